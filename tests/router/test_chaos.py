#!/usr/bin/env python3
"""Chaos: steady load while clusters misbehave and the router dies.

Three kubesim clusters and a real fedrouter (batch_commit_timeout_s = 10).
Two tenants run create -> exec -> terminate loops, while a driver flips
kubesim faults at random (down, API latency, 5xx, 429, every watch dropped
and new ones rejected) and now and then kills the router with SIGKILL and
starts a new one on the same config. A monitor asks /healthz every 0.25 s.

Invariants, asserted once the faults are cleared:
  - every sandbox the client saw created was terminated, or is still
    visible through the API (a 404 only after the client's own delete);
  - after a sweep (delete what is visible) and one commit timeout, the
    clusters hold 0 sandbox pods: nothing leaked (pods the API did not
    show: uncommitted batches of a killed router) and none left Pending;
  - each tenant's listing holds only its own sandboxes, and the other
    tenant's ids answer it 404;
  - /healthz answered 200 whenever the router was up;
  - no sanitizer report in the router's log, and the last router exits
    cleanly (in the ASan build: no leak).

CHAOS_SECONDS (default 30) sets how long the load runs; a long run:
  CHAOS_SECONDS=600 ctest --test-dir build -R chaos_blackbox --timeout 900
Usage: test_chaos.py --fedrouter PATH --kubesim PATH [--seed N]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk"))
import fedharness  # noqa: E402

TENANTS = {"t1": "tok-chaos-1", "t2": "tok-chaos-2"}
TIMEOUT_S = 10
CLEAR = {"down": False, "latency_ms": 0, "error_rate": 0, "throttle_rate": 0, "reject_watches": False}


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.up = True              # the router is up (not being killed or restarted)
        self.created: dict = {}     # id -> tenant
        self.terminated: set = set()
        self.delete_tried: set = set()
        self.counts = {"creates": 0, "created": 0, "execs_ok": 0, "errors": 0, "kills": 0, "faults": 0}
        self.health_fail: list = []
        self.health_ok = 0


def request(fed, method: str, path: str, body=None, token=None, timeout: float = 30.0):
    return fed.raw(method, path, body, token=token, timeout=timeout)


def tenant_loop(fed, st: State, tenant: str, rnd: random.Random) -> None:
    token = TENANTS[tenant]
    i = 0
    while not st.stop.is_set():
        i += 1
        n = rnd.randint(1, 3)
        code, b = request(fed, "POST", "/v1/sandboxes", {
            "name": f"c-{tenant}-{i}", "image": "python:3.12", "cpus": 0.1, "memory_gb": 0.1,
            "num_sandboxes": n, "timeout_s": 900}, token=token)
        with st.lock:
            st.counts["creates"] += 1
        if code != 201:
            with st.lock:
                st.counts["errors"] += 1
            time.sleep(0.2)
            continue
        ids = [s["id"] for s in b["sandboxes"]]
        with st.lock:
            st.counts["created"] += len(ids)
            for sid in ids:
                st.created[sid] = tenant
        code, b = request(fed, "POST", f"/v1/sandboxes/{ids[0]}/exec", {"argv": ["echo", "hi"], "timeout_s": 10},
                          token=token)
        if code == 200 and b.get("stdout") == "hi\n":
            with st.lock:
                st.counts["execs_ok"] += 1
        for sid in ids:
            for _ in range(4):
                with st.lock:
                    st.delete_tried.add(sid)
                code, _b = request(fed, "DELETE", f"/v1/sandboxes/{sid}", token=token)
                if code in (200, 404):
                    with st.lock:
                        st.terminated.add(sid)
                    break
                time.sleep(0.3)


def health_loop(fed, st: State) -> None:
    while not st.stop.is_set():
        with st.lock:
            up_before, port = st.up, fed.port
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            c.request("GET", "/healthz")
            r = c.getresponse()
            r.read()
            code = r.status
        except OSError as e:
            code = str(e)
        finally:
            c.close()
        with st.lock:
            if up_before and st.up and port == fed.port:
                if code == 200:
                    st.health_ok += 1
                else:
                    st.health_fail.append((time.strftime("%H:%M:%S"), code))
        time.sleep(0.25)


def driver(fed, st: State, args, rnd: random.Random, seconds: float) -> None:
    sims = list(fed.sims)
    end = time.monotonic() + seconds
    next_kill = time.monotonic() + rnd.uniform(6, 12)
    while time.monotonic() < end:
        sim = rnd.choice(sims)
        kind = rnd.choice(["down", "latency", "5xx", "429", "watches"])
        fault = {"down": {"down": True}, "latency": {"latency_ms": rnd.randint(200, 1500)},
                 "5xx": {"error_rate": 0.3, "error_code": rnd.choice([500, 503])},
                 "429": {"throttle_rate": 0.3}, "watches": {"reject_watches": True, "drop_watches": True}}[kind]
        fed.sim_admin(sim, "POST", "/_sim/faults", fault)
        with st.lock:
            st.counts["faults"] += 1
        time.sleep(rnd.uniform(1.0, 3.0))
        fed.sim_admin(sim, "POST", "/_sim/faults", CLEAR)
        time.sleep(rnd.uniform(0.2, 1.0))
        if time.monotonic() >= next_kill:
            with st.lock:
                st.up = False
            os.kill(fed.router.pid, signal.SIGKILL)
            fed.router.wait(10)
            fed.procs.remove(fed.router)
            time.sleep(rnd.uniform(0.2, 1.5))
            router, port = fed.start_router(args.fedrouter)
            with st.lock:
                fed.router, fed.port = router, port
                st.up = True
                st.counts["kills"] += 1
            next_kill = time.monotonic() + rnd.uniform(8, 14)


def sandbox_pods(fed, sim: str) -> dict:
    """name -> phase of the sandbox pods a kubesim holds."""
    with open(fed.sims[sim]["kubeconfig"]) as f:
        port = int(re.search(r"server:\s*\"?http://127\.0\.0\.1:(\d+)", f.read()).group(1))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", "/api/v1/namespaces/default/pods?" +
                  urllib.parse.urlencode({"labelSelector": "fedrouter.io/sandbox=true"}),
                  headers={"Authorization": "Bearer " + fed.sim_token})
        items = json.loads(c.getresponse().read())["items"]
    finally:
        c.close()
    return {p["metadata"]["name"]: p.get("status", {}).get("phase", "") for p in items}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    seconds = float(os.environ.get("CHAOS_SECONDS", "30"))
    fedharness.start_watchdog(seconds + 150)
    rnd = random.Random(args.seed)
    print(f"chaos: seed {args.seed}, {seconds:.0f} s of load", flush=True)
    t0 = time.monotonic()
    fed = fedharness.Federation(
        args.kubesim, args.fedrouter,
        [(n, "us", fedharness.FAST + ["--nodes", "8"]) for n in ("c1", "c2", "c3")],
        {t: (tok, "max_sandboxes = 1000;") for t, tok in TENANTS.items()}, prefix="fr-chaos-", tls=False,
        fast_exec=True, sandbox_conf=f"batch_commit_timeout_s = {TIMEOUT_S};")
    st = State()
    problems: list = []
    try:
        threads = [threading.Thread(target=tenant_loop, args=(fed, st, t, random.Random(rnd.random())), daemon=True)
                   for t in TENANTS]
        threads.append(threading.Thread(target=health_loop, args=(fed, st), daemon=True))
        for th in threads:
            th.start()
        driver(fed, st, args, rnd, seconds)
        st.stop.set()
        for th in threads:
            th.join(60)
        for sim in fed.sims:
            fed.sim_admin(sim, "POST", "/_sim/faults", CLEAR)
        print(f"load done: {st.counts}; /healthz ok {st.health_ok} ({time.monotonic() - t0:.1f} s)", flush=True)

        # Every sandbox the client saw created: terminated, or visible.
        fedharness.wait_until(lambda: fed.raw("GET", "/readyz")[0] == 200, 30, 0.2)
        lost = []
        for sid, tenant in sorted(st.created.items()):
            if sid in st.terminated:
                continue
            code, _ = request(fed, "GET", f"/v1/sandboxes/{sid}", token=TENANTS[tenant])
            if code == 200 or (code == 404 and sid in st.delete_tried):
                continue
            lost.append((sid, code))
        if lost:
            problems.append(f"{len(lost)} sandboxes the client saw created are neither terminated nor "
                            f"visible: {lost[:5]}")

        # Tenants never see each other's sandboxes: a listing holds only
        # what that tenant created (or an id a killed router never
        # answered), and the other's ids answer 404.
        listed = {}
        for t, tok in TENANTS.items():
            code, b = request(fed, "GET", "/v1/sandboxes", token=tok, timeout=60)
            listed[t] = [x["id"] for x in b.get("sandboxes", [])] if code == 200 and isinstance(b, dict) else []
            foreign = [i for i in listed[t] if st.created.get(i) not in (None, t)]
            if code != 200 or foreign:
                problems.append(f"listing of {t}: {code}, another tenant's sandboxes in it: {foreign[:5]}")
        for t, tok in TENANTS.items():
            for other, ids in listed.items():
                for sid in ids[:10] if other != t else []:
                    code, _ = request(fed, "GET", f"/v1/sandboxes/{sid}", token=tok)
                    if code != 404:
                        problems.append(f"{t} GET {other}'s sandbox {sid}: {code}, not 404")

        # Sweep: delete what the API shows; the rest must be reaped.
        for t, tok in TENANTS.items():
            code, b = request(fed, "DELETE", f"/v1/sandboxes?name_prefix=c-{t}-", token=tok, timeout=60)
            if code != 200:
                problems.append(f"sweep of {t}: {code} {str(b)[:200]}")
        before = {s: sandbox_pods(fed, s) for s in fed.sims}
        print(f"after the sweep: {sum(len(p) for p in before.values())} pods left to go "
              f"(terminating, or of batches never committed)", flush=True)

        def left() -> int:
            return sum(len(sandbox_pods(fed, s)) for s in fed.sims)
        if not fedharness.wait_until(lambda: left() == 0, TIMEOUT_S + 30, 0.5):
            pods = {s: sandbox_pods(fed, s) for s in fed.sims}
            pending = sum(1 for p in pods.values() for ph in p.values() if ph == "Pending")
            problems.append(f"{left()} sandbox pods leaked ({pending} Pending): {pods}")
        if st.health_fail:
            problems.append(f"/healthz failed {len(st.health_fail)} times while the router was up: "
                            f"{st.health_fail[:5]}")
        if st.counts["created"] == 0 or st.counts["kills"] == 0:
            problems.append(f"the run did not exercise anything: {st.counts}")
    except Exception as e:  # noqa: BLE001 - reported as a failure with the router's log
        problems.append(f"{type(e).__name__}: {e}")
    st.stop.set()
    with open(fed.router_log, errors="replace") as f:
        log = f.read()
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        if marker in log:
            problems.append(f"sanitizer report in the router log ({marker}):\n" +
                            "\n".join(log[log.index(marker) - 200:log.index(marker) + 2000].splitlines()[:40]))
            break
    problems += fed.stop()
    if problems:
        for p in problems:
            print("FAIL", p, flush=True)
        print(f"seed {args.seed}", flush=True)
        return 1
    print(f"PASS chaos_blackbox: {st.counts}, 0 lost, 0 leaked, /healthz {st.health_ok} ok "
          f"({time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
