#!/usr/bin/env python3
"""loadtest/abuse.py - the router under abuse: what one tenant (or anyone who
can open a socket) can do to everyone else, measured.

Starts one kubesim cluster and fedrouter on loopback with two tenants,
"abuser" (the router's default tenant limits, max_sandboxes 50) and
"victim", then runs four phases and reports the router's RSS and open
descriptors, /healthz latency while each abuse runs, and the answers by
status:

  idle     IDLE_CONNS idle TCP connections, no token (the per-address
           limit evicts the oldest; /healthz and the victim still get in)
  floods   FLOODS concurrent execs printing 20 MiB of NUL bytes on stdout
           and 20 MiB on stderr (the output budget and base64 bound it)
  burst    BURST concurrent execs from the abuser (max_concurrent_execs
           sheds the excess with 429) while the victim creates and execs
  creates  300 concurrent creates by the abuser, limited to 50 sandboxes
  streams  through a second router and cluster whose pods run the real
           fedrouter-agent: one streamed exec of `yes` read as fast as the
           client can, then FOLLOWERS clients following one process whose
           output buffer is full; target /healthz under 50 ms throughout
           (the router bounds what streams deliver per loop turn, fr/turn.h)

Usage: abuse.py --build-dir DIR [--smoke] [--json-out FILE] [--phases idle,floods,...]
Exit 0 when every phase ran and the invariants held (the victim was never
refused, no cluster breaker opened, the sandbox limit held, nothing
leaked); the figures themselves are for docs/benchmarks.md.
Python 3 standard library only; loopback only; cleans up after itself.
"""
import argparse
import asyncio
import hashlib
import http.client
import json
import multiprocessing
import multiprocessing.pool
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ABUSER = "abuser-" + os.urandom(6).hex()
VICTIM = "victim-" + os.urandom(6).hex()
PROCS = []


def die(msg):
    print(f"abuse.py: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def start(cmd, log):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "w"), stdin=subprocess.DEVNULL,
                         start_new_session=True)
    PROCS.append(p)
    return p


def stop_all():
    for p in reversed(PROCS):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass


def proc_status(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def req(port, method, path, body=None, token=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if token:
        r.add_header("Authorization", "Bearer " + token)
    if data is not None:
        r.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw


def sample_loop(port, pid, stop, out):
    rss, fds, lat = [], [], []
    while not stop.is_set():
        r, f = proc_status(pid)
        rss.append(r)
        fds.append(f)
        t0 = time.monotonic()
        try:
            st, _ = req(port, "GET", "/healthz", timeout=30)
        except OSError:
            st = 0
        lat.append((time.monotonic() - t0) * 1000 if st == 200 else float("inf"))
        stop.wait(0.1)
    out.send((rss, fds, lat))


class Sampler:
    """Router RSS/fds and /healthz latency, sampled every 100 ms in a
    process of its own (in a thread, the GIL held while this process
    parses a flood's 40 MB answers would show up as router latency)."""

    def __init__(self, port, pid, hport=None):
        self.stop = multiprocessing.Event()
        self.procs = []
        for prt in (port, hport):
            if prt is None:
                continue
            rx, tx = multiprocessing.Pipe(duplex=False)
            p = multiprocessing.Process(target=sample_loop, args=(prt, pid, self.stop, tx), daemon=True)
            p.start()
            self.procs.append((p, rx))

    def done(self):
        self.stop.set()
        out = {}
        for i, (p, rx) in enumerate(self.procs):
            rss, fds, lat = rx.recv()
            p.join()
            lat = sorted(lat) or [0]
            key = "healthz" if i == 0 else "health_listener"
            if i == 0:
                out.update({"rss_max_mib": round(max(rss or [0]) / 2**20, 1), "fds_max": max(fds or [0])})
            out.update({f"{key}_p50_ms": round(statistics.median(lat), 2),
                        f"{key}_max_ms": round(max(lat), 2) if lat[-1] != float("inf") else None,
                        f"{key}_failed": sum(1 for x in lat if x == float("inf")), f"{key}_samples": len(lat)})
        return out


async def http_post(port, path, body, token, timeout=300):
    """One POST on a fresh connection; (status, parsed body or None)."""
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    except (OSError, asyncio.TimeoutError):
        return 0, None
    data = json.dumps(body).encode()
    w.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data)
    try:
        raw = await asyncio.wait_for(r.read(), timeout)
    except (OSError, asyncio.TimeoutError):
        raw = b""
    w.close()
    try:
        head, _, payload = raw.partition(b"\r\n\r\n")
        status = int(head.split()[1])
    except (IndexError, ValueError):
        return 0, None
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, None


def count(statuses):
    out = {}
    for s in statuses:
        out[str(s)] = out.get(str(s), 0) + 1
    return out


def breakers_closed(port):
    st, r = req(port, "GET", "/v1/clusters", token=VICTIM)
    return st == 200 and all(c.get("breaker") in (None, "closed") and c.get("healthy", True) for c in r["clusters"])


def read_stream(port, path, body, token, seconds):
    """POST <body> (or GET when None) to <path> and read the answer as fast
    as possible for at most <seconds>; the bytes read."""
    # The socket's timeout ends a follow that has nothing more to say.
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=min(seconds, 30))
    got = 0
    try:
        hdrs = {"Authorization": "Bearer " + token}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        c.request("POST" if body is not None else "GET", path, body=json.dumps(body) if body is not None else None,
                  headers=hdrs)
        r = c.getresponse()
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            b = r.read1(1 << 20)
            if not b:
                break
            got += len(b)
    except OSError:
        pass
    finally:
        c.close()
    return got


