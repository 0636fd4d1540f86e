#!/usr/bin/env python3
"""fedrouter routing black-box tests: placement policy, spillover, capacity.

The real router in front of three kubesim clusters on loopback, placing by
a policy file written here (docs/policy.md is the contract for the file,
docs/api.md for the API). The harness (kubesim and router processes,
API calls, teardown with SIGTERM and a check for leftover processes) is
the one of test_router.py, imported from the same directory.

Clusters and regions: us-east (region us-east), us-west (region us-west),
ap-tokyo (region ap-tokyo); the policy groups them so that for an APAC
client the nearest are us-west, then us-east:

    group apac = [ap-tokyo]           near = [us-west, us]
    group us   = [us-east, us-west]   near = [apac]

(us-east and us-west get regions of their own because a policy can only
order regions, not clusters of one region, and the test needs us-west to
be deterministically "nearer" to APAC than us-east.)

Three federations, each started once:
  geo    us-east, us-west (2 roomy nodes each), ap-tokyo (1 node of 5
         pods, 1 s scheduling delay, 3 s image pulls):
         tests 1 (APAC/US placement, explain), 2 (spill when ap-tokyo is
         full), 4 (fault switch), 6 (reload), 7 (broken policy files)
  big    three clusters of 20 nodes x 100 pods (2,000 slots each),
         --fast-exec: test 3 (the 5,000-sandbox batch)
  tight  three clusters of 1 node x 100 pods: test 5 (two concurrent
         bursts of 150 on room for exactly 300)
  priced two clusters of one region at $0.50 and $0.01: test 8 (the
         cost weight ranks within a region)
  cheaper us-dear (region us, $0.10) and eu-cheap (region eu, $0.04, 40 ms,
         4 slots): test 9 (cheaper_region moves a US client's sandboxes
         to the EU within the latency budget, explain says why, what does
         not fit spills back and is counted as spilled)

Usage: test_routing.py --fedrouter PATH --kubesim PATH [--only NAME ...] [--keep]
Prints `ok NAME` / `FAIL NAME: details` per test and `N passed, M failed`;
exits 1 if any test failed. Python 3 standard library only.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402  (the harness: Kubesim, Router, Fed, api_call, ...)
from test_router import TestFailure, check, short, wait_until, tail  # noqa: E402

ARGS = None
WATCHDOG_S = 540        # ctest's TIMEOUT is 600: clean up ourselves before it
IMAGE = tr.IMAGE
TOKEN = tr.TOKEN_A
TIMINGS = {}            # name -> seconds, printed at the end

BASE_POLICY = """\
# policy for tests/router/test_routing.py (written by the test)
region_groups = (
  { name = "apac"; regions = ["ap-tokyo"];           near = ["us-west", "us"]; },
  { name = "us";   regions = ["us-east", "us-west"]; near = ["apac"]; }
);
split = "fill_first";
warm = { beats_cold = false; };
"""

# The same plus a rule pinning every request to us-west (test 6).
PIN_WEST_POLICY = BASE_POLICY + """\
rules = (
  { name = "pin-us-west"; pin = ["us-west"]; }
);
"""


def write_atomic(path, text):
    """Replaces <path> by rename, as config management does: the router's
    file watch never sees a half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# federation with a policy file

class PolicyFed(tr.Fed):
    """tr.Fed plus `policy = "policy.conf";` (relative to the config's
    directory) with <policy_text> in it."""

    def __init__(self, name, clusters, policy_text, costs=None):
        self.policy_text = policy_text
        self.costs = costs or {}
        super().__init__(name, clusters)
        self.shared = {}

    def write_config(self, path, lifetime):
        self.policy_path = os.path.join(self.root, "policy.conf")
        write_atomic(self.policy_path, self.policy_text)
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        for cname, per_core_hour in self.costs.items():
            text = text.replace(f'{{ name = "{cname}"; ',
                                f'{{ name = "{cname}"; cost = {{ per_core_hour = {per_core_hour}; }}; ')
        with open(path, "w") as f:
            f.write(text + 'policy = "policy.conf";\n')

    def post(self, body, region=None, timeout=120, path="/v1/sandboxes"):
        """POST a create (or explain) as a client of <region>
        (X-Client-Region). Returns (status, json, headers, seconds)."""
        b = dict(body)
        if "pool" not in b:
            b.setdefault("image", IMAGE)
        h = {"X-Client-Region": region} if region else None
        t0 = time.monotonic()
        try:
            st, r, hd = self.api("POST", path, b, headers=h, full=True, timeout=timeout)
        except socket.timeout:
            state = {n: (s.state()["pods"], s.state()["unschedulable"]) for n, s in self.sims.items()}
            raise TestFailure(f"POST {path} {short(b)} (region {region}): no answer within {timeout} s; "
                              f"kubesim (pods, unschedulable) now {state}")
        return st, r, hd, time.monotonic() - t0

    def create_ok(self, body, region=None, timeout=120):
        st, r, h, el = self.post(body, region, timeout)
        n = body.get("num_sandboxes", 1)
        check(st == 201 and isinstance(r, dict) and len(r.get("sandboxes", [])) == n,
              f"create {short(body)} as region {region}: expected 201 with {n} sandboxes, "
              f"got {st} after {el:.1f} s: {short(r, 1500)}")
        return r, el

    def explain(self, body, region=None):
        st, r, h, el = self.post(body, region, path="/v1/placement/explain")
        check(st == 200 and isinstance(r, dict) and isinstance(r.get("plan"), dict)
              and isinstance(r["plan"].get("clusters"), list),
              f"explain {short(body)} as region {region}: {st} {short(r, 1500)}")
        return r

    def clusters(self):
        st, r = self.api("GET", "/v1/clusters")
        check(st == 200 and isinstance(r, dict) and isinstance(r.get("clusters"), list),
              f"GET /v1/clusters: {st} {short(r)}")
        return {c.get("name"): c for c in r["clusters"]}

    def free_default(self, name):
        """Free slots of the default shape in the router's view of <name>."""
        c = self.clusters().get(name) or {}
        for s in c.get("slots") or []:
            if s.get("pool") is None:
                return s.get("free")
        return None

    def policy(self):
        st, r = self.api("GET", "/v1/policy")
        check(st == 200 and isinstance(r, dict) and isinstance(r.get("version"), str),
              f"GET /v1/policy: {st} {short(r)}")
        return r

    def terminate(self, label):
        st, r = self.api("DELETE", "/v1/sandboxes?label=" + urllib.parse.quote(label), timeout=120)
        check(st == 200 and isinstance(r, dict), f"DELETE /v1/sandboxes?label={label}: {st} {short(r)}")
        return r.get("terminated")

    def router_pods(self, name):
        """Sandbox pods (fedrouter's label) in kubesim <name>."""
        return self.sims[name].pods("fedrouter.io/sandbox")

    def clean_all(self, labels):
        for l in labels:
            self.terminate(l)
        ok = wait_until(lambda: not self.list_ids() and all(not self.router_pods(n) for n in self.sims), 20, 0.2)
        check(ok, f"sandboxes left after cleanup: listed {len(self.list_ids())}, "
                  f"kubesim {[(n, len(self.router_pods(n))) for n in self.sims]}")


