#!/usr/bin/python3
"""kubesim_volumes.py - StorageClasses and PersistentVolumeClaims in
kubesim, driven by the real kubectl and the official Python client
(Debian's python3-kubernetes) as a user of a real cluster would:

- the default StorageClass (`get storageclass`: "standard (default)", its
  provisioner, reclaim policy, binding mode), classes made with kubectl
  apply, their validation (422) and immutable fields;
- a claim without a class gets the default one and is Bound to a volume
  pvc-<uid> with its capacity and access modes (`get pvc` columns), the
  pvc-protection finalizer and the provisioner's annotations and events; a
  directory of its own under --workdir/volumes;
- a claim of a class that does not exist stays Pending (ProvisioningFailed)
  and binds once the class is created; a class of a provisioner nobody runs
  leaves it Pending (ExternalProvisioning); storageClassName "" waits for a
  PersistentVolume (FailedBinding); WaitForFirstConsumer binds when a pod is
  scheduled (selected-node annotation);
- a pod whose claim is unbound is Unschedulable with the scheduler's words;
- (root: pods with their own root) a file written to the mount outlives the
  pod and is read by the next one; a ReadWriteOnce claim used on another
  node keeps the second pod ContainerCreating with the Multi-Attach
  FailedAttachVolume event until the first pod goes, while a pod on the
  same node shares it; ReadWriteOncePod makes the second pod
  Unschedulable; readOnly mounts refuse writes; subPath mounts a
  directory of the volume; a symlink a pod wrote into the volume cannot
  make another pod's subPath mount a host path; the mount is nosuid,nodev;
- a claim in use is only Terminating when deleted, and goes (with its
  directory) when its last pod goes; an unused one goes at once;
- a generic ephemeral volume's claim is made with its pod, owned by it,
  mounted, and deleted with it unless its owner reference was removed;
- kubesim's exit removes the volumes' directories.

Usage: /usr/bin/python3 kubesim_volumes.py PATH/TO/kubesim
Loopback only; kubesim is stopped and its temp dir removed on every path.
Exit 0 when every check passed, 1 otherwise (each failure printed).
"""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubesim_kinds as kk  # noqa: E402  (Sim: kubesim started and stopped)
from kubesim_kinds import FAILS, check  # noqa: E402

try:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
except ImportError as e:
    print("FAIL: the official Kubernetes Python client is not importable by %s (%s): "
          "apt-get install python3-kubernetes (scripts/lib/packages.sh installs it)" % (sys.executable, e))
    sys.exit(1)

ROOT = os.geteuid() == 0


class Sim(kk.Sim):
    def __init__(self, binary):
        super().__init__(binary, ["--nodes", "2", "--hide", os.path.dirname(os.path.abspath(__file__))])
        self.work = os.path.join(self.dir, "work")

    def kubectl(self, *args, stdin=None):
        p = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "--request-timeout=10s"] + list(args),
                           input=stdin, capture_output=True, text=True, timeout=30)
        return p.returncode, p.stdout + p.stderr

    def get(self, *args):
        rc, out = self.kubectl("get", "-o", "json", *args)
        return json.loads(out) if rc == 0 else {}

    def volumes(self):
        d = os.path.join(self.work, "volumes")
        return sorted(os.listdir(d)) if os.path.isdir(d) else None


def wait_for(what, fn, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            check(False, "timed out waiting for " + what)
            return v
        time.sleep(0.05)


def claim(name, sc=None, modes=("ReadWriteOnce",), size="1Gi"):
    spec = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if sc is not None:
        spec["storageClassName"] = sc
    return json.dumps({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                       "spec": spec})


def pod(name, claim_name, node=None, mount="/workspace", read_only=False, sub_path=None):
    m = {"name": "w", "mountPath": mount}
    if read_only:
        m["readOnly"] = True
    if sub_path:
        m["subPath"] = sub_path
    spec = {"volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": claim_name}}],
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"], "volumeMounts": [m]}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def events(sim, name, reason):
    ev = sim.get("events", "--field-selector", "involvedObject.name=%s,reason=%s" % (name, reason))
    return ev.get("items", [])


def phase(sim, name):
    return sim.get("pvc", name).get("status", {}).get("phase")


def ready(sim, name):
    p = sim.get("pod", name)
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in p.get("status", {}).get("conditions", []))


def waiting_reason(sim, name):
    cs = sim.get("pod", name).get("status", {}).get("containerStatuses", [])
    return cs[0].get("state", {}).get("waiting", {}).get("reason") if cs else None


