#!/usr/bin/env python3
"""loadtest/agent_bench.py - exec through the sandbox agent vs through
pods/exec, in one run.

One kubesim cluster (TLS, real processes) running the real fedrouter-agent
in agent pods (--agent-binary), and two routers in front of it: "agent"
has the `agent` config (its sandboxes get the agent, exec goes through the
pod proxy), "podexec" has none (it execs into the same sandbox through the
API server's pods/exec). Both run the same `echo hi` in the same sandbox:

  throughput   N execs at concurrency C through each router: exec/s
  latency      sequential execs at one in flight: p50/p99 through each
               router and straight to the agent through kubesim's proxy
               (what the router adds on the agent path)
  streaming    `echo a; sleep 1; echo b`: time to the first chunk through
               the router's streaming exec (NDJSON) and straight to the
               agent through kubesim's proxy
  inproc       a second kubesim in --agent-mode inproc (no process per
               exec: the router's and the proxy's own cost) behind a third
               router: exec/s over kept-alive client connections
  files        upload then download of FILE_MB (1024; smoke 16) MiB through
               the router's /files, sha256 checked: MB/s each way and the
               router's RSS before, at its peak and after

Usage: agent_bench.py --build-dir DIR [--smoke] [--json-out FILE]
Prints a table and JSON; exit 0 when every exec succeeded.
"""
import argparse
import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import rss_kib  # noqa: E402

PROCS = []
PIDS = {}  # router port -> pid
TOKEN = "bench-" + os.urandom(6).hex()
SIM_TOKEN = "sim-" + os.urandom(6).hex()


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


def api(port, method, path, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                               headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=timeout) as resp:
        return json.loads(resp.read())


def kubesim(build, root, name, mode):
    """Starts kubesim <name> with the agent in <mode>; returns its kubeconfig."""
    kc = os.path.join(root, f"{name}.kubeconfig")
    port_file = os.path.join(root, f"{name}.port")
    start([os.path.join(build, "kubesim"), "--tls", "--token", SIM_TOKEN, "--name", name,
           "--write-kubeconfig", kc, "--port-file", port_file,
           "--workdir", os.path.join(root, f"wd-{name}"), "--agent-binary", os.path.join(build, "fedrouter-agent"),
           "--agent-mode", mode, "--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi", "--event-limit", "0", "--log-level", "warn"],
          os.path.join(root, f"kubesim-{name}.log"))
    for _ in range(300):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            return kc
        time.sleep(0.05)
    raise SystemExit(f"kubesim {name} did not start")


def router(build, root, name, kubeconfig, agent_key):
    conf = os.path.join(root, f"{name}.conf")
    sha = hashlib.sha256(TOKEN.encode()).hexdigest()
    with open(conf, "w") as f:
        f.write(f'listen = "127.0.0.1:0";\nregion = "us";\n'
                f'tenants = ( {{ name = "b"; token_sha256 = "{sha}"; max_requests_in_flight = 1000000; '
                f'max_concurrent_execs = 1000000; }} );\n'
                f'clusters = ( {{ name = "c1"; region = "us"; kubeconfig = "{kubeconfig}"; }} );\n')
        if agent_key:
            f.write(f'agent = {{ image = "fedrouter-agent:bench"; key_file = "{agent_key}"; }};\n')
    p = start([os.path.join(build, "fedrouter"), "--config", conf], os.path.join(root, f"{name}.log"))
    line = p.stdout.readline().decode()
    port = int(line.rsplit(":", 1)[1])
    PIDS[port] = p.pid
    for _ in range(300):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status == 200:
                return port
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"router {name} not ready")


