#!/usr/bin/env python3
"""Black box: nothing a dying router started stays (batch commit markers).

Two kubesim clusters and a real fedrouter with batch_commit_timeout_s = 10:

  1. a committed batch and a pool's warm pods exist; the batch's pods carry
     its id and each cluster that got some holds its commit marker;
  2. a slow but live batch of 100 (API latency, slow starts on cluster a) runs longer than
     the timeout while a second router replica on the same config runs too:
     it commits whole, and no reaper deleted any of its pods;
  3. a batch of 200 is slowed down the same way, the router is killed with
     SIGKILL mid-way, and a new router starts on the same config: within the
     timeout plus slack every pod of that batch is gone, its ids never
     reached the client, and nothing else was touched (the committed
     batches, their commit markers, the warm pods);
  4. the committed batches survive the restart untouched.

Usage: test_batch_commit.py --fedrouter PATH --kubesim PATH
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk"))
import fedharness  # noqa: E402

TOKEN = "tok-commit"
TIMEOUT_S = 10
BATCH = "fedrouter.io/batch"


def fail(msg: str) -> None:
    raise AssertionError(msg)


class Kube:
    """Reads one kubesim's API directly (plain HTTP + bearer token)."""

    def __init__(self, kubeconfig: str, token: str) -> None:
        with open(kubeconfig) as f:
            m = re.search(r"server:\s*\"?http://127\.0\.0\.1:(\d+)", f.read())
        if not m:
            fail(f"no plain-HTTP server in {kubeconfig}")
        self.port = int(m.group(1))
        self.token = token

    def items(self, resource: str, selector: str) -> list:
        q = urllib.parse.urlencode({"labelSelector": selector})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("GET", f"/api/v1/namespaces/default/{resource}?{q}",
                      headers={"Authorization": "Bearer " + self.token})
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                fail(f"GET {resource}: {r.status} {body[:200]!r}")
            return json.loads(body)["items"]
        finally:
            c.close()

    def pods(self, selector: str = "fedrouter.io/sandbox=true") -> dict:
        """name -> (batch label, deleting) of the live sandbox and pool pods."""
        return {p["metadata"]["name"]: (p["metadata"].get("labels", {}).get(BATCH),
                                        "deletionTimestamp" in p["metadata"])
                for p in self.items("pods", selector)}

    def markers(self) -> dict:
        return {m["metadata"]["labels"][BATCH]: m.get("data", {}) for m in self.items("configmaps", BATCH)}


