#!/usr/bin/env python3
"""kubesim_kinds.py - kubesim's stored kinds (the objects of deploy/'s
bundles) behave as an API server's do: discovery and OpenAPI list them,
create / get / list / patch / delete work, the API server's validation
rejects bad objects with 422 Invalid and its causes, and dryRun=All
validates and answers without storing anything.

Usage: kubesim_kinds.py PATH/TO/kubesim
Loopback only; kubesim is stopped and its temp dir removed on every path.
Exit 0 when every check passed, 1 otherwise (each failure printed).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)
    return cond


class Sim:
    def __init__(self, binary, extra=()):
        self.dir = tempfile.mkdtemp(prefix="kubesim-kinds-")
        port_file = os.path.join(self.dir, "port")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen([binary, "--port-file", port_file, "--workdir",
                                      os.path.join(self.dir, "work"), "--write-kubeconfig", self.kubeconfig]
                                     + list(extra), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("kubesim did not start")
            time.sleep(0.05)
        self.base = "http://127.0.0.1:%s" % open(port_file).read().strip()

    def call(self, method, path, body=None, ctype="application/json", accept="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": ctype, "Accept": accept})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def rv(self):
        return self.call("GET", "/_sim/state")[1]["resource_version"]

    def close(self):
        self.proc.terminate()
        try:
            check(self.proc.wait(timeout=20) == 0, "kubesim exited with %s after SIGTERM (sanitizer "
                  "report?): %s" % (self.proc.returncode, open(self.log.name).read()[-2000:]))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            check(False, "kubesim did not stop within 20 s of SIGTERM")
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


NS = "/api/v1/namespaces/sbx"
RBAC = "/apis/rbac.authorization.k8s.io/v1"

GOOD = [
    # (collection path, object)
    (NS + "/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "fedrouter"}}),
    (NS + "/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"},
                       "stringData": {"HF_TOKEN": "abc"}}),
    (NS + "/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "b"}},
                          "data": {"k": "v"}}),
    (NS + "/limitranges", {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "l"},
                           "spec": {"limits": [{"type": "Container", "default": {"cpu": 1, "memory": "2Gi"}}]}}),
    (NS + "/services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                        "spec": {"selector": {"a": "b"}, "ports": [{"port": 80, "targetPort": "http"}]}}),
    (RBAC + "/namespaces/sbx/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                      "metadata": {"name": "r"},
                                      "rules": [{"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}]}),
    (RBAC + "/namespaces/sbx/rolebindings", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                             "metadata": {"name": "rb"},
                                             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                                             "subjects": [{"kind": "ServiceAccount", "name": "fedrouter", "namespace": "sbx"}]}),
    (RBAC + "/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": "cr"},
                              "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]}),
    (RBAC + "/clusterrolebindings", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                     "metadata": {"name": "crb"},
                                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"},
                                     "subjects": [{"kind": "ServiceAccount", "name": "fedrouter", "namespace": "sbx"}]}),
    ("/apis/networking.k8s.io/v1/namespaces/sbx/networkpolicies",
     {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny"},
      "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
               "ingress": [{"from": [{"ipBlock": {"cidr": "192.0.2.0/24"}}], "ports": [{"port": 49983}]}]}}),
    ("/apis/node.k8s.io/v1/runtimeclasses", {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                             "metadata": {"name": "gvisor"}, "handler": "runsc"}),
    (NS + "/persistentvolumeclaims", {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
                                      "spec": {"accessModes": ["ReadWriteMany"],
                                               "resources": {"requests": {"storage": "1Gi"}}}}),
    ("/apis/apps/v1/namespaces/sbx/deployments",
     {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
      "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "x"}},
               "template": {"metadata": {"labels": {"app": "x"}},
                            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    ("/apis/policy/v1/namespaces/sbx/poddisruptionbudgets",
     {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
      "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}}}),
    ("/apis/autoscaling/v2/namespaces/sbx/horizontalpodautoscalers",
     {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
      "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
               "minReplicas": 3, "maxReplicas": 10}}),
]

# (collection path, object, field named in the 422 cause)
BAD = [
    (RBAC + "/namespaces/sbx/roles", {"metadata": {"name": "noverbs"},
                                      "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}]},
     "rules[0].verbs"),
    (RBAC + "/namespaces/sbx/roles", {"metadata": {"name": "urls"},
                                      "rules": [{"nonResourceURLs": ["/x"], "verbs": ["get"]}]},
     "rules[0].nonResourceURLs"),
    (RBAC + "/namespaces/sbx/rolebindings", {"metadata": {"name": "badref"},
                                             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Pod", "name": "r"}},
     "roleRef.kind"),
    (RBAC + "/clusterrolebindings", {"metadata": {"name": "nons"},
                                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"},
                                     "subjects": [{"kind": "ServiceAccount", "name": "x"}]},
     "subjects[0].namespace"),
    ("/apis/networking.k8s.io/v1/namespaces/sbx/networkpolicies", {"metadata": {"name": "nosel"}, "spec": {}},
     "spec.podSelector"),
    ("/apis/networking.k8s.io/v1/namespaces/sbx/networkpolicies",
     {"metadata": {"name": "badport"}, "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 70000}]}]}},
     "spec.ingress[0].ports[0]"),
    ("/apis/node.k8s.io/v1/runtimeclasses", {"metadata": {"name": "bad"}, "handler": "Run_SC"}, "handler"),
    (NS + "/secrets", {"metadata": {"name": "b64"}, "data": {"k": "not base64!"}}, "data[k]"),
    (NS + "/limitranges", {"metadata": {"name": "lt"}, "spec": {"limits": [{"type": "Node"}]}}, "spec.limits[0].type"),
    (NS + "/services", {"metadata": {"name": "noports"}, "spec": {}}, "spec.ports"),
    ("/apis/apps/v1/namespaces/sbx/deployments",
     {"metadata": {"name": "mismatch"},
      "spec": {"selector": {"matchLabels": {"app": "x"}},
               "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}},
     None),
    ("/apis/policy/v1/namespaces/sbx/poddisruptionbudgets",
     {"metadata": {"name": "both"}, "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {}}}, "spec"),
    ("/apis/autoscaling/v2/namespaces/sbx/horizontalpodautoscalers",
     {"metadata": {"name": "minmax"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"},
                                               "minReplicas": 5, "maxReplicas": 2}}, "spec.minReplicas"),
]


def test_discovery(sim):
    st, groups = sim.call("GET", "/apis")
    names = [g["name"] for g in groups.get("groups", [])] if st == 200 else []
    for g in ("apps", "rbac.authorization.k8s.io", "networking.k8s.io", "node.k8s.io", "policy", "autoscaling"):
        check(g in names, "/apis lists group %s (got %s)" % (g, names))
    st, core = sim.call("GET", "/api/v1")
    res = {r["name"]: r for r in core.get("resources", [])} if st == 200 else {}
    for r in ("pods", "pods/exec", "serviceaccounts", "secrets", "configmaps", "limitranges", "services"):
        check(r in res, "/api/v1 lists %s" % r)
    check(res.get("secrets", {}).get("namespaced") is True, "secrets are namespaced")
    st, apps = sim.call("GET", "/apis/apps/v1")
    check({"replicasets", "replicasets/scale", "deployments"} <= {r["name"] for r in apps.get("resources", [])},
          "/apis/apps/v1 lists replicasets, their scale and deployments")
    st, rbac = sim.call("GET", RBAC)
    rbac_res = {r["name"]: r for r in rbac.get("resources", [])} if st == 200 else {}
    check(rbac.get("groupVersion") == "rbac.authorization.k8s.io/v1" and
          rbac_res.get("clusterroles", {}).get("namespaced") is False and
          rbac_res.get("roles", {}).get("namespaced") is True,
          "%s: an APIResourceList with cluster-scoped clusterroles and namespaced roles: %s" % (RBAC, rbac))
    st, g = sim.call("GET", "/apis/node.k8s.io")
    check(st == 200 and g.get("kind") == "APIGroup" and g["preferredVersion"]["groupVersion"] == "node.k8s.io/v1",
          "/apis/node.k8s.io is an APIGroup: %s" % g)
    check(sim.call("GET", "/apis/nosuch.k8s.io/v1")[0] == 404, "an unknown group is 404")
    st, oa = sim.call("GET", "/openapi/v3")
    check("apis/rbac.authorization.k8s.io/v1" in oa.get("paths", {}), "/openapi/v3 lists the rbac group")
    st, doc = sim.call("GET", "/openapi/v3/apis/rbac.authorization.k8s.io/v1")
    gvks = [op["patch"]["x-kubernetes-group-version-kind"]["kind"] for op in doc.get("paths", {}).values()]
    check(sorted(gvks) == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
          "the rbac OpenAPI document has a PATCH op per kind: %s" % gvks)
    st, doc = sim.call("GET", "/openapi/v3/api/v1")
    check("/api/v1/namespaces/{namespace}/secrets/{name}" in doc.get("paths", {}) and
          "/api/v1/namespaces/{namespace}/pods/{name}" in doc.get("paths", {}),
          "the core OpenAPI document has pods and secrets")


def test_create_get_list(sim):
    for path, obj in GOOD:
        st, out = sim.call("POST", path, obj)
        if not check(st == 201, "create %s: %s %s" % (path, st, out)):
            continue
        check(out["metadata"].get("uid") and out["metadata"].get("resourceVersion"),
              "create %s: uid and resourceVersion set" % path)
        st, got = sim.call("GET", path + "/" + obj["metadata"]["name"])
        check(st == 200 and got["metadata"]["uid"] == out["metadata"]["uid"], "get %s" % path)
        st, lst = sim.call("GET", path)
        check(st == 200 and lst.get("kind") == obj["kind"] + "List" and
              [i["metadata"]["name"] for i in lst["items"]] == [obj["metadata"]["name"]],
              "list %s: %s" % (path, lst))
        check(sim.call("POST", path, obj)[0] == 409, "create %s twice: 409 AlreadyExists" % path)
    st, claim = sim.call("GET", NS + "/persistentvolumeclaims/data")
    check(claim.get("status", {}).get("phase") == "Bound", "a PVC is Bound once it exists: %s" % claim)
    st, sec = sim.call("GET", NS + "/secrets/hf")
    check(sec.get("data") == {"HF_TOKEN": "YWJj"} and "stringData" not in sec and sec.get("type") == "Opaque",
          "stringData folded into base64 data, type defaulted: %s" % sec)
    st, lr = sim.call("GET", NS + "/limitranges/l")
    check(lr["spec"]["limits"][0]["default"] == {"cpu": "1", "memory": "2Gi"}, "LimitRange quantities as strings")
    st, svc = sim.call("GET", NS + "/services/s")
    check(svc["spec"]["type"] == "ClusterIP" and svc["spec"]["ports"][0]["protocol"] == "TCP",
          "Service defaults type and protocol: %s" % svc["spec"])
    st, lst = sim.call("GET", NS + "/configmaps?labelSelector=a%3Db")
    check(len(lst.get("items", [])) == 1, "label selector on configmaps")
    st, lst = sim.call("GET", NS + "/configmaps?labelSelector=a%3Dz")
    check(lst.get("items") == [], "label selector on configmaps (no match)")
    st, tab = sim.call("GET", RBAC + "/namespaces/sbx/roles",
                       accept="application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    check(st == 200 and tab.get("kind") == "Table" and [c["name"] for c in tab["columnDefinitions"]] == ["Name", "Age"]
          and tab["rows"][0]["cells"][0] == "r", "roles as a Table: %s" % tab)
    check(sim.call("POST", "/api/v1/namespaces/nosuch/secrets", {"metadata": {"name": "x"}})[0] == 404,
          "a Secret in a missing namespace: 404")


def test_invalid(sim):
    for path, obj, field in BAD:
        before = sim.rv()
        st, out = sim.call("POST", path, obj)
        ok = check(st == 422 and isinstance(out, dict) and out.get("reason") == "Invalid",
                   "invalid %s %s: want 422 Invalid, got %s %s" % (path, obj["metadata"]["name"], st, out))
        if ok and field is not None:
            causes = out.get("details", {}).get("causes", [])
            check(any(c.get("field") == field for c in causes),
                  "invalid %s: cause names %s: %s" % (obj["metadata"]["name"], field, causes))
        check(sim.rv() == before, "invalid %s: nothing stored" % obj["metadata"]["name"])
    # Immutable fields on update.
    st, out = sim.call("PATCH", RBAC + "/namespaces/sbx/rolebindings/rb", {"roleRef": {"name": "other"}},
                       ctype="application/merge-patch+json")
    check(st == 422 and "roleRef" in json.dumps(out), "roleRef cannot change: %s %s" % (st, out))
    st, out = sim.call("PATCH", "/apis/node.k8s.io/v1/runtimeclasses/gvisor", {"handler": "kata"},
                       ctype="application/merge-patch+json")
    check(st == 422, "RuntimeClass handler cannot change: %s %s" % (st, out))


def test_dry_run(sim):
    before = sim.rv()
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "dry"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
    st, out = sim.call("POST", RBAC + "/namespaces/sbx/roles?dryRun=All&fieldManager=kubectl-client-side-apply", role)
    check(st == 201 and out["metadata"]["name"] == "dry" and out["metadata"].get("uid") and
          not out["metadata"].get("resourceVersion"), "dry-run create answers the object: %s %s" % (st, out))
    check(sim.call("GET", RBAC + "/namespaces/sbx/roles/dry")[0] == 404, "dry-run create stores nothing")
    bad = dict(role, rules=[{"apiGroups": [""], "resources": ["secrets"], "verbs": []}])
    check(sim.call("POST", RBAC + "/namespaces/sbx/roles?dryRun=All", bad)[0] == 422, "dry-run still validates")
    st, out = sim.call("POST", RBAC + "/namespaces/sbx/roles?dryRun=Some", role)
    check(st == 400 and "dryRun" in out.get("message", ""), "dryRun=Some is 400: %s %s" % (st, out))
    st, out = sim.call("POST", "/api/v1/namespaces?dryRun=All",
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "drynamespace"}})
    check(st == 201 and out["status"]["phase"] == "Active", "dry-run namespace create: %s" % out)
    check(sim.call("GET", "/api/v1/namespaces/drynamespace")[0] == 404, "dry-run namespace not stored")
    st, out = sim.call("POST", "/apis/apps/v1/namespaces/sbx/replicasets?dryRun=All",
                       {"metadata": {"name": "dryrs"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                        "template": {"metadata": {"labels": {"a": "b"}},
                                     "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    check(st == 201, "dry-run ReplicaSet create: %s %s" % (st, out))
    st, out = sim.call("PATCH", NS + "/configmaps/c?dryRun=All", {"data": {"k": "changed"}},
                       ctype="application/merge-patch+json")
    check(st == 200 and out["data"]["k"] == "changed", "dry-run patch answers the patched object: %s" % out)
    check(sim.call("GET", NS + "/configmaps/c")[1]["data"]["k"] == "v", "dry-run patch changes nothing")
    st, out = sim.call("DELETE", NS + "/configmaps/c?dryRun=All")
    check(st == 200, "dry-run delete: %s %s" % (st, out))
    check(sim.call("GET", NS + "/configmaps/c")[0] == 200, "dry-run delete deletes nothing")
    check(sim.call("DELETE", NS + "/configmaps?dryRun=All")[0] == 200 and
          sim.call("GET", NS + "/configmaps/c")[0] == 200, "dry-run deletecollection deletes nothing")
    check(sim.rv() == before, "no dry-run request bumped the resourceVersion (%s -> %s)" % (before, sim.rv()))


def watch_events(sim, path):
    """The events of a watch that ends after timeoutSeconds=1."""
    req = urllib.request.Request(sim.base + path + "?watch=true&resourceVersion=0&timeoutSeconds=1")
    with urllib.request.urlopen(req, timeout=10) as r:
        return [json.loads(x) for x in r.read().splitlines() if x.strip()]


def test_update_delete(sim):
    rv0 = sim.rv()
    st, out = sim.call("PATCH", NS + "/configmaps/c", {"data": {"k": "w"}}, ctype="application/merge-patch+json")
    check(st == 200 and out["data"]["k"] == "w", "patch a ConfigMap: %s" % out)
    ev = watch_events(sim, RBAC + "/namespaces/sbx/roles")
    check([(e["type"], e["object"]["metadata"]["name"]) for e in ev] == [("ADDED", "r")],
          "watch roles from 0: one synthetic ADDED: %s" % ev)
    req = urllib.request.Request(sim.base + NS + "/configmaps?watch=true&resourceVersion=%d&timeoutSeconds=1" % rv0)
    with urllib.request.urlopen(req, timeout=10) as r:
        ev = [json.loads(x) for x in r.read().splitlines() if x.strip()]
    check([(e["type"], e["object"]["data"]["k"]) for e in ev] == [("MODIFIED", "w")],
          "watch configmaps from before the patch: one MODIFIED: %s" % ev)
    st, out = sim.call("DELETE", RBAC + "/clusterroles/cr")
    check(st == 200 and sim.call("GET", RBAC + "/clusterroles/cr")[0] == 404, "delete a ClusterRole")
    # Deleting the namespace deletes the stored kinds in it.
    st, _ = sim.call("DELETE", "/api/v1/namespaces/sbx")
    check(st == 200, "delete namespace sbx")
    for path, obj in GOOD:
        if "/namespaces/sbx/" in path:
            check(sim.call("GET", path + "/" + obj["metadata"]["name"])[0] == 404,
                  "%s gone with its namespace" % path)
    check(sim.call("GET", "/apis/node.k8s.io/v1/runtimeclasses/gvisor")[0] == 200,
          "a cluster-scoped RuntimeClass outlives the namespace")


def main():
    if len(sys.argv) != 2 or not os.access(sys.argv[1], os.X_OK):
        print("usage: kubesim_kinds.py PATH/TO/kubesim", file=sys.stderr)
        return 2
    sim = Sim(sys.argv[1])
    try:
        st, out = sim.call("POST", "/api/v1/namespaces",
                           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sbx"}})
        if not check(st == 201, "create namespace sbx: %s %s" % (st, out)):
            return 1
        for t in (test_discovery, test_create_get_list, test_invalid, test_dry_run, test_update_delete):
            n = len(FAILS)
            t(sim)
            print("%s %s" % ("ok  " if len(FAILS) == n else "FAIL", t.__name__))
    finally:
        sim.close()
    print("kubesim_kinds: %s" % ("%d failure(s)" % len(FAILS) if FAILS else "OK"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
