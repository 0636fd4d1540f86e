#!/usr/bin/env python3
"""The create queue, fair share, quotas and the exec wait, black-box: the
real router in front of two small kubesim clusters (one node of 2 cpus
each: room for 4 sandboxes of 1 cpu at a time).

Proves: without wait_s a create that does not fit is 503 at once, as
before; with wait_s it waits in the queue and starts as room frees
(placement.waited_s, the wait histogram); room that frees goes to the
tenant with the smaller share first, ahead of another tenant's older
creates; an all-or-nothing batch waits whole (GET /v1/queue says why:
its shortfall) and starts once it fits; a partial_ok batch starts what
fits, waits for the rest and keeps its numbering; a wait that ends
answers the last refusal (or, partial_ok, what was made); quotas in
cpus refuse at once what can never fit and hold back only their own
tenant; the queue's bounds answer 429 max_queued_sandboxes; execs past
max_concurrent_execs wait first come first served (and are refused past
max_queued_execs, or after queue.exec_wait_s, reloaded live); a cluster
answering 429 keeps its breaker closed while one answering 503 opens it;
GET /v1/queue shows a tenant its own line and an admin every one,
/metrics the queue, shares and waits; the SDK's wait_s and fedctl create
--wait and queue; an E2B create waits queue.e2b_wait_s (reloaded live).

Usage: test_queue.py --fedrouter PATH --kubesim PATH --fedctl PATH [--only NAME ...] [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))
import test_router as tr  # noqa: E402
from test_router import check, expect_error, short, wait_until  # noqa: E402

TOK = {n: f"{n}-" + os.urandom(8).hex() for n in ("a", "b", "q", "lim", "e", "ops")}
SHAPE = {"image": tr.IMAGE, "cpus": 1, "memory_gb": 1}
SLOTS = 4


def sha(t):
    return hashlib.sha256(t.encode()).hexdigest()


class QueueFed(tr.Fed):
    def write_config(self, path, lifetime):
        self.exec_wait_s = 30
        self.e2b_wait_s = 0
        self.lifetime = lifetime
        self.write_now(path)

    def write_now(self, path=None):
        cl = ",\n".join(f'  {{ name = "{n}"; region = "{s.region}"; kubeconfig = "{s.kubeconfig}"; }}'
                        for n, s in self.sims.items())
        text = f"""# written by tests/router/test_queue.py
listen = "127.0.0.1:0";
region = "us";
sandbox = {{ default_lifetime_s = {self.lifetime[0]}; max_lifetime_s = {self.lifetime[1]}; }};
queue = {{ max_wait_s = 300; exec_wait_s = {self.exec_wait_s}; e2b_wait_s = {self.e2b_wait_s}; }};
tenants = (
  {{ name = "a"; token_sha256 = "{sha(TOK['a'])}"; }},
  {{ name = "b"; token_sha256 = "{sha(TOK['b'])}"; }},
  {{ name = "q"; token_sha256 = "{sha(TOK['q'])}"; max_cpus = 2; }},
  {{ name = "lim"; token_sha256 = "{sha(TOK['lim'])}"; max_queued_sandboxes = 2; }},
  {{ name = "e"; token_sha256 = "{sha(TOK['e'])}"; max_concurrent_execs = 1; max_queued_execs = 2; }},
  {{ name = "ops"; token_sha256 = "{sha(TOK['ops'])}"; admin = true; }}
);
clusters = (
{cl}
);
"""
        tmp = (path or self.config) + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, path or self.config)


def api(fed, method, path, body=None, who="a", **kw):
    return fed.api(method, path, body, token=TOK[who], **kw)


def create_body(**kw):
    b = dict(SHAPE)
    b.setdefault("labels", {"t": "q"})
    b.update(kw)
    return b


def bg_create(fed, who, **kw):
    """Starts a create in a thread; returns a dict that gets "r" = (status, body)."""
    out = {}

    def run():
        out["r"] = api(fed, "POST", "/v1/sandboxes", create_body(**kw), who=who, timeout=300)
    out["t"] = threading.Thread(target=run)
    out["t"].start()
    return out


def done(h, timeout=60):
    h["t"].join(timeout)
    check("r" in h, "a create did not answer")
    return h["r"]


def queue(fed, who="ops"):
    st, r = api(fed, "GET", "/v1/queue", who=who)
    check(st == 200, f"GET /v1/queue: {st} {short(r)}")
    return {t["tenant"]: t for t in r["tenants"]}, r["total"]


def waiting(fed, who):
    return queue(fed)[0][who]["queue"]


def held(fed, who):
    st, r = api(fed, "GET", "/v1/sandboxes", who=who)
    check(st == 200, f"list of {who}: {st}")
    return [s for s in r["sandboxes"] if s.get("state") in ("running", "pending")]


def free_slots(fed):
    st, r = api(fed, "GET", "/v1/clusters", who="ops")
    return sum(next(s["free"] for s in c["slots"] if s["pool"] is None) for c in r["clusters"])


def reset(fed):
    """Every tenant's sandboxes gone, nothing waiting, every slot free."""
    for who in ("a", "b", "q", "lim", "e"):
        api(fed, "DELETE", "/v1/sandboxes?label=t=q", who=who, timeout=120)
    check(wait_until(lambda: free_slots(fed) == SLOTS and queue(fed)[1]["creates"] == 0, 30, 0.1),
          f"the federation did not empty: {free_slots(fed)} free, queue {queue(fed)[1]}")