def test_classes(sim):
    rc, out = sim.kubectl("get", "storageclass")
    lines = out.splitlines()
    check(rc == 0 and lines and lines[0].split() == ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE",
                                                       "ALLOWVOLUMEEXPANSION", "AGE"], "get sc header: %s" % out)
    check(any(ln.split()[:6] == ["standard", "(default)", "kubesim.io/hostpath", "Delete", "Immediate", "false"]
              for ln in lines[1:]), "the default class: %s" % out)
    rc, out = sim.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "late"},
         "provisioner": "kubesim.io/hostpath", "volumeBindingMode": "WaitForFirstConsumer"}))
    check(rc == 0, "apply a WaitForFirstConsumer class: %s" % out)
    sc = sim.get("sc", "late")
    check(sc.get("reclaimPolicy") == "Delete" and sc.get("volumeBindingMode") == "WaitForFirstConsumer",
          "class defaults: %s" % sc)
    rc, out = sim.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "bad"}}))
    check(rc != 0 and "provisioner: Required value" in out, "a class without provisioner: %s" % out)
    rc, out = sim.kubectl("patch", "sc", "late", "--type=merge", "-p", '{"volumeBindingMode":"Immediate"}')
    check(rc != 0 and "forbidden" in out.lower(), "volumeBindingMode is immutable: %s" % out)
    rc, out = sim.kubectl("get", "sc", "-o", "name")
    check(rc == 0 and out.split() == ["storageclass.storage.k8s.io/late", "storageclass.storage.k8s.io/standard"],
          "get sc -o name: %s" % out)


def test_bound_claim(sim):
    rc, out = sim.kubectl("create", "-f", "-", stdin=claim("ws", size="10Gi"))
    check(rc == 0, "create claim: %s" % out)
    wait_for("ws Bound", lambda: phase(sim, "ws") == "Bound")
    c = sim.get("pvc", "ws")
    uid = c["metadata"]["uid"]
    check(c["spec"].get("storageClassName") == "standard", "default class filled in: %s" % c["spec"])
    check(c["spec"].get("volumeName") == "pvc-" + uid and c["spec"].get("volumeMode") == "Filesystem",
          "volume name and mode: %s" % c["spec"])
    check(c["status"].get("capacity") == {"storage": "10Gi"} and c["status"].get("accessModes") == ["ReadWriteOnce"],
          "status: %s" % c["status"])
    check(c["metadata"].get("finalizers") == ["kubernetes.io/pvc-protection"], "finalizer: %s" % c["metadata"])
    ann = c["metadata"].get("annotations", {})
    check(ann.get("pv.kubernetes.io/bind-completed") == "yes" and
          ann.get("volume.kubernetes.io/storage-provisioner") == "kubesim.io/hostpath", "annotations: %s" % ann)
    check(["default_ws_" + uid] == [v for v in (sim.volumes() or []) if v.startswith("default_ws_")],
          "its directory: %s" % sim.volumes())
    check(len(events(sim, "ws", "ProvisioningSucceeded")) == 1, "ProvisioningSucceeded event")
    rc, out = sim.kubectl("get", "pvc", "ws")
    rows = [ln.split() for ln in out.splitlines()]
    check(rc == 0 and rows[0] == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS",
                                  "VOLUMEATTRIBUTESCLASS", "AGE"]
          and rows[1][:7] == ["ws", "Bound", "pvc-" + uid, "10Gi", "RWO", "standard", "<unset>"],
          "get pvc columns: %s" % out)


