#!/usr/bin/env python3
"""Usage over time: the usage counters of /metrics, GET /v1/history from
memory, GET /v1/usage and /v1/history from a real Prometheus.

Federation "replicas" (two kubesim clusters, c1 priced by the node, c2 by
the resource; two fedrouter replicas on the same config, no Prometheus):
  * usage_counted_once_per_replica: sandboxes created through either
    replica are counted by both, the same (creates by outcome, sandbox-
    seconds at the rate of the live sandboxes), so max across replicas is
    the truth and a sum would double it; core-, GiB-seconds and dollars
    follow the requests and the prices exactly; the series of every
    configured tenant exist at 0 before its first create; a tenant label
    the config does not know is counted as "_other"; nothing grows once the
    sandboxes are gone.
  * usage_needs_prometheus: /v1/usage answers 501 prometheus_not_configured
    (and 400 for bad parameters).
  * history_from_memory: /v1/history (history_step_s = 1) says
    "source": "memory"; its creates, failures and spend integrate back to
    what the test did and what /metrics says; capacity and sandboxes match
    /v1/clusters; a tenant sees only itself, an admin every tenant; bad
    windows are 400.

Federation "prom" (one cluster, Debian's prometheus on loopback scraping
the router every second, metrics.prometheus_url set):
  * usage_from_prometheus: /v1/usage by tenant, pool and cluster matches
    what was created (warm, cold, failed) and /metrics' counters; prices
    exactly; a tenant sees itself only (403 for another), an admin anyone;
    /v1/history says "source": "prometheus" with the sandboxes and creates
    it holds; with Prometheus stopped both answer 502
    prometheus_unavailable.

Usage: test_usage.py --fedrouter PATH --kubesim PATH [--prometheus PATH]
                     [--only NAME ...] [--keep]
Talks to 127.0.0.1 only; cleans up its processes and directories.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
from test_router import TestFailure, check, short, wait_until, tail  # noqa: E402

ARGS = None
WATCHDOG_S = 280
IMAGE = tr.IMAGE
A, B, OPS = tr.TOKEN_A, tr.TOKEN_B, tr.TOKEN_ADMIN
NODE_HOUR = 0.36          # c1: $ per sandbox-hour (node model, 1 per node)
CORE_HOUR, GIB_HOUR = 0.036, 0.0036   # c2 and the prom cluster

# --------------------------------------------------------------------------
# helpers

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port):
    """/metrics as {(name, frozenset(labels)): value}."""
    st, text = tr.api_call(port, "GET", "/metrics")
    check(st == 200 and isinstance(text, str), f"GET /metrics: {st}")
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        check(m is not None, f"/metrics line does not parse: {line!r}")
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def series(metrics, name, **labels):
    """Value of the one series of <name> whose labels include <labels>; None
    when there is none; a failure when there are several."""
    want = set(labels.items())
    got = [v for (n, ls), v in metrics.items() if n == name and want <= set(ls)]
    check(len(got) <= 1, f"{name}{labels}: {len(got)} series, expected at most one")
    return got[0] if got else None


def total(metrics, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


def close(a, b, rel=1e-6, abs_=1e-9):
    return a is not None and b is not None and abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class UsageFed(tr.Fed):
    """tr.Fed with prices per cluster and a `metrics` group."""

    def __init__(self, name, clusters, prices, metrics):
        self.prices = prices
        self.metrics = metrics
        super().__init__(name, clusters)

    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        for cname, cost in self.prices.items():
            entry = f'{{ name = "{cname}"; '
            check(text.count(entry) == 1, f"config: no single entry {entry!r} to price")
            text = text.replace(entry, entry + cost + " ")
        with open(path, "w") as f:
            f.write(text + self.metrics + "\n")


def wait_synced(fed, router):
    def ok():
        st, r = fed.api("GET", "/v1/clusters", router=router)
        return st == 200 and all(c.get("synced") for c in r["clusters"])
    check(wait_until(ok, 30, 0.1), "clusters not synced within 30 s")


def terminate_all(fed, token):
    for sid in fed.list_ids(token=token):
        st, r = fed.api("DELETE", f"/v1/sandboxes/{sid}", token=token)
        check(st in (200, 202, 204, 404), f"DELETE {sid}: {st} {short(r)}")


# --------------------------------------------------------------------------
# federation "replicas"

def test_usage_counted_once_per_replica(fed):
    r1 = fed.router
    r2 = fed.start_router()
    wait_synced(fed, r1)
    wait_synced(fed, r2)
    # Declared ahead: every configured tenant's creates series, at 0.
    for port in (r1.port, r2.port):
        m = scrape(port)
        for t in ("a", "b", "c", "ops"):
            for c in ("c1", "c2"):
                v = series(m, "fedrouter_sandbox_creates_total", tenant=t, pool="", cluster=c, outcome="cold")
                check(v == 0, f"replica :{port}: creates series of tenant {t} in {c} is {v}, want 0 before any create")
    fed.create({"name": "u1", "num_sandboxes": 2, "clusters": ["c1"]})                      # via r1
    fed.api("POST", "/v1/sandboxes", {"name": "u2", "image": IMAGE, "clusters": ["c1"]}, router=r2)
    st, r = fed.api("POST", "/v1/sandboxes", {"name": "u3", "image": IMAGE, "cpus": 2, "memory_gb": 4,
                                              "clusters": ["c2"]}, token=B, router=r2)
    check(st == 201, f"create for b via replica 2: {st} {short(r)}")
    check(len(fed.list_ids()) == 3, f"tenant a has {len(fed.list_ids())} sandboxes, want 3")

    def both_counted():
        ms = [scrape(p) for p in (r1.port, r2.port)]
        return all(series(m, "fedrouter_sandbox_creates_total", tenant="a", pool="", cluster="c1",
                          outcome="cold") == 3 and
                   series(m, "fedrouter_sandbox_creates_total", tenant="b", pool="", cluster="c2",
                          outcome="cold") == 1 for m in ms)
    ok = wait_until(both_counted, 15, 0.2)
    m1, m2 = scrape(r1.port), scrape(r2.port)
    check(ok, "each replica counts every create, whichever replica served it: a/c1 cold "
              f"{series(m1, 'fedrouter_sandbox_creates_total', tenant='a', pool='', cluster='c1', outcome='cold')} and "
              f"{series(m2, 'fedrouter_sandbox_creates_total', tenant='a', pool='', cluster='c1', outcome='cold')}, "
              "want 3 on both")
    # The rate of sandbox-seconds is the number of live sandboxes, on both.
    s0 = [(time.monotonic(), scrape(p)) for p in (r1.port, r2.port)]
    time.sleep(2.0)
    s1 = [(time.monotonic(), scrape(p)) for p in (r1.port, r2.port)]
    for (t0, a0), (t1, a1), port in zip(s0, s1, (r1.port, r2.port)):
        for tenant, cluster, live in (("a", "c1", 3), ("b", "c2", 1)):
            v0 = series(a0, "fedrouter_sandbox_seconds_total", tenant=tenant, pool="", cluster=cluster)
            v1 = series(a1, "fedrouter_sandbox_seconds_total", tenant=tenant, pool="", cluster=cluster)
            rate = (v1 - v0) / (t1 - t0)
            check(abs(rate - live) <= 0.35 * live, f"replica :{port}: {tenant}/{cluster} sandbox-seconds grow at "
                                                    f"{rate:.2f}/s, want {live} (the live sandboxes)")
    for m, port in ((m1, r1.port), (s1[1][1], r2.port)):
        sec = series(m, "fedrouter_sandbox_seconds_total", tenant="a", pool="", cluster="c1")
        check(close(series(m, "fedrouter_cpu_core_seconds_total", tenant="a", pool="", cluster="c1"), sec) and
              close(series(m, "fedrouter_memory_gib_seconds_total", tenant="a", pool="", cluster="c1"), 2 * sec) and
              close(series(m, "fedrouter_cost_dollars_total", tenant="a", pool="", cluster="c1"),
                    sec * NODE_HOUR / 3600),
              f"replica :{port}: a/c1 (1 cpu, 2 GiB, ${NODE_HOUR}/h a sandbox): sandbox {sec}, core "
              f"{series(m, 'fedrouter_cpu_core_seconds_total', tenant='a', pool='', cluster='c1')}, GiB "
              f"{series(m, 'fedrouter_memory_gib_seconds_total', tenant='a', pool='', cluster='c1')}, $ "
              f"{series(m, 'fedrouter_cost_dollars_total', tenant='a', pool='', cluster='c1')}")
        bsec = series(m, "fedrouter_sandbox_seconds_total", tenant="b", pool="", cluster="c2")
        core = series(m, "fedrouter_cpu_core_seconds_total", tenant="b", pool="", cluster="c2")
        gib = series(m, "fedrouter_memory_gib_seconds_total", tenant="b", pool="", cluster="c2")
        check(close(core, 2 * bsec) and close(gib, 4 * bsec) and
              close(series(m, "fedrouter_cost_dollars_total", tenant="b", pool="", cluster="c2"),
                    (core * CORE_HOUR + gib * GIB_HOUR) / 3600),
              f"replica :{port}: b/c2 (2 cpu, 4 GiB per resource): {bsec} {core} {gib}")
        check(series(m, "fedrouter_gpu_seconds_total", tenant="b", pool="", cluster="c2") == 0,
              "no GPUs asked: 0 GPU-seconds")
    # A pod whose tenant the config does not know: "_other", not its label.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "stray", "labels": {"fedrouter.io/sandbox": "true", "fedrouter.io/state": "claimed",
                                                     "fedrouter.io/tenant": "not-configured-xyz"}},
           "spec": {"containers": [{"name": "main", "image": IMAGE,
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    st, body = kube_post(fed.sims["c1"], "/api/v1/namespaces/default/pods", pod)
    check(st == 201, f"kubesim: create the stray pod: {st} {short(body)}")
    ok = wait_until(lambda: series(scrape(r1.port), "fedrouter_sandbox_creates_total", tenant="_other", pool="",
                                   cluster="c1", outcome="cold") == 1, 10, 0.2)
    m = scrape(r1.port)
    check(ok, "a tenant the config does not know counts as tenant=\"_other\"")
    check(not any("not-configured-xyz" in str(ls) for (n, ls) in m), "the unknown tenant's name is not a label value")
    kube_delete(fed.sims["c1"], "/api/v1/namespaces/default/pods/stray")
    # Once the sandboxes are gone nothing grows.
    terminate_all(fed, A)
    terminate_all(fed, B)
    ok = wait_until(lambda: all(total(scrape(p), "fedrouter_cluster_sandboxes") == 0 for p in (r1.port, r2.port)),
                    20, 0.2)
    check(ok, "sandboxes still counted after terminating them all")
    a0 = scrape(r1.port)
    time.sleep(1.2)
    a1 = scrape(r1.port)
    for name in ("fedrouter_sandbox_seconds_total", "fedrouter_cost_dollars_total"):
        check(total(a0, name) == total(a1, name), f"{name} grows with no sandbox: {total(a0, name)} -> {total(a1, name)}")
    fed.routers.remove(r2)
    rc = tr.stop_proc(r2.proc)
    check(rc == 0, f"replica 2 exit {rc}")


def kube_post(sim, path, body):
    import http.client
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=15, context=sim.ssl)
    try:
        c.request("POST", path, body=json.dumps(body),
                  headers={"Authorization": "Bearer " + tr.SIM_TOKEN, "Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def kube_delete(sim, path):
    import http.client
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=15, context=sim.ssl)
    try:
        c.request("DELETE", path, headers={"Authorization": "Bearer " + tr.SIM_TOKEN})
        c.getresponse().read()
    finally:
        c.close()


def test_usage_needs_prometheus(fed):
    st, r = fed.api("GET", "/v1/usage?group_by=tenant")
    tr.expect_error((st, r), 501, "prometheus_not_configured", "/v1/usage without metrics.prometheus_url")
    check("metrics.prometheus_url" in r["error"]["message"], f"the message says what to set: {short(r)}")
    st, r = fed.api("GET", "/v1/usage?group=tenant")
    tr.expect_error((st, r), 400, "invalid_query", "/v1/usage with an unknown parameter")
    st, r = tr.api_call(fed.router.port, "GET", "/v1/usage")
    check(st == 401, f"/v1/usage without a token: {st}")


def integral(t, rates):
    """Sum of rate * dt over the points (a rate at point i covers t[i-1]..t[i])."""
    return sum((r or 0) * (t[i] - t[i - 1]) for i, r in enumerate(rates) if i > 0)


def history(fed, token=A, window=None):
    st, r = fed.api("GET", "/v1/history" + (f"?window={window}" if window else ""), token=token)
    check(st == 200 and isinstance(r, dict), f"GET /v1/history: {st} {short(r)}")
    for k in ("window", "source", "step_s", "since", "note", "t", "sandboxes", "capacity", "creates_per_s",
              "cold_start_s", "warm_hit_rate", "spend_per_hour", "top_tenants"):
        check(k in r, f"/v1/history lacks {k!r}: {short(r)}")
    n = len(r["t"])
    check(all(r["t"][i] < r["t"][i + 1] for i in range(n - 1)), f"t is not increasing: {r['t']}")
    for s in r["sandboxes"] + r["capacity"] + r["spend_per_hour"]["by_region"] + r["spend_per_hour"]["by_tenant"]:
        check(len(s["values"]) == n, f"a series of {len(s['values'])} values for {n} points: {short(s)}")
    return r


def test_history_from_memory(fed):
    for bad in ("2h", "", "1h&x=1"):
        st, r = fed.api("GET", "/v1/history?window=" + bad)
        check(st == 400 and r["error"]["code"] in ("invalid_window", "invalid_query"),
              f"window={bad!r}: {st} {short(r)}")
    h0 = history(fed)
    check(h0["source"] == "memory" and h0["window"] == "1h" and h0["step_s"] == 1,
          f"no Prometheus: source memory, step 1 s: {short(h0)}")
    check("since this router started" in h0["note"], f"the answer says where it comes from: {h0['note']!r}")
    # The creates of the tests before: counted since the router started.
    h0 = history(fed, token=OPS)
    base_cold = integral(h0["t"], h0["creates_per_s"]["cold"])
    base_failed = integral(h0["t"], h0["creates_per_s"]["failed"])
    hb0 = history(fed, token=B)
    base_b = integral(hb0["t"], hb0["creates_per_s"]["cold"])
    # What the test does: 3 cold for a in c1, 2 for b in c2, one create of a
    # that cannot fit (failed, 50 sandboxes: the clusters hold 20 each).
    t_start = time.time()
    fed.create({"name": "h1", "num_sandboxes": 3, "clusters": ["c1"]})
    fed.create({"name": "h2", "num_sandboxes": 2, "clusters": ["c2"]}, token=B)
    st, r = fed.api("POST", "/v1/sandboxes", {"name": "toomany", "image": IMAGE, "num_sandboxes": 50})
    tr.expect_error((st, r), 503, "no_capacity", "a create the federation cannot hold")
    t_done = time.time()

    def settled():
        h = history(fed, token=OPS)
        return h["t"] and h["t"][-1] > t_done + 1.5 and \
            round(integral(h["t"], h["creates_per_s"]["cold"]) - base_cold) == 5
    check(wait_until(settled, 20, 0.3), "the history never counted the 5 cold creates")
    h = history(fed, token=OPS)
    t = h["t"]
    cold = integral(t, h["creates_per_s"]["cold"]) - base_cold
    failed = integral(t, h["creates_per_s"]["failed"]) - base_failed
    check(abs(cold - 5) < 1e-6 and abs(failed - 50) < 1e-6 and integral(t, h["creates_per_s"]["warm"]) == 0,
          f"creates over the window: cold {cold} (want 5), failed {failed} (want 50)")
    p50 = [v for v in h["cold_start_s"]["p50"] if v is not None]
    check(p50 and all(0 < v <= (t_done - t_start) + 1 for v in p50),
          f"cold start p50 values {p50} within the creates' own time ({t_done - t_start:.1f} s)")
    # Sandboxes and capacity per cluster: the last point is /v1/clusters' view
    # (the admin's: every tenant's sandboxes).
    st, cl = fed.api("GET", "/v1/clusters", token=OPS)
    for c in cl["clusters"]:
        sb = next(s for s in h["sandboxes"] if s["cluster"] == c["name"])
        cap = next(s for s in h["capacity"] if s["cluster"] == c["name"])
        total_slots = next(s["total"] for s in c["slots"] if s.get("pool") is None)
        check(sb["values"][-1] == c["sandboxes"] and sb["region"] == c["region"],
              f"{c['name']}: history says {sb['values'][-1]} sandboxes, /v1/clusters {c['sandboxes']}")
        check(cap["values"][-1] == total_slots, f"{c['name']}: capacity {cap['values'][-1]}, slots {total_slots}")
    # Spend: the integral of spend per hour is what /metrics' dollars say
    # (both since the router started, give or take the last step).
    m = scrape(fed.router.port)
    for tenant, n in (("a", 3), ("b", 2)):
        s = next(x for x in h["spend_per_hour"]["by_tenant"] if x["tenant"] == tenant)
        spent = integral(t, s["values"]) / 3600
        want = total(m, "fedrouter_cost_dollars_total", tenant=tenant)
        check(abs(spent - want) <= n * NODE_HOUR / 3600 * 2.5, f"tenant {tenant}: the history spent ${spent:.6f}, "
                                                               f"/metrics ${want:.6f}")
    regions = {s["region"] for s in h["spend_per_hour"]["by_region"]}
    check(regions == {"us", "eu"}, f"spend by region: {regions}")
    check({x["tenant"] for x in h["top_tenants"]} >= {"a", "b"} and
          h["top_tenants"] == sorted(h["top_tenants"], key=lambda x: -x["dollars"]),
          f"top tenants (admin): {h['top_tenants']}")
    # A tenant sees itself only; the clusters are everyone's.
    hb = history(fed, token=B)
    check([x["tenant"] for x in hb["spend_per_hour"]["by_tenant"]] == ["b"] and
          [x["tenant"] for x in hb["top_tenants"]] == ["b"],
          f"tenant b's history shows other tenants: {short(hb['spend_per_hour'])} {hb['top_tenants']}")
    check(round(integral(hb["t"], hb["creates_per_s"]["cold"]) - base_b) == 2 and
          integral(hb["t"], hb["creates_per_s"]["failed"]) == 0,
          f"tenant b's creates are its own: cold {integral(hb['t'], hb['creates_per_s']['cold'])}")
    st, clb = fed.api("GET", "/v1/clusters", token=B)
    for c in clb["clusters"]:
        sb = next(s for s in hb["sandboxes"] if s["cluster"] == c["name"])
        check(sb["values"][-1] == c["sandboxes"], f"tenant b: {c['name']} has {sb['values'][-1]} sandboxes in the "
                                                  f"history, {c['sandboxes']} in /v1/clusters (its own)")
    for w in ("24h", "7d"):
        hw = history(fed, token=OPS, window=w)
        check(hw["window"] == w and hw["t"], f"window {w}: {short(hw)}")
    terminate_all(fed, A)
    terminate_all(fed, B)


# --------------------------------------------------------------------------
# federation "prom"

class Prometheus:
    def __init__(self, root, router_port, port):
        self.port = port
        self.dir = os.path.join(root, "prometheus")
        os.makedirs(os.path.join(self.dir, "data"))
        self.conf = os.path.join(self.dir, "prometheus.yml")
        with open(self.conf, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: fedrouter
    scrape_interval: 1s
    static_configs:
      - targets: ["127.0.0.1:{router_port}"]
""")
        self.log = os.path.join(self.dir, "prometheus.log")
        self.proc = tr.start_proc([ARGS.prometheus, "--config.file=" + self.conf,
                                   "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                                   f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
                                   "--storage.tsdb.retention.time=1d"], self.log)

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr):
        u = self.url() + "/api/v1/query?query=" + urllib.parse.quote(expr)
        with urllib.request.urlopen(u, timeout=10) as r:
            d = json.loads(r.read())
        check(d.get("status") == "success", f"prometheus {expr}: {short(d)}")
        return d["data"]["result"]

    def ready(self):
        try:
            with urllib.request.urlopen(self.url() + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            tr.stop_proc(self.proc)


class PromFed(UsageFed):
    def __init__(self, name, clusters, prices):
        self.prom_port = free_port()
        super().__init__(name, clusters, prices,
                         f'metrics = {{ prometheus_url = "http://127.0.0.1:{self.prom_port}/"; }};')
        self.prom = None

    def start_prometheus(self):
        self.prom = Prometheus(self.root, self.router.port, self.prom_port)
        check(wait_until(self.prom.ready, 60, 0.2), f"prometheus not ready within 60 s:\n{tail(self.prom.log)}")
        check(wait_until(lambda: self.prom.query('up{job="fedrouter"} == 1'), 30, 0.3),
              f"prometheus does not scrape the router:\n{tail(self.prom.log)}")


def usage(fed, token=OPS, **params):
    q = urllib.parse.urlencode(params)
    st, r = fed.api("GET", "/v1/usage" + ("?" + q if q else ""), token=token)
    return st, r


def rows_by(r, key):
    return {row[key]: row for row in r["usage"]}


def test_usage_from_prometheus(fed):
    t_start = int(time.time()) - 5
    fed.start_prometheus()
    st, p = fed.api("POST", "/v1/pools", {"name": "warmpool", "image": IMAGE, "cpus": 1, "memory_gb": 2,
                                          "replicas": 2, "shared": True}, token=OPS)
    check(st == 201, f"POST /v1/pools (shared): {st} {short(p)}")

    def pool_full():
        st, r = fed.api("GET", "/v1/pools/warmpool")
        return st == 200 and all(c.get("ready") == c.get("target") == 2 for c in r.get("clusters", []))
    check(wait_until(pool_full, 60, 0.2), "the pool did not fill")
    # Prometheus must have seen the declared zeros of the new pool's series
    # before the warm claims (increase() cannot see a series born at 1).
    check(wait_until(lambda: fed.prom.query('fedrouter_sandbox_creates_total{tenant="a",pool="warmpool",'
                                            'outcome="warm"} == 0'), 20, 0.3),
          "prometheus never saw a's warmpool series at 0")
    fed.create({"name": "pc", "num_sandboxes": 3})
    fed.create({"name": "pw", "pool": "warmpool", "num_sandboxes": 2})
    fed.create({"name": "pb", "num_sandboxes": 1}, token=B)
    st, r = fed.api("POST", "/v1/sandboxes", {"name": "nope", "image": IMAGE, "num_sandboxes": 40})
    tr.expect_error((st, r), 503, "no_capacity", "a create that does not fit")

    def scraped():
        res = fed.prom.query('sum(fedrouter_sandbox_creates_total{tenant="a"})')
        fail = fed.prom.query('sum(fedrouter_sandbox_create_failures_total{tenant="a"})')
        return res and float(res[0]["value"][1]) == 5 and fail and float(fail[0]["value"][1]) == 40
    check(wait_until(scraped, 30, 0.3), "prometheus never scraped a's 5 creates and 40 failures")
    time.sleep(2.5)   # a few more samples of the sandboxes' seconds
    m = scrape(fed.router.port)
    st, r = usage(fed, group_by="tenant", **{"from": str(t_start)})
    check(st == 200 and r.get("source") == "prometheus" and r.get("group_by") == "tenant",
          f"/v1/usage by tenant: {st} {short(r, 1500)}")
    rows = rows_by(r, "tenant")
    check({"a", "b"} <= set(rows), f"rows for a and b: {list(rows)}")
    a, b = rows["a"], rows["b"]
    check(a["creates"] == {"warm": 2, "cold": 3, "spilled": 0, "failed": 40},
          f"a's creates: {a['creates']}, want 2 warm, 3 cold, 40 failed")
    check(b["creates"] == {"warm": 0, "cold": 1, "spilled": 0, "failed": 0}, f"b's creates: {b['creates']}")
    want = total(m, "fedrouter_sandbox_seconds_total", tenant="a")
    check(abs(a["sandbox_seconds"] - want) <= 5 * 3.0, f"a's sandbox-seconds from Prometheus {a['sandbox_seconds']}, "
                                                       f"/metrics {want} (5 live sandboxes, 1 s scrapes)")
    check(close(a["cpu_core_seconds"], a["sandbox_seconds"], rel=1e-3) and
          close(a["memory_gib_seconds"], 2 * a["sandbox_seconds"], rel=1e-3) and
          close(a["cost_dollars"], (a["cpu_core_seconds"] * CORE_HOUR + a["memory_gib_seconds"] * GIB_HOUR) / 3600,
                rel=1e-3, abs_=1e-6),   # /v1/usage gives micro-dollars
          f"a's usage does not follow its requests and the price: {a}")
    check(a["sandbox_seconds"] > 4 * b["sandbox_seconds"] > 0, f"a had 5 sandboxes, b 1: {a} {b}")
    # by pool and by cluster
    st, r = usage(fed, group_by="pool", **{"from": str(t_start)})
    pools = rows_by(r, "pool")
    check(st == 200 and pools.get("warmpool", {}).get("creates", {}).get("warm") == 2 and
          pools.get("", {}).get("creates", {}).get("cold") == 4, f"/v1/usage by pool: {st} {short(r, 1500)}")
    st, r = usage(fed, group_by="cluster", **{"from": str(t_start)})
    check(st == 200 and set(rows_by(r, "cluster")) == {"p1"} and r.get("creates_failed") == 40,
          f"/v1/usage by cluster (failed creates have no cluster): {st} {short(r, 1500)}")
    # scoping
    st, r = usage(fed, token=A, **{"from": str(t_start)})
    check(st == 200 and set(rows_by(r, "tenant")) == {"a"}, f"tenant a sees itself only: {st} {short(r, 1500)}")
    st, r = usage(fed, token=A, tenant="b")
    tr.expect_error((st, r), 403, "forbidden", "tenant a asking for b's usage")
    st, r = usage(fed, token=OPS, tenant="b", **{"from": str(t_start)})
    check(st == 200 and set(rows_by(r, "tenant")) == {"b"}, f"an admin asks for b: {st} {short(r, 1500)}")
    st, r = usage(fed, tenant="nobody")
    tr.expect_error((st, r), 404, "tenant_not_found", "an unknown tenant")
    for params, code in (({"from": "yesterday"}, "invalid_time"), ({"from": "100", "to": "50"}, "invalid_range"),
                         ({"group_by": "colour"}, "invalid_group_by")):
        st, r = usage(fed, **params)
        tr.expect_error((st, r), 400, code, f"/v1/usage {params}")
    # the history from Prometheus
    st, h = fed.api("GET", "/v1/history?window=1h", token=OPS)
    check(st == 200 and h.get("source") == "prometheus", f"/v1/history with Prometheus: {st} {short(h, 1500)}")
    sb = next((s for s in h["sandboxes"] if s["cluster"] == "p1"), None)
    check(sb is not None and max(v for v in sb["values"] if v is not None) >= 6,
          f"p1's sandboxes over the hour reach the 6 live ones: {short(sb, 1500)}")
    check(any(v for v in h["creates_per_s"]["cold"] if v), "creates per second from Prometheus: all zero")
    check({x["tenant"] for x in h["top_tenants"]} >= {"a", "b"}, f"top tenants: {h['top_tenants']}")
    st, hb = fed.api("GET", "/v1/history?window=1h", token=B)
    check(st == 200 and [x["tenant"] for x in hb["spend_per_hour"]["by_tenant"]] in (["b"], []),
          f"tenant b's history from Prometheus shows others: {short(hb['spend_per_hour'], 1500)}")
    # Prometheus gone: a clear 502
    fed.prom.stop()
    st, r = usage(fed)
    tr.expect_error((st, r), 502, "prometheus_unavailable", "/v1/usage with Prometheus down")
    st, r = fed.api("GET", "/v1/history", token=OPS)
    tr.expect_error((st, r), 502, "prometheus_unavailable", "/v1/history with Prometheus down")
    terminate_all(fed, A)
    terminate_all(fed, B)


# --------------------------------------------------------------------------

FEDERATIONS = [
    ("replicas",
     lambda: UsageFed("usage", [("c1", "us", ["--nodes", "1", "--node-pods", "20"]),
                                ("c2", "eu", ["--nodes", "1", "--node-pods", "20"])],
                      {"c1": f"cost = {{ node_hour = {NODE_HOUR}; sandboxes_per_node = 1; }};",
                       "c2": f"cost = {{ per_core_hour = {CORE_HOUR}; per_gib_hour = {GIB_HOUR}; }};"},
                      "metrics = { history_step_s = 1; };"),
     [test_usage_counted_once_per_replica, test_usage_needs_prometheus, test_history_from_memory]),
    ("prom",
     lambda: PromFed("uprom", [("p1", "us", ["--nodes", "1", "--node-pods", "30"])],
                     {"p1": f"cost = {{ per_core_hour = {CORE_HOUR}; per_gib_hour = {GIB_HOUR}; }};"}),
     [test_usage_from_prometheus]),
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
    ap.add_argument("--prometheus", default="/usr/bin/prometheus")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()
    tr.ARGS = ARGS
    threading.Thread(target=watchdog, daemon=True).start()
    results = []
    t_all = time.monotonic()
    for name, make, tests in FEDERATIONS:
        if ARGS.only:
            tests = [t for t in tests if any(t.__name__.startswith(o) or t.__name__[5:].startswith(o)
                                             for o in ARGS.only)]
        if not tests:
            continue
        if name == "prom" and not os.access(ARGS.prometheus, os.X_OK):
            for t in tests:
                results.append((t.__name__, False, f"{ARGS.prometheus} not found: apt-get install prometheus "
                                                    "(scripts/lib/packages.sh)"))
                print(f"FAIL {t.__name__}: {ARGS.prometheus} not found (Debian's prometheus package)", flush=True)
            continue
        try:
            fed = make()
        except Exception as e:
            for t in tests:
                results.append((t.__name__, False, f"federation {name} did not start: {e}"))
                print(f"FAIL {t.__name__}: federation {name} did not start: {e}", flush=True)
            continue
        for t in tests:
            tr.run_test(t, fed, results)
            if not results[-1][1]:
                print(tail(fed.router.log, 15), flush=True)
        if getattr(fed, "prom", None) is not None:
            fed.prom.stop()
        problems = fed.teardown()
        results.append((f"teardown_{name}", not problems, "; ".join(problems)))
        print(f"ok   teardown_{name}" if not problems else f"FAIL teardown_{name}: " + "\n".join(problems),
              flush=True)
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
