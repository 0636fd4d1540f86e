#!/usr/bin/env python3
"""The seed benchmark through the Python SDK vs loadgen's C client, in one run.

Starts the federation of `loadtest/bench.sh seed` (two kubesim clusters in
region us with a real cluster's delays: scheduling 50 ms, image pull 3 s,
start 1.5 s, scheduler 100 pods/s, API latency 20 ms; 20 nodes of 32 cpu /
128Gi / 110 pods; --fast-exec, TLS + token), fedrouter in front with a warm
pool "bench" of P pods per cluster, then runs the seed cycle (create from
the pool -> first exec `echo hi` -> terminate) three ways, each with the
pool full again before it starts:

  loadgen   build/loadgen seed -n N -c C (C, libuv + libcurl)
  sdk-sync  C threads, each: sandbox.create(pool=) -> sb.exec('echo','hi')
            -> sb.terminate(), on one Client (blocking keep-alive pool)
  sdk-aio   C coroutines on one event loop: create.aio -> exec.aio ->
            terminate.aio

and prints p50/p99 per call and the SDK/loadgen ratio, plus a JSON report
(--json-out). Also (--fanout K, default 1000): K concurrent exec.aio on one
event loop (one `echo` each, over K sandboxes of a batch), to show the SDK
does not limit them.

Usage: loadtest/sdk_bench.py [--build-dir build] [-n 200] [-c 10] [--pool 100]
                             [--fanout 1000] [--json-out FILE] [--smoke]
Python 3 standard library only; everything it starts is stopped at the end.
"""
import argparse
import asyncio
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "sdk"))

import fedharness as H  # noqa: E402
from fedrouter import Client  # noqa: E402

NODES = ["--nodes", "20", "--node-cpu", "32", "--node-memory", "128Gi", "--node-pods", "110", "--event-limit", "0"]
SMOKE_DELAYS = ["--schedule-ms", "10", "--image-pull-ms", "200", "--start-ms", "100", "--scheduler-qps", "100"]


def pct(v, p):
    """loadgen's percentile: the ceil(p/100*n)-th smallest."""
    if not v:
        return float("nan")
    s = sorted(v)
    k = max(1, math.ceil(p / 100.0 * len(s)))
    return s[k - 1]


def lat(v):
    return {"n": len(v), "p50": round(pct(v, 50), 3), "p90": round(pct(v, 90), 3), "p99": round(pct(v, 99), 3),
            "max": round(max(v), 3) if v else None, "mean": round(sum(v) / len(v), 3) if v else None}


