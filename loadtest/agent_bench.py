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
  streaming    `echo a; sleep 1; echo b` through the agent path: the first
               chunk's arrival is what streaming would show (the v1 API's
               non-streaming exec answers after the end)

Usage: agent_bench.py --build-dir DIR [--smoke] [--json-out FILE]
Prints a table and JSON; exit 0 when every exec succeeded.
"""
import argparse
import asyncio
import base64
import hashlib
import hmac
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
import time
import urllib.request

PROCS = []
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
    root = tempfile.mkdtemp(prefix="fr-agentbench-")
    rep = {"scenario": "agent", "smoke": a.smoke, "n": n, "concurrency": c}
    ok = True
    try:
        key = os.path.join(root, "agent.key")
        with open(key, "w") as f:
            f.write(os.urandom(32).hex())
        kc = os.path.join(root, "c1.kubeconfig")
        start([os.path.join(build, "kubesim"), "--tls", "--token", SIM_TOKEN, "--name", "c1",
               "--write-kubeconfig", kc, "--port-file", os.path.join(root, "c1.port"),
               "--workdir", os.path.join(root, "wd"), "--agent-binary", os.path.join(build, "fedrouter-agent"),
               "--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi", "--log-level", "warn"],
              os.path.join(root, "kubesim.log"))
        for _ in range(300):
            if os.path.exists(os.path.join(root, "c1.port")):
                break
            time.sleep(0.05)
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
        # One in flight: through each router, and straight to the agent via kubesim's proxy.
        for name, port in (("agent", p_agent), ("pods_exec", p_plain)):
            lat = []
            for _ in range(seq):
                t0 = time.monotonic()
                st, _ = asyncio.run(exec_once(port, sid, ["echo", "hi"]))
                lat.append((time.monotonic() - t0) * 1000)
                ok &= st == 200
            rep[f"{name}_p50_ms"], rep[f"{name}_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
        # Direct to the agent through kubesim's pod proxy, as the router does it.
        m = re.search(r"certificate-authority-data:\s*(\S+)", open(kc).read())
        ctx = ssl.create_default_context(cadata=base64.b64decode(m.group(1)).decode())
        sim_port = int(open(os.path.join(root, "c1.port")).read())
        pod = sid.split(".", 1)[1]
        tok = hmac.new(open(key, "rb").read().strip(), sid.encode(), hashlib.sha256).hexdigest()
        req = json.dumps({"process": {"cmd": "echo", "args": ["hi"]}}).encode()
        env = b"\x00" + len(req).to_bytes(4, "big") + req
        import http.client
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
        resp = conn.getresponse()
        first = None
        buf = b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            if first is None and b'"stdout"' in buf:
                first = (time.monotonic() - t0) * 1000
        rep["stream_first_chunk_ms"] = round(first or -1, 1)
        rep["stream_total_ms"] = round((time.monotonic() - t0) * 1000, 1)
        conn.close()
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
