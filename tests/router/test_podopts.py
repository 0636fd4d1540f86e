#!/usr/bin/env python3
"""fedrouter pod options black-box tests: runtime_class, node_selector,
tolerations, gpus and volumes on creates and pools (docs/api.md).

The real router in front of three kubesim clusters on loopback (the
harness of test_router.py):

    gpu      2 nodes; node 1 has 2 nvidia.com/gpu, label accel=a100 and
             taint nvidia.com/gpu=present:NoSchedule; RuntimeClass gvisor;
             PersistentVolumeClaim "data"
    plain    2 plain nodes; PersistentVolumeClaim "other"
    tainted  1 node labelled pool=dedicated, tainted dedicated=sandbox:NoSchedule

Each option must place only where the cluster can host it, the pod must
carry it, explain must name why every other cluster was skipped, bad
bodies get 400 naming the field, and a pool that pre-mounts a volume
serves warm claims only to creates asking for exactly its options. The
router injects the agent (kubesim runs the real fedrouter-agent), so the
options must sit beside the agent's init container, volume and mount.

Usage: test_podopts.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints `ok NAME` / `FAIL NAME: details` per test and `N passed, M failed`;
exits 1 if any test failed. Python 3 standard library only.
"""
import argparse
import http.client
import json
import os
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402  (AgentFed: the router's `agent` group)
from test_router import TestFailure, check, expect_error, short, wait_until, tail  # noqa: E402

WATCHDOG_S = 110        # ctest's TIMEOUT is 120
IMAGE = tr.IMAGE
GPU_TOL = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
DEDICATED_TOL = [{"key": "dedicated", "operator": "Equal", "value": "sandbox", "effect": "NoSchedule"}]

CLUSTERS = [
    ("gpu", "us", ["--nodes", "2", "--gpu-nodes", "1", "--node-gpus", "2", "--node-label", "1@accel=a100",
                   "--node-taint", "1@nvidia.com/gpu=present:NoSchedule"]),
    ("plain", "us", ["--nodes", "2"]),
    ("tainted", "us", ["--nodes", "1", "--node-label", "pool=dedicated",
                       "--node-taint", "dedicated=sandbox:NoSchedule"]),
]


def kube_post(sim, path, obj):
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=15, context=sim.ssl)
    try:
        c.request("POST", path, body=json.dumps(obj),
                  headers={"Authorization": "Bearer " + tr.SIM_TOKEN, "Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        check(r.status == 201, f"kubesim {sim.name} POST {path}: {r.status} {body[:300]!r}")
    finally:
        c.close()


def pvc(name):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


def setup_objects(fed):
    kube_post(fed.sims["gpu"], "/apis/node.k8s.io/v1/runtimeclasses",
              {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"},
               "handler": "runsc"})
    kube_post(fed.sims["gpu"], "/api/v1/namespaces/default/persistentvolumeclaims", pvc("data"))
    kube_post(fed.sims["plain"], "/api/v1/namespaces/default/persistentvolumeclaims", pvc("other"))


def explain(fed, body):
    b = dict(body)
    b.setdefault("image", IMAGE)
    st, r = fed.api("POST", "/v1/placement/explain", b)
    check(st == 200 and isinstance(r, dict), f"explain {short(b)}: {st} {short(r)}")
    return r


def reasons(r):
    return {c["cluster"]: (c["verdict"], c.get("reason", "")) for c in r["plan"]["clusters"]}


def expect_placed(fed, body, cluster, skips):
    """Explain uses only <cluster> and skips each of <skips> (cluster ->
    code) naming the code; then the create lands there. Returns the pod."""
    # The informers may take a moment to see the objects setup made.
    def settled():
        rs = reasons(explain(fed, body))
        return all(rs[c][0] == "skip" and code in rs[c][1] for c, code in skips.items()) and \
            rs[cluster][0] == "use"
    wait_until(settled, 10, 0.2)
    rs = reasons(explain(fed, body))
    check(rs[cluster][0] == "use", f"explain {short(body)}: {cluster} not used: {rs}")
    for c, code in skips.items():
        check(rs[c][0] == "skip" and f"skipped: {code}" in rs[c][1],
              f"explain {short(body)}: {c} should be skipped with {code}: {rs[c]}")
    sb = fed.create(dict(body, image=IMAGE))["sandboxes"][0]
    check(sb["cluster"] == cluster, f"create {short(body)} landed on {sb['cluster']}, want {cluster}")
    sim, pod = fed.sim_of(sb["id"])
    p = sim.pod(pod)
    check(p is not None and p["status"]["phase"] == "Running", f"pod {pod}: {short(p)}")
    return sb, p


def test_bad_bodies_name_the_field(fed):
    cases = [
        ({"runtime_class": "Not_A_Name"}, "runtime_class"),
        ({"runtime_class": 3}, "runtime_class"),
        ({"node_selector": {"accel": 1}}, "node_selector"),
        ({"node_selector": {"bad key!": "x"}}, "node_selector"),
        ({"node_selector": ["accel"]}, "node_selector"),
        ({"tolerations": [{"key": "k", "operator": "Maybe"}]}, "tolerations"),
        ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, "tolerations"),
        ({"tolerations": [{"key": "k", "effect": "Sometimes"}]}, "tolerations"),
        ({"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]}, "tolerations"),
        ({"tolerations": [{"key": "k", "colour": "red"}]}, "tolerations"),
        ({"tolerations": {"key": "k"}}, "tolerations"),
        ({"tolerations": [{"key": "k"}] * 17}, "tolerations"),
        ({"gpus": -1}, "gpus"),
        ({"gpus": "1"}, "gpus"),
        ({"gpus": 1.5}, "gpus"),
        ({"gpus": 65}, "gpus"),
        ({"volumes": {"data": "data"}}, "volumes"),
        ({"volumes": {"/a/../b": "data"}}, "volumes"),
        ({"volumes": {"/a//b": "data"}}, "volumes"),
        ({"volumes": {"/a/": "data"}}, "volumes"),
        ({"volumes": {"/": "data"}}, "volumes"),
        ({"volumes": {"/fr-agent/x": "data"}}, "volumes"),
        ({"volumes": {"/data": "Data_1"}}, "volumes"),
        ({"volumes": {"/data": 7}}, "volumes"),
        ({"volumes": ["/data"]}, "volumes"),
        ({"volumes": {f"/v{i}": "data" for i in range(9)}}, "volumes"),
    ]
    for extra, field in cases:
        st, r = fed.api("POST", "/v1/sandboxes", dict(extra, image=IMAGE))
        check(st == 400 and r["error"]["code"] == "invalid_field" and r["error"].get("field") == field,
              f"create with {short(extra)}: want 400 invalid_field naming {field}, got {st} {short(r)}")
    st, r = fed.api("POST", "/v1/pools", {"name": "badpool", "image": IMAGE, "replicas": 1,
                                          "volumes": {"rel": "data"}})
    check(st == 400 and r["error"].get("field") == "volumes", f"pool with a relative mount: {st} {short(r)}")
    st, r = fed.api("POST", "/v1/placement/explain", {"image": IMAGE, "gpus": -2})
    check(st == 400 and r["error"].get("field") == "gpus", f"explain with gpus -2: {st} {short(r)}")


def test_gpus_only_where_gpu_nodes_are(fed):
    sb, p = expect_placed(fed, {"gpus": 1, "tolerations": GPU_TOL}, "gpu",
                          {"plain": "no_gpu_node", "tainted": "no_matching_node"})
    res = p["spec"]["containers"][0]["resources"]
    check(res["limits"].get("nvidia.com/gpu") == "1" and res["requests"].get("nvidia.com/gpu") == "1",
          f"gpu pod resources: {res}")
    check(p["spec"]["nodeName"] == "gpu-node-1", f"gpu pod on {p['spec']['nodeName']}")
    req = explain(fed, {"gpus": 1, "tolerations": GPU_TOL})["request"]
    check(req.get("pod_options") == {"gpus": 1, "tolerations": GPU_TOL},
          f"explain's request.pod_options: {req.get('pod_options')}")
    # The router's toleration, then the two the API server's
    # DefaultTolerationSeconds admission adds to every pod.
    check(p["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] +
          [{"key": "node.kubernetes.io/" + k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
           for k in ("not-ready", "unreachable")], f"tolerations: {p['spec'].get('tolerations')}")
    # The node has 2: one more of 1 fits, then the cluster is full for GPUs.
    fed.create({"gpus": 1, "tolerations": GPU_TOL, "name": "g2"})
    r = explain(fed, {"gpus": 1, "tolerations": GPU_TOL})
    rs = reasons(r)
    check("full" in rs["gpu"][1] and "no_gpu_node" not in rs["gpu"][1],
          f"gpu cluster with its GPUs taken: want full (not unfit), got {rs['gpu']}")
    st, r = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "gpus": 1, "tolerations": GPU_TOL})
    check(st == 503 and r["error"]["code"] == "no_capacity", f"third GPU create: {st} {short(r)}")
    # A GPU pool's slots count GPU nodes only: 2 in all (one node of 2
    # GPUs), none free while g1 and g2 hold them.
    st, r = fed.api("POST", "/v1/pools", {"name": "gp", "image": IMAGE, "replicas": 0, "gpus": 1,
                                          "tolerations": GPU_TOL})
    check(st == 201 and {s["cluster"] for s in r.get("skipped", [])} == {"plain", "tainted"},
          f"GPU pool: {st} {short(r)}")

    def gp_slots():
        st, r = fed.api("GET", "/v1/clusters")
        return {c["name"]: [s for s in c["slots"] if s["pool"] == "gp"] for c in r["clusters"]}
    wait_until(lambda: gp_slots()["gpu"], 10, 0.1)
    slots = gp_slots()
    check([(s["free"], s["total"]) for s in slots["gpu"]] == [(0, 2)] and not slots["plain"],
          f"GPU pool slots: {slots}")
    fed.api("DELETE", "/v1/pools/gp")
    # Without the toleration the GPU node refuses it and no other node has GPUs.
    rs = reasons(explain(fed, {"gpus": 1}))
    check(all(v[0] == "skip" for v in rs.values()) and "no_gpu_node" in rs["gpu"][1], f"gpus without toleration: {rs}")


def test_node_selector_and_tolerations(fed):
    sb, p = expect_placed(fed, {"node_selector": {"pool": "dedicated"}, "tolerations": DEDICATED_TOL}, "tainted",
                          {"gpu": "no_matching_node", "plain": "no_matching_node"})
    check(p["spec"]["nodeSelector"] == {"pool": "dedicated"}, f"nodeSelector: {p['spec'].get('nodeSelector')}")
    # The selector alone: the only matching node's taint is not tolerated.
    rs = reasons(explain(fed, {"node_selector": {"pool": "dedicated"}}))
    check(all(v[0] == "skip" and "no_matching_node" in v[1] for v in rs.values()), f"selector alone: {rs}")
    st, r = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "node_selector": {"pool": "dedicated"}})
    check(st == 503 and r["error"]["code"] == "no_capacity" and
          all("no_matching_node" in c["reason"] for c in r["error"]["clusters"]), f"selector alone: {st} {short(r)}")
    # A selector on the GPU node's label plus its toleration: the gpu cluster.
    expect_placed(fed, {"node_selector": {"accel": "a100"}, "tolerations": GPU_TOL}, "gpu",
                  {"plain": "no_matching_node", "tainted": "no_matching_node"})


def test_runtime_class_only_where_it_exists(fed):
    sb, p = expect_placed(fed, {"runtime_class": "gvisor"}, "gpu",
                          {"plain": "no_runtime_class", "tainted": "no_runtime_class"})
    check(p["spec"].get("runtimeClassName") == "gvisor", f"runtimeClassName: {p['spec'].get('runtimeClassName')}")
    st, r = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "runtime_class": "kata"})
    check(st == 503 and all("no_runtime_class" in c["reason"] for c in r["error"]["clusters"]),
          f"unknown runtime class: {st} {short(r)}")
    # A pool no cluster can host is refused with every cluster's reason.
    st, r = fed.api("POST", "/v1/pools", {"name": "kata", "image": IMAGE, "replicas": 1, "runtime_class": "kata"})
    check(st == 409 and r["error"]["code"] == "no_cluster_fits" and
          sorted(c["cluster"] for c in r["error"]["clusters"]) == ["gpu", "plain", "tainted"] and
          all("no_runtime_class" in c["reason"] for c in r["error"]["clusters"]), f"pool nowhere: {st} {short(r)}")
    check(fed.api("GET", "/v1/pools/kata")[0] == 404, "the refused pool exists")


