#!/usr/bin/env python3
"""Concurrent creates do not plan on the same warm pods, black-box.

Reproduces issue 15 item 8 ("warm pods are not reserved while creates are
in flight"): the planner saw the raw ready-warm count, so concurrent
creates all planned on the same warm pods and the losers cold-started in
the far cluster they had picked for its warm pods (10 x 5 concurrent
creates from a US client, 9 warm pods in all: 13 cold starts landed in
ap-tokyo while us-east had ~120 free).

Federation (the harness of test_router.py, the policy-file federation of
test_routing.py):

  us-east   region us-east, 2 nodes x 63 pods, API latency 5 ms,
            cold start 300 ms; pool "wr" with 3 warm pods (~120 free)
  ap-tokyo  region ap-tokyo, 1 node x 40 pods, API latency 150 ms,
            cold start 2 s; pool "wr" scaled to 6 warm pods in this
            cluster (its ReplicaSet, as an operator would)

  policy: us = [us-east] near apac; fill_first; warm.beats_cold with a
  5 s cold start, so a warm pod in ap-tokyo (~150 ms farther) beats a
  cold start in us-east (docs/policy.md, "Warm in a farther cluster vs
  cold in a nearer one").

First explain (docs/api.md, POST /v1/placement/explain) checks the
premise: one create of 5 from pool wr by a US client alone is planned as
us-east 3 warm + ap-tokyo 2 warm. Then 10 such creates are sent at once
(X-Client-Region: us, one connection each, released by a barrier). Every
one must answer 201 with 5 sandboxes, and by each sandbox's `cluster` and
`warm` (cross-checked against each answer's `placement`): ap-tokyo holds
at most the 6 sandboxes it had warm pods for and every one of them is a
warm claim (no cold start travelled to the far cluster for a warm pod
someone else got); every cold start is in us-east, where the capacity is;
and the 9 warm pods were all claimed (us-east's pool may refill in
time for a late create; ap-tokyo's takes 2 s). kubesim's own pods agree with the
answers. Then everything is deleted and nothing is left.

Usage: test_warm_reservation.py --fedrouter PATH --kubesim PATH [--only NAME] [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_routing as rt  # noqa: E402  (PolicyFed, kube_req, plan_entry)
from test_router import check, short, wait_until  # noqa: E402

POOL = "wr"
WARM = {"us-east": 3, "ap-tokyo": 6}
CREATES, PER_CREATE = 10, 5
BIG = ["--node-cpu", "64", "--node-memory", "256Gi"]
CLUSTERS = [
    ("us-east", "us-east", ["--nodes", "2", "--node-pods", "63", "--start-ms", "300", "--api-latency-ms", "5"] + BIG),
    ("ap-tokyo", "ap-tokyo", ["--nodes", "1", "--node-pods", "40", "--start-ms", "2000",
                              "--api-latency-ms", "150"] + BIG),
]
POLICY = """\
# policy for tests/router/test_warm_reservation.py (written by the test)
region_groups = (
  { name = "us";   regions = ["us-east"];  near = ["apac"]; },
  { name = "apac"; regions = ["ap-tokyo"]; near = ["us"]; }
);
split = "fill_first";
warm = { beats_cold = true; cold_start_s = 5.0; round_trips = 1; };
"""


def test_concurrent_creates_do_not_share_warm_pods(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": POOL, "image": tr.IMAGE, "cpus": 1, "memory_gb": 1,
                                          "replicas": WARM["us-east"]})
    check(st == 201, f"POST /v1/pools {POOL}: {st} {short(r)}")
    tokyo = fed.sims["ap-tokyo"]
    st, b = rt.kube_req(tokyo, "PATCH", f"/apis/apps/v1/namespaces/default/replicasets/fr-pool-{POOL}",
                        {"spec": {"replicas": WARM["ap-tokyo"]}}, content_type="application/merge-patch+json")
    check(st == 200, f"scaling fr-pool-{POOL} in ap-tokyo to {WARM['ap-tokyo']}: {st} {short(b)}")
    ok = wait_until(lambda: all(tr.pool_ready(fed, POOL, c) == n for c, n in WARM.items()), 30, 0.2)
    check(ok, f"pool {POOL} not ready {WARM} within 30 s: {short(fed.api('GET', '/v1/pools')[1], 800)}")

    # The premise: alone, a create of 5 takes us-east's 3 warm pods and 2
    # of ap-tokyo's (warm far beats cold near). The router's latency view
    # of ap-tokyo takes a few probes to settle, hence the wait.
    body = {"pool": POOL, "num_sandboxes": PER_CREATE}
    last = [None]

    def premise():
        plan = fed.explain(body, region="us")["plan"]
        last[0] = plan
        east, tok = rt.plan_entry(plan, "us-east"), rt.plan_entry(plan, "ap-tokyo")
        return (east.get("count") == 3 and east.get("warm") == 3 and tok.get("count") == 2
                and tok.get("warm") == 2)
    check(wait_until(premise, 20, 0.25),
          f"explain for {body} from a US client: want us-east 3 warm + ap-tokyo 2 warm, got {short(last[0], 1500)}")
    reason = rt.plan_entry(last[0], "ap-tokyo").get("reason", "")
    check("warm beats" in reason, f"ap-tokyo's reason does not say warm beats cold: {reason!r}")

    barrier = threading.Barrier(CREATES)
    res = [None] * CREATES

    def create(i):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=60)
        data = json.dumps(dict(body, name=f"wr{i}", labels={"t": "wr"})).encode()
        try:
            c.connect()
            barrier.wait(10)
            c.request("POST", "/v1/sandboxes", body=data,
                      headers={"Authorization": "Bearer " + tr.TOKEN_A, "Content-Type": "application/json",
                               "X-Client-Region": "us"})
            r = c.getresponse()
            raw = r.read()
            res[i] = (r.status, json.loads(raw) if raw else None)
        except Exception as e:  # reported below
            res[i] = (0, repr(e))
        finally:
            c.close()
    ths = [threading.Thread(target=create, args=(i,)) for i in range(CREATES)]
    t0 = time.monotonic()
    for t in ths:
        t.start()
    for t in ths:
        t.join(70)
    el = time.monotonic() - t0
    try:
        check(not any(t.is_alive() for t in ths), "a create did not answer within 70 s")
        bad = [(i, st, short(r, 600)) for i, (st, r) in enumerate(res)
               if st != 201 or not isinstance(r, dict) or len(r.get("sandboxes") or []) != PER_CREATE]
        check(not bad, f"creates not answered 201 with {PER_CREATE} sandboxes: {bad}")
        placed = {c: 0 for c in WARM}
        warm = {c: 0 for c in WARM}
        per_answer = []
        for i, (st, r) in enumerate(res):
            mine = {}
            for sb in r["sandboxes"]:
                c = sb.get("cluster")
                check(c in placed and sb.get("id", "").startswith(c + "."), f"create {i}: sandbox {short(sb)}")
                check(isinstance(sb.get("warm"), bool), f"create {i}: sandbox without warm: {short(sb)}")
                placed[c] += 1
                warm[c] += sb["warm"]
                m = mine.setdefault(c, [0, 0])
                m[0] += 1
                m[1] += sb["warm"]
            pl = r.get("placement") or {}
            said = {e.get("cluster"): [e.get("created"), e.get("warm")] for e in pl.get("clusters") or []
                    if e.get("created")}
            check(said == mine and pl.get("created") == PER_CREATE
                  and pl.get("warm") == sum(m[1] for m in mine.values()),
                  f"create {i}: placement {short(pl, 600)} does not match its sandboxes {mine}")
            per_answer.append(",".join(f"{c} {m[0]}/{m[1]}w" for c, m in sorted(mine.items())))
        cold = {c: placed[c] - warm[c] for c in placed}
        print(f"    ({CREATES} x {PER_CREATE} in {el:.1f} s: placed {placed}, warm {warm}, cold {cold}; "
              f"per create {per_answer})", flush=True)
        check(placed["ap-tokyo"] <= WARM["ap-tokyo"] and cold["ap-tokyo"] == 0,
              f"{cold['ap-tokyo']} cold starts in ap-tokyo ({placed['ap-tokyo']} sandboxes there, "
              f"{WARM['ap-tokyo']} warm pods): concurrent creates planned on the same warm pods. "
              f"Per create (cluster created/warm): {per_answer}")
        check(cold["us-east"] == CREATES * PER_CREATE - sum(warm.values()),
              f"cold starts {cold}: every cold start belongs in us-east")
        # Every warm pod was claimed: the reservations strand none. (us-east
        # may claim more: its pool refills within ~0.3 s, ap-tokyo's in 2 s.)
        check(warm["ap-tokyo"] == WARM["ap-tokyo"] and warm["us-east"] >= WARM["us-east"],
              f"warm claims {warm}, want every warm pod claimed: {WARM}")
        # kubesim agrees: the sandboxes the answers name are the pods there.
        for c, sim in fed.sims.items():
            ids = {f"{c}.{p['metadata']['name']}" for p in sim.pods("fedrouter.io/state=claimed")}
            named = {sb["id"] for st, r in res for sb in r["sandboxes"] if sb["cluster"] == c}
            check(named <= ids, f"{c}: answered sandboxes not in kubesim: {sorted(named - ids)[:5]}")
    finally:
        st, r = fed.api("DELETE", f"/v1/pools/{POOL}")
        check(st == 200, f"DELETE /v1/pools/{POOL}: {st} {short(r)}")
        fed.clean_all(["t=wr"])
        gone = wait_until(lambda: not any(s.pods(f"fedrouter.io/pool={POOL}") for s in fed.sims.values()), 20, 0.25)
        check(gone, f"pool pods left 20 s after DELETE /v1/pools/{POOL}: "
                    f"{ {n: len(s.pods(f'fedrouter.io/pool={POOL}')) for n, s in fed.sims.items()} }")


TESTS = [test_concurrent_creates_do_not_share_warm_pods]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(__doc__, lambda: rt.PolicyFed("warmres", CLUSTERS, POLICY), TESTS))
