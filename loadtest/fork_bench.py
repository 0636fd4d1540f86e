#!/usr/bin/env python3
"""loadtest/fork_bench.py - POST /v1/sandboxes/{id}/fork: one sandbox's
directory streamed into N new ones, agent to agent through the router.

One kubesim cluster (TLS, pods with their own root as root, the real
fedrouter-agent) behind one router. A source sandbox gets TREE_MIB MiB of
random files in /workspace (64 files); then forks of it to 1, 8 and N
(default 64) new sandboxes are timed (the batch's create and the copy,
one request), with the router's RSS sampled every 20 ms during each, and
every copy's file digests checked against the source's. The forks are
terminated between rounds.

Usage: fork_bench.py --build-dir DIR [--count 64] [--tree-mib 100] [--smoke] [--json-out FILE]
(--smoke: 8 forks of 16 MiB.) Prints a table and JSON; exit 0 when every
copy matched.
"""
import argparse
import json
import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sdk"))
import fedharness as H  # noqa: E402
from benchlib import PeakRss  # noqa: E402

TOKEN = "bench-" + os.urandom(6).hex()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--tree-mib", type=int, default=100)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    if a.smoke:
        a.count, a.tree_mib = 8, 16
    if os.geteuid() != 0:
        print("note: not root: kubesim pods share this host's /tmp and run without their own root")
    b = os.path.abspath(a.build_dir)
    fed = H.Federation(os.path.join(b, "kubesim"), os.path.join(b, "fedrouter"),
                       [("c1", "us", ["--nodes", "4", "--node-pods", "110", "--event-limit", "0"])],
                       {"bench": (TOKEN, "max_file_bytes = 17179869184L;")}, prefix="fr-forkbench-",
                       agent=os.path.join(b, "fedrouter-agent"))
    results, ok = {"tree_mib": a.tree_mib, "rounds": []}, True
    try:
        shape = {"image": "python:3.12", "cpus": 0.1, "memory_gb": 0.25}
        st, r = fed.raw("POST", "/v1/sandboxes", dict(shape, name="src"), token=TOKEN, timeout=120)
        assert st == 201, (st, r)
        src = r["sandboxes"][0]["id"]
        per = a.tree_mib * (1 << 20) // 64
        cmd = (f"mkdir -p /workspace/d && for i in $(seq 1 64); do head -c {per} /dev/urandom > /workspace/d/f$i; "
               "done && cd /workspace && find . -type f | sort | xargs sha256sum | sha256sum")
        st, r = fed.raw("POST", f"/v1/sandboxes/{src}/exec", {"argv": ["sh", "-c", cmd], "timeout_s": 600},
                        token=TOKEN, timeout=700)
        assert st == 200 and r["exit_code"] == 0, (st, r)
        want = r["stdout"]
        check = "cd /workspace && find . -type f | sort | xargs sha256sum | sha256sum"
        for n in sorted({1, min(8, a.count), a.count}):
            with PeakRss(fed.router_pid()) as s:
                t0 = time.monotonic()
                st, r = fed.raw("POST", f"/v1/sandboxes/{src}/fork",
                                dict(shape, count=n, paths=["/workspace"], name=f"fork{n}"), token=TOKEN,
                                timeout=1800)
                wall = time.monotonic() - t0
            assert st == 201, (st, r)
            ids = [x["id"] for x in r["sandboxes"]]
            bad = 0
            for sid in ids:
                st2, r2 = fed.raw("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sh", "-c", check]},
                                  token=TOKEN, timeout=300)
                bad += not (st2 == 200 and r2.get("stdout") == want)
            ok = ok and bad == 0
            row = {"forks": n, "wall_s": round(wall, 2), "archive_mib": round(r["copied"]["archive_bytes"] / 2**20, 1),
                   "copied_mib": round(n * r["copied"]["archive_bytes"] / 2**20, 1),
                   "mib_per_s": round(n * r["copied"]["archive_bytes"] / 2**20 / wall, 1),
                   "router_rss_base_mib": round(s.before / 1024, 1), "router_rss_peak_mib": round(s.peak / 1024, 1),
                   "mismatched": bad}
            results["rounds"].append(row)
            print(json.dumps(row), flush=True)
            fed.raw("DELETE", "/v1/sandboxes?name_prefix=fork", token=TOKEN, timeout=300)
            H.wait_until(lambda: sum(fed.pod_counts().values()) <= 1, 120, 0.2)
    finally:
        fed.stop()
    print()
    print(f"fork of a {a.tree_mib} MiB tree (64 files), wall time of the whole request (create + copy)")
    print(f"{'forks':>6} {'wall s':>8} {'copied MiB':>11} {'MiB/s':>8} {'router RSS MiB base/peak':>26}")
    for row in results["rounds"]:
        print(f"{row['forks']:>6} {row['wall_s']:>8} {row['copied_mib']:>11} {row['mib_per_s']:>8} "
              f"{row['router_rss_base_mib']:>12}/{row['router_rss_peak_mib']:<12}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