def test_volumes_only_where_the_pvc_is(fed):
    sb, p = expect_placed(fed, {"volumes": {"/data": "data"}}, "gpu",
                          {"plain": "no_pvc", "tainted": "no_pvc"})
    vols = {v["name"]: v for v in p["spec"]["volumes"]}
    mounts = p["spec"]["containers"][0].get("volumeMounts", [])
    claim = [n for n, v in vols.items() if v.get("persistentVolumeClaim", {}).get("claimName") == "data"]
    check(len(claim) == 1 and {"name": claim[0], "mountPath": "/data"} in mounts,
          f"pod volumes {vols} mounts {mounts}")
    # The agent's emptyDir, mount and init container are still there, and
    # exec reaches the sandbox through the agent.
    check("emptyDir" in vols.get("fr-agent", {}) and any(m["name"] == "fr-agent" for m in mounts) and
          [c["name"] for c in p["spec"].get("initContainers", [])] == ["fr-agent-install"],
          f"agent wiring beside the volume: volumes {vols} mounts {mounts}")
    r = fed.exec_ok(sb["id"], ["echo", "mounted"])
    check(r.get("stdout") == "mounted\n", f"exec in the sandbox with a volume: {r}")
    expect_placed(fed, {"volumes": {"/data": "other"}}, "plain", {"gpu": "no_pvc", "tainted": "no_pvc"})
    st, r = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "volumes": {"/data": "missing"}})
    check(st == 503 and all("no_pvc" in c["reason"] for c in r["error"]["clusters"]), f"missing claim: {st} {short(r)}")