def test_pending_claims(sim):
    sim.kubectl("create", "-f", "-", stdin=claim("nocls", sc="fast"))
    wait_for("ProvisioningFailed", lambda: events(sim, "nocls", "ProvisioningFailed"))
    ev = events(sim, "nocls", "ProvisioningFailed")
    check(ev and ev[0]["type"] == "Warning" and ev[0]["message"] == 'storageclass.storage.k8s.io "fast" not found',
          "missing class event: %s" % ev)
    check(phase(sim, "nocls") == "Pending", "claim of a missing class is Pending")
    rc, out = sim.kubectl("get", "pvc", "nocls")
    check(rc == 0 and out.splitlines()[1].split()[:3] == ["nocls", "Pending", "fast"], "get pvc Pending: %s" % out)
    # A pod of it cannot be scheduled.
    sim.kubectl("create", "-f", "-", stdin=pod("waits", "nocls"))

    def unsched():
        p = sim.get("pod", "waits")
        return [c.get("message") for c in p.get("status", {}).get("conditions", [])
                if c.get("type") == "PodScheduled" and c.get("status") == "False"]
    msg = wait_for("Unschedulable", unsched)
    check(msg and "pod has unbound immediate PersistentVolumeClaims" in msg[0], "scheduler's words: %s" % msg)
    # The class appears: the claim binds, the pod is scheduled.
    rc, out = sim.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
         "provisioner": "kubesim.io/hostpath"}))
    check(rc == 0, "create class fast: %s" % out)
    wait_for("nocls Bound", lambda: phase(sim, "nocls") == "Bound")
    wait_for("pod waits scheduled", lambda: sim.get("pod", "waits").get("spec", {}).get("nodeName"))
    sim.kubectl("delete", "pod", "waits", "--wait=false")

    sim.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "ebs"},
         "provisioner": "ebs.csi.aws.com"}))
    sim.kubectl("create", "-f", "-", stdin=claim("ext", sc="ebs"))
    ev = wait_for("ExternalProvisioning", lambda: events(sim, "ext", "ExternalProvisioning"))
    check(ev and "external provisioner 'ebs.csi.aws.com'" in ev[0]["message"], "external provisioner: %s" % ev)
    check(phase(sim, "ext") == "Pending", "claim of another provisioner stays Pending")

    sim.kubectl("create", "-f", "-", stdin=claim("nopv", sc=""))
    ev = wait_for("FailedBinding", lambda: events(sim, "nopv", "FailedBinding"))
    check(phase(sim, "nopv") == "Pending" and ev, "storageClassName \"\" waits for a PV")

    sim.kubectl("create", "-f", "-", stdin=claim("wffc", sc="late"))
    wait_for("WaitForFirstConsumer", lambda: events(sim, "wffc", "WaitForFirstConsumer"))
    check(phase(sim, "wffc") == "Pending", "WaitForFirstConsumer claim Pending before a pod")
    sim.kubectl("create", "-f", "-", stdin=pod("consumer", "wffc"))
    wait_for("wffc Bound", lambda: phase(sim, "wffc") == "Bound")
    node = sim.get("pod", "consumer").get("spec", {}).get("nodeName")
    ann = sim.get("pvc", "wffc").get("metadata", {}).get("annotations", {})
    check(node and ann.get("volume.kubernetes.io/selected-node") == node, "selected node %s: %s" % (node, ann))
    sim.kubectl("delete", "pod", "consumer", "--wait=false")

    # Validation as the API server's.
    rc, out = sim.kubectl("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bad"},
         "spec": {"resources": {"requests": {"storage": "1Gi"}}}}))
    check(rc != 0 and "spec.accessModes: Required value" in out, "claim without access modes: %s" % out)
    rc, out = sim.kubectl("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bad"},
         "spec": {"accessModes": ["ReadWriteOnce"]}}))
    check(rc != 0 and "spec.resources[storage]: Required value" in out, "claim without size: %s" % out)
    rc, out = sim.kubectl("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "badmount"},
         "spec": {"containers": [{"name": "c", "image": "busybox",
                                  "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]}}))
    check(rc != 0 and "volumeMounts[0].name: Not found" in out, "mount of no volume: %s" % out)


def kx(sim, name, script):
    return sim.kubectl("exec", name, "--", "sh", "-c", script)


def test_mounts(sim):
    nodes = [n["metadata"]["name"] for n in sim.get("nodes").get("items", [])]
    n1, n2 = nodes[0], nodes[1]
    sim.kubectl("create", "-f", "-", stdin=pod("a1", "ws", node=n1))
    wait_for("a1 Ready", lambda: ready(sim, "a1"))
    rc, out = kx(sim, "a1", "echo kept > /workspace/f && mkdir -p /workspace/sub && echo s > /workspace/sub/g "
                            "&& ln -s /etc /workspace/esc && grep ' /workspace ' /proc/mounts")
    check(rc == 0 and "nosuid" in out and "nodev" in out, "write to the volume, mount flags: %s" % out)
    uid = sim.get("pvc", "ws")["metadata"]["uid"]
    with open(os.path.join(sim.work, "volumes", "default_ws_" + uid, "f")) as f:
        check(f.read() == "kept\n", "the file is in the claim's directory")
    # Another node: Multi-Attach, ContainerCreating.
    sim.kubectl("create", "-f", "-", stdin=pod("b2", "ws", node=n2))
    ev = wait_for("Multi-Attach", lambda: events(sim, "b2", "FailedAttachVolume"))
    check(ev and ev[0]["type"] == "Warning" and ev[0]["message"] ==
          'Multi-Attach error for volume "pvc-%s" Volume is already used by pod(s) a1' % uid, "event: %s" % ev)
    check(waiting_reason(sim, "b2") == "ContainerCreating" and not ready(sim, "b2"), "b2 waits")
    # The same node shares it.
    sim.kubectl("create", "-f", "-", stdin=pod("a3", "ws", node=n1, read_only=True))
    wait_for("a3 Ready", lambda: ready(sim, "a3"))
    rc, out = kx(sim, "a3", "cat /workspace/f")
    check(rc == 0 and out == "kept\n", "same node reads it: %r" % out)
    rc, out = kx(sim, "a3", "echo x > /workspace/ro")
    check(rc != 0 and "Read-only file system" in out, "readOnly mount refuses writes: %s" % out)
    # subPath, and a symlink in the volume cannot aim a mount at the host.
    sim.kubectl("create", "-f", "-", stdin=pod("a4", "ws", node=n1, mount="/data", sub_path="sub"))
    wait_for("a4 Ready", lambda: ready(sim, "a4"))
    rc, out = kx(sim, "a4", "cat /data/g")
    check(rc == 0 and out == "s\n", "subPath: %r" % out)
    sim.kubectl("create", "-f", "-", stdin=pod("a5", "ws", node=n1, mount="/data", sub_path="esc"))
    wait_for("a5 Ready", lambda: ready(sim, "a5"))
    rc, out = kx(sim, "a5", "ls /data/passwd")
    check(rc != 0 and "passwd" not in out.replace("/data/passwd", ""), "subPath through a symlink refused: %s" % out)
    # Delete: the claim is in use, so Terminating; the pods go, so it goes.
    rc, out = sim.kubectl("delete", "pvc", "ws", "--wait=false")
    check(rc == 0, "delete ws: %s" % out)
    c = sim.get("pvc", "ws")
    check(c.get("metadata", {}).get("deletionTimestamp") is not None, "in use: Terminating: %s" % c.get("metadata"))
    rc, out = sim.kubectl("get", "pvc", "ws")
    check("Terminating" in out, "get pvc shows Terminating: %s" % out)
    sim.kubectl("delete", "pod", "a1", "a3", "a4", "a5", "--wait=true")
    # b2 attaches now that a1 is gone, and reads what a1 wrote.
    wait_for("b2 Ready", lambda: ready(sim, "b2"))
    rc, out = kx(sim, "b2", "cat /workspace/f")
    check(rc == 0 and out == "kept\n", "the file outlived its pod: %r" % out)
    check(phase(sim, "ws") == "Bound" and sim.get("pvc", "ws"), "still there while b2 uses it")
    sim.kubectl("delete", "pod", "b2", "--wait=true")
    wait_for("ws gone", lambda: not sim.get("pvc", "ws"))
    wait_for("its directory gone", lambda: not any(v.startswith("default_ws_") for v in (sim.volumes() or [])))

    # ReadWriteOncePod: the second pod is not scheduled.
    sim.kubectl("create", "-f", "-", stdin=claim("one", modes=("ReadWriteOncePod",)))
    wait_for("one Bound", lambda: phase(sim, "one") == "Bound")
    sim.kubectl("create", "-f", "-", stdin=pod("o1", "one"))
    wait_for("o1 Ready", lambda: ready(sim, "o1"))
    sim.kubectl("create", "-f", "-", stdin=pod("o2", "one"))

    def unsched():
        p = sim.get("pod", "o2")
        return [c.get("message") for c in p.get("status", {}).get("conditions", [])
                if c.get("type") == "PodScheduled" and c.get("status") == "False"]
    msg = wait_for("o2 Unschedulable", unsched)
    check(msg and "ReadWriteOncePod access mode" in msg[0], "RWOP: %s" % msg)
    sim.kubectl("delete", "pod", "o1", "--wait=true")
    wait_for("o2 Ready once o1 is gone", lambda: ready(sim, "o2"))
    sim.kubectl("delete", "pod", "o2", "--wait=true")


def test_ephemeral(sim):
    def eph_pod(name):
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": {"kind": "eph"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}}}],
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]}})
    sim.kubectl("create", "-f", "-", stdin=eph_pod("e1"))
    wait_for("e1-scratch Bound", lambda: phase(sim, "e1-scratch") == "Bound")
    c = sim.get("pvc", "e1-scratch")
    uid = sim.get("pod", "e1")["metadata"]["uid"]
    refs = c["metadata"].get("ownerReferences", [])
    check(len(refs) == 1 and refs[0]["kind"] == "Pod" and refs[0]["uid"] == uid and refs[0]["controller"] is True,
          f"owner: {refs}")
    check(c["metadata"]["labels"] == {"kind": "eph"} and c["status"]["capacity"] == {"storage": "2Gi"},
          f"from the template: {c['metadata']}")
    if ROOT:
        wait_for("e1 Ready", lambda: ready(sim, "e1"))
        rc, out = kx(sim, "e1", "echo x > /scratch/f && cat /scratch/f")
        check(rc == 0 and out == "x\n", f"ephemeral mount: {out}")
    sim.kubectl("delete", "pod", "e1", "--wait=true")
    wait_for("e1-scratch gone with its pod", lambda: not sim.get("pvc", "e1-scratch"))
    # Orphaned (owner reference taken off): it outlives the pod.
    sim.kubectl("create", "-f", "-", stdin=eph_pod("e2"))
    wait_for("e2-scratch Bound", lambda: phase(sim, "e2-scratch") == "Bound")
    rc, out = sim.kubectl("patch", "pvc", "e2-scratch", "--type=merge", "-p", '{"metadata":{"ownerReferences":null}}')
    check(rc == 0, f"orphan it: {out}")
    sim.kubectl("delete", "pod", "e2", "--wait=true")
    check(phase(sim, "e2-scratch") == "Bound", "an orphaned claim stays")
    sim.kubectl("delete", "pvc", "e2-scratch", "--wait=true")


