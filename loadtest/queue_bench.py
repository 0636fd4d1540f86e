#!/usr/bin/env python3
"""The create queue under load: two tenants, one submitting 10,000
sandboxes and one 100, on a federation with room for 2,000 at a time.

Starts two kubesim clusters (10 nodes of 100 cpu / 400Gi / 110 pods each,
short delays: scheduling 10 ms, start 100 ms, --fast-exec): sandboxes of 1
cpu and 1 GiB, so 1,000 fit in each cluster and 2,000 in the federation.
fedrouter in front, tenants `big` and `small` (weight 1 each). Then:

  big    submits its 10,000 at once as 1,000 creates of 10 (all or
         nothing, wait_s 600): 2,000 start, 8,000 wait in the router's
         queue;
  small  submits its 100 as 10 creates of 10 once the federation is full;
  both   give each sandbox a lifetime of HOLD_S (5 s, `timeout_s`): the
         cluster (and the routers' reaper) ends it then, which frees its
         room for the next waiting create.

and measures, per tenant: failures (an answer other than 201 with every
sandbox made), time to start (submit to the 201 of a create: all of its
sandboxes running), when its last sandbox started; and every 0.5 s from
GET /v1/queue the sandboxes each tenant holds and has waiting: the share
over time. The same run again with `small`'s creates sent under big's
token (one tenant: first come, first served) is the baseline: without a
fair share, small's 100 wait behind big's 8,000.

Usage: loadtest/queue_bench.py [--build-dir build] [--big 10000] [--small 100]
                               [--room 2000] [--hold 5] [--json-out FILE] [--smoke]
--smoke: 400 vs 20 on room for 80, 1 s lifetimes (about a minute). Prints a table and a
JSON report. Python 3 standard library only; stops everything it started.
"""
import argparse
import json
import math
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "sdk"))
import fedharness as H  # noqa: E402

TOK = {"big": "big-" + os.urandom(8).hex(), "small": "small-" + os.urandom(8).hex(),
       "ops": "ops-" + os.urandom(8).hex()}
DELAYS = ["--schedule-ms", "10", "--start-ms", "100", "--event-limit", "0"]


def pct(v, p):
    if not v:
        return float("nan")
    s = sorted(v)
    return s[max(1, math.ceil(p / 100.0 * len(s))) - 1]


def call(port, method, path, body=None, token=None, timeout=900):
    return H.call(port, method, path, body, token, timeout)