def pool_ready(fed, name, cluster):
    st, r = fed.api("GET", f"/v1/pools/{name}")
    for c in (r.get("clusters", []) if st == 200 else []):
        if c.get("cluster") == cluster:
            return c.get("ready")
    return None


def test_pool_premounts_volume_warm_claim(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": "vol", "image": IMAGE, "cpus": 0.5, "memory_gb": 0.5,
                                          "replicas": 1, "volumes": {"/data": "data"}})
    check(st == 201 and r.get("volumes") in (None, {"/data": "data"}), f"POST /v1/pools: {st} {short(r)}")
    skipped = {s["cluster"]: s["reason"] for s in r.get("skipped", [])}
    check(set(skipped) == {"plain", "tainted"} and all("no_pvc" in v for v in skipped.values()),
          f"pool skipped clusters: {r.get('skipped')}")
    check(wait_until(lambda: pool_ready(fed, "vol", "gpu") == 1, 30, 0.2),
          f"pool vol not ready: {short(fed.api('GET', '/v1/pools/vol')[1])}")
    st, r = fed.api("GET", "/v1/pools/vol")
    check(r.get("volumes") == {"/data": "data"} and [c["cluster"] for c in r["clusters"]] == ["gpu"],
          f"GET /v1/pools/vol: {short(r)}")
    pods = fed.sims["gpu"].pods("fedrouter.io/pool=vol")
    check(len(pods) == 1 and any(v.get("persistentVolumeClaim", {}).get("claimName") == "data"
                                 for v in pods[0]["spec"]["volumes"]), f"pool pod volumes: {short(pods)}")
    # Same options (inherited, then spelled out): warm.
    resp = fed.create({"pool": "vol", "name": "w1"})
    check(resp["sandboxes"][0]["warm"] is True, f"claim from vol: {short(resp)}")
    check(wait_until(lambda: pool_ready(fed, "vol", "gpu") == 1, 30, 0.2), "pool vol did not refill")
    resp = fed.create({"pool": "vol", "name": "w2", "volumes": {"/data": "data"}})
    check(resp["sandboxes"][0]["warm"] is True, f"claim from vol with the same volumes: {short(resp)}")
    check(wait_until(lambda: pool_ready(fed, "vol", "gpu") == 1, 30, 0.2), "pool vol did not refill")
    # Other options: cold, and explain says why.
    body = {"pool": "vol", "volumes": {"/scratch": "data"}}
    r = explain(fed, body)
    check("cold_reason" in r and "vol" in r["cold_reason"] and r["plan"]["clusters"][0]["warm"] == 0,
          f"explain with other volumes: {short(r, 1200)}")
    resp = fed.create(dict(body, name="c1"))
    sb = resp["sandboxes"][0]
    check(sb["warm"] is False and "cold_reason" in resp["placement"], f"create with other volumes: {short(resp)}")
    p = fed.sims["gpu"].pod(fed.sim_of(sb["id"])[1])
    check({"name": "fr-vol-0", "mountPath": "/scratch"} in p["spec"]["containers"][0]["volumeMounts"],
          f"cold pod mounts: {p['spec']['containers'][0].get('volumeMounts')}")
    check(pool_ready(fed, "vol", "gpu") == 1, "the cold create took the pool's warm pod")
    # A second router reads the options back from the pool's annotation.
    r2 = fed.start_router()
    st, r = fed.api("GET", "/v1/pools/vol", router=r2)
    check(st == 200 and r.get("volumes") == {"/data": "data"}, f"second router GET /v1/pools/vol: {short(r)}")
    r2.expected_dead = True
    tr.stop_proc(r2.proc)
    fed.api("DELETE", "/v1/pools/vol")


