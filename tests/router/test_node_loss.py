#!/usr/bin/env python3
"""A sandbox whose node is lost, black-box: the router says so.

One kubesim cluster "nl" (2 nodes, --node-monitor-grace-ms 300) behind the
real router (the harness of test_router.py). Two sandboxes are pinned to
node 1 with node_selector: "brief" tolerates node.kubernetes.io/unreachable
for 4 s, "stays" has only the 300 s tolerations every pod gets. Then node
1's kubelet is lost (kubesim's POST /_sim/nodes/NAME):

- both sandboxes show state "unreachable" (their pods went Ready=False
  because the node went Unknown), not "pending" (which says "not yet
  exec-ready") — and an exec or a files call into one fails at once with
  503 sandbox_unreachable naming the node, rather than hanging, failing on
  the API server's dial error or succeeding;
- the cluster evicts "brief" after its 4 s: while its pod is held
  Terminating (no kubelet to confirm the stop) the sandbox is still listed
  and found, state "evicted", not a silent 404;
- terminating by label (DELETE /v1/sandboxes?label=...) takes the evicted
  sandbox like any listed one: 404 from then on, though its pod still
  waits for the kubelet;
- the kubelet back: "stays" is "running" again and execs work, "brief"'s
  pod is removed.

Usage: test_node_loss.py --fedrouter PATH --kubesim PATH [--only NAME] [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
from test_router import check, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 80        # ctest's TIMEOUT is 90
NODE = "nl-node-1"
CLUSTERS = [("nl", "us", ["--nodes", "2", "--node-monitor-grace-ms", "300", "--terminate-ms", "200"])]
PIN = {"kubernetes.io/hostname": NODE}
# Long enough for the router to be seen showing it "unreachable" first.
UNREACHABLE_4S = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                   "tolerationSeconds": 4}]


def state_of(fed, sid):
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}")
    if st == 404:
        return "404"
    check(st == 200, f"GET /v1/sandboxes/{sid}: {st} {short(r)}")
    return r.get("state")


def wait_state(fed, sid, want, timeout):
    last = [None]

    def ok():
        last[0] = state_of(fed, sid)
        return last[0] == want
    check(wait_until(ok, timeout, 0.1), f"{sid}: state {last[0]!r} after {timeout} s, want {want!r}")


def kubelet(fed, what):
    st, r = fed.sims["nl"].admin("POST", f"/_sim/nodes/{NODE}", {"kubelet": what})
    check(st == 200 and r.get("kubelet") == what, f"POST /_sim/nodes/{NODE} kubelet={what}: {st} {short(r)}")


def test_lost_node_sandboxes_unreachable_then_evicted(fed):
    brief = fed.create_one(name="brief", node_selector=PIN, tolerations=UNREACHABLE_4S, labels={"t": "brief"})["id"]
    stays = fed.create_one(name="stays", node_selector=PIN)["id"]
    for sid in (brief, stays):
        wait_state(fed, sid, "running", 15)
        check(fed.sim_of(sid)[0].pod(fed.sim_of(sid)[1])["spec"]["nodeName"] == NODE, f"{sid} not on {NODE}")
    check(fed.exec_ok(stays, ["echo", "hi"]).get("stdout") == "hi\n", "exec before the loss")
    try:
        kubelet(fed, "lost")
        for sid in (brief, stays):
            wait_state(fed, sid, "unreachable", 10)
        listed = {s["id"]: s["state"] for s in fed.api("GET", "/v1/sandboxes")[1]["sandboxes"]}
        check(listed.get(stays) == "unreachable", f"the listing shows {stays} as {listed.get(stays)!r}")
        # Calls into the sandbox are not sent to a node that cannot answer:
        # 503 sandbox_unreachable naming the node, with Retry-After.
        st, r = fed.exec(stays, ["echo", "hi"])
        check(st == 503 and r.get("error", {}).get("code") == "sandbox_unreachable"
              and NODE in r["error"].get("message", ""),
              f"exec into a sandbox on a lost node: {st} {short(r)}")
        st, r = fed.api("GET", f"/v1/sandboxes/{stays}/files?path=/tmp")
        check(st == 503 and r.get("error", {}).get("code") == "sandbox_unreachable",
              f"files call into a sandbox on a lost node: {st} {short(r)}")
        # The taint manager evicts "brief" 4 s after the taint; its pod stays
        # Terminating while the node is away, and so the sandbox is shown.
        wait_state(fed, brief, "evicted", 10)
        listed = {s["id"]: s["state"] for s in fed.api("GET", "/v1/sandboxes")[1]["sandboxes"]}
        check(listed.get(brief) == "evicted", f"the listing shows {brief} as {listed.get(brief)!r}")
        check(state_of(fed, stays) == "unreachable", "stays (300 s tolerations) should not be evicted yet")
        # Terminating what the listing shows takes the evicted one too; then
        # it is gone for the router although its pod waits for the kubelet.
        st, r = fed.api("DELETE", "/v1/sandboxes?label=t=brief")
        check(st == 200 and r.get("terminated") == 1 and r.get("ids") == [brief],
              f"DELETE /v1/sandboxes?label=t=brief: {st} {short(r)}")
        check(state_of(fed, brief) == "404", "an evicted sandbox terminated by the tenant is still shown")
        check(fed.sim_of(brief)[0].pod(fed.sim_of(brief)[1]) is not None, "brief's pod should wait for the kubelet")
    finally:
        kubelet(fed, "ready")
    wait_state(fed, stays, "running", 10)
    check(fed.exec_ok(stays, ["echo", "back"]).get("stdout") == "back\n", "exec after the node came back")
    check(wait_until(lambda: fed.sim_of(brief)[0].pod(fed.sim_of(brief)[1]) is None, 10, 0.1),
          "brief's pod not removed once the kubelet was back")
    check(state_of(fed, brief) == "404" and brief not in fed.list_ids(), f"{brief} still shown")
    st, r = fed.api("DELETE", f"/v1/sandboxes/{stays}")
    check(st == 200, f"DELETE {stays}: {st} {short(r)}")


TESTS = [test_lost_node_sandboxes_unreachable_then_evicted]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(__doc__, lambda: tr.Fed("nodeloss", CLUSTERS), TESTS))