def fill(fed, who, n):
    r = fed.create(create_body(num_sandboxes=n, name=f"fill-{who}"), token=TOK[who])
    return [s["id"] for s in r["sandboxes"]]


def drop(fed, who, sid):
    st, r = api(fed, "DELETE", f"/v1/sandboxes/{sid}", who=who)
    check(st == 200, f"terminate {sid}: {st} {short(r)}")


def test_full_without_wait_is_503_at_once(fed):
    reset(fed)
    fed.shared["a"] = fill(fed, "a", SLOTS)
    t0 = time.monotonic()
    st, r, h = api(fed, "POST", "/v1/sandboxes", create_body(), full=True)
    check(st == 503 and r["error"]["code"] == "no_capacity" and h.get("retry-after"),
          f"a create with no room and no wait: {st} {short(r)} {h.get('retry-after')}")
    check(time.monotonic() - t0 < 5, "the refusal was not at once")
    check("waited_s" not in r["error"], f"a create that did not wait says it waited: {r}")


def test_wait_starts_when_room_frees(fed):
    from fedrouter import Client  # noqa: E402
    c = Client(f"http://127.0.0.1:{fed.router.port}", TOK["b"])
    out = {}

    def sdk_create():
        out["sb"] = c.create(image=tr.IMAGE, cpus=1, memory_gb=1, labels={"t": "q"}, name="waiter", wait_s=60)
    t = threading.Thread(target=sdk_create)
    t.start()
    try:
        check(wait_until(lambda: waiting(fed, "b")["creates"] == 1, 15), "b's create is not waiting")
        first = waiting(fed, "b")["first"]
        check(first["sandboxes"] == 1 and first["why"].startswith("no_capacity"), f"why it waits: {first}")
        st, mine = api(fed, "GET", "/v1/queue", who="b")
        check(st == 200 and [x["tenant"] for x in mine["tenants"]] == ["b"], f"b sees only its line: {short(mine)}")
        drop(fed, "a", fed.shared["a"].pop())
        t.join(60)
        sb = out.get("sb")
        check(sb is not None and sb.state == "running", f"b's create after the room freed: {out}")
        check(sb.placement.get("waited_s", 0) > 0, f"placement.waited_s: {sb.placement}")
        check(sb.exec("echo", "ok").stdout == "ok\n", "exec in the sandbox that waited")
    finally:
        c.close()
    st, m = fed.api("GET", "/metrics", token=None)
    check('fedrouter_queue_wait_seconds_count{tenant="b",outcome="started"} 1' in m, "the wait histogram")
    check('fedrouter_queue_started_sandboxes_total{tenant="b"} 1' in m, "the started counter")


def test_smaller_share_goes_first(fed):
    # a holds 3, b holds 1: full. a queues two creates, then b one.
    h_a = [bg_create(fed, "a", name=f"a-late-{i}", wait_s=120) for i in range(2)]
    check(wait_until(lambda: waiting(fed, "a")["creates"] == 2, 15), "a's creates are not waiting")
    h_b = bg_create(fed, "b", name="b-late", wait_s=120)
    check(wait_until(lambda: waiting(fed, "b")["creates"] == 1, 15), "b's create is not waiting")
    shares = {n: t["share"] for n, t in queue(fed)[0].items()}
    check(shares["a"] > shares["b"] > 0, f"shares: {shares}")
    # One slot frees: b (the smaller share) gets it, ahead of a's older two.
    drop(fed, "a", fed.shared["a"].pop())
    st, r = done(h_b)
    check(st == 201, f"b's create: {st} {short(r)}")
    check(waiting(fed, "a")["creates"] == 2 and all("r" not in h for h in h_a),
          "a create of a started before b's, which had the smaller share")
    # Room for both of a's.
    for s in held(fed, "b"):
        drop(fed, "b", s["id"])
    for h in h_a:
        st, r = done(h)
        check(st == 201, f"a's waiting create: {st} {short(r)}")