def kube_req(sim, method, path, body=None, timeout=15, content_type="application/json"):
    """Any request on kubesim's Kubernetes API: (status, json). A PATCH
    names its kind in <content_type> (application/merge-patch+json)."""
    import http.client
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=timeout, context=sim.ssl)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Authorization": "Bearer " + tr.SIM_TOKEN, "Content-Type": content_type})
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data.decode(errors="replace")
    finally:
        c.close()


def pod_unschedulable(pod):
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason") or "PodScheduled=False"
    return None


def not_running(sim):
    """Pods of <sim> (every namespace) that are not Running, or that are
    Unschedulable: [(name, phase, reason)]."""
    st, body = kube_req(sim, "GET", "/api/v1/pods")
    check(st == 200, f"kubesim {sim.name} GET /api/v1/pods: {st} {short(body)}")
    out = []
    for p in body["items"]:
        phase = (p.get("status") or {}).get("phase")
        uns = pod_unschedulable(p)
        if phase != "Running" or uns:
            out.append((p["metadata"]["name"], phase, uns))
    return out


def where(resp):
    return [s.get("cluster") for s in resp.get("sandboxes", [])]


def plan_entry(plan, name):
    for e in plan["clusters"]:
        if e.get("cluster") == name:
            return e
    return None


# --------------------------------------------------------------------------
# geo federation: tests 1, 2, 4, 6, 7

def test_1_apac_and_us_clients(fed):
    """An APAC client lands in ap-tokyo (header and region field), a US
    client in a us-* cluster; explain ranks ap-tokyo, us-west, us-east for
    APAC with a reason for every cluster and creates nothing."""
    r, el = fed.create_ok({"name": "apac-h", "labels": {"t": "t1"}}, region="apac")
    sb = r["sandboxes"][0]
    check(sb.get("cluster") == "ap-tokyo" and sb.get("id", "").startswith("ap-tokyo.")
          and sb.get("region") == "ap-tokyo",
          f"X-Client-Region: apac placed {short(sb)}")
    pl = r.get("placement", {})
    check(any(c.get("cluster") == "ap-tokyo" and c.get("created") == 1 for c in pl.get("clusters", [])),
          f"placement of the APAC create: {short(pl)}")
    r, _ = fed.create_ok({"name": "apac-f", "region": "apac", "labels": {"t": "t1"}})
    check(where(r) == ["ap-tokyo"], f'"region":"apac" placed {where(r)}')
    # The region field wins over the header.
    r, _ = fed.create_ok({"name": "apac-f2", "region": "apac", "labels": {"t": "t1"}}, region="us")
    check(where(r) == ["ap-tokyo"], f'"region":"apac" with X-Client-Region: us placed {where(r)}')
    for reg in ("us", None):
        r, _ = fed.create_ok({"name": "us-1", "labels": {"t": "t1"}}, region=reg)
        check(where(r)[0] in ("us-east", "us-west") and r["sandboxes"][0].get("region") == where(r)[0],
              f"US client (X-Client-Region {reg}) placed {short(r['sandboxes'][0])}")

    # Explain: same body, nothing created.
    before = {n: len(s.pods()) for n, s in fed.sims.items()}
    listed = fed.list_ids()
    body = {"name": "explained", "num_sandboxes": 2, "labels": {"t": "t1"}}
    ex = fed.explain(body, region="apac")
    plan = ex["plan"]
    names = [e.get("cluster") for e in plan["clusters"]]
    check(sorted(names) == ["ap-tokyo", "us-east", "us-west"], f"explain lists clusters {names}")
    check(names == ["ap-tokyo", "us-west", "us-east"],
          f"explain for APAC ranks {names}, want ap-tokyo, us-west, us-east: {short(plan, 1500)}")
    first = plan["clusters"][0]
    check(first.get("verdict") == "use" and first.get("count") == 2,
          f"ap-tokyo in the APAC plan: {first}")
    check(plan.get("planned") == 2 and plan.get("shortfall") == 0, f"plan totals: {short(plan)}")
    for e in plan["clusters"]:
        check(isinstance(e.get("reason"), str) and e["reason"].strip(), f"no reason for {e}")
        check(e.get("cluster") == "ap-tokyo" or e.get("count") == 0, f"unneeded cluster got sandboxes: {e}")
    check("client" in first["reason"] and "ap-tokyo" in first["reason"],
          f"ap-tokyo reason does not say it is the client's: {first['reason']!r}")
    west, east = plan_entry(plan, "us-west"), plan_entry(plan, "us-east")
    check("near apac #1" in west["reason"] and "near apac" in east["reason"]
          and "#1" not in east["reason"],
          f"us-west/us-east reasons do not follow the near list: {west['reason']!r} / {east['reason']!r}")
    check(ex.get("request", {}).get("region") == "apac" and ex.get("request", {}).get("num_sandboxes") == 2,
          f"explain echoes the request: {short(ex.get('request'))}")
    check(ex.get("policy", {}).get("version") == fed.policy()["version"],
          f"explain's policy version {ex.get('policy')} is not GET /v1/policy's")
    time.sleep(0.5)
    after = {n: len(s.pods()) for n, s in fed.sims.items()}
    check(after == before and fed.list_ids() == listed,
          f"explain created something: kubesim pods {before} -> {after}")
    # For a US client ap-tokyo comes last.
    ex = fed.explain({"num_sandboxes": 1}, region="us")
    names = [e.get("cluster") for e in ex["plan"]["clusters"]]
    check(names[0] in ("us-east", "us-west") and names[-1] == "ap-tokyo",
          f"explain for a US client ranks {names}")
    fed.clean_all(["t=t1"])


def test_1b_batch_follows_plan(fed):
    """A batch that fits in the first cluster of the plan goes there whole
    (fill_first): a US client's 60 sandboxes, with 128 default-shape slots
    in each us-* cluster, land in the one cluster explain names, and none
    in ap-tokyo; an APAC client's 5 all land in ap-tokyo."""
    ex = fed.explain({"num_sandboxes": 60}, region="us")
    plan = {e["cluster"]: e.get("count") for e in ex["plan"]["clusters"] if e.get("count")}
    check(len(plan) == 1 and list(plan.values()) == [60] and "ap-tokyo" not in plan,
          f"explain for 60 from a US client: {short(ex['plan'], 1500)}")
    r, el = fed.create_ok({"name": "us60", "num_sandboxes": 60, "labels": {"t": "t1b"}}, region="us")
    got = {}
    for c in where(r):
        got[c] = got.get(c, 0) + 1
    try:
        check("ap-tokyo" not in got and len(got) == 1,
              f"POST /v1/sandboxes {{num_sandboxes:60}} X-Client-Region: us placed {got}; explain's plan "
              f"(same body, just before) is {plan}; fill_first with room for all 60 in one US cluster "
              f"means one cluster, never ap-tokyo. placement: {short(r.get('placement'), 600)}")
    finally:
        fed.clean_all(["t=t1b"])
    r, el = fed.create_ok({"name": "apac5", "num_sandboxes": 5, "labels": {"t": "t1b"}}, region="apac")
    try:
        check(where(r) == ["ap-tokyo"] * 5, f"APAC batch of 5 (ap-tokyo has 5 free) placed {where(r)}")
    finally:
        fed.clean_all(["t=t1b"])


