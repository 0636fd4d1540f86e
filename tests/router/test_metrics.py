#!/usr/bin/env python3
"""Metrics, cost and access log of fedrouter against two kubesim clusters.

- /metrics passes `promtool check metrics` (Debian's prometheus package);
- its values match the clusters' state and what the test did (creates,
  execs, spills, requests, pools, capacity);
- the cost figures match hand computation from the configured prices and
  the hosted reference;
- every API request leaves one JSON access-log line with its request id,
  tenant and cluster; the X-Request-Id a client sends is echoed.
Talks only to 127.0.0.1; cleans up after itself.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk"))
import fedharness  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--fedrouter", required=True)
ap.add_argument("--kubesim", required=True)
args = ap.parse_args()

TOKEN = "metrics-token"
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def api(port, method, path, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null"), dict(r.headers)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, (json.loads(raw) if raw else None), dict(e.headers)


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def samples(text):
    """name{labels} value -> dict keyed by (name, frozenset(labels))."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not check(m is not None, f"unparseable metrics line: {line!r}"):
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def get(s, name, **labels):
    return s.get((name, frozenset(labels.items())))


def main():
    if shutil.which("promtool") is None:
        print("FAIL: promtool is missing (scripts/test installs Debian's prometheus package)")
        print("0 passed, 1 failed")
        return 1
    fedharness.start_watchdog(270)   # ctest's TIMEOUT is 300
    clusters = [("m1", "us"), ("m2", "apac")]
    node = ["--nodes", "2", "--node-cpu", "8", "--node-memory", "32Gi", "--node-pods", "20"]
    fed = None
    try:
        try:
            fed = fedharness.Federation(
                args.kubesim, args.fedrouter, [(n, r, node) for n, r in clusters],
                # admin: its pool "p" is shared, so an open /metrics shows it
                {"t1": (TOKEN, "admin = true;")}, prefix="fr-metrics-",
                cluster_conf={"m1": "cost = { per_core_hour = 0.04; per_gib_hour = 0.005; };",
                              "m2": "cost = { node_hour = 0.093; sandboxes_per_node = 1; };"},
                config_extra='health_listen = "127.0.0.1:0";\n'
                             'hosted = { per_core_second = 0.00003942; per_gib_second = 0.00000672; };\n')
        except RuntimeError as e:
            check(False, f"the federation did not start: {e}")
            return 1
        # The health line follows the listening line on the router's stdout.
        port, hport = fed.port, fedharness.wait_until(lambda: fed.routers[0].health_port, 10)
        log_path = fed.router_log
        if not check(hport is not None, f"no health line from fedrouter: {fed.routers[0].lines}"):
            return 1
        # The health listener: /healthz, /readyz, /metrics there, nothing else.
        check(hport != port, "the health listener has a port of its own")
        check(api(hport, "GET", "/healthz")[0] == 200, "health listener /healthz")
        check(api(hport, "GET", "/readyz")[0] == 200, "health listener /readyz")
        st, r, _ = api(hport, "GET", "/v1/sandboxes")
        check(st == 404 and r["error"]["code"] == "not_found", f"health listener /v1/sandboxes: {st} {r}")
        st, r, _ = api(hport, "POST", "/healthz", {})
        check(st == 405, f"health listener POST /healthz: {st}")
        check("fedrouter_cluster_healthy{" in scrape(hport), "health listener /metrics")

        # Traffic: a pool, a batch of 4 cold sandboxes in m1 (1 cpu, 2 GiB
        # each), two execs (one non-zero), a refused batch.
        st, _, _ = api(port, "POST", "/v1/pools", {"name": "p", "image": "python:3.12", "cpus": 1, "shared": True,
                                                   "memory_gb": 2, "replicas": 1, "clusters": ["m2"]})
        check(st == 201, f"pool create: {st}")
        st, r, h = api(port, "POST", "/v1/sandboxes", {"image": "python:3.12", "num_sandboxes": 4,
                                                       "name": "mm", "clusters": ["m1"]},
                       headers={"X-Request-Id": "req-metrics-create-1"})
        check(st == 201, f"batch create: {st} {r}")
        check(h.get("X-Request-Id") == "req-metrics-create-1", f"X-Request-Id not echoed: {h}")
        sid = r["sandboxes"][0]["id"]
        st, r1, _ = api(port, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"]})
        st2, r2, _ = api(port, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", "exit 4"]})
        check(st == 200 and r1["exit_code"] == 0 and st2 == 200 and r2["exit_code"] == 4, "execs")
        st, r, _ = api(port, "POST", "/v1/sandboxes", {"image": "python:3.12", "num_sandboxes": 500,
                                                       "name": "big"})
        check(st == 503 and r["error"]["code"] == "no_capacity", f"oversized batch: {st}")
        end = time.time() + 10
        while time.time() < end:
            _, pools, _ = api(port, "GET", "/v1/pools")
            if pools["pools"] and pools["pools"][0]["clusters"][0]["ready"] == 1:
                break
            time.sleep(0.2)

        text = scrape(port)
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        check(p.returncode == 0, f"promtool check metrics failed: {p.stdout} {p.stderr}")
        s = samples(text)
        _, cl, _ = api(port, "GET", "/v1/clusters")
        by = {c["name"]: c for c in cl["clusters"]}
        for name, region in clusters:
            check(get(s, "fedrouter_cluster_healthy", cluster=name, region=region) == 1, f"{name} healthy gauge")
            check(get(s, "fedrouter_cluster_sandboxes", cluster=name, region=region) == by[name]["sandboxes"],
                  f"{name} sandboxes gauge vs /v1/clusters")
            free = get(s, "fedrouter_cluster_capacity_slots", cluster=name, region=region, pool="", state="free")
            total = get(s, "fedrouter_cluster_capacity_slots", cluster=name, region=region, pool="", state="total")
            # per node min(8 cpu / 1, 32 GiB / 2, 20 pods) = 8; two nodes
            check(total == 16, f"{name} total slots of 1 cpu / 2 GiB on 2 nodes of 8 cpu / 32 GiB: {total}")
            check(free == by[name]["slots"][0]["free"], f"{name} free slots gauge vs /v1/clusters: {free}")
        check(get(s, "fedrouter_cluster_sandboxes", cluster="m1", region="us") == 4, "m1 holds the 4 sandboxes")
        # The sandbox pod cache: m1 holds the 4 sandboxes, m2 the pool's pod;
        # their records fill part of one page each, the tables their first 64
        # slots; the reaper has a due time for each of m1's sandboxes.
        check(get(s, "fedrouter_pod_cache_pods", cluster="m1") == 4, "m1's pod cache holds the 4 sandboxes")
        check(get(s, "fedrouter_pod_cache_pods", cluster="m2") == 1, "m2's pod cache holds the pool's pod")
        check(get(s, "fedrouter_pod_cache_bytes", cluster="m1", part="table") == 64 * 8, "m1's table: 64 slots")
        check(get(s, "fedrouter_pod_cache_bytes", cluster="m1", part="records") == 2 * 16384,
              "m1's records: one page of records, one of the reaper's names")
        check((get(s, "fedrouter_reaper_queue_entries", cluster="m1") or 0) >= 4, "m1's reaper queue")
        # (malloc's figures: a sanitizer build's allocator reports none, 0)
        check(get(s, "fedrouter_heap_bytes", state="in_use") is not None, "heap in use")
        check(get(s, "fedrouter_heap_bytes", state="free") is not None, "heap free")
        check(get(s, "fedrouter_pool_warm_pods", cluster="m2", pool="p", state="target") == 1, "pool target")
        check(get(s, "fedrouter_pool_warm_pods", cluster="m2", pool="p", state="ready") == 1, "pool ready")
        check(get(s, "fedrouter_creates_total", cluster="m1", tenant="t1", outcome="ok", start="cold") == 4,
              "creates_total")
        check(get(s, "fedrouter_create_duration_seconds_count", cluster="m1", start="cold") == 4,
              "create duration histogram: the 4 cold creates")
        check(get(s, "fedrouter_sandbox_create_failures_total", tenant="t1", pool="") == 500,
              "the refused batch's 500 sandboxes are counted as failed")
        check(get(s, "fedrouter_sandbox_creates_total", tenant="t1", pool="", region="us", cluster="m1",
                  outcome="cold") == 4, "usage: 4 cold creates seen in m1's state")
        check((get(s, "fedrouter_sandbox_seconds_total", tenant="t1", pool="", region="us", cluster="m1") or 0) > 0,
              "usage: sandbox-seconds of the 4 sandboxes")
        check(get(s, "fedrouter_execs_total", cluster="m1", outcome="ok", via="pods_exec") == 1, "execs ok")
        check(get(s, "fedrouter_execs_total", cluster="m1", outcome="nonzero", via="pods_exec") == 1, "execs nonzero")
        check(get(s, "fedrouter_exec_duration_seconds_count", cluster="m1") == 2, "exec histogram count")
        check(get(s, "fedrouter_http_requests_total", route="/v1/sandboxes", method="POST", status="503") == 1,
              "the refused batch is counted")
        check(get(s, "fedrouter_http_requests_total", route="/v1/sandboxes/{id}/exec", method="POST",
                  status="200") == 2, "exec requests counted")
        check((get(s, "fedrouter_cluster_api_latency_seconds_count", cluster="m1") or 0) > 0, "API latency histogram")

        # Cost by hand: m1 per resource, 4 sandboxes of 1 cpu / 2 GiB.
        now_m1 = 4 * (1 * 0.04 + 2 * 0.005)
        hosted_m1 = 4 * (1 * 0.00003942 * 3600 + 2 * 0.00000672 * 3600)
        cap_m1 = 16 * (0.04 + 2 * 0.005)
        cap_m2 = 16 * 0.093
        for basis, want, got in [
                ("now", now_m1, get(s, "fedrouter_cluster_cost_dollars_per_hour", cluster="m1", region="us", basis="now")),
                ("hosted", hosted_m1, get(s, "fedrouter_cluster_cost_dollars_per_hour", cluster="m1", region="us",
                                          basis="hosted_equivalent")),
                ("capacity", cap_m1, get(s, "fedrouter_cluster_cost_dollars_per_hour", cluster="m1", region="us",
                                         basis="capacity")),
                ("m2 capacity", cap_m2, get(s, "fedrouter_cluster_cost_dollars_per_hour", cluster="m2",
                                            region="apac", basis="capacity"))]:
            check(got is not None and abs(got - want) < 1e-6, f"cost {basis}: got {got}, want {want}")
        c1 = by["m1"].get("cost") or {}
        check(abs(c1.get("now", -1) - now_m1) < 1e-6 and abs(c1.get("savings", -1) - (hosted_m1 - now_m1)) < 1e-6,
              f"/v1/clusters cost for m1: {c1}")

        # Access log: one JSON line per API request, written when the
        # answer has gone: wait for the last request's line (the scrape
        # above is never logged), then take the whole log.
        def access_log():
            with open(log_path) as f:
                return [json.loads(l) for l in f if l.startswith("{")]
        check(fedharness.wait_until(lambda: any(l.get("route") == "/v1/clusters" for l in access_log()), 10),
              "no access-log line for GET /v1/clusters within 10 s")
        lines = access_log()
        create = [l for l in lines if l.get("request_id") == "req-metrics-create-1"]
        check(len(create) == 1, f"access log lines for the create: {len(create)}")
        if create:
            c = create[0]
            check(c["status"] == 201 and c["tenant"] == "t1" and c["route"] == "/v1/sandboxes"
                  and c["placement"] == "m1:4" and c["method"] == "POST", f"create log line: {c}")
        execs = [l for l in lines if l.get("route") == "/v1/sandboxes/{id}/exec"]
        check(len(execs) == 2 and all(l.get("cluster") == "m1" for l in execs), f"exec log lines: {execs}")
        check(not any(l.get("route") == "/metrics" for l in lines), "scrapes are not access-logged")
        return 0
    finally:
        if fed is not None:
            for problem in fed.stop():   # router then clusters, SIGTERM: each must exit 0
                check(False, problem)
        total = 1
        print(f"{total - (1 if failures else 0)} passed, {1 if failures else 0} failed")


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