def test_all_or_nothing_waits_whole(fed):
    reset(fed)
    fed.shared["a"] = fill(fed, "a", SLOTS)
    h = bg_create(fed, "b", name="whole", num_sandboxes=2, wait_s=120)
    check(wait_until(lambda: waiting(fed, "b")["sandboxes"] == 2, 15), "b's batch of 2 is not waiting")
    drop(fed, "a", fed.shared["a"].pop())
    # Tried with one free slot: it waits whole, nothing of it made.
    check(wait_until(lambda: (waiting(fed, "b")["first"] or {}).get("why", "").endswith("shortfall 1 of 2"), 15),
          f"the batch was not tried with one slot free: {waiting(fed, 'b')}")
    check(held(fed, "b") == [] and "r" not in h, f"part of an all-or-nothing batch started: {held(fed, 'b')}")
    drop(fed, "a", fed.shared["a"].pop())
    st, r = done(h)
    check(st == 201 and len(r["sandboxes"]) == 2 and r["placement"]["shortfall"] == 0, f"the batch: {st} {short(r)}")
    check(sorted(s["name"] for s in r["sandboxes"]) == ["whole-0001", "whole-0002"], f"names: {r['sandboxes']}")


def test_partial_ok_starts_what_fits(fed):
    reset(fed)
    fed.shared["a"] = fill(fed, "a", SLOTS - 1)
    h = bg_create(fed, "b", name="part", num_sandboxes=3, partial_ok=True, wait_s=120)
    check(wait_until(lambda: len(held(fed, "b")) == 1 and waiting(fed, "b")["sandboxes"] == 2, 15),
          f"partial_ok did not start what fits: held {len(held(fed, 'b'))}, waiting {waiting(fed, 'b')}")
    check("r" not in h, "the create answered before the rest started")
    for sid in fed.shared["a"][:2]:
        drop(fed, "a", sid)
    st, r = done(h)
    check(st == 201 and r["placement"]["created"] == 3 and r["placement"]["shortfall"] == 0, f"{st} {short(r)}")
    check(sorted(s["name"] for s in r["sandboxes"]) == ["part-0001", "part-0002", "part-0003"],
          f"the numbering across batches: {[s['name'] for s in r['sandboxes']]}")


def test_wait_ends_with_the_refusal_or_what_was_made(fed):
    reset(fed)
    fill(fed, "a", SLOTS - 1)
    t0 = time.monotonic()
    st, r = api(fed, "POST", "/v1/sandboxes", create_body(num_sandboxes=2, wait_s=1.5), who="b")
    check(st == 503 and r["error"]["code"] == "no_capacity" and r["error"]["waited_s"] >= 1.4,
          f"an all-or-nothing wait that ran out: {st} {short(r)}")
    check(time.monotonic() - t0 < 30, "the wait outlasted wait_s")
    st, r = api(fed, "POST", "/v1/sandboxes", create_body(num_sandboxes=3, partial_ok=True, wait_s=1.5, name="pw"),
                who="b")
    check(st == 201 and r["placement"]["created"] == 1 and r["placement"]["shortfall"] == 2 and
          r["placement"]["waited_s"] >= 1.4, f"a partial_ok wait that ran out: {st} {short(r)}")


def test_quota_holds_back_only_its_tenant(fed):
    reset(fed)
    e = expect_error(api(fed, "POST", "/v1/sandboxes", create_body(num_sandboxes=3, wait_s=60), who="q"), 429,
                     "tenant_limit", "3 cpus for a tenant with max_cpus 2")
    check(e.get("limit") == "max_cpus", f"{e}")
    q_ids = fill(fed, "q", 2)
    h = bg_create(fed, "q", name="q-wait", wait_s=120)
    check(wait_until(lambda: (waiting(fed, "q")["first"] or {}).get("why") == "tenant_limit: max_cpus", 15),
          f"q's create does not wait for its quota: {waiting(fed, 'q')}")
    # Room in the federation goes to b meanwhile.
    st, r = api(fed, "POST", "/v1/sandboxes", create_body(name="b-free"), who="b")
    check(st == 201, f"b is held back by q's quota: {st} {short(r)}")
    check("r" not in h, "q's create started past its quota")
    drop(fed, "q", q_ids[0])
    st, r = done(h)
    check(st == 201, f"q's create once its own sandbox went: {st} {short(r)}")