def streams_phase(a, root, followers, seconds):
    """A router and a cluster whose pods run the real agent: a `yes` stream
    read fast, then <followers> clients following one full buffer."""
    d = f"{root}/streams"
    os.makedirs(d)
    start([os.path.join(a.build_dir, "kubesim"), "--name", "s1", "--port-file", f"{d}/s1.port",
           "--write-kubeconfig", f"{d}/s1.kubeconfig", "--token", "t", "--nodes", "2", "--node-cpu", "64",
           "--node-memory", "256Gi", "--event-limit", "0", "--workdir", f"{d}/wd", "--log-level", "warn",
           "--agent-binary", os.path.abspath(os.path.join(a.build_dir, "fedrouter-agent"))], f"{d}/s1.log")
    for _ in range(300):
        if os.path.exists(f"{d}/s1.port") and os.path.getsize(f"{d}/s1.port"):
            break
        time.sleep(0.05)
    with open(f"{d}/agent.key", "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    sha = hashlib.sha256(ABUSER.encode()).hexdigest()
    with open(f"{d}/fedrouter.conf", "w") as f:
        f.write(f'listen = "127.0.0.1:0";\nregion = "us";\n'
                f'tenants = ( {{ name = "abuser"; token_sha256 = "{sha}"; }} );\n'
                f'agent = {{ image = "fedrouter/agent:bench"; port = 49983; key_file = "{d}/agent.key"; }};\n'
                f'clusters = ( {{ name = "s1"; region = "us"; kubeconfig = "{d}/s1.kubeconfig"; }} );\n')
    router = start([os.path.join(a.build_dir, "fedrouter"), "--config", f"{d}/fedrouter.conf"], f"{d}/fedrouter.log")
    line = router.stdout.readline().decode()
    if not line.startswith("fedrouter listening on http://127.0.0.1:"):
        die(f"streams: router did not start: {line!r}")
    port = int(line.rsplit(":", 1)[1])
    for _ in range(300):
        if req(port, "GET", "/readyz")[0] == 200:
            break
        time.sleep(0.1)
    st, sb = req(port, "POST", "/v1/sandboxes", {"image": "python:3.12", "name": "streams"}, ABUSER)
    if st != 201:
        die(f"streams: create: {st} {sb}\n" + open(f"{d}/s1.log").read()[-3000:])
    sid = sb["sandboxes"][0]["id"]
    out = {"followers": followers, "seconds_each": seconds, "target_healthz_max_ms": 50}
    # One stream of `yes`, read as fast as this client can.
    s = Sampler(port, router.pid)
    got = read_stream(port, f"/v1/sandboxes/{sid}/exec", {"argv": ["yes", "flood"], "stream": True,
                                                          "timeout_s": seconds}, ABUSER, seconds + 5)
    out["yes_stream"] = dict(s.done(), bytes=got)
    # A process whose output buffer is full, then <followers> at once.
    st, pr = req(port, "POST", f"/v1/sandboxes/{sid}/processes",
                 {"argv": ["sh", "-c", "yes follow | head -c 20000000; sleep 120"]}, ABUSER)
    if st != 201:
        die(f"streams: process: {st} {pr}")
    # Until the process has written it all (its buffer holds what it keeps).
    for _ in range(600):
        st, ps = req(port, "GET", f"/v1/sandboxes/{sid}/processes", token=ABUSER)
        out_len = read_stream(port, f"/v1/sandboxes/{sid}/processes/{pr['pid']}/output", None, ABUSER, 2)
        if out_len > 1000000:
            break
        time.sleep(0.1)
    s = Sampler(port, router.pid)
    with multiprocessing.pool.ThreadPool(followers) as pool:
        got = pool.starmap(read_stream, [(port, f"/v1/sandboxes/{sid}/processes/{pr['pid']}/output?follow=1", None,
                                          ABUSER, seconds)] * followers)
    out["followers_phase"] = dict(s.done(), bytes=sum(got))
    out["met"] = all(x.get("healthz_max_ms") is not None and x["healthz_max_ms"] < 50
                     for x in (out["yes_stream"], out["followers_phase"]))
    req(port, "DELETE", f"/v1/sandboxes/{sid}", token=ABUSER)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json-out")
    ap.add_argument("--phases", default="idle,floods,burst,creates,streams",
                    help="comma-separated subset of idle,floods,burst,creates,streams (default: all)")
    a = ap.parse_args()
    phases = set(a.phases.split(","))
    if not phases <= {"idle", "floods", "burst", "creates", "streams"}:
        die(f"unknown phase in --phases {a.phases!r}")
    idle_conns, floods, flood_mib, burst = (2000, 2, 4, 200) if a.smoke else (20000, 10, 20, 3000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # This process holds the idle sockets: at most its own limit (20,000 on
    # the project's standard machine) less room for everything else.
    idle_conns = min(idle_conns, hard - 2048)
    want = min(hard, idle_conns + 4096)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    root = tempfile.mkdtemp(prefix="fr-abuse-")
    report = {"scenario": "abuse", "smoke": a.smoke, "idle_conns": idle_conns, "floods": floods,
              "flood_mib_per_stream": flood_mib, "burst": burst}
    ok = True
    try:
        sim = start([os.path.join(a.build_dir, "kubesim"), "--name", "c1", "--port-file", f"{root}/c1.port",
                     "--write-kubeconfig", f"{root}/c1.kubeconfig", "--token", "t", "--nodes", "4",
                     "--node-cpu", "64", "--node-memory", "256Gi", "--node-pods", "200", "--fast-exec", "--event-limit", "0",
                     "--workdir", f"{root}/c1.wd", "--log-level", "warn"], f"{root}/c1.log")
        for _ in range(300):
            if os.path.exists(f"{root}/c1.port") and os.path.getsize(f"{root}/c1.port"):
                break
            time.sleep(0.05)
        sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
        with open(f"{root}/fedrouter.conf", "w") as f:
            f.write(f'listen = "127.0.0.1:0";\nhealth_listen = "127.0.0.1:0";\nregion = "us";\n'
                    f'tenants = ( {{ name = "abuser"; token_sha256 = "{sha(ABUSER)}"; max_sandboxes = 50; }},\n'
                    f'            {{ name = "victim"; token_sha256 = "{sha(VICTIM)}"; }} );\n'
                    f'clusters = ( {{ name = "c1"; region = "us"; kubeconfig = "c1.kubeconfig"; }} );\n')
        router = start([os.path.join(a.build_dir, "fedrouter"), "--config", f"{root}/fedrouter.conf"],
                       f"{root}/fedrouter.log")
        line = router.stdout.readline().decode()
        if not line.startswith("fedrouter listening on http://127.0.0.1:"):
            die(f"router did not start: {line!r}")
        port = int(line.rsplit(":", 1)[1])
        line = router.stdout.readline().decode()
        if not line.startswith("fedrouter health on http://127.0.0.1:"):
            die(f"router did not report its health listener: {line!r}")
        hport = int(line.rsplit(":", 1)[1])
        for _ in range(300):
            if req(port, "GET", "/readyz")[0] == 200:
                break
            time.sleep(0.1)
        st, vsb = req(port, "POST", "/v1/sandboxes", {"image": "python:3.12", "name": "victim"}, VICTIM)
        if st != 201:
            die(f"victim create: {st} {vsb}")
        vid = vsb["sandboxes"][0]["id"]
        st, asb = req(port, "POST", "/v1/sandboxes", {"image": "python:3.12", "name": "abuser"}, ABUSER)
        if st != 201:
            die(f"abuser create: {st} {asb}")
        aid = asb["sandboxes"][0]["id"]
        # The baseline after a little ordinary work, so the router's pooled
        # connections to the cluster are already counted in it.
        for _ in range(20):
            req(port, "POST", f"/v1/sandboxes/{vid}/exec", {"argv": ["echo", "warm"]}, VICTIM)
        time.sleep(1)
        rss0, fds0 = proc_status(router.pid)
        report["baseline"] = {"rss_mib": round(rss0 / 2**20, 1), "fds": fds0}

        # ---- idle connections
        if "idle" in phases:
            s = Sampler(port, router.pid, hport)
            socks = []
            t0 = time.monotonic()
            for _ in range(idle_conns):
                try:
                    socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                except OSError:
                    break
            victim_during = [req(port, "GET", "/v1/sandboxes", token=VICTIM)[0] for _ in range(20)]
            phase = s.done()
            phase.update({"opened": len(socks), "seconds": round(time.monotonic() - t0, 1),
                          "victim_answers": count(victim_during)})
            st, text = req(port, "GET", "/metrics")
            for ln in (text.decode() if isinstance(text, bytes) else "").splitlines():
                if ln.startswith("fedrouter_http_connections_limited_total{action=\"evicted\"}"):
                    phase["evicted"] = int(float(ln.split()[-1]))
            for sk in socks:
                sk.close()
            report["idle"] = phase
            ok &= all(x == 200 for x in victim_during) and phase["healthz_failed"] == 0

        # ---- output floods
        if "floods" in phases:
            cmd = f"head -c {flood_mib}M /dev/zero; head -c {flood_mib}M /dev/zero >&2"

            async def flood_all():
                return await asyncio.gather(*[http_post(port, f"/v1/sandboxes/{aid}/exec",
                                                        {"argv": ["sh", "-c", cmd], "timeout_s": 120}, ABUSER)
                                              for _ in range(floods)])
            s = Sampler(port, router.pid, hport)
            t0 = time.monotonic()
            res = asyncio.run(flood_all())
            phase = s.done()
            kept = [len(r.get("stdout", "")) + len(r.get("stderr", "")) for st_, r in res if st_ == 200 and r]
            phase.update({"seconds": round(time.monotonic() - t0, 1), "answers": count(st_ for st_, _ in res),
                          "encodings": sorted({r.get("stdout_encoding") for st_, r in res if st_ == 200 and r},
                                              key=str),
                          "answer_chars_max": max(kept or [0])})
            report["floods"] = phase
            ok &= phase["healthz_failed"] == 0

        # ---- exec burst by one tenant, the victim alongside
        if "burst" in phases:
            async def burst_all():
                ab = [http_post(port, f"/v1/sandboxes/{aid}/exec", {"argv": ["true"]}, ABUSER) for _ in range(burst)]
                vi = [http_post(port, f"/v1/sandboxes/{vid}/exec", {"argv": ["echo", "ok"]}, VICTIM) for _ in range(20)]
                return await asyncio.gather(asyncio.gather(*ab), asyncio.gather(*vi))
            s = Sampler(port, router.pid, hport)
            t0 = time.monotonic()
            ab, vi = asyncio.run(burst_all())
            phase = s.done()
            phase.update({"seconds": round(time.monotonic() - t0, 1), "abuser_answers": count(x for x, _ in ab),
                          "victim_answers": count(x for x, _ in vi), "breakers_closed": breakers_closed(port)})
            report["burst"] = phase
            ok &= all(x == 200 for x, _ in vi) and phase["breakers_closed"]

        # ---- creates past the tenant's sandbox limit
        if "creates" in phases:
            async def creates_all():
                return await asyncio.gather(*[http_post(port, "/v1/sandboxes",
                                                        {"image": "python:3.12", "name": f"c{i}",
                                                         "labels": {"run": "abuse"}}, ABUSER)
                                              for i in range(300 if not a.smoke else 100)])
            s = Sampler(port, router.pid, hport)
            res = asyncio.run(creates_all())
            phase = s.done()
            st, lst = req(port, "GET", "/v1/sandboxes", token=ABUSER)
            phase.update({"answers": count(x for x, _ in res), "abuser_sandboxes": len(lst.get("sandboxes", []))})
            report["creates"] = phase
            ok &= phase["abuser_sandboxes"] <= 50

        # ---- streams: one fast stream, then many followers (own router)
        if "streams" in phases:
            report["streams"] = streams_phase(a, root, 5 if a.smoke else 40, 3 if a.smoke else 7)

        # ---- clean up, and what is left
        req(port, "DELETE", "/v1/sandboxes?label=run=abuse", token=ABUSER)
        req(port, "DELETE", f"/v1/sandboxes/{aid}", token=ABUSER)
        req(port, "DELETE", f"/v1/sandboxes/{vid}", token=VICTIM)
        time.sleep(2)
        rss1, fds1 = proc_status(router.pid)
        report["after"] = {"rss_mib": round(rss1 / 2**20, 1), "fds": fds1}
        report["leaked_fds"] = max(0, fds1 - fds0)
        # The cluster client keeps up to 2 x max_host_connections pooled; what
        # passes that is a leak.
        ok &= fds1 <= fds0 + 64
    finally:
        stop_all()
        shutil.rmtree(root, ignore_errors=True)
    report["ok"] = bool(ok)
    print(json.dumps(report, indent=1))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