class Run:
    """One run: <small_as> is the token small's creates use (small's own, or
    big's for the first-come-first-served baseline)."""

    def __init__(self, port, args, small_as):
        self.port = port
        self.args = args
        self.small_as = small_as
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.res = {"big": [], "small": []}
        self.samples = []
        self.stop = threading.Event()

    def now(self):
        return time.monotonic() - self.t0

    def one(self, who, token, i, n):
        tag = f"{who}-{i}"
        body = {"name": tag, "num_sandboxes": n, "image": "python:3.12", "cpus": 1, "memory_gb": 1,
                "wait_s": 600, "timeout_s": max(1, int(self.args.hold)), "labels": {"b": tag, "bench": "queue"}}
        t = self.now()
        st, r = call(self.port, "POST", "/v1/sandboxes", body, token)
        t1 = self.now()
        made = len(r.get("sandboxes", [])) if isinstance(r, dict) and st == 201 else 0
        rec = {"submit": t, "answer": t1, "status": st, "made": made, "want": n,
               "waited_s": (r.get("placement") or {}).get("waited_s") if isinstance(r, dict) and st == 201 else None,
               "error": None if st == 201 else (r.get("error", {}).get("code") if isinstance(r, dict) else str(r))}
        with self.lock:
            self.res[who].append(rec)

    def sampler(self):
        while not self.stop.is_set():
            st, q = call(self.port, "GET", "/v1/queue", token=TOK["ops"], timeout=30)
            if st == 200:
                rows = {t["tenant"]: t for t in q["tenants"]}
                self.samples.append({"t": round(self.now(), 2), **{
                    n: {"holds": rows[n]["holds"]["sandboxes"], "creating": rows[n]["creating"]["sandboxes"],
                        "waiting": rows[n]["queue"]["sandboxes"], "share": round(rows[n]["share"], 4)}
                    for n in ("big", "small")}})
            self.stop.wait(0.5)

    def go(self):
        a = self.args
        smp = threading.Thread(target=self.sampler, daemon=True)
        smp.start()
        per_big = max(1, a.big // a.big_batches)
        ths = [threading.Thread(target=self.one, args=("big", TOK["big"], i, per_big)) for i in range(a.big_batches)]
        for t in ths:
            t.start()
        # The federation is full (or nearly) and big's rest waits: now small.
        H.wait_until(lambda: self.samples and self.samples[-1]["big"]["holds"] >= a.room * 0.95, 300, 0.2)
        small_at = self.now()
        per_small = max(1, a.small // a.small_batches)
        sth = [threading.Thread(target=self.one, args=("small", self.small_as, i, per_small))
               for i in range(a.small_batches)]
        for t in sth:
            t.start()
        for t in ths + sth:
            t.join()
        self.stop.set()
        smp.join(5)
        return self.report(small_at)

    def report(self, small_at):
        out = {"small_submitted_at_s": round(small_at, 2), "wall_s": round(self.now(), 2), "tenants": {}}
        for who, recs in self.res.items():
            tts = [r["answer"] - r["submit"] for r in recs if r["status"] == 201]
            out["tenants"][who] = {
                "creates": len(recs), "sandboxes": sum(r["want"] for r in recs),
                "made": sum(r["made"] for r in recs),
                "failures": sum(1 for r in recs if r["status"] != 201 or r["made"] != r["want"]),
                "errors": sorted({r["error"] for r in recs if r["error"]}),
                "time_to_start_s": {"p50": round(pct(tts, 50), 2), "p90": round(pct(tts, 90), 2),
                                    "p99": round(pct(tts, 99), 2), "max": round(max(tts), 2) if tts else float("nan")},
                "last_started_at_s": round(max((r["answer"] for r in recs), default=0), 2),
            }
        # Share over time: every 5 s (and the peak of small's).
        series, nxt = [], 0.0
        for s in self.samples:
            if s["t"] >= nxt:
                series.append(s)
                nxt = s["t"] + 5
        out["series_5s"] = series
        out["peak_small_holds"] = max((s["small"]["holds"] for s in self.samples), default=0)
        out["peak_waiting"] = max((s["big"]["waiting"] + s["small"]["waiting"] for s in self.samples), default=0)
        return out


def federation(args):
    nodes = max(1, args.room // 2 // 100)
    per_node = args.room // 2 // nodes
    sim = ["--nodes", str(nodes), "--node-cpu", str(per_node), "--node-memory", f"{per_node * 4}Gi",
           "--node-pods", str(per_node + 10)] + DELAYS
    tenants = {"big": (TOK["big"], "max_requests_in_flight = 8192;"),
               "small": (TOK["small"], "max_requests_in_flight = 8192;"),
               "ops": (TOK["ops"], "admin = true;")}
    return H.Federation(args.kubesim, args.fedrouter, [("q1", "us", sim), ("q2", "us", sim)], tenants,
                        prefix="fr-queue-bench-", fast_exec=True, max_batch=5000, tls=True)


def table(name, rep):
    print(f"\n{name}: wall {rep['wall_s']} s; small submitted at {rep['small_submitted_at_s']} s; "
          f"peak waiting {rep['peak_waiting']}")
    print(f"  {'tenant':8} {'creates':>7} {'sandboxes':>9} {'made':>6} {'fail':>4} {'start p50':>9} "
          f"{'p90':>7} {'p99':>7} {'max':>7} {'last start':>10}")
    for who, t in rep["tenants"].items():
        s = t["time_to_start_s"]
        print(f"  {who:8} {t['creates']:>7} {t['sandboxes']:>9} {t['made']:>6} {t['failures']:>4} {s['p50']:>8}s "
              f"{s['p90']:>6}s {s['p99']:>6}s {s['max']:>6}s {t['last_started_at_s']:>9}s")
    print("  share over time (sandboxes held / waiting):")
    for s in rep["series_5s"]:
        print(f"    t={s['t']:>6.1f}s  big {s['big']['holds']:>5} / {s['big']['waiting']:>5}   "
              f"small {s['small']['holds']:>4} / {s['small']['waiting']:>4}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--big", type=int, default=10000)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--room", type=int, default=2000)
    ap.add_argument("--hold", type=float, default=5.0)
    ap.add_argument("--no-baseline", action="store_true", help="skip the one-tenant baseline run")
    ap.add_argument("--json-out")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.big, args.small, args.room, args.hold = 400, 20, 80, 1.0
    # Creates of 10 each: every create is all or nothing, and its answer
    # time is when its sandboxes started.
    args.big_batches = max(1, args.big // 10)
    args.small_batches = max(1, args.small // 10)
    args.fedrouter = os.path.join(args.build_dir, "fedrouter")
    args.kubesim = os.path.join(args.build_dir, "kubesim")
    H.start_watchdog(3000)
    report = {"config": {"big": args.big, "small": args.small, "room": args.room, "hold_s": args.hold,
                         "big_creates": args.big_batches, "small_creates": args.small_batches}}
    failed = 0
    for name, fair in (("fair", True), ("baseline_one_tenant", False)):
        if not fair and args.no_baseline:
            continue
        fed = federation(args)
        try:
            rep = Run(fed.port, args, TOK["small"] if fair else TOK["big"]).go()
        finally:
            problems = fed.stop()
        rep["teardown_problems"] = problems
        report[name] = rep
        table(name, rep)
        failed += sum(t["failures"] for t in rep["tenants"].values()) + len(problems)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    print(f"\n{'0 failures' if failed == 0 else f'{failed} FAILURES'}")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
