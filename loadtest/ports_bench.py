#!/usr/bin/env python3
"""loadtest/ports_bench.py - a sandbox's own ports through fedrouter: what
the router and the cluster's data path add, and the Code Interpreter.

One kubesim cluster (TLS, token) whose pods run the real fedrouter-agent in
their own network namespaces (and, in code-interpreter pods,
deploy/code-interpreter/server.py on 49999); a router with
`ports = { domain = "sbx.localhost"; }` in front of it. The data path is
the cluster's API server pod proxy (kubesim's), as for a cluster without a
gateway.

  small      GET of a 1 KiB file served by `python3 -m http.server` in a
             sandbox, with wrk (16 connections kept alive, DURATION_S each:
             10; smoke 2): straight to the pod's address, through the
             router by path (/v1/sandboxes/{id}/ports/8000/...) and by host
             (Host: 8000-<short id>.sbx.localhost): requests/s, p50, p99
  big        FILE_MB (1024; smoke 32) MiB made in the sandbox, downloaded
             through the router's path route, sha256 checked: MB/s, and the
             router's RSS before and at its peak
  cells      runCode('1+1') (POST .../ports/49999/execute): p50 of CELLS
             (200; smoke 20) cells one after another in one sandbox; then
             SANDBOXES (64; smoke 4) code-interpreter sandboxes, one client
             thread each running CELLS_EACH (20; smoke 5) cells: cells/s

  ws         a WebSocket echo server in the sandbox (tests/router/
             test_ports.py's, standard library only) on port 8003:
             WS_OPENS (200; smoke 20) upgrades one after another (connect,
             101) and WS_MSGS (2000; smoke 200) round trips of a 32-byte
             text message on one connection, straight to the pod, through
             the router by path and by host: p50, p99; and 64 MiB (smoke 8)
             of 1 MiB binary messages echoed through the path route: MB/s

Usage: ports_bench.py --build-dir DIR [--smoke] [--json-out FILE]
Needs wrk (Debian package wrk) for `small`. Prints a table and JSON; exit 0
when every step worked.
"""
import argparse
import concurrent.futures
import hashlib
import http.client
import json
import os
import shutil
import socket
import statistics
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "router"))
sys.path.insert(0, os.path.join(ROOT, "tests", "codeint"))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
import test_ports as tp  # noqa: E402
import ci_server as cs  # noqa: E402
from benchlib import BenchError, PeakRss, wrk  # noqa: E402

DOMAIN = "sbx.localhost"
CI_IMAGE = "registry.example/fedrouter/code-interpreter:0.1.0"


class BenchFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path, "a") as f:
            f.write(f'ports = {{ domain = "{DOMAIN}"; max_requests_per_sandbox = 4096; '
                    'max_requests_per_tenant = 8192; };\n')


def die(msg):
    print("ports_bench: " + msg, file=sys.stderr, flush=True)
    raise SystemExit(1)