TESTS = [test_bad_bodies_name_the_field, test_gpus_only_where_gpu_nodes_are, test_node_selector_and_tolerations,
         test_runtime_class_only_where_it_exists, test_volumes_only_where_the_pvc_is,
         test_pool_premounts_volume_warm_claim]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--agent", required=True, help="fedrouter-agent, run by kubesim in every sandbox")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories (logs)")
    tr.ARGS = ap.parse_args()
    tr.WATCHDOG_S = WATCHDOG_S
    threading.Thread(target=tr.watchdog, daemon=True).start()
    results = []
    t_all = time.monotonic()
    agent = ["--agent-binary", os.path.abspath(tr.ARGS.agent)]
    fed = tap.AgentFed("podopts", [(n, r, extra + agent) for n, r, extra in CLUSTERS])
    try:
        setup_objects(fed)
        for t in TESTS:
            tr.run_test(t, fed, results)
            if not results[-1][1]:
                print(tail(fed.router.log, 15), flush=True)
    finally:
        problems = fed.teardown()
    results.append(("teardown", not problems, "; ".join(problems)))
    print("ok   teardown" if not problems else "FAIL teardown: " + "\n".join(problems), flush=True)
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed ({time.monotonic() - t_all:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        for p in tr.ALL_PROCS:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
    sys.exit(rc)
