#!/usr/bin/env python3
"""kubesim_podopts.py - what pod options meet in kubesim, driven by the real
kubectl as a user would: GPU allocatable per node (--gpu-nodes), node
labels and taints (--node-label, --node-taint, kubectl taint), the
scheduler's selector, taint and GPU checks with its Unschedulable
messages, RuntimeClass admission (403 Forbidden for a missing class) and
PersistentVolumeClaims (kubectl apply / get; a pod whose claim is missing
stays Pending until the claim appears).

Usage: kubesim_podopts.py PATH/TO/kubesim
Loopback only; kubesim is stopped and its temp dir removed on every path.
Exit 0 when every check passed, 1 otherwise (each failure printed).
"""
import json
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubesim_kinds as kk  # noqa: E402  (Sim: kubesim started and stopped; check, FAILS)
from kubesim_kinds import FAILS, check  # noqa: E402

NODE_FLAGS = ["--nodes", "3", "--gpu-nodes", "1", "--node-gpus", "2", "--node-label", "1@accel=a100",
              "--node-taint", "1@nvidia.com/gpu=present:NoSchedule", "--node-label", "zone=z1"]


class Sim(kk.Sim):
    """kubesim with GPU, label and taint flags, driven by kubectl."""

    def __init__(self, binary):
        super().__init__(binary, NODE_FLAGS)

    def kubectl(self, *args, stdin=None):
        p = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "--request-timeout=10s"] + list(args),
                           input=stdin, capture_output=True, text=True, timeout=30)
        return p.returncode, p.stdout + p.stderr

    def get(self, *args):
        rc, out = self.kubectl("get", "-o", "json", *args)
        check(rc == 0, "kubectl get %s: %s" % (" ".join(args), out))
        return json.loads(out) if rc == 0 else {}