def run_loadgen(build, url, token, n, c):
    out = tempfile.mktemp(prefix="sdk-bench-loadgen-", suffix=".json")
    try:
        p = subprocess.run([os.path.join(build, "loadgen"), "seed", "--url", url, "--token", token, "--pool", "bench",
                            "-n", str(n), "-c", str(c), "--json-out", out], capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"loadgen failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        with open(out) as f:
            rep = json.load(f)
    finally:
        if os.path.exists(out):
            os.unlink(out)
    fig = rep["figures"]
    return {"create_ms": fig["create_ms"], "first_exec_ms": fig["first_exec_ms"],
            "create_plus_first_exec_ms": fig["create_plus_first_exec_ms"], "terminate_ms": fig["terminate_ms"],
            "cycles_per_s": fig["cycles_per_s"], "errors": 0, "leaked": fig["leaked"]}


def run_sdk_sync(url, token, n, c):
    cl = Client(url, token, retry_budget_s=0)
    create, ex, tot, term, errors = [], [], [], [], []
    lock = threading.Lock()
    left = [n]

    def worker():
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            try:
                t0 = time.perf_counter()
                sb = cl.create(name="sdk", pool="bench", labels={"bench": "sdk-sync"})
                t1 = time.perf_counter()
                r = sb.exec("echo", "hi")
                t2 = time.perf_counter()
                if r.stdout != "hi\n" or r.exit_code != 0:
                    raise RuntimeError(f"exec answer {dict(r)}")
                sb.terminate()
                t3 = time.perf_counter()
                with lock:
                    create.append((t1 - t0) * 1e3)
                    ex.append((t2 - t1) * 1e3)
                    tot.append((t2 - t0) * 1e3)
                    term.append((t3 - t2) * 1e3)
            except Exception as e:  # counted and reported
                with lock:
                    errors.append(repr(e))
    t = time.perf_counter()
    ths = [threading.Thread(target=worker) for _ in range(c)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    wall = time.perf_counter() - t
    leaked = len(cl.ls(label="bench=sdk-sync"))
    cl.terminate_many(label="bench=sdk-sync") if leaked else None
    cl.close()
    return {"create_ms": lat(create), "first_exec_ms": lat(ex), "create_plus_first_exec_ms": lat(tot),
            "terminate_ms": lat(term), "cycles_per_s": round(len(tot) / wall, 3), "errors": len(errors),
            "error_samples": errors[:3], "leaked": leaked}


def run_sdk_aio(url, token, n, c):
    cl = Client(url, token, retry_budget_s=0)
    create, ex, tot, term, errors = [], [], [], [], []

    async def main():
        left = [n]

        async def worker():
            while left[0] > 0:
                left[0] -= 1
                try:
                    t0 = time.perf_counter()
                    sb = await cl.create.aio(name="sdk", pool="bench", labels={"bench": "sdk-aio"})
                    t1 = time.perf_counter()
                    r = await sb.exec.aio("echo", "hi")
                    t2 = time.perf_counter()
                    if r.stdout != "hi\n" or r.exit_code != 0:
                        raise RuntimeError(f"exec answer {dict(r)}")
                    await sb.terminate.aio()
                    t3 = time.perf_counter()
                    create.append((t1 - t0) * 1e3)
                    ex.append((t2 - t1) * 1e3)
                    tot.append((t2 - t0) * 1e3)
                    term.append((t3 - t2) * 1e3)
                except Exception as e:
                    errors.append(repr(e))
        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        wall = time.perf_counter() - t
        leaked = len(await cl.ls.aio(label="bench=sdk-aio"))
        if leaked:
            await cl.terminate_many.aio(label="bench=sdk-aio")
        await cl.aclose()
        return wall, leaked
    wall, leaked = asyncio.run(main())
    return {"create_ms": lat(create), "first_exec_ms": lat(ex), "create_plus_first_exec_ms": lat(tot),
            "terminate_ms": lat(term), "cycles_per_s": round(len(tot) / wall, 3), "errors": len(errors),
            "error_samples": errors[:3], "leaked": leaked}


def run_fanout(url, token, k):
    """k concurrent exec.aio on one event loop over k cold sandboxes."""
    cl = Client(url, token, retry_budget_s=0)

    async def main():
        sbs = await cl.create.aio(name="fan", image="python:3.12", cpus=0.1, memory_gb=0.1, num_sandboxes=k,
                                  labels={"bench": "sdk-fanout"})
        try:
            res = {}
            for wave in ("first", "second"):
                t = time.perf_counter()
                lats = []

                async def one(sb):
                    t0 = time.perf_counter()
                    r = await sb.exec.aio("echo", "hi")
                    lats.append((time.perf_counter() - t0) * 1e3)
                    return r.stdout == "hi\n"
                ok = await asyncio.gather(*(one(sb) for sb in sbs), return_exceptions=True)
                wall = time.perf_counter() - t
                errs = {}
                for x in ok:
                    if isinstance(x, BaseException):
                        code = getattr(x, "code", type(x).__name__)
                        errs[code] = errs.get(code, 0) + 1
                res[wave] = {"execs": k, "ok": sum(1 for x in ok if x is True), "errors": errs,
                             "wall_s": round(wall, 3),
                             "exec_per_s": round(k / wall, 1), "exec_ms": lat(lats),
                             "connections_opened_so_far": cl._aio.opened()}
            return res
        finally:
            await sbs.terminate.aio()
            await cl.aclose()
    return asyncio.run(main())


INSTANT_SERVER = r"""
import asyncio, sys
import json
BODY = json.dumps({"stdout": "hi" + chr(10), "stderr": "", "exit_code": 0, "timed_out": False,
                   "stdout_truncated": False, "stderr_truncated": False, "duration_ms": 0}).encode()
RESP = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: x\r\nContent-Length: "
        + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
async def handle(r, w):
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            n = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    n = int(line[15:])
            if n:
                await r.readexactly(n)
            w.write(RESP)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        w.close()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def run_sdk_only(k):
    """The SDK's own cost: exec calls against an instant fake router (an
    asyncio server in another process answering every request at once)."""
    p = subprocess.Popen([sys.executable, "-c", INSTANT_SERVER], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        port = int(p.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        out = {}
        cl = Client(url, "t")
        lats = []
        for i in range(2000):
            t0 = time.perf_counter()
            cl.exec("c1.x", "echo", "hi")
            if i >= 200:
                lats.append((time.perf_counter() - t0) * 1e3)
        cl.close()
        out["sync_sequential"] = {"calls": len(lats), "exec_ms": lat(lats),
                                  "calls_per_s": round(len(lats) / (sum(lats) / 1e3), 1)}

        async def waves():
            c2 = Client(url, "t")
            res = []
            for wave in range(3):
                t = time.perf_counter()
                ls = []

                async def one():
                    t0 = time.perf_counter()
                    r = await c2.exec.aio("c1.x", "echo", "hi")
                    ls.append((time.perf_counter() - t0) * 1e3)
                    return r.stdout == "hi\n"
                ok = await asyncio.gather(*(one() for _ in range(k)))
                wall = time.perf_counter() - t
                res.append({"wave": wave + 1, "concurrent": k, "ok": sum(ok), "wall_s": round(wall, 3),
                            "calls_per_s": round(k / wall, 1), "exec_ms": lat(ls),
                            "connections_opened_so_far": c2._aio.opened()})
            await c2.aclose()
            return res
        out["aio_concurrent"] = asyncio.run(waves())
        return out
    finally:
        p.kill()
        p.wait()


def table(results):
    rows = []
    calls = [("create_ms", "create (warm claim)"), ("first_exec_ms", "first exec"),
             ("create_plus_first_exec_ms", "create + first exec"), ("terminate_ms", "terminate")]
    base = results["loadgen"]
    rows.append(f"{'ms':<22} {'client':<9} {'p50':>8} {'p99':>8}   {'p50 ratio':>9} {'p99 ratio':>9}")
    for key, name in calls:
        for side in ("loadgen", "sdk-sync", "sdk-aio"):
            f = results[side][key]
            r50 = f["p50"] / base[key]["p50"] if base[key]["p50"] else float("nan")
            r99 = f["p99"] / base[key]["p99"] if base[key]["p99"] else float("nan")
            rows.append(f"{name if side == 'loadgen' else '':<22} {side:<9} {f['p50']:>8.1f} {f['p99']:>8.1f}   "
                        f"{r50:>9.2f} {r99:>9.2f}")
    for side in ("loadgen", "sdk-sync", "sdk-aio"):
        rows.append(f"{side:<9} {results[side]['cycles_per_s']:.1f} cycles/s, errors "
                    f"{results[side]['errors']}, leaked {results[side]['leaked']}")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", type=int, default=200, help="cycles per client (200)")
    ap.add_argument("-c", type=int, default=10, help="concurrent cycles (10)")
    ap.add_argument("--pool", type=int, default=100, help="warm pool per cluster (100)")
    ap.add_argument("--fanout", type=int, default=1000, help="concurrent exec.aio on one loop (1000; 0: skip)")
    ap.add_argument("--json-out")
    ap.add_argument("--sdk-only", action="store_true", help="only the SDK's own cost against an instant fake router")
    ap.add_argument("--smoke", action="store_true", help="tiny N and short delays")
    a = ap.parse_args()
    delays = H.REALISTIC
    if a.smoke:
        a.n, a.pool, a.fanout, delays = 10, 5, 50, SMOKE_DELAYS
    build = os.path.abspath(a.build_dir)
    token = "bench-" + os.urandom(8).hex()
    sdk_only = run_sdk_only(a.fanout or 1000)
    s1 = sdk_only["sync_sequential"]
    print(f"==> SDK alone (instant fake router): blocking exec p50 {s1['exec_ms']['p50']:.3f} ms "
          f"p99 {s1['exec_ms']['p99']:.3f} ms ({s1['calls_per_s']} calls/s on one thread)", flush=True)
    for w in sdk_only["aio_concurrent"]:
        print(f"==> SDK alone: {w['concurrent']} concurrent exec.aio, wave {w['wave']}: {w['ok']} ok in "
              f"{w['wall_s']} s ({w['calls_per_s']} calls/s), p50 {w['exec_ms']['p50']:.1f} ms, "
              f"connections {w['connections_opened_so_far']}", flush=True)
    if a.sdk_only:
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump({"scenario": "sdk_only", "figures": sdk_only}, f, indent=1)
        return 0
    H.start_watchdog(1800)
    fed = H.Federation(os.path.join(build, "kubesim"), os.path.join(build, "fedrouter"),
                       [("c1", "us", NODES + delays), ("c2", "us", NODES + delays)],
                       {"bench": (token, "")}, prefix="fr-sdk-bench-", fast_exec=True)
    results = {}
    try:
        cl = Client(fed.url, token)
        cl.create_pool("bench", "python:3.12", cpus=1, memory_gb=2, replicas=a.pool)
        cl.close()
        print(f"==> federation at {fed.url}; pool bench: {a.pool} per cluster x 2", flush=True)
        for side, fn in (("loadgen", lambda: run_loadgen(build, fed.url, token, a.n, a.c)),
                         ("sdk-sync", lambda: run_sdk_sync(fed.url, token, a.n, a.c)),
                         ("sdk-aio", lambda: run_sdk_aio(fed.url, token, a.n, a.c))):
            t = time.monotonic()
            # The pool's ready count lags the claims just made: let it see
            # them, then wait for the refill (cold starts take ~1.5 s).
            time.sleep(5)
            if not fed.wait_pool(token, "bench", 300) or not (time.sleep(2) or fed.wait_pool(token, "bench", 300)):
                raise RuntimeError("pool bench did not refill in 300 s")
            print(f"==> pool full after {time.monotonic() - t:.1f} s (5 s settle included); running {side}: {a.n} cycles, "
                  f"{a.c} concurrent", flush=True)
            results[side] = fn()
        if a.fanout:
            print(f"==> fan-out: {a.fanout} concurrent exec.aio on one event loop", flush=True)
            results["fanout_aio"] = run_fanout(fed.url, token, a.fanout)
    finally:
        problems = fed.stop()
    print()
    print(f"seed through the SDK vs loadgen: {a.n} cycles each, {a.c} concurrent, warm pool {a.pool} x 2 clusters")
    print(table(results))
    if "fanout_aio" in results:
        for wave, f in results["fanout_aio"].items():
            print(f"fan-out {wave} wave: {f['ok']}/{f['execs']} ok (errors {f['errors']}) in {f['wall_s']} s "
                  f"({f['exec_per_s']} exec/s), "
                  f"exec p50 {f['exec_ms']['p50']:.1f} ms p99 {f['exec_ms']['p99']:.1f} ms, "
                  f"connections opened {f['connections_opened_so_far']}")
    report = {"scenario": "sdk_seed", "parameters": {"n": a.n, "c": a.c, "pool_per_cluster": a.pool,
                                                     "fanout": a.fanout, "smoke": a.smoke},
              "machine": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
                          "loadavg_end": os.getloadavg()},
              "figures": dict(results, sdk_only=sdk_only), "teardown_problems": problems}
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(report, f, indent=1)
    bad = problems or any(results[s]["errors"] or results[s]["leaked"] for s in ("loadgen", "sdk-sync", "sdk-aio"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