def test_2_tokyo_full_spills_to_us_west(fed):
    """ap-tokyo (1 node, 5 pods) full: an APAC create goes to us-west in
    the same request. (a) the router knows it is full; (b) it does not (5
    pods created behind its back, not yet scheduled): the create's pods go
    Unschedulable in ap-tokyo and move to us-west within the request."""
    check(wait_until(lambda: fed.free_default("ap-tokyo") == 5, 15, 0.2),
          f"router's free slots for ap-tokyo: {fed.free_default('ap-tokyo')} (want 5)")
    # No room for the request: a prompt 503 no_capacity with every
    # cluster's reason and the shortfall, and nothing created.
    for body, short_by in (({"num_sandboxes": 6, "clusters": ["ap-tokyo"]}, 1),
                           ({"num_sandboxes": 1000}, None)):
        st, r, h, el = fed.post(dict(body, name="toobig", labels={"t": "t2"}), region="apac")
        e = (r.get("error") or {}) if isinstance(r, dict) else {}
        check(st == 503 and e.get("code") == "no_capacity", f"{short(body)}: {st} {short(r, 800)}")
        check("retry-after" in h, f"{short(body)}: no Retry-After: {h}")
        cl = {c.get("cluster"): c for c in e.get("clusters") or []}
        check(set(cl) == set(fed.sims) and all(c.get("reason") for c in cl.values()),
              f"{short(body)}: no_capacity does not give a reason for every cluster: {short(e, 1200)}")
        if short_by is not None:
            check(e.get("shortfall") == short_by and cl["ap-tokyo"].get("free_slots") == 5
                  and "not in the request's cluster list" in cl["us-west"].get("reason", ""),
                  f"{short(body)}: no_capacity details: {short(e, 1200)}")
        else:
            check(isinstance(e.get("shortfall"), int) and 0 < e["shortfall"] < 1000, f"shortfall: {short(e, 800)}")
        check(el < 3, f"{short(body)}: no_capacity took {el:.1f} s")
    check(not fed.list_ids() and all(not fed.router_pods(n) for n in fed.sims),
          "a refused create left sandboxes behind")
    r, el = fed.create_ok({"name": "fill", "num_sandboxes": 5, "labels": {"t": "t2"}}, region="apac")
    check(where(r) == ["ap-tokyo"] * 5, f"filling ap-tokyo placed {where(r)}")
    check(wait_until(lambda: fed.free_default("ap-tokyo") == 0, 10, 0.1),
          f"ap-tokyo full but the router says free={fed.free_default('ap-tokyo')}")
    ex = fed.explain({"num_sandboxes": 1}, region="apac")
    tok, west = plan_entry(ex["plan"], "ap-tokyo"), plan_entry(ex["plan"], "us-west")
    check(west.get("verdict") == "use" and west.get("count") == 1 and tok.get("count") == 0
          and "full" in tok.get("reason", ""),
          f"explain with ap-tokyo full: {short(ex['plan'], 1500)}")
    r, el = fed.create_ok({"name": "spill-a", "labels": {"t": "t2"}}, region="apac")
    check(where(r) == ["us-west"], f"APAC create with ap-tokyo full placed {where(r)}, want us-west")
    check(el < 5, f"spilled create took {el:.1f} s")
    TIMINGS["2a spill (known full)"] = el

    # (b) The router's view says 5 free; kubesim will bind 5 foreign pods first.
    check(fed.terminate("t=t2") == 6, "terminating the t2 sandboxes")
    check(wait_until(lambda: fed.free_default("ap-tokyo") == 5 and not fed.router_pods("ap-tokyo"), 15, 0.1),
          f"ap-tokyo not free again: free={fed.free_default('ap-tokyo')}")
    tokyo = fed.sims["ap-tokyo"]
    fillers = []
    try:
        for i in range(5):
            name = f"filler-{i}"
            st, b = kube_req(tokyo, "POST", "/api/v1/namespaces/default/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"t": "filler"}},
                "spec": {"containers": [{"name": "c", "image": IMAGE, "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}})
            check(st == 201, f"creating filler pod {name} in ap-tokyo: {st} {short(b)}")
            fillers.append(name)
        # The fillers are bound after --schedule-ms 1000: until then the
        # router's view (bound pods only) still has 5 free slots.
        r, el = fed.create_ok({"name": "spill-b", "num_sandboxes": 2, "labels": {"t": "t2"}}, region="apac")
        check(where(r) == ["us-west"] * 2, f"APAC create racing the fillers placed {where(r)}, want us-west x2")
        pl = {c.get("cluster"): c for c in r.get("placement", {}).get("clusters", [])}
        tried = pl.get("ap-tokyo")
        print(f"    (2b: {el:.1f} s; ap-tokyo in the placement: {short(tried) if tried else 'not tried'})")
        check(el < 10, f"the create that had to move took {el:.1f} s")
        TIMINGS["2b spill (Unschedulable)"] = el
        # Nothing of the router's left Pending in ap-tokyo; the fillers run.
        ok = wait_until(lambda: not fed.router_pods("ap-tokyo"), 10, 0.1)
        check(ok, f"router pods left in ap-tokyo: "
                  f"{[(p['metadata']['name'], p['status'].get('phase'), pod_unschedulable(p)) for p in fed.router_pods('ap-tokyo')]}")
        check(not not_running(tokyo), f"ap-tokyo pods not Running: {not_running(tokyo)}")
        # The router counts pods it did not create (the cluster-wide pod
        # watch): the running fillers leave no room.
        check(wait_until(lambda: fed.free_default("ap-tokyo") == 0, 10, 0.1),
              f"ap-tokyo with 5 foreign pods running: router says free={fed.free_default('ap-tokyo')}")
    finally:
        for name in fillers:
            kube_req(tokyo, "DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
    fed.clean_all(["t=t2"])


def test_4_fault_switch(fed):
    """us-west down through kubesim's fault switch: creates of a us-west
    client keep succeeding in us-east from the first moment, /v1/clusters
    says healthy false within seconds; after down:false it is healthy again
    within ~10 s and a create pinned to it succeeds."""
    r, _ = fed.create_ok({"name": "pre", "labels": {"t": "t4"}}, region="us-west")
    check(where(r) == ["us-west"], f"us-west client before the fault placed {where(r)}")
    west = fed.sims["us-west"]
    st, b = west.admin("POST", "/_sim/faults", {"down": True})
    check(st == 200, f"POST /_sim/faults down:true: {st} {short(b)}")
    t0 = time.monotonic()
    results, stop = [], threading.Event()

    def creator():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                results.append(fed.post({"name": f"during-{i}", "labels": {"t": "t4"}}, region="us-west",
                                        timeout=30))
            except Exception as e:  # reported below
                results.append((0, repr(e), {}, 0))
                return
    th = threading.Thread(target=creator)
    th.start()
    try:
        def unhealthy():
            c = fed.clusters().get("us-west", {})
            return c.get("healthy") is False
        down_seen = wait_until(unhealthy, 20, 0.1)
        t_down = time.monotonic() - t0
        # Keep creating for a moment with the breaker open.
        time.sleep(1.5)
    finally:
        stop.set()
        th.join(60)
    check(not th.is_alive(), "a create during the outage did not return within 60 s")
    check(down_seen, f"/v1/clusters still says us-west is healthy 20 s after down: {short(fed.clusters().get('us-west'))}")
    TIMINGS["4 us-west unhealthy after down"] = t_down
    print(f"    (healthy:false {t_down:.1f} s after down; {len(results)} creates during the outage, "
          f"slowest {max((x[3] for x in results), default=0):.1f} s)")
    check(t_down < 10, f"us-west reported unhealthy only {t_down:.1f} s after going down")
    bad = [(x[0], short(x[1], 300)) for x in results if x[0] != 201]
    check(results and not bad, f"creates failed while us-west was down: {bad} (of {len(results)})")
    moved = sum(1 for x in results for c in (x[1].get("placement") or {}).get("clusters", [])
                if c.get("cluster") == "us-west" and c.get("reason"))
    print(f"    ({moved} of them tried us-west first and moved on within the request)")
    placed = [where(x[1])[0] for x in results]
    check(all(p == "us-east" for p in placed), f"creates during the outage went to {placed}")
    slow = max(x[3] for x in results)
    check(slow < 10, f"a create during the outage took {slow:.1f} s")
    ex = fed.explain({"num_sandboxes": 1}, region="us-west")
    e = plan_entry(ex["plan"], "us-west")
    check(e.get("verdict") == "skip" and "unhealthy" in e.get("reason", ""),
          f"explain while us-west is down: {e}")

    st, b = west.admin("POST", "/_sim/faults", {"down": False})
    check(st == 200, f"POST /_sim/faults down:false: {st} {short(b)}")
    t1 = time.monotonic()
    up = wait_until(lambda: fed.clusters().get("us-west", {}).get("healthy") is True, 20, 0.1)
    t_up = time.monotonic() - t1
    check(up, f"us-west still unhealthy 20 s after down:false: {short(fed.clusters().get('us-west'))}")
    TIMINGS["4 us-west healthy after up"] = t_up
    print(f"    (healthy:true {t_up:.1f} s after down:false)")
    check(t_up < 12, f"us-west healthy again only after {t_up:.1f} s")
    r, _ = fed.create_ok({"name": "pinned", "clusters": ["us-west"], "labels": {"t": "t4"}})
    check(where(r) == ["us-west"], f'create with "clusters":["us-west"] placed {where(r)}')
    # Used again by the policy too, without pinning (once its view is synced).
    ok = wait_until(lambda: plan_entry(fed.explain({"num_sandboxes": 1}, region="us-west")["plan"],
                                       "us-west").get("count") == 1, 15, 0.2)
    check(ok, f"explain does not use us-west again: "
              f"{short(fed.explain({'num_sandboxes': 1}, region='us-west')['plan'], 1200)}")
    r, _ = fed.create_ok({"name": "after", "labels": {"t": "t4"}}, region="us-west")
    check(where(r) == ["us-west"], f"us-west client after recovery placed {where(r)}")
    fed.clean_all(["t=t4"])


def signal_router(fed):
    fed.router.proc.send_signal(signal.SIGHUP)


def test_6_reload_in_flight(fed):
    """A slow APAC create (3 s image pull + 1 s scheduling in ap-tokyo) is
    in flight while the policy is replaced by one pinning everything to
    us-west (+ SIGHUP): it still succeeds in ap-tokyo; /v1/policy shows the
    new version and one more reload; a new APAC create goes to us-west."""
    p0 = fed.policy()
    check(p0.get("last_reload_error") is None, f"a reload error before the test: {short(p0)}")
    check(wait_until(lambda: fed.free_default("ap-tokyo") == 5, 15, 0.2), "ap-tokyo not empty")
    image = f"python:3.12-reload-{os.urandom(3).hex()}"   # never pulled: a 3 s pull
    out = {}

    def slow():
        try:
            out["r"] = fed.post({"name": "inflight", "image": image, "labels": {"t": "t6"}}, region="apac",
                                timeout=60)
        except Exception as e:
            out["r"] = (0, repr(e), {}, 0)
        out["end"] = time.monotonic()
    th = threading.Thread(target=slow)
    t0 = time.monotonic()
    th.start()
    # Wait until its pod exists in ap-tokyo: the create is placed and in flight.
    check(wait_until(lambda: fed.router_pods("ap-tokyo"), 5, 0.05),
          f"the slow create made no pod in ap-tokyo within 5 s (result so far {out})")
    write_atomic(fed.policy_path, PIN_WEST_POLICY)
    signal_router(fed)
    ok = wait_until(lambda: fed.policy()["version"] != p0["version"], 5, 0.05)
    t_reload = time.monotonic()
    p1 = fed.policy()
    check(ok, f"/v1/policy version unchanged 5 s after SIGHUP: {short(p1)}")
    check("end" not in out, f"the slow create finished before the reload ({out.get('end', 0) - t0:.1f} s): "
                            "the test did not overlap them")
    TIMINGS["6 reload visible after SIGHUP"] = t_reload - t0
    check(p1.get("reloads") == p0.get("reloads", 0) + 1 and p1.get("last_reload_error") is None,
          f"/v1/policy after the reload: {short(p1)} (before: {short(p0)})")
    check(re.fullmatch(r"[0-9a-f]{64}", p1["version"] or "") is not None, f"version is not a SHA-256: {p1['version']!r}")
    check(p1.get("source", "").endswith("policy.conf"), f"source: {p1.get('source')!r}")
    th.join(60)
    check(not th.is_alive(), "the in-flight create did not return within 60 s")
    st, r, _, el = out["r"]
    check(st == 201 and where(r) == ["ap-tokyo"],
          f"the in-flight create across the reload: {st} after {el:.1f} s {short(r, 800)}")
    print(f"    (in-flight create {el:.1f} s; the reload landed {t_reload - t0:.1f} s into it)")
    # New requests follow the new policy.
    ex = fed.explain({"num_sandboxes": 1}, region="apac")
    check(ex["policy"]["version"] == p1["version"], f"explain uses policy {ex['policy']}")
    tok = plan_entry(ex["plan"], "ap-tokyo")
    check(tok.get("verdict") == "skip" and "pin-us-west" in tok.get("reason", ""),
          f"ap-tokyo under the pinning policy: {tok}")
    check("pin-us-west" in ex["plan"].get("rules", []), f"plan rules: {ex['plan'].get('rules')}")
    r, _ = fed.create_ok({"name": "after-reload", "labels": {"t": "t6"}}, region="apac")
    check(where(r) == ["us-west"], f"APAC create after the reload placed {where(r)}, want us-west")
    # Back to the base policy (file watch only, no signal this time).
    write_atomic(fed.policy_path, BASE_POLICY)
    t1 = time.monotonic()
    ok = wait_until(lambda: fed.policy()["version"] == p0["version"], 10, 0.1)
    check(ok, f"file watch did not reload the base policy within 10 s: {short(fed.policy())}")
    TIMINGS["6 reload by file watch"] = time.monotonic() - t1
    p2 = fed.policy()
    check(p2.get("reloads") == p0.get("reloads", 0) + 2, f"reloads after restoring: {short(p2)}")
    r, _ = fed.create_ok({"name": "restored", "labels": {"t": "t6"}}, region="apac")
    check(where(r) == ["ap-tokyo"], f"APAC create after restoring the base policy placed {where(r)}")
    fed.clean_all(["t=t6"])


BROKEN = [
    # (name, text, line of the error, substring of the message, substrings
    # of the later errors: last_reload_error and `policy check` tell them too)
    ("syntax", BASE_POLICY + "max_state_age_ms == 15000;\nweights = { latency = 1.0; };\n", None, "syntax", ()),
    # Two errors in one group: the unknown key does not hide the bad value.
    ("two_in_a_group", BASE_POLICY + "weights = { latncy = 1.0; cost = -1.0; };\n", None, "latncy",
     ("weights.cost: must be >= 0, got -1",)),
    ("unknown_key", BASE_POLICY + "weigths = { latency = 1.0; };\n", None, "weigths", ()),
]


def broken_line(text, name):
    """Line of the error in a BROKEN text: the first line past BASE_POLICY."""
    return BASE_POLICY.count("\n") + 1


def test_7_broken_policy(fed):
    """A policy file with a syntax error, then one with an unknown key:
    rejected on reload (last_reload_error with file:line, version and
    reloads unchanged, reload_failures up), creates keep the old policy;
    `fedrouter policy check` exits 1 with file:line on each and 0 on the
    good file."""
    p0 = fed.policy()
    check(p0.get("last_reload_error") is None, f"a reload error before the test: {short(p0)}")
    failures = p0.get("reload_failures", 0)
    for name, text, _, needle, later in BROKEN:
        line = broken_line(text, name)
        write_atomic(fed.policy_path, text)
        signal_router(fed)
        # Both SIGHUP and the file watch reload; a late failure of the
        # previous file could satisfy a bare "one more failure" wait, so
        # wait for this file's own error.
        ok = wait_until(lambda: fed.policy().get("reload_failures", 0) > failures and
                        needle in ((fed.policy().get("last_reload_error") or {}).get("message") or ""), 5, 0.05)
        p = fed.policy()
        check(ok, f"{name}: no reload failure for this file 5 s after SIGHUP: {short(p)}")
        failures = p["reload_failures"]
        err = p.get("last_reload_error") or {}
        msg = err.get("message") or ""
        check(re.search(r"policy\.conf:%d: " % line, msg) is not None and needle in msg,
              f"{name}: last_reload_error {short(err)} does not name policy.conf:{line} / {needle!r}")
        for more in later:
            check(f"line {line}: {more}" in msg, f"{name}: last_reload_error {short(err)} lacks the later "
                                                 f"error 'line {line}: {more}'")
        check(p["version"] == p0["version"] and p.get("reloads") == p0.get("reloads"),
              f"{name}: version/reloads changed by a rejected file: {short(p)} (was {short(p0)})")
        print(f"    ({name}: {msg})")
        # Still the old policy: APAC to ap-tokyo, explain shows the old version.
        r, _ = fed.create_ok({"name": f"old-{name.replace('_', '-')}", "labels": {"t": "t7"}}, region="apac")
        check(where(r) == ["ap-tokyo"], f"{name}: APAC create with a rejected file placed {where(r)}")
        r, _ = fed.create_ok({"name": f"old-us-{name.replace('_', '-')}", "labels": {"t": "t7"}}, region="us")
        check(where(r)[0] in ("us-east", "us-west"), f"{name}: US create with a rejected file placed {where(r)}")
        ex = fed.explain({"num_sandboxes": 1}, region="apac")
        check(ex["policy"]["version"] == p0["version"], f"{name}: explain uses {ex['policy']}")
        # The file watch keeps failing on the same file without a new change;
        # the router keeps serving.
        check(fed.api("GET", "/healthz", token=None)[0] == 200, "router not alive")
        # Offline check of the same file.
        bad = os.path.join(fed.root, f"broken-{name}.conf")
        write_atomic(bad, text)
        pc = subprocess.run([ARGS.fedrouter, "policy", "check", bad], capture_output=True, text=True, timeout=30)
        outp = pc.stdout + pc.stderr
        check(pc.returncode == 1 and f"broken-{name}.conf:{line}:" in outp and needle in outp,
              f"`fedrouter policy check {os.path.basename(bad)}`: rc {pc.returncode}, output {outp!r} "
              f"(want 1 and broken-{name}.conf:{line}: ... {needle})")
        for more in later:
            check(f"broken-{name}.conf:{line}: {more}" in outp,
                  f"`fedrouter policy check {os.path.basename(bad)}` does not list {more!r}: {outp!r}")
        pc = subprocess.run([ARGS.fedrouter, "policy", "check", bad, "--config", fed.config],
                            capture_output=True, text=True, timeout=30)
        check(pc.returncode == 1 and f"broken-{name}.conf:{line}:" in pc.stdout + pc.stderr,
              f"`policy check --config` on {name}: rc {pc.returncode} {pc.stdout + pc.stderr!r}")
    log = open(fed.router.log, errors="replace").read()
    check(re.search(r"reload rejected.*policy\.conf:%d: .*weigths" % broken_line("", "unknown_key"), log),
          f"the router log does not say why the reload was rejected:\n{tail(fed.router.log, 10)}")
    # "did you mean" for the misspelled key.
    check("weights" in (fed.policy().get("last_reload_error") or {}).get("message", ""),
          f"no did-you-mean for weigths: {fed.policy().get('last_reload_error')}")
    # Back to the good file: same version as before, the error is cleared.
    write_atomic(fed.policy_path, BASE_POLICY)
    signal_router(fed)
    ok = wait_until(lambda: fed.policy().get("last_reload_error") is None, 5, 0.05)
    p = fed.policy()
    check(ok and p["version"] == p0["version"] and p.get("reloads") == p0.get("reloads"),
          f"after restoring the good file: {short(p)} (was {short(p0)})")
    good = os.path.join(fed.root, "good.conf")
    write_atomic(good, BASE_POLICY)
    for extra in ([], ["--config", fed.config]):
        pc = subprocess.run([ARGS.fedrouter, "policy", "check", good] + extra, capture_output=True, text=True,
                            timeout=30)
        check(pc.returncode == 0 and "OK" in pc.stdout and p0["version"][:12] in pc.stdout,
              f"`fedrouter policy check good.conf {' '.join(extra)}`: rc {pc.returncode} "
              f"{pc.stdout + pc.stderr!r} (want 0, OK and version {p0['version'][:12]})")
    # With the router config, a misspelled cluster name is caught offline.
    typo = os.path.join(fed.root, "typo.conf")
    write_atomic(typo, BASE_POLICY + 'rules = ( { name = "x"; pin = ["us-wset"]; } );\n')
    pc = subprocess.run([ARGS.fedrouter, "policy", "check", typo, "--config", fed.config],
                        capture_output=True, text=True, timeout=30)
    outp = pc.stdout + pc.stderr
    check(pc.returncode == 1 and re.search(r"typo\.conf:%d:" % (BASE_POLICY.count("\n") + 1), outp)
          and "us-west" in outp,
          f"`policy check typo.conf --config`: rc {pc.returncode} {outp!r} (want 1, file:line, did you mean us-west)")
    fed.clean_all(["t=t7"])


# --------------------------------------------------------------------------
# big federation: test 3

BIG_SHAPE = {"cpus": 0.25, "memory_gb": 0.25}


def test_3_batch_5000(fed):
    """5,000 sandboxes over three clusters of 2,000 slots: 201, counts add
    up to 5,000, no cluster over 2,000, nothing Pending; exec works; then
    DELETE by label removes them all."""
    cl = fed.clusters()
    for n in fed.sims:
        total = [s for s in cl[n].get("slots", []) if s.get("pool") is None]
        check(total and total[0].get("total") == 2000 and total[0].get("free") == 2000,
              f"{n}: default-shape slots {total}; the nodes are sized for exactly 2000 sandboxes "
              "(20 x 100 pods, cpu and memory to spare)")
    body = dict(BIG_SHAPE, name="big", num_sandboxes=5000, labels={"run": "big5000"})
    ex = fed.explain(body, region="us")
    fed.shared["plan5000"] = {e["cluster"]: e.get("count") for e in ex["plan"]["clusters"] if e.get("count")}
    print(f"    (explain: {fed.shared['plan5000']}, split {ex['plan'].get('split')})")
    st, r, h, el = fed.post(body, region="us", timeout=180)
    TIMINGS["3 batch of 5000"] = el
    print(f"    (5000 sandboxes: {st} in {el:.1f} s)")
    check(st == 201 and isinstance(r, dict), f"batch of 5000: {st} after {el:.1f} s: {short(r, 1500)}")
    sbs = r.get("sandboxes", [])
    ids = [s.get("id") for s in sbs]
    check(len(sbs) == 5000 and len(set(ids)) == 5000, f"{len(sbs)} sandboxes, {len(set(ids))} distinct ids")
    check(all(s.get("state") == "running" for s in sbs),
          f"not running: {[s for s in sbs if s.get('state') != 'running'][:3]}")
    by = {}
    for s in sbs:
        by[s.get("cluster")] = by.get(s.get("cluster"), 0) + 1
    pl = r.get("placement", {})
    plc = {c.get("cluster"): c.get("created") for c in pl.get("clusters", []) if c.get("created")}
    print(f"    (placement {plc})")
    check(pl.get("requested") == 5000 and pl.get("created") == 5000 and sum(plc.values()) == 5000,
          f"placement totals: {short(pl, 800)}")
    check(plc == by, f"placement per cluster {plc} != sandboxes per cluster {by}")
    fed.shared["placed5000"] = by
    check(all(v <= 2000 for v in by.values()) and set(by) <= set(fed.sims), f"per cluster: {by}")
    names = sorted(s.get("name") for s in sbs)
    check(names[0] == "big-0001" and names[-1] == "big-5000" and len(set(names)) == 5000,
          f"names {names[:2]}..{names[-1:]}")
    for n, sim in fed.sims.items():
        pods = sim.pods("fedrouter.io/sandbox")
        check(len(pods) == by.get(n, 0) and len(pods) <= 2000,
              f"kubesim {n} has {len(pods)} sandbox pods, placement says {by.get(n, 0)}")
        bad = not_running(sim)
        check(not bad, f"kubesim {n}: {len(bad)} pods not Running, e.g. {bad[:3]}")
    # One exec per cluster (fast exec path).
    for n in by:
        sid = next(s["id"] for s in sbs if s.get("cluster") == n)
        out = fed.exec_ok(sid, ["echo", "big"])
        check(out.get("stdout") == "big\n" and out.get("exit_code") == 0, f"exec in {sid}: {out}")
    t0 = time.monotonic()
    got = fed.terminate("run=big5000")
    check(got == 5000, f"DELETE by label terminated {got}, want 5000")
    ok = wait_until(lambda: all(not s.pods("fedrouter.io/sandbox") for s in fed.sims.values())
                    and not fed.list_ids("?label=run=big5000"), 60, 0.5)
    left = {n: len(s.pods("fedrouter.io/sandbox")) for n, s in fed.sims.items()}
    check(ok, f"after DELETE by label: kubesim sandbox pods {left}, listed {len(fed.list_ids())}")
    TIMINGS["3 terminate 5000 by label"] = time.monotonic() - t0
    print(f"    (terminated and gone in {time.monotonic() - t0:.1f} s)")


def test_3b_batch_follows_fill_first(fed):
    """The 5,000 batch of test 3 followed its plan: a US client under
    fill_first fills both US clusters (2,000 each) and puts only the
    remaining 1,000 in ap-tokyo, as explain said for the same body."""
    plan, by = fed.shared.get("plan5000"), fed.shared.get("placed5000")
    check(plan is not None and by is not None, "test 3 did not get far enough to compare")
    check(plan.get("ap-tokyo", 0) == 1000 and sum(plan.values()) == 5000,
          f"explain's plan for the 5000 batch of a US client: {plan}")
    check(by == plan, f"POST /v1/sandboxes {{num_sandboxes:5000, cpus:0.25, memory_gb:0.25}} "
                      f"X-Client-Region: us placed {by}; explain (same body, just before) planned {plan}")


# --------------------------------------------------------------------------
# tight federation: test 5

TIGHT_SHAPE = {"cpus": 0.5, "memory_gb": 0.5}


class PodWatch:
    """Watches every pod of one kubesim from now on and remembers each pod
    that was ever PodScheduled=False (Unschedulable): over-commit."""

    def __init__(self, sim):
        import http.client
        self.sim = sim
        self.unsched = {}
        self.events = 0
        self.error = None
        st, body = kube_req(sim, "GET", "/api/v1/pods")
        check(st == 200, f"list pods: {st}")
        rv = body["metadata"]["resourceVersion"]
        self.conn = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=120, context=sim.ssl)
        self.conn.request("GET", f"/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=110",
                          headers={"Authorization": "Bearer " + tr.SIM_TOKEN})
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, f"watch pods on {sim.name}: {self.resp.status}")
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                ev = json.loads(line)
                self.events += 1
                obj = ev.get("object") or {}
                why = pod_unschedulable(obj) if ev.get("type") in ("ADDED", "MODIFIED") else None
                if why:
                    self.unsched[obj["metadata"]["name"]] = why
        except Exception as e:  # closed by stop(), or a real error
            self.error = repr(e)

    def stop(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self.th.join(5)
        self.conn.close()


def test_5_concurrent_bursts(fed):
    """Two batches of 150 sent at the same moment to three clusters of 100
    pods (room for exactly 300): no cluster is over-committed (no pod ever
    Unschedulable, none left Pending), every created sandbox runs, and a
    refused batch is a prompt 503 no_capacity."""
    for n in fed.sims:
        check(wait_until(lambda: fed.free_default(n) == 100, 10, 0.1),
              f"{n}: router says {fed.free_default(n)} free, want 100")
    watches = {n: PodWatch(s) for n, s in fed.sims.items()}
    barrier = threading.Barrier(2)
    res = [None, None]

    def burst(i):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=90)
        body = json.dumps(dict(TIGHT_SHAPE, image=IMAGE, name=f"burst{i}", num_sandboxes=150,
                               labels={"t": "t5", "burst": str(i)})).encode()
        try:
            c.connect()
            barrier.wait(10)
            t0 = time.monotonic()
            c.request("POST", "/v1/sandboxes", body=body,
                      headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json",
                               "X-Client-Region": "us"})
            r = c.getresponse()
            data = r.read()
            res[i] = (r.status, json.loads(data) if data else None,
                      {k.lower(): v for k, v in r.getheaders()}, time.monotonic() - t0)
        except Exception as e:
            res[i] = (0, repr(e), {}, 0)
        finally:
            c.close()
    ths = [threading.Thread(target=burst, args=(i,)) for i in range(2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(100)
    try:
        check(not any(t.is_alive() for t in ths), "a burst did not return within 100 s (hang)")
        fed.shared["bursts"] = [(st, el, (r.get("error") or {}) if isinstance(r, dict) and st != 201
                                 else (r.get("placement") if isinstance(r, dict) else r))
                                for st, r, h, el in res]
        summary = []
        created = []
        for i, (st, r, h, el) in enumerate(res):
            if st == 201:
                sbs = r.get("sandboxes", [])
                check(len(sbs) == 150, f"burst {i}: 201 with {len(sbs)} sandboxes")
                check(all(s.get("state") == "running" for s in sbs), f"burst {i}: a sandbox is not running")
                created += sbs
                pl = {c.get("cluster"): c.get("created") for c in r.get("placement", {}).get("clusters", [])}
                summary.append(f"burst {i}: 201 in {el:.1f} s {pl}")
            else:
                check(st == 503 and isinstance(r, dict) and (r.get("error") or {}).get("code") == "no_capacity",
                      f"burst {i}: expected 201 or 503 no_capacity, got {st} after {el:.1f} s: {short(r, 800)}")
                check("retry-after" in h and isinstance(r["error"].get("clusters"), list) and r["error"]["clusters"],
                      f"burst {i}: no_capacity without Retry-After or per-cluster reasons: {h} {short(r, 800)}")
                check(el < 30, f"burst {i}: no_capacity took {el:.1f} s")
                summary.append(f"burst {i}: 503 no_capacity in {el:.1f} s")
            TIMINGS[f"5 burst {i}"] = el
        print("    (" + "; ".join(summary) + ")")
        # Nothing left Pending/Unschedulable anywhere (rolled-back pods may
        # take a moment to go).
        ok = wait_until(lambda: not any(not_running(s) for s in fed.sims.values()), 15, 0.2)
        check(ok, "pods not Running after the bursts: " +
              str({n: not_running(s)[:3] for n, s in fed.sims.items() if not_running(s)}))
        by = {}
        for n, s in fed.sims.items():
            pods = s.pods("fedrouter.io/sandbox")
            by[n] = len(pods)
            check(len(pods) <= 100, f"{n} holds {len(pods)} sandbox pods on 100 slots")
        check(sum(by.values()) == len(created), f"kubesim sandbox pods {by} but {len(created)} created")
        for sb in created:
            sim, pod = fed.sim_of(sb["id"])
            check(sb.get("cluster") == sim.name, f"{sb}")
        running = {}
        for n, s in fed.sims.items():
            for p in s.pods("fedrouter.io/sandbox"):
                running[f"{n}.{p['metadata']['name']}"] = p["status"].get("phase")
        check(all(running.get(sb["id"]) == "Running" for sb in created),
              f"created sandboxes not Running in kubesim: "
              f"{[(sb['id'], running.get(sb['id'])) for sb in created if running.get(sb['id']) != 'Running'][:5]}")
    finally:
        for w in watches.values():
            w.stop()
    over = {n: w.unsched for n, w in watches.items() if w.unsched}
    check(all(w.events > 0 for w in watches.values()) or not created,
          f"the pod watches saw nothing: {[(n, w.events, w.error) for n, w in watches.items()]}")
    check(not over, "over-commit: pods the router created went Unschedulable: " +
          "; ".join(f"{n}: {len(u)} pods, e.g. {list(u.items())[:1]}" for n, u in over.items()))
    fed.clean_all(["t=t5"])


def test_5b_both_bursts_fit(fed):
    """The two bursts of test 5 ask for exactly the federation's 300 free
    slots: with reservations taken at decision time, both fit (deliverable
    5: creates keep succeeding while the federation has room)."""
    b = fed.shared.get("bursts")
    check(b is not None, "test 5 did not get far enough to compare")
    refused = [(i, st, short(x, 1200)) for i, (st, el, x) in enumerate(b) if st != 201]
    check(not refused, f"two concurrent POST /v1/sandboxes {{num_sandboxes:150, cpus:0.5, memory_gb:0.5}} "
                       f"on 3 x 100 free slots: refused {refused}")


# --------------------------------------------------------------------------
# runner

BIG = ["--node-cpu", "64", "--node-memory", "256Gi"]
# Two clusters equal but for price and size: "pricey" has twice the nodes,
# so the capacity term ranks it first; a cost weight must turn that around.
PRICED_POLICY = """\
# policy for tests/router/test_routing.py test_8 (written by the test)
split = "fill_first";
weights = { latency = 0.0; warm = 0.0; capacity = 1.0; cost = %s; cost_ref_per_hour = 0.10; };
"""


def test_8_cost_weight_ranks_cheaper_first(fed):
    body = {"num_sandboxes": 50, "cpus": 1, "memory_gb": 1}

    def first_and_entries():
        plan = fed.explain(body)["plan"]
        used = [e for e in plan["clusters"] if e.get("verdict") == "use"]
        check(used, f"explain: no cluster used: {short(plan, 1500)}")
        return used[0]["cluster"], {e["cluster"]: e for e in plan["clusters"]}

    def load(weight):
        write_atomic(fed.policy_path, PRICED_POLICY % weight)
        want_scored = float(weight) > 0
        check(wait_until(lambda: (first_and_entries()[1]["cheap"]["scores"]["cost"] > 0) == want_scored, 20),
              f"the policy with cost weight {weight} was not in force within 20 s")

    load("0.0")
    first, entries = first_and_entries()
    check(first == "pricey", f"without a cost weight the bigger cluster ranks first; got {first}: {short(entries, 1500)}")
    # The prices behind the cost term are shown whatever the weight.
    check(abs(entries["pricey"]["cost_per_hour"] - 0.50) < 1e-6 and abs(entries["cheap"]["cost_per_hour"] - 0.01) < 1e-6,
          f"explain shows cost_per_hour 0.50 and 0.01 for 1 cpu: {short(entries, 1500)}")
    check(entries["pricey"]["scores"]["cost"] == 0 and entries["cheap"]["scores"]["cost"] == 0,
          f"cost weight 0 scores nothing: {short(entries, 1500)}")

    load("2.0")
    first, entries = first_and_entries()
    check(first == "cheap", f"with weights.cost the cheaper cluster ranks first; got {first}: {short(entries, 1500)}")
    check(entries["cheap"]["scores"]["cost"] > entries["pricey"]["scores"]["cost"] > 0,
          f"the cheaper cluster scores higher on cost: {short(entries, 1500)}")
    # A real create follows the plan.
    r, _ = fed.create_ok({"num_sandboxes": 2, "cpus": 1, "memory_gb": 1, "labels": {"t": "t8"}})
    check(all(sb["cluster"] == "cheap" for sb in r["sandboxes"]), f"created in {where(r)}, expected cheap")
    fed.terminate("t=t8")



# Test 9: cost against region within a latency budget. "us-dear" (region
# us, the client's) costs $0.10 a sandbox-hour, "eu-cheap" (region eu,
# 40 ms of API latency) $0.04 and has room for 4 sandboxes.
CHEAPER_POLICY = """\
# policy for tests/router/test_routing.py test_9 (written by the test)
split = "fill_first";
weights = { cost = %s; };
%s
"""


def metrics_value(fed, name, **labels):
    st, text = fed.api("GET", "/metrics")
    check(st == 200, f"GET /metrics: {st}")
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_9_cheaper_region_within_latency_budget(fed):
    body = {"num_sandboxes": 1, "cpus": 1, "memory_gb": 1}

    def load(text, check_fn, what):
        write_atomic(fed.policy_path, text)
        check(wait_until(lambda: check_fn(fed.explain(body, region="us")["plan"]), 20),
              f"the policy ({what}) was not in force within 20 s: {short(fed.explain(body, region='us'), 1500)}")

    def first(plan):
        return next(e for e in plan["clusters"] if e.get("verdict") == "use" and e.get("count"))

    # A cost weight alone (20) ranks clusters within a region only: the
    # client's region keeps the request however cheap the other one is.
    load(CHEAPER_POLICY % ("20.0", ""), lambda p: first(p)["cluster"] == "us-dear" and
         first(p)["scores"]["cost"] > 0, "cost weight 20")
    # cheaper_region: eu-cheap is 60% cheaper and within 1000 ms.
    load(CHEAPER_POLICY % ("0.0", "cheaper_region = { min_saving = 0.25; max_latency_ms = 1000; };"),
         lambda p: first(p)["cluster"] == "eu-cheap", "cheaper_region")
    plan = fed.explain(body, region="us")["plan"]
    e = first(plan)
    check(e.get("cheaper_than") == "us-dear" and e.get("first_choice") is True and
          "cheaper region: $0.0400/h vs $0.1000/h in us-dear (60% less, over 25%" in e.get("reason", ""),
          f"explain says why the sandbox goes to the cheaper region: {short(e, 800)}")
    before_cold = metrics_value(fed, "fedrouter_sandbox_creates_total", cluster="eu-cheap", outcome="cold")
    before_spill = metrics_value(fed, "fedrouter_sandbox_creates_total", cluster="us-dear", outcome="spilled")
    r, _ = fed.create_ok({"num_sandboxes": 6, "cpus": 1, "memory_gb": 1, "labels": {"t": "t9"}}, region="us")
    got = {}
    for sb in r["sandboxes"]:
        got[sb["cluster"]] = got.get(sb["cluster"], 0) + 1
    check(got == {"eu-cheap": 4, "us-dear": 2}, f"6 sandboxes: the cheaper region's 4 slots first, then the client's "
                                                f"region; got {got}")
    # The two that did not fit where the plan wanted them spilled: their
    # pods say so, and usage counts them as spilled.
    for sb in r["sandboxes"]:
        pod = fed.sims[sb["cluster"]].pod(sb["id"].split(".", 1)[1])
        spilled = ((pod or {}).get("metadata", {}).get("annotations") or {}).get("fedrouter.io/spilled")
        check((spilled == "true") == (sb["cluster"] == "us-dear"),
              f"{sb['id']} in {sb['cluster']}: annotation fedrouter.io/spilled={spilled!r}")
    ok = wait_until(lambda: metrics_value(fed, "fedrouter_sandbox_creates_total", cluster="eu-cheap",
                                          outcome="cold") - before_cold == 4 and
                    metrics_value(fed, "fedrouter_sandbox_creates_total", cluster="us-dear",
                                  outcome="spilled") - before_spill == 2, 10)
    check(ok, "usage counts 4 cold creates in eu-cheap and 2 spilled ones in us-dear")
    fed.terminate("t=t9")
    # Over the latency budget: eu-cheap is ~40 ms away, the budget 10 ms.
    load(CHEAPER_POLICY % ("0.0", "cheaper_region = { min_saving = 0.25; max_latency_ms = 10; };"),
         lambda p: first(p)["cluster"] == "us-dear", "cheaper_region within 10 ms")
    e = next(x for x in fed.explain(body, region="us")["plan"]["clusters"] if x["cluster"] == "eu-cheap")
    check("cheaper_than" not in e, f"eu-cheap is over the budget: not moved ({short(e, 600)})")
    # Not cheaper by more than the saving asked (60% < 70%).
    load(CHEAPER_POLICY % ("0.0", "cheaper_region = { min_saving = 0.7; max_latency_ms = 1000; };"),
         lambda p: first(p)["cluster"] == "us-dear", "cheaper_region at 70%")


FEDERATIONS = [
    ("geo",
     [("us-east", "us-east", ["--nodes", "2"] + BIG),
      ("us-west", "us-west", ["--nodes", "2"] + BIG),
      ("ap-tokyo", "ap-tokyo", ["--nodes", "1", "--node-pods", "5", "--schedule-ms", "1000",
                                "--image-pull-ms", "3000"] + BIG)],
     [test_1_apac_and_us_clients, test_1b_batch_follows_plan, test_2_tokyo_full_spills_to_us_west, test_4_fault_switch,
      test_6_reload_in_flight, test_7_broken_policy]),
    ("big",
     [(n, n, ["--nodes", "20", "--node-pods", "100", "--node-cpu", "128", "--node-memory", "256Gi",
              "--fast-exec", "--schedule-ms", "5", "--start-ms", "10"])
      for n in ("us-east", "us-west", "ap-tokyo")],
     [test_3_batch_5000, test_3b_batch_follows_fill_first]),
    ("tight",
     [(n, n, ["--nodes", "1", "--node-pods", "100", "--node-cpu", "128", "--node-memory", "256Gi"])
      for n in ("us-east", "us-west", "ap-tokyo")],
     [test_5_concurrent_bursts, test_5b_both_bursts_fit]),
    ("priced",
     [("pricey", "us", ["--nodes", "4", "--node-pods", "100", "--fast-exec"]),
      ("cheap", "us", ["--nodes", "2", "--node-pods", "100", "--fast-exec"])],
     [test_8_cost_weight_ranks_cheaper_first],
     PRICED_POLICY % "0.0", {"pricey": 0.50, "cheap": 0.01}),
    ("cheaper",
     [("us-dear", "us", ["--nodes", "2", "--node-pods", "20", "--fast-exec"]),
      ("eu-cheap", "eu", ["--nodes", "1", "--node-pods", "4", "--fast-exec", "--api-latency-ms", "40"])],
     [test_9_cheaper_region_within_latency_budget],
     CHEAPER_POLICY % ("0.0", ""), {"us-dear": 0.10, "eu-cheap": 0.04}),
]


def watchdog():
    time.sleep(WATCHDOG_S)
    print(f"FAIL watchdog: the suite ran over {WATCHDOG_S} s; killing everything", flush=True)
    for p in tr.ALL_PROCS:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--only", action="append", default=[], help="run only these tests (repeatable; a prefix "
                    "such as test_3 is enough)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories (logs)")
    ARGS = ap.parse_args()
    tr.ARGS = ARGS
    threading.Thread(target=watchdog, daemon=True).start()
    results = []
    t_all = time.monotonic()
    for name, clusters, tests, *extra in FEDERATIONS:
        if ARGS.only:
            tests = [t for t in tests if any(t.__name__.startswith(o) for o in ARGS.only)]
        if not tests:
            continue
        print(f"# federation {name}: {', '.join(c[0] for c in clusters)}", flush=True)
        fed = None
        t0 = time.monotonic()
        try:
            fed = PolicyFed(name, clusters, *(extra or [BASE_POLICY]))
        except Exception as e:
            for t in tests:
                results.append((t.__name__, False, f"federation {name} did not start: {e}"))
                print(f"FAIL {t.__name__}: federation {name} did not start: {e}", flush=True)
        if fed is None:
            continue
        print(f"    (federation up in {time.monotonic() - t0:.1f} s; {fed.root})", flush=True)
        for t in tests:
            if fed.router.proc.poll() is not None:
                results.append((t.__name__, False, "the router is not running"))
                print(f"FAIL {t.__name__}: the router died (rc {fed.router.proc.poll()}):\n"
                      f"{tail(fed.router.log)}", flush=True)
                continue
            tr.run_test(t, fed, results)
            if not results[-1][1]:
                print(tail(fed.router.log, 15), flush=True)
        problems = fed.teardown()
        tname = f"teardown_{name}"
        results.append((tname, not problems, "; ".join(problems)))
        print(f"ok   {tname}" if not problems else f"FAIL {tname}: " + "\n".join(problems), flush=True)
    if TIMINGS:
        print("# timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in TIMINGS.items()))
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