def pod(name, gpus=0, tolerations=None, selector=None, claim=None, runtime_class=None):
    c = {"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {"containers": [c]}
    if tolerations:
        spec["tolerations"] = tolerations
    if selector:
        spec["nodeSelector"] = selector
    if claim:
        spec["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]
        c["volumeMounts"] = [{"name": "d", "mountPath": "/data"}]
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


GPU_TOL = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def placed(sim, name, timeout=5):
    """(nodeName, PodScheduled=False message) once the scheduler decided."""
    deadline = time.monotonic() + timeout
    while True:
        p = sim.get("pod", name)
        node = p.get("spec", {}).get("nodeName")
        msg = [c.get("message") for c in p.get("status", {}).get("conditions", [])
               if c.get("type") == "PodScheduled" and c.get("status") == "False"]
        if node or msg or time.monotonic() > deadline:
            return node, (msg[0] if msg else None)
        time.sleep(0.05)


def test_nodes(sim):
    nodes = {n["metadata"]["name"]: n for n in sim.get("nodes")["items"]}
    n1, n2 = nodes.get("kubesim-node-1", {}), nodes.get("kubesim-node-2", {})
    check(n1.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu") == "2" and
          n1["status"]["capacity"].get("nvidia.com/gpu") == "2", "node 1 has 2 GPUs: %s" % n1.get("status"))
    check("nvidia.com/gpu" not in n2.get("status", {}).get("allocatable", {}), "node 2 has no GPUs")
    check(n1.get("metadata", {}).get("labels", {}).get("accel") == "a100" and
          "accel" not in n2["metadata"]["labels"], "accel label on node 1 only")
    check(all(n["metadata"]["labels"].get("zone") == "z1" for n in nodes.values()), "zone label on every node")
    check(n1.get("spec", {}).get("taints") == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
          and not n2.get("spec", {}).get("taints"), "taint on node 1 only: %s" % n1.get("spec"))


def test_gpus_and_taints(sim):
    check(sim.kubectl("create", "-f", "-", stdin=pod("g-untolerated", gpus=1))[0] == 0, "create g-untolerated")
    node, msg = placed(sim, "g-untolerated")
    check(node is None and msg and "Insufficient nvidia.com/gpu" in msg and
          "untolerated taint {nvidia.com/gpu: present}" in msg, "GPU pod without toleration: %s %s" % (node, msg))
    for name in ("g1", "g2"):
        check(sim.kubectl("create", "-f", "-", stdin=pod(name, gpus=1, tolerations=GPU_TOL))[0] == 0, "create " + name)
        node, msg = placed(sim, name)
        check(node == "kubesim-node-1", "%s with toleration on %s (%s)" % (name, node, msg))
    check(sim.kubectl("create", "-f", "-", stdin=pod("g3", gpus=1, tolerations=GPU_TOL))[0] == 0, "create g3")
    node, msg = placed(sim, "g3")
    check(node is None and msg and "Insufficient nvidia.com/gpu" in msg, "third GPU pod: %s %s" % (node, msg))
    check(sim.kubectl("delete", "pod", "g1", "--wait=false")[0] == 0, "delete g1")
    node = None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not node:
        node = sim.get("pod", "g3").get("spec", {}).get("nodeName")
        time.sleep(0.05)
    check(node == "kubesim-node-1", "g3 scheduled once g1 freed its GPU: %s" % node)
    # Selector on the GPU node's label without its toleration: untolerated.
    sim.kubectl("create", "-f", "-", stdin=pod("sel", selector={"accel": "a100"}))
    node, msg = placed(sim, "sel")
    check(node is None and msg and "didn't match Pod's node affinity/selector" in msg, "selector: %s %s" % (node, msg))
    # kubectl taint reaches the scheduler: taint node 2 and 3, then a plain pod fits nowhere.
    for n in ("kubesim-node-2", "kubesim-node-3"):
        rc, out = sim.kubectl("taint", "nodes", n, "dedicated=sandbox:NoExecute")
        check(rc == 0, "kubectl taint %s: %s" % (n, out))
    sim.kubectl("create", "-f", "-", stdin=pod("plain"))
    node, msg = placed(sim, "plain")
    check(node is None and msg and "untolerated taint" in msg, "plain pod on tainted nodes: %s %s" % (node, msg))
    tol = [{"key": "dedicated", "operator": "Equal", "value": "sandbox", "effect": "NoExecute"}]
    sim.kubectl("create", "-f", "-", stdin=pod("tolerant", tolerations=tol))
    node, msg = placed(sim, "tolerant")
    check(node in ("kubesim-node-2", "kubesim-node-3"), "pod tolerating the new taint: %s %s" % (node, msg))


def test_runtime_class(sim):
    rc, out = sim.kubectl("create", "-f", "-", stdin=pod("rc-missing", runtime_class="gvisor"))
    check(rc != 0 and "Forbidden" in out and 'pod rejected: RuntimeClass "gvisor" not found' in out,
          "pod naming a missing RuntimeClass: %s" % out)
    rc, out = sim.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"}))
    check(rc == 0, "kubectl apply RuntimeClass: %s" % out)
    rc, out = sim.kubectl("create", "-f", "-", stdin=pod("rc-ok", runtime_class="gvisor"))
    check(rc == 0, "pod with an existing RuntimeClass: %s" % out)
    rc, out = sim.kubectl("get", "runtimeclass", "gvisor")
    check(rc == 0 and "gvisor" in out, "kubectl get runtimeclass: %s" % out)


def test_pvc(sim):
    rc, out = sim.kubectl("create", "-f", "-", stdin=pod("v1", claim="data", tolerations=[{"operator": "Exists"}]))
    check(rc == 0, "create v1: %s" % out)
    node, msg = placed(sim, "v1")
    check(node is None and msg and 'persistentvolumeclaim "data" not found' in msg, "pod without its claim: %s %s"
          % (node, msg))
    rc, out = sim.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}))
    check(rc == 0, "kubectl apply PVC: %s" % out)
    rc, out = sim.kubectl("get", "pvc")
    check(rc == 0 and "data" in out and "Bound" in out, "kubectl get pvc: %s" % out)
    deadline = time.monotonic() + 5
    node = None
    while time.monotonic() < deadline and not node:
        node = sim.get("pod", "v1").get("spec", {}).get("nodeName")
        time.sleep(0.05)
    check(node is not None, "pod scheduled once its claim exists")


def main():
    if shutil.which("kubectl") is None:
        print("kubectl not found")
        return 1
    sim = Sim(sys.argv[1])
    try:
        for t in (test_nodes, test_gpus_and_taints, test_runtime_class, test_pvc):
            n = len(FAILS)
            t(sim)
            print(("ok   " if len(FAILS) == n else "FAIL ") + t.__name__, flush=True)
    finally:
        sim.close()
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