async def exec_once(port, sid, argv):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"argv": argv}).encode()
    w.write(f"POST /v1/sandboxes/{sid}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body)
    raw = await r.read()
    w.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload


async def throughput(port, sid, n, c):
    sem = asyncio.Semaphore(c)
    ok = 0

    async def one():
        nonlocal ok
        async with sem:
            st, body = await exec_once(port, sid, ["echo", "hi"])
            ok += st == 200 and json.loads(body).get("stdout") == "hi\n"
    t0 = time.monotonic()
    await asyncio.gather(*[one() for _ in range(n)])
    return ok, n / (time.monotonic() - t0)


async def keepalive_throughput(port, sid, n, c):
    """n execs over c kept-alive connections (one request at a time each)."""
    body = json.dumps({"argv": ["echo", "hi"]}).encode()
    req = (f"POST /v1/sandboxes/{sid}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    left = n
    ok = 0

    async def worker():
        nonlocal left, ok
        r, w = await asyncio.open_connection("127.0.0.1", port)
        while left > 0:
            left -= 1
            w.write(req)
            head = await r.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            payload = await r.readexactly(int(m.group(1))) if m else b""
            ok += head.startswith(b"HTTP/1.1 200") and b'"stdout":"hi\\n"' in payload
        w.close()
    t0 = time.monotonic()
    await asyncio.gather(*[worker() for _ in range(c)])
    return ok, n / (time.monotonic() - t0)


def stream_first_chunk(port, sid):
    """ms to the first stdout chunk of `echo a; sleep 1; echo b` through the
    router's streaming exec, and to its end."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t0 = time.monotonic()
    conn.request("POST", f"/v1/sandboxes/{sid}/exec",
                 json.dumps({"argv": ["sh", "-c", "echo a; sleep 1; echo b"], "stream": True}),
                 {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
    first, buf = read_first_stdout(conn.getresponse(), t0)
    conn.close()
    return round(first or -1, 1), round((time.monotonic() - t0) * 1000, 1), b'"exit_code":0' in buf


def read_first_stdout(resp, t0):
    """Reads <resp> to its end: (ms from t0 to the first stdout, all bytes)."""
    first, buf = None, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        if first is None and b'"stdout"' in buf:
            first = (time.monotonic() - t0) * 1000
    return first, buf


def file_transfer(port, sid, pid, mib, rep):
    """Upload then download <mib> MiB through the router; RSS sampled."""
    chunk = os.urandom(1 << 20)
    want = hashlib.sha256()
    peak = [rss_kib(pid)]
    rep["files_rss_before_kib"] = peak[0]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_kib(pid))
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    hdr = {"Authorization": "Bearer " + TOKEN}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

        def body():
            for i in range(mib):
                piece = chunk[i % 7:] + chunk[:i % 7]
                want.update(piece)
                yield piece
        t0 = time.monotonic()
        conn.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/bench.bin", body(),
                     dict(hdr, **{"Content-Length": str(mib << 20)}))
        resp = conn.getresponse()
        resp.read()
        up_ok = resp.status in (200, 201, 204)
        rep["files_upload_mb_s"] = round((mib << 20) / 1e6 / (time.monotonic() - t0), 1)
        got = hashlib.sha256()
        t0 = time.monotonic()
        conn.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/bench.bin", headers=hdr)
        resp = conn.getresponse()
        n = 0
        while True:
            b = resp.read1(1 << 20)
            if not b:
                break
            got.update(b)
            n += len(b)
        rep["files_download_mb_s"] = round(n / 1e6 / (time.monotonic() - t0), 1)
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("DELETE", f"/v1/sandboxes/{sid}/files?path=/tmp/bench.bin", headers=hdr)
        conn.getresponse().read()
        conn.close()
    finally:
        done.set()
        t.join()
    rep["files_mib"] = mib
    rep["files_rss_peak_kib"] = peak[0]
    rep["files_rss_after_kib"] = rss_kib(pid)
    rep["files_sha256_ok"] = up_ok and n == mib << 20 and got.digest() == want.digest()
    return rep["files_sha256_ok"]


def pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    n, c, seq = (200, 20, 50) if a.smoke else (4000, 100, 500)
    n_in, c_in = (2000, 20) if a.smoke else (50000, 64)
    fmib = int(os.environ.get("FILE_MB", 16 if a.smoke else 1024))
    root = tempfile.mkdtemp(prefix="fr-agentbench-")
    rep = {"scenario": "agent", "smoke": a.smoke, "n": n, "concurrency": c}
    ok = True
    try:
        key = os.path.join(root, "agent.key")
        with open(key, "w") as f:
            f.write(os.urandom(32).hex())
        kc = kubesim(build, root, "c1", "process")
        p_agent = router(build, root, "agent", kc, key)
        p_plain = router(build, root, "podexec", kc, None)
        sb = api(p_agent, "POST", "/v1/sandboxes", {"image": "python:3.12", "name": "bench"})["sandboxes"][0]
        sid = sb["id"]
        for port in (p_agent, p_plain):  # warm the connections
            asyncio.run(throughput(port, sid, 20, 5))
        for name, port in (("agent", p_agent), ("pods_exec", p_plain)):
            good, rate = asyncio.run(throughput(port, sid, n, c))
            rep[f"{name}_exec_per_s"] = round(rate, 1)
            rep[f"{name}_ok"] = good
            ok &= good == n
        rep["speedup"] = round(rep["agent_exec_per_s"] / rep["pods_exec_exec_per_s"], 2)
        # One in flight, over one kept-alive client connection (as the
        # direct measurement below): through each router, and straight to
        # the agent via kubesim's proxy.
        body = json.dumps({"argv": ["echo", "hi"]})
        for name, port in (("agent", p_agent), ("pods_exec", p_plain)):
            lat = []
            rconn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            for _ in range(seq):
                t0 = time.monotonic()
                rconn.request("POST", f"/v1/sandboxes/{sid}/exec", body,
                              {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
                resp = rconn.getresponse()
                resp.read()
                lat.append((time.monotonic() - t0) * 1000)
                ok &= resp.status == 200
            rconn.close()
            rep[f"{name}_p50_ms"], rep[f"{name}_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
        # Direct to the agent through kubesim's pod proxy, as the router does it.
        m = re.search(r"certificate-authority-data:\s*(\S+)", open(kc).read())
        ctx = ssl.create_default_context(cadata=base64.b64decode(m.group(1)).decode())
        sim_port = int(open(os.path.join(root, "c1.port")).read())
        pod = sid.split(".", 1)[1]
        tok = hmac.new(open(key, "rb").read().strip(), sid.encode(), hashlib.sha256).hexdigest()
        req = json.dumps({"process": {"cmd": "echo", "args": ["hi"]}}).encode()
        env = b"\x00" + len(req).to_bytes(4, "big") + req
        conn = http.client.HTTPSConnection("127.0.0.1", sim_port, context=ctx, timeout=30)
        lat = []
        for _ in range(seq):
            t0 = time.monotonic()
            conn.request("POST", f"/api/v1/namespaces/default/pods/{pod}:49983/proxy/process.Process/Start", env,
                         {"Authorization": "Bearer " + SIM_TOKEN, "X-Access-Token": tok,
                          "Content-Type": "application/connect+json"})
            resp = conn.getresponse()
            resp.read()
            lat.append((time.monotonic() - t0) * 1000)
            ok &= resp.status == 200
        rep["direct_agent_p50_ms"], rep["direct_agent_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
        rep["router_adds_p50_ms"] = round(rep["agent_p50_ms"] - rep["direct_agent_p50_ms"], 3)
        # First byte of a streaming command, straight through the proxy.
        req = json.dumps({"process": {"cmd": "sh", "args": ["-c", "echo a; sleep 1; echo b"]}}).encode()
        t0 = time.monotonic()
        conn.request("POST", f"/api/v1/namespaces/default/pods/{pod}:49983/proxy/process.Process/Start",
                     b"\x00" + len(req).to_bytes(4, "big") + req,
                     {"Authorization": "Bearer " + SIM_TOKEN, "X-Access-Token": tok,
                      "Content-Type": "application/connect+json"})
        first, _ = read_first_stdout(conn.getresponse(), t0)
        rep["direct_stream_first_chunk_ms"] = round(first or -1, 1)
        rep["direct_stream_total_ms"] = round((time.monotonic() - t0) * 1000, 1)
        conn.close()
        # Three times: the first streamed call also opens the router's
        # streaming connection to the cluster (TLS handshake).
        runs = [stream_first_chunk(p_agent, sid) for _ in range(3)]
        rep["stream_first_chunk_ms"] = statistics.median(r[0] for r in runs)
        rep["stream_first_chunk_cold_ms"] = runs[0][0]
        rep["stream_total_ms"] = statistics.median(r[1] for r in runs)
        ok &= all(good and 0 < first < 900 for first, _, good in runs)
        # Files through the router.
        ok &= file_transfer(p_agent, sid, PIDS[p_agent], fmib, rep)
        # kubesim's in-process agent: no process per exec.
        kc2 = kubesim(build, root, "c2", "inproc")
        p_inproc = router(build, root, "inproc", kc2, key)
        sid2 = api(p_inproc, "POST", "/v1/sandboxes", {"image": "python:3.12", "name": "bench"})["sandboxes"][0]["id"]
        asyncio.run(keepalive_throughput(p_inproc, sid2, 200, 10))
        good, rate = asyncio.run(keepalive_throughput(p_inproc, sid2, n_in, c_in))
        rep["inproc_exec_per_s"], rep["inproc_ok"], rep["inproc_n"], rep["inproc_concurrency"] = \
            round(rate, 1), good, n_in, c_in
        ok &= good == n_in
    finally:
        stop_all()
        shutil.rmtree(root, ignore_errors=True)
    rep["ok"] = bool(ok)
    print(json.dumps(rep, indent=1))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rep, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