def cell(port, sid, code="1+1"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        t0 = time.perf_counter()
        c.request("POST", f"/v1/sandboxes/{sid}/ports/49999/execute", body=json.dumps({"code": code}),
                  headers={"Authorization": "Bearer " + tr.TOKEN_A, "Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        dt = time.perf_counter() - t0
    finally:
        c.close()
    if r.status != 200 or b'"text": "2"' not in body and b'"text":"2"' not in body:
        die(f"runCode through the router: {r.status} {body[:300]!r}")
    return dt


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[int(q * (len(xs) - 1))] * 1000, 3)


def ws_bench(fed, sid, short, pod_ip, opens, msgs, mib):
    st, r = fed.api("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/ws_echo.py", raw=tp.WS_ECHO.encode())
    if st not in (200, 201, 204):
        die(f"uploading the echo server: {st} {r}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["python3", "/tmp/ws_echo.py",
                                                                        str(tp.WS_PORT)]})
    if st != 201:
        die(f"starting the echo server: {st} {r}")
    auth = {"Authorization": "Bearer " + tr.TOKEN_A}
    ways = {"path": (f"/v1/sandboxes/{sid}/ports/{tp.WS_PORT}/", auth, None),
            "host": ("/", dict(auth, Host=f"{tp.WS_PORT}-{short}.{DOMAIN}"), None)}
    if pod_ip:
        ways = dict({"direct": ("/", {}, (pod_ip, tp.WS_PORT))}, **ways)

    def up():
        w = tp.WS(fed, *ways["path"][:2])
        ok = w.accepted()
        w.close()
        return ok
    if not tr.wait_until(up, 30, 0.1):
        die("the WebSocket echo server did not answer through the router")
    out = {}
    for name, (target, hdrs, addr) in ways.items():
        open_s, rt = [], []
        for _ in range(opens):
            t0 = time.perf_counter()
            w = tp.WS(fed, target, hdrs, addr=addr)
            open_s.append(time.perf_counter() - t0)
            if not w.accepted():
                die(f"ws {name}: {w.status} {w.body[:200]!r}")
            w.close()
        w = tp.WS(fed, target, hdrs, addr=addr)
        w.sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg = b"x" * 32
        for _ in range(msgs):
            t0 = time.perf_counter()
            w.send(1, msg)
            op, data = w.recv()
            rt.append(time.perf_counter() - t0)
            if op != 1 or data != msg:
                die(f"ws {name}: echo {op} {data[:50]!r}")
        w.close()
        out[name] = {"open_p50_ms": pct(open_s, 0.5), "open_p99_ms": pct(open_s, 0.99),
                     "rt_p50_ms": pct(rt, 0.5), "rt_p99_ms": pct(rt, 0.99)}
    w = tp.WS(fed, *ways["path"][:2])
    big = os.urandom(1 << 20)
    t0 = time.perf_counter()
    for _ in range(mib):
        w.send(2, big)
        op, data = w.recv()
        if op != 2 or data != big:
            die(f"ws 1 MiB echo: {op} {len(data)} bytes")
    dt = time.perf_counter() - t0
    w.close()
    out["echo_1mib"] = {"mib": mib, "mb_s_each_way": round(mib * (1 << 20) / dt / 1e6, 1)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    b = os.path.abspath(args.build_dir)
    tr.ARGS = argparse.Namespace(fedrouter=os.path.join(b, "fedrouter"), kubesim=os.path.join(b, "kubesim"),
                                 agent=os.path.join(b, "fedrouter-agent"), keep=False, only=[])
    dur = 2 if args.smoke else 10
    file_mb = 32 if args.smoke else 1024
    cells_n = 20 if args.smoke else 200
    nsb = 4 if args.smoke else 64
    cells_each = 5 if args.smoke else 20
    cs.ensure_packages()
    report = {"smoke": args.smoke}
    fed = BenchFed("ports-bench", [("pb", "us", ["--nodes", "4", "--node-cpu", "256", "--node-memory", "1024Gi",
                                                  "--node-pods", "500", "--agent-binary", tr.ARGS.agent,
                                                  "--code-interpreter", cs.SERVER])])
    fed.shared = {}
    try:
        port = fed.router.port
        auth = "Authorization: Bearer " + tr.TOKEN_A
        sb = fed.create_one(name="web", image="python:3.12")
        sid = sb["id"]
        st, info = fed.api("GET", f"/v1/sandboxes/{sid}")
        short = info["short_id"]
        st, r = fed.exec(sid, ["sh", "-c", "mkdir -p /tmp/www && head -c 1024 /dev/urandom >/tmp/www/small && "
                                         f"head -c {file_mb << 20} /dev/urandom >/tmp/www/big && "
                                         "sha256sum /tmp/www/big"])
        if st != 200 or r.get("exit_code") != 0:
            die(f"making the files: {st} {r}")
        big_sha = r["stdout"].split()[0]
        st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes",
                        {"argv": ["python3", "-m", "http.server", "8000", "--bind", "0.0.0.0", "--directory",
                                  "/tmp/www"]})
        if st != 201:
            die(f"starting the server: {st} {r}")
        path_url = f"http://127.0.0.1:{port}/v1/sandboxes/{sid}/ports/8000/small"
        if not tr.wait_until(lambda: tr.api_call(port, "GET", f"/v1/sandboxes/{sid}/ports/8000/small",
                                                   token=tr.TOKEN_A)[0] == 200,
                             30, 0.1):
            die("the sandbox's server did not answer through the router")
        sim, pod = fed.sim_of(sid)
        pod_ip = sim.pod(pod)["status"].get("podIP")

        # small
        small = {}
        if shutil.which("wrk"):
            if pod_ip:
                small["direct"] = wrk(f"http://{pod_ip}:8000/small", [], dur, max_fail_ratio=0.01)
            small["path"] = wrk(path_url, [auth], dur, max_fail_ratio=0.01)
            small["host"] = wrk(f"http://127.0.0.1:{port}/small", [f"Host: 8000-{short}.{DOMAIN}", auth], dur,
                                max_fail_ratio=0.01)
        else:
            print("ports_bench: wrk not installed: small requests skipped (apt-get install wrk)")
        report["small"] = small

        # big
        with PeakRss(fed.router.proc.pid) as rss:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            t0 = time.perf_counter()
            c.request("GET", f"/v1/sandboxes/{sid}/ports/8000/big",
                      headers={"Authorization": "Bearer " + tr.TOKEN_A})
            r = c.getresponse()
            h = hashlib.sha256()
            n = 0
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
                n += len(chunk)
            dt = time.perf_counter() - t0
            c.close()
        if r.status != 200 or n != file_mb << 20 or h.hexdigest() != big_sha:
            die(f"the {file_mb} MiB download: {r.status}, {n} bytes, sha256 match {h.hexdigest() == big_sha}")
        report["big"] = {"mib": file_mb, "mb_s": round(n / dt / 1e6, 1), "router_rss_before_kib": rss.before,
                         "router_rss_peak_kib": rss.peak}

        # ws
        report["ws"] = ws_bench(fed, sid, short, pod_ip, 20 if args.smoke else 200, 200 if args.smoke else 2000,
                                8 if args.smoke else 64)

        # cells
        st, r = fed.api("POST", "/v1/pools", {"name": "ci", "image": CI_IMAGE, "cpus": 0.25, "memory_gb": 0.5,
                                             "replicas": 1, "readiness": {"port": 49999, "path": "/health"}})
        if st != 201:
            die(f"the code-interpreter pool: {st} {r}")
        ci = fed.create_one(name="ci-0", pool="ci")["id"]
        cell(port, ci)
        lat = [cell(port, ci) for _ in range(cells_n)]
        report["cells_one"] = {"cells": cells_n, "p50_ms": round(statistics.median(lat) * 1000, 2),
                               "p99_ms": round(sorted(lat)[int(0.99 * (len(lat) - 1))] * 1000, 2)}
        t0 = time.monotonic()
        st, r = fed.api("POST", "/v1/sandboxes", {"pool": "ci", "name": "cis", "num_sandboxes": nsb},
                        timeout=900)
        if st != 201:
            die(f"{nsb} code-interpreter sandboxes: {st} {tr.short(r)}")
        ids = [s["id"] for s in r["sandboxes"]]
        made_s = time.monotonic() - t0
        for i in ids:  # each kernel up before the clock starts
            cell(port, i)
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(nsb) as ex:
            lats = list(ex.map(lambda i: [cell(port, i) for _ in range(cells_each)], ids))
        wall = time.perf_counter() - t0
        flat = [x for l in lats for x in l]
        report["cells_parallel"] = {"sandboxes": nsb, "cells": len(flat), "cells_per_s": round(len(flat) / wall, 1),
                                    "p50_ms": round(statistics.median(flat) * 1000, 2),
                                    "create_s": round(made_s, 1)}
    except BenchError as e:
        die(str(e))
    finally:
        problems = fed.teardown()
        if problems:
            print("ports_bench: teardown: " + "; ".join(problems), file=sys.stderr)

    print("\n%-28s %12s %10s %10s %10s" % ("ports", "req/s", "p50 ms", "p99 ms", "non-2xx"))
    for k, v in report.get("small", {}).items():
        print("%-28s %12.0f %10.3f %10.3f %10d" % ("GET 1 KiB " + k, v["rps"], v["p50_ms"] or 0, v["p99_ms"] or 0,
                                                   v["non_2xx"]))
    bg = report["big"]
    print(f"{bg['mib']} MiB down through a port: {bg['mb_s']} MB/s; router RSS {bg['router_rss_before_kib'] >> 10} "
          f"-> peak {bg['router_rss_peak_kib'] >> 10} MiB")
    for k, v in report["ws"].items():
        if k != "echo_1mib":
            print(f"WebSocket {k:6}: open p50 {v['open_p50_ms']} ms p99 {v['open_p99_ms']} ms; 32-byte round trip "
                  f"p50 {v['rt_p50_ms']} ms p99 {v['rt_p99_ms']} ms")
    e = report["ws"]["echo_1mib"]
    print(f"WebSocket 1 MiB messages echoed through the path route: {e['mb_s_each_way']} MB/s each way "
          f"({e['mib']} MiB)")
    c1, cp = report["cells_one"], report["cells_parallel"]
    print(f"runCode('1+1'), one sandbox: p50 {c1['p50_ms']} ms, p99 {c1['p99_ms']} ms ({c1['cells']} cells)")
    print(f"runCode('1+1'), {cp['sandboxes']} sandboxes in parallel: {cp['cells_per_s']} cells/s, p50 "
          f"{cp['p50_ms']} ms ({cp['cells']} cells; the sandboxes took {cp['create_s']} s to create)")
    print(json.dumps(report))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