def test_queue_bound_refuses_at_once(fed):
    reset(fed)
    ids = fill(fed, "a", SLOTS)
    e = expect_error(api(fed, "POST", "/v1/sandboxes", create_body(num_sandboxes=3, wait_s=60), who="lim"), 429,
                     "tenant_limit", "3 sandboxes waiting for a tenant with max_queued_sandboxes 2")
    check(e.get("limit") == "max_queued_sandboxes", f"{e}")
    h = bg_create(fed, "lim", num_sandboxes=2, wait_s=60, name="in-bound")
    check(wait_until(lambda: waiting(fed, "lim")["sandboxes"] == 2, 15), "2 sandboxes do not wait")
    e = expect_error(api(fed, "POST", "/v1/sandboxes", create_body(wait_s=60), who="lim"), 429, "tenant_limit",
                     "a third waiting sandbox")
    check(e.get("limit") == "max_queued_sandboxes", f"{e}")
    for sid in ids[:2]:
        drop(fed, "a", sid)
    st, r = done(h)
    check(st == 201 and len(r["sandboxes"]) == 2, f"the waiting create: {st} {short(r)}")
    reset(fed)


def exec_at(fed, sid, out, key, secs):
    st, r = api(fed, "POST", f"/v1/sandboxes/{sid}/exec",
                {"argv": ["sh", "-c", f"date +%s%N; sleep {secs}"]}, who="e", timeout=120)
    out[key] = (st, r)


def test_execs_wait_for_a_slot(fed):
    reset(fed)
    sid = fed.create(create_body(name="ex"), token=TOK["e"])["sandboxes"][0]["id"]
    out = {}
    t1 = threading.Thread(target=exec_at, args=(fed, sid, out, "e1", 2))
    t1.start()
    check(wait_until(lambda: queue(fed)[0]["e"]["creating"]["execs"] == 1, 15), "the first exec is not running")
    t2 = threading.Thread(target=exec_at, args=(fed, sid, out, "e2", 0))
    t2.start()
    check(wait_until(lambda: queue(fed)[0]["e"]["exec_queue"]["waiting"] == 1, 15), "the second exec does not wait")
    t3 = threading.Thread(target=exec_at, args=(fed, sid, out, "e3", 0))
    t3.start()
    check(wait_until(lambda: queue(fed)[0]["e"]["exec_queue"]["waiting"] == 2, 15), "the third exec does not wait")
    st, m = fed.api("GET", "/metrics", token=None)
    check('fedrouter_exec_queue{tenant="e"} 2' in m, "the exec queue gauge")
    # Past max_queued_execs: refused at once.
    e = expect_error(api(fed, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}, who="e"), 429, "tenant_limit",
                     "a fourth exec")
    check(e.get("limit") == "max_concurrent_execs" and "max_queued_execs" in e["message"], f"{e}")
    for t in (t1, t2, t3):
        t.join(60)
    starts = {}
    for k in ("e1", "e2", "e3"):
        st, r = out.get(k, (0, None))
        check(st == 200 and r.get("exit_code") == 0, f"exec {k}: {st} {short(r)}")
        starts[k] = int(r["stdout"].split()[0])
    check(starts["e1"] + 2 * 10 ** 9 <= starts["e2"] <= starts["e3"],
          f"the waiting execs did not run after the first, in order: {starts}")
    st, m = fed.api("GET", "/metrics", token=None)
    check('fedrouter_exec_wait_seconds_count{tenant="e",outcome="started"} 2' in m, "the exec wait histogram")


def reloads(fed):
    st, c = api(fed, "GET", "/v1/config", who="ops")
    check(st == 200, f"/v1/config: {st}")
    return c["reloads"]


