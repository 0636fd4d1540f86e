#!/usr/bin/env python3
"""What a kubesim pod that runs processes costs: time to Ready and memory.

Starts one kubesim (plain HTTP on loopback) with the real fedrouter-agent,
creates N agent pods at once (one POST each, as a ReplicaSet controller
would), and measures
  - time from the first create to every pod Ready (the agent listening);
  - memory per pod: the proportional set size (PSS) of the processes kubesim
    started for it (found by KUBESIM_POD_UID in their environment: the
    supervisor, the pod's init, the agent), kubesim's own RSS growth, the
    kernel's unreclaimable slab growth (namespaces, mounts, overlay, veths)
    and MemAvailable's drop (all of it; both noisy on a shared machine);
  - time from deleting every pod to the last of those processes gone.
Several rounds; prints one line per round and the medians.

Usage: loadtest/pod_bench.py --kubesim build/kubesim --agent build/fedrouter-agent
           [--pods 50] [--rounds 3] [-- EXTRA KUBESIM ARGS...]
Root gives the pods their namespaces and private roots (docs/kubesim.md);
run it with and without --no-pod-namespaces to see what the isolation costs.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def api(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "1"}},
            "spec": {"containers": [{"name": "sandbox", "image": "python:3.12",
                                     "command": ["/fr-agent/fedrouter-agent"],
                                     "ports": [{"containerPort": 49983}]}]}}


def ready_count(port):
    st, lst = api(port, "GET", "/api/v1/namespaces/default/pods?labelSelector=bench%3D1")
    n = 0
    for p in lst.get("items", []):
        for c in p.get("status", {}).get("conditions", []):
            if c["type"] == "Ready" and c["status"] == "True":
                n += 1
    return n


def pod_procs(uids):
    """{uid: [pid, ...]} of the processes whose environment names a pod uid."""
    out = {u: [] for u in uids}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"KUBESIM_POD_UID="):
                u = kv[16:].decode()
                if u in out:
                    out[u].append(int(d))
    return out


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def meminfo_kib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def mem_available_kib():
    return meminfo_kib("MemAvailable")


def wait(cond, limit, step=0.01):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def one_round(args, extra):
    d = tempfile.mkdtemp(prefix="pod-bench-")
    pf = os.path.join(d, "port")
    proc = subprocess.Popen([args.kubesim, "--port-file", pf, "--workdir", os.path.join(d, "wd"),
                             "--agent-binary", args.agent, "--nodes", "4", "--node-cpu", "64",
                             "--node-memory", "256Gi", "--log-level", "warn", "--event-limit", "0"] + extra,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"),
                            start_new_session=True)
    try:
        if not wait(lambda: os.path.exists(pf) and os.path.getsize(pf) > 0, 20):
            sys.exit(f"kubesim did not start: {open(os.path.join(d, 'log')).read()[-2000:]}")
        port = int(open(pf).read())
        rss0 = status_kib(proc.pid, "VmRSS")
        avail0 = mem_available_kib()
        slab0 = meminfo_kib("SUnreclaim")
        t0 = time.monotonic()
        uids = []
        for i in range(args.pods):
            st, p = api(port, "POST", "/api/v1/namespaces/default/pods", pod(f"b{i}"))
            if st != 201:
                sys.exit(f"create: {st} {p}")
            uids.append(p["metadata"]["uid"])
        if not wait(lambda: ready_count(port) == args.pods, 120, 0.02):
            sys.exit(f"only {ready_count(port)} of {args.pods} Ready after 120 s")
        ready_s = time.monotonic() - t0
        procs = pod_procs(uids)
        per_pod = [sum(pss_kib(p) for p in procs[u]) for u in uids]
        nprocs = sum(len(v) for v in procs.values()) / len(uids)
        rss1 = status_kib(proc.pid, "VmRSS")
        avail1 = mem_available_kib()
        slab1 = meminfo_kib("SUnreclaim")
        t1 = time.monotonic()
        api(port, "DELETE", "/api/v1/namespaces/default/pods?labelSelector=bench%3D1")
        if not wait(lambda: not any(pod_procs(uids).values()), 60):
            sys.exit("pods' processes still running 60 s after the delete")
        gone_s = time.monotonic() - t1
        return {"ready_s": ready_s, "pss_kib_per_pod": statistics.mean(per_pod), "procs_per_pod": nprocs,
                "kubesim_rss_kib_per_pod": (rss1 - rss0) / args.pods,
                "mem_available_drop_kib_per_pod": (avail0 - avail1) / args.pods,
                "kernel_slab_kib_per_pod": (slab1 - slab0) / args.pods, "gone_s": gone_s}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--pods", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="more kubesim arguments (after --)")
    args = ap.parse_args()
    args.kubesim, args.agent = os.path.abspath(args.kubesim), os.path.abspath(args.agent)
    rows = []
    for r in range(args.rounds):
        row = one_round(args, args.extra)
        rows.append(row)
        print(f"round {r + 1}: {args.pods} agent pods Ready in {row['ready_s']:.2f} s; per pod "
              f"{row['procs_per_pod']:.1f} processes, PSS {row['pss_kib_per_pod'] / 1024:.2f} MiB, "
              f"kubesim RSS +{row['kubesim_rss_kib_per_pod']:.0f} KiB, kernel slab "
              f"+{row['kernel_slab_kib_per_pod']:.0f} KiB, MemAvailable "
              f"-{row['mem_available_drop_kib_per_pod'] / 1024:.2f} MiB; all gone "
              f"{row['gone_s']:.2f} s after the delete", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median: Ready in {med['ready_s']:.2f} s, PSS {med['pss_kib_per_pod'] / 1024:.2f} MiB/pod, "
          f"kernel slab +{med['kernel_slab_kib_per_pod']:.0f} KiB/pod, "
          f"MemAvailable -{med['mem_available_drop_kib_per_pod'] / 1024:.2f} MiB/pod, "
          f"gone in {med['gone_s']:.2f} s")
    print(json.dumps(med))


if __name__ == "__main__":
    main()