def test_python_client(sim):
    config.load_kube_config(config_file=sim.kubeconfig)
    st = client.StorageV1Api()
    core = client.CoreV1Api()
    names = [c.metadata.name for c in st.list_storage_class().items]
    check("standard" in names, "StorageV1Api list: %s" % names)
    sc = st.read_storage_class("standard")
    check(sc.provisioner == "kubesim.io/hostpath" and sc.metadata.annotations.get(
        "storageclass.kubernetes.io/is-default-class") == "true", "read_storage_class: %s" % sc)
    body = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="py"),
        spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
                                                resources=client.V1ResourceRequirements(requests={"storage": "2Gi"})))
    created = core.create_namespaced_persistent_volume_claim("default", body)
    check(created.status.phase == "Pending", "created Pending: %s" % created.status)
    wait_for("py Bound", lambda: core.read_namespaced_persistent_volume_claim("py", "default").status.phase == "Bound")
    got = core.read_namespaced_persistent_volume_claim("py", "default")
    check(got.status.capacity == {"storage": "2Gi"} and got.spec.storage_class_name == "standard",
          "typed claim: %s" % got.status)
    items = core.list_namespaced_persistent_volume_claim("default", field_selector="metadata.name=py").items
    check([c.metadata.name for c in items] == ["py"], "list with a field selector")
    try:
        core.create_namespaced_persistent_volume_claim("default", body)
        check(False, "duplicate claim accepted")
    except ApiException as e:
        check(e.status == 409, "duplicate claim: %s" % e.status)
    core.delete_namespaced_persistent_volume_claim("py", "default")
    try:
        core.read_namespaced_persistent_volume_claim("py", "default")
        check(False, "unused claim not deleted at once")
    except ApiException as e:
        check(e.status == 404, "deleted: %s" % e.status)
    made = st.create_storage_class(client.V1StorageClass(metadata=client.V1ObjectMeta(name="pysc"),
                                                         provisioner="kubesim.io/hostpath",
                                                         reclaim_policy="Retain"))
    check(made.volume_binding_mode == "Immediate" and made.reclaim_policy == "Retain", "create_storage_class")
    st.delete_storage_class("pysc")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    sim = Sim(sys.argv[1])
    vols = None
    try:
        for t in (test_classes, test_bound_claim, test_pending_claims, test_ephemeral, test_python_client):
            t(sim)
        if ROOT:
            test_mounts(sim)
        else:
            print("note: not root: pods have no root of their own, mounts not checked")
    finally:
        vols = os.path.join(sim.work, "volumes")
        sim.proc.terminate()
        try:
            sim.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            sim.proc.kill()
            sim.proc.wait()
        check(not os.path.exists(vols), "kubesim's exit removes %s" % vols)
        sim.close()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("kubesim_volumes: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