def test_exec_wait_ends_after_exec_wait_s(fed):
    n = reloads(fed)
    fed.exec_wait_s = 1
    fed.write_now()
    sid = [s for s in held(fed, "e")][0]["id"]
    check(wait_until(lambda: reloads(fed) > n, 15), "the config did not reload")
    out = {}
    t1 = threading.Thread(target=exec_at, args=(fed, sid, out, "e1", 4))
    t1.start()
    check(wait_until(lambda: queue(fed)[0]["e"]["creating"]["execs"] == 1, 15), "the long exec is not running")
    t0 = time.monotonic()
    e = expect_error(api(fed, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]}, who="e", timeout=60), 429,
                     "tenant_limit", "an exec that waited queue.exec_wait_s")
    check("waited" in e["message"] and time.monotonic() - t0 < 3.5, f"{e} after {time.monotonic() - t0:.1f} s")
    t1.join(60)
    check(out["e1"][0] == 200, f"the long exec: {out['e1']}")
    n = reloads(fed)
    fed.exec_wait_s = 30
    fed.write_now()
    check(wait_until(lambda: reloads(fed) > n, 15), "the config did not reload back")


def api_calls(fed, cluster):
    st, m = fed.api("GET", "/metrics", token=None)
    for line in m.splitlines():
        if line.startswith(f'fedrouter_cluster_api_latency_seconds_count{{cluster="{cluster}"}}'):
            return int(float(line.split()[-1]))
    return 0


def healthy(fed, cluster):
    st, r = api(fed, "GET", "/v1/clusters", who="ops")
    return next(c for c in r["clusters"] if c["name"] == cluster)["healthy"]


def test_busy_cluster_keeps_its_breaker_closed(fed):
    reset(fed)
    sim = fed.sims["k1"]
    check(sim.admin("POST", "/_sim/faults", {"throttle_rate": 1.0, "retry_after_s": 1})[0] == 200, "fault")
    try:
        n0 = api_calls(fed, "k1")
        for i in range(4):
            st, r = api(fed, "POST", "/v1/sandboxes", create_body(clusters=["k1"], name=f"busy-{i}"), who="a")
            check(st == 503 and healthy(fed, "k1"), f"a create on the busy cluster: {st} {short(r)}; "
                  f"healthy {healthy(fed, 'k1')}")
        # Three probe periods of 429s and more: still closed.
        check(wait_until(lambda: api_calls(fed, "k1") >= n0 + 12 or not healthy(fed, "k1"), 30, 0.2),
              "the router made no more calls to the busy cluster")
        check(healthy(fed, "k1"), "a cluster answering 429 opened its breaker")
        # A cluster that fails (503) does open it: the check above can fail.
        sim.admin("POST", "/_sim/faults", {"throttle_rate": 0.0, "error_rate": 1.0, "error_code": 503})
        for i in range(2):
            api(fed, "POST", "/v1/sandboxes", create_body(clusters=["k1"], name=f"down-{i}"), who="a")
        check(wait_until(lambda: not healthy(fed, "k1"), 15), "a cluster answering 503 kept its breaker closed")
    finally:
        sim.admin("POST", "/_sim/faults", {"throttle_rate": 0.0, "error_rate": 0.0})
    check(wait_until(lambda: healthy(fed, "k1"), 30), "k1 did not come back")


def test_queue_views_and_fedctl(fed):
    reset(fed)
    ids = fill(fed, "a", SLOTS)
    h = bg_create(fed, "b", name="viewed", num_sandboxes=2, wait_s=60)
    check(wait_until(lambda: waiting(fed, "b")["creates"] == 1, 15), "b's create is not waiting")
    tenants, total = queue(fed)
    check(set(tenants) == {"a", "b", "q", "lim", "e", "ops"} and total["creates"] == 1 and total["sandboxes"] == 2,
          f"the admin's view: {list(tenants)} {total}")
    check(tenants["a"]["holds"]["sandboxes"] == SLOTS and tenants["a"]["holds"]["cpus"] == SLOTS and
          abs(tenants["a"]["share"] - 1.0) < 1e-6 and tenants["b"]["share"] == 0, f"a's row: {tenants['a']}")
    st, m = fed.api("GET", "/metrics", token=None)
    for want in ('fedrouter_queue_sandboxes{tenant="b"} 2', 'fedrouter_queue_creates{tenant="b"} 1',
                 'fedrouter_tenant_share{tenant="a"} 1.000000', 'fedrouter_tenant_weight{tenant="a"} 1',
                 'fedrouter_queue_oldest_wait_seconds{tenant="b"}'):
        check(want in m, f"/metrics lacks {want}")
    env = dict(os.environ, FEDROUTER_URL=f"http://127.0.0.1:{fed.router.port}", FEDROUTER_TOKEN=TOK["ops"])
    p = subprocess.run([tr.ARGS.fedctl, "queue"], capture_output=True, text=True, env=env, timeout=30)
    line = next((l for l in p.stdout.splitlines() if l.startswith("b ")), "")
    check(p.returncode == 0 and "TENANT" in p.stdout and " 2 " in line and "1 creates of 2 sandboxes" in p.stdout,
          f"fedctl queue: {p.returncode} {p.stdout} {p.stderr}")
    for sid in ids[:2]:
        drop(fed, "a", sid)
    st, r = done(h)
    check(st == 201, f"b's create: {st} {short(r)}")
    reset(fed)