def create(fed, body: dict, port: int = 0, timeout: float = 120):
    return fed.raw("POST", "/v1/sandboxes", body, token=TOKEN, timeout=timeout, port=port)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    args = ap.parse_args()
    fedharness.start_watchdog(170)
    t0 = time.monotonic()
    fed = fedharness.Federation(
        args.kubesim, args.fedrouter,
        [("a", "us", ["--schedule-ms", "20", "--start-ms", "3000", "--nodes", "20"]),
         ("b", "us", fedharness.FAST + ["--nodes", "20"])],
        {"t1": (TOKEN, "max_sandboxes = 5000; admin = true;")}, prefix="fr-commit-", tls=False,
        sandbox_conf=f"batch_commit_timeout_s = {TIMEOUT_S};")
    kube = {n: Kube(s["kubeconfig"], fed.sim_token) for n, s in fed.sims.items()}

    def latency(ms: int) -> None:
        for n in fed.sims:
            st, _ = fed.sim_admin(n, "POST", "/_sim/faults", {"latency_ms": ms} if n == "a" else {"latency_ms": 0})
            if st != 200:
                fail(f"faults on {n}: {st}")

    def batch_pods(batch: str) -> dict:
        out = {}
        for n, k in kube.items():
            out.update({f"{n}.{p}": v for p, v in k.pods(f"{BATCH}={batch}").items()})
        return out

    try:
        # 1. A pool and a committed batch on both clusters.
        st, b = fed.raw("POST", "/v1/pools", {"name": "wp", "image": "python:3.12", "cpus": 0.1,
                                              "memory_gb": 0.1, "replicas": 3}, token=TOKEN)
        if st != 201:
            fail(f"pool: {st} {b}")
        if not fed.wait_pool(TOKEN, "wp", 60):
            fail("the pool did not fill")
        warm = {n: {p for p, (bt, _) in k.pods("fedrouter.io/pool=wp,fedrouter.io/state=warm").items()}
                for n, k in kube.items()}
        st, b = create(fed, {"name": "kept", "image": "python:3.12", "cpus": 0.1, "memory_gb": 0.1,
                             "num_sandboxes": 20})
        if st != 201 or len(b["sandboxes"]) != 20:
            fail(f"committed batch: {st} {str(b)[:300]}")
        kept_ids = {s["id"] for s in b["sandboxes"]}
        kept_batches, kept_on = set(), set()
        for n, k in kube.items():
            for p, (bt, _) in k.pods("fedrouter.io/name").items():
                if f"{n}.{p}" in kept_ids:
                    kept_batches.add(bt)
                    kept_on.add(n)
        if len(kept_batches) != 1 or None in kept_batches:
            fail(f"the committed batch's pods carry batch labels {kept_batches}")
        kept_batch = kept_batches.pop()
        for n, k in kube.items():
            if (k.markers().get(kept_batch, {}).get("state") == "committed") != (n in kept_on):
                fail(f"batch {kept_batch} on {sorted(kept_on)}; markers of {n}: {k.markers()}")
        print(f"ok committed batch of 20 on {sorted(kept_on)}, a marker in each ({time.monotonic() - t0:.1f} s)", flush=True)

        # 2. A slow but live batch, longer than the timeout, with another
        # replica's reaper watching: nothing of it is reaped.
        replica, rport = fed.start_router(args.fedrouter)
        latency(800)
        t = time.monotonic()
        st, b = create(fed, {"name": "slow", "image": "python:3.12", "cpus": 0.1, "memory_gb": 0.1,
                             "num_sandboxes": 100, "clusters": ["a"]}, timeout=150)
        took = time.monotonic() - t
        latency(0)
        if st != 201 or len(b["sandboxes"]) != 100:
            fail(f"slow batch: {st} {str(b)[:300]}")
        if took <= TIMEOUT_S + 1:
            fail(f"the slow batch took {took:.1f} s, not longer than the timeout: the case is not exercised")
        slow_ids = {s["id"] for s in b["sandboxes"]}
        slow_batch = kube["a"].pods(BATCH)[sorted(slow_ids)[0][2:]][0]
        time.sleep(3)  # a reaper sweep of both routers after the commit
        live = {f"a.{p}" for p, (_, d) in kube["a"].pods("fedrouter.io/name").items() if not d}
        if not slow_ids <= live:
            fail(f"{len(slow_ids - live)} sandboxes of the slow live batch were reaped")
        print(f"ok slow batch of 100 took {took:.1f} s (> {TIMEOUT_S} s timeout), two routers, none reaped",
              flush=True)
        replica.send_signal(signal.SIGTERM)
        replica.wait(20)
        fed.procs.remove(replica)
        st, _ = fed.raw("DELETE", "/v1/sandboxes?name_prefix=slow-", token=TOKEN)
        if st != 200:
            fail(f"deleting the slow batch: {st}")

        # 3. Kill -9 mid-batch.
        before = {n: set(k.pods().keys()) for n, k in kube.items()}
        latency(800)
        answer: list = []
        th = threading.Thread(target=lambda: answer.append(create(
            fed, {"name": "doomed", "image": "python:3.12", "cpus": 0.1, "memory_gb": 0.1, "num_sandboxes": 200,
                  "clusters": ["a"]}, timeout=120)), daemon=True)
        th.start()

        def doomed() -> dict:
            return {p: v for p, v in kube["a"].pods(BATCH).items() if v[0] not in (kept_batch, slow_batch)}
        if not fedharness.wait_until(lambda: len(doomed()) >= 40, 60, 0.2):
            fail(f"the doomed batch did not get going: {len(doomed())} pods")
        os.kill(fed.router.pid, signal.SIGKILL)
        fed.router.wait(10)
        killed_at = time.monotonic()
        fed.procs.remove(fed.router)
        th.join(30)
        if answer and answer[0][0] == 201:
            fail("the killed router answered the batch")
        latency(0)
        n_doomed = len(doomed())
        batches = {bt for bt, _ in doomed().values()}
        if len(batches) != 1 or None in batches:
            fail(f"the doomed pods carry batch labels {batches}")
        if any(k.markers().get(bt, {}).get("state") == "committed" for k in kube.values() for bt in batches):
            fail("the killed batch has a committed marker")
        fed.router, fed.port = fed.start_router(args.fedrouter)
        gone = fedharness.wait_until(lambda: len(doomed()) == 0, TIMEOUT_S + 25, 0.25)
        took = time.monotonic() - killed_at
        if not gone:
            fail(f"{len(doomed())} pods of the killed batch left {took:.0f} s after the kill")
        print(f"ok killed mid-batch with {n_doomed} pods made: all gone {took:.1f} s after the kill "
              f"(timeout {TIMEOUT_S} s)", flush=True)

        # 4. Nothing else touched: the committed batch, its markers, the warm pods.
        for n, k in kube.items():
            pods = k.pods()
            left = before[n] - set(pods)
            doomed_or_slow = {p for p in left if p.startswith("sb-")}
            if warm[n] - set(pods):
                fail(f"warm pods of {n} were deleted: {warm[n] - set(pods)}")
            if any(d for p, (_, d) in pods.items() if p in warm[n]):
                fail(f"warm pods of {n} are being deleted")
            del doomed_or_slow
        live_ids = {f"{n}.{p}" for n, k in kube.items() for p, (_, d) in k.pods(f"{BATCH}={kept_batch}").items()
                    if not d}
        if live_ids != kept_ids:
            fail(f"the committed batch changed across the restart: {len(live_ids)} of {len(kept_ids)} left")
        st, b = fed.raw("GET", "/v1/sandboxes?name_prefix=kept-", token=TOKEN)
        if st != 200 or {s["id"] for s in b["sandboxes"]} != kept_ids:
            fail(f"the new router does not list the committed batch: {st} {str(b)[:200]}")
        for n in kept_on:
            if kube[n].markers().get(kept_batch, {}).get("state") != "committed":
                fail(f"the committed marker of {n} went")
        print(f"ok committed batch, its markers and {sum(len(w) for w in warm.values())} warm pods untouched "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
    except AssertionError as e:
        print("FAIL", e, flush=True)
        print(fedharness.tail(fed.router_log, 40), flush=True)
        fed.stop()
        return 1
    problems = fed.stop()
    if problems:
        print("FAIL", problems, flush=True)
        return 1
    print(f"PASS batch_commit_blackbox ({time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