def test_fedctl_create_wait(fed):
    reset(fed)
    ids = fill(fed, "a", SLOTS)
    env = dict(os.environ, FEDROUTER_URL=f"http://127.0.0.1:{fed.router.port}", FEDROUTER_TOKEN=TOK["b"])
    p = subprocess.Popen([tr.ARGS.fedctl, "--json", "create", "--image", tr.IMAGE, "--cpus", "1", "--memory-gb", "1",
                          "--label", "t=q", "--wait", "60", "--name", "cli-wait"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        check(wait_until(lambda: waiting(fed, "b")["creates"] == 1, 15), "fedctl create --wait does not wait")
        drop(fed, "a", ids[0])
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    check(p.returncode == 0 and json.loads(out)["sandboxes"][0]["name"] == "cli-wait" and
          json.loads(out)["placement"]["waited_s"] > 0, f"fedctl create --wait: {p.returncode} {out} {err}")
    reset(fed)


def test_e2b_create_waits_queue_e2b_wait_s(fed):
    reset(fed)
    st, r = api(fed, "POST", "/v1/pools", {"name": "qp", "image": tr.IMAGE, "cpus": 1, "memory_gb": 1, "replicas": 0})
    check(st == 201, f"pool: {st} {short(r)}")
    check(wait_until(lambda: api(fed, "GET", "/v1/pools/qp")[0] == 200, 15), "the pool is not listed")
    ids = fill(fed, "a", SLOTS)

    def e2b_create(out):
        out["r"] = fed.api("POST", "/e2b/sandboxes", {"templateID": "qp", "timeout": 300, "metadata": {"t": "q"}},
                           token=None,
                           headers={"X-API-Key": TOK["a"]}, timeout=120)
    # Without queue.e2b_wait_s: no room is an answer at once.
    out = {}
    e2b_create(out)
    check(out["r"][0] == 503, f"an E2B create with no room and no wait: {short(out['r'])}")
    n = reloads(fed)
    fed.e2b_wait_s = 60
    fed.write_now()
    check(wait_until(lambda: reloads(fed) > n, 15), "the config did not reload")
    out = {}
    t = threading.Thread(target=e2b_create, args=(out,))
    t.start()
    check(wait_until(lambda: waiting(fed, "a")["creates"] == 1, 15), "the E2B create does not wait")
    drop(fed, "a", ids[0])
    t.join(60)
    st, r = out.get("r", (0, None))
    check(st == 201 and isinstance(r, dict) and r.get("templateID") == "qp" and r.get("sandboxID"),
          f"the E2B create that waited: {st} {short(r)}")
    n = reloads(fed)
    fed.e2b_wait_s = 0
    fed.write_now()
    check(wait_until(lambda: reloads(fed) > n, 15), "the config did not reload back")
    api(fed, "DELETE", "/v1/pools/qp")
    reset(fed)


TESTS = [test_full_without_wait_is_503_at_once, test_wait_starts_when_room_frees, test_smaller_share_goes_first,
         test_all_or_nothing_waits_whole, test_partial_ok_starts_what_fits,
         test_wait_ends_with_the_refusal_or_what_was_made, test_quota_holds_back_only_its_tenant,
         test_queue_bound_refuses_at_once, test_execs_wait_for_a_slot, test_exec_wait_ends_after_exec_wait_s,
         test_busy_cluster_keeps_its_breaker_closed, test_queue_views_and_fedctl, test_fedctl_create_wait,
         test_e2b_create_waits_queue_e2b_wait_s]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: QueueFed("queue", [(n, "us", ["--nodes", "1", "--node-cpu", "2", "--node-memory", "8Gi"])
                                            for n in ("k1", "k2")]),
        TESTS, ["--fedctl"]))
