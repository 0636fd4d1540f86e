#!/usr/bin/env python3
"""loadtest/gateway_bench.py - fedrouter-gateway: what it costs on the data
path, and what it holds.

One kubesim (TLS, token, --write-serviceaccount) lists the sandbox pods; a
sandbox pod's status.podIP is a loopback address of its own where the real
fedrouter-agent listens; the gateway runs in-cluster against kubesim, as in
a member cluster.

  small      GET /health (204, no body) with wrk, 16 connections kept alive,
             for DURATION_S (10; smoke 2) each: straight to the agent, then
             through the gateway over TLS, then over plain HTTP: requests/s
             and p50/p99
  exec       a Connect process.Process/Start `echo hi`, sequentially, straight
             and through the gateway: p50
  files      upload then download of FILE_MB (1024; smoke 32) MiB through the
             gateway's /files route, sha256 checked: MB/s each way, the
             gateway's RSS before, at its peak and after
  pods       the gateway's RSS watching PODS (50,000; smoke 2,000) sandbox
             pods (a ReplicaSet in kubesim, no processes): before the list,
             once synced, and the time the first list took
  router     the whole data path: a second kubesim running the real agent in
             its pods (their own addresses), a gateway (TLS) in-cluster
             against it, and two routers on that cluster with the same agent
             key: "gw" with the `gateway` group, "pp" without (the API
             server's pod proxy). One sandbox, `echo hi`:
               gateway_exec_per_s / apiserver_exec_per_s: ROUTER_N (4,000;
                 smoke 400) execs at ROUTER_C (32) in flight over kept-alive
                 client connections, through each router;
               apiserver_requests_per_exec: every request kubesim served
                 during the gateway run (its /_sim/stats: health probes and
                 lists included) / the execs, and the pods/proxy and
                 pods/exec ones alone;
               gateway_p50_ms / apiserver_p50_ms / direct_agent_p50_ms:
                 sequential execs (one in flight, kept-alive) through each
                 router and straight to the agent at its pod IP (a Connect
                 Start, as the router sends it), and what the router and
                 gateway add

Usage: gateway_bench.py --build-dir DIR [--smoke] [--json-out FILE]
Needs wrk (Debian package wrk) for `small`. Prints a table and JSON; exit 0
when every step worked.
"""
import argparse
import hashlib
import hmac
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BenchError, rss_kib, wrk  # noqa: E402

PROCS = []
SIM_TOKEN = "sim-" + os.urandom(6).hex()
AGENT_TOKEN = "agent-" + os.urandom(6).hex()
KEY = os.urandom(32).hex().encode()
CLUSTER = "bench"
NS = "sandboxes"
AGENT_PORT = 49983


def die(msg):
    print("gateway_bench: " + msg, file=sys.stderr)
    stop_all()
    sys.exit(1)


def start(argv, log, env=None):
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                         env=env, start_new_session=True)
    PROCS.append(p)
    return p


def stop_all():
    for p in reversed(PROCS):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_for(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    die("timed out waiting for " + what)


def bench_wrk(url, headers, seconds):
    try:
        return wrk(url, headers, seconds)
    except BenchError as e:
        die(str(e))


def sign(pod, port, exp=None):
    exp = exp or int(time.time()) + 280
    msg = f"fedrouter-gateway/v1\n{CLUSTER}\n{NS}\n{pod}\n{port}\n{exp}".encode()
    return f"v1.{exp}." + hmac.new(KEY, msg, hashlib.sha256).hexdigest()


class Sim:
    def __init__(self, build, root):
        self.root = root
        self.sa = os.path.join(root, "sa")
        pf = os.path.join(root, "port")
        start([os.path.join(build, "kubesim"), "--tls", "--token", SIM_TOKEN, "--write-kubeconfig",
               os.path.join(root, "kubeconfig"), "--write-serviceaccount", self.sa, "--port-file", pf,
               "--workdir", os.path.join(root, "wd"), "--nodes", "100", "--node-pods", "1000",
               "--node-cpu", "4000", "--node-memory", "16000Gi", "--history", "200000", "--event-limit", "0",
               "--log-level", "warn"], os.path.join(root, "kubesim.log"))
        wait_for(lambda: os.path.exists(pf), 20, "kubesim")
        self.port = int(open(pf).read())
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.sa, "ca.crt"))
        self.kube("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})

    def kube(self, method, path, body=None, ctype="application/json"):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=120, context=self.ctx)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Authorization": "Bearer " + SIM_TOKEN, "Content-Type": ctype})
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status >= 300:
            die(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def sandbox_pod(self, name, ip):
        self.kube("POST", f"/api/v1/namespaces/{NS}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"fedrouter.io/sandbox": "true",
                                                  "fedrouter.io/agent": str(AGENT_PORT)}},
            "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": ["sleep", "infinity"]}]}})
        wait_for(lambda: self.kube("GET", f"/api/v1/namespaces/{NS}/pods/{name}")["status"].get("phase") == "Running",
                 10, "pod running")
        self.kube("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
                  {"status": {"podIP": ip, "podIPs": [{"ip": ip}],
                              "conditions": [{"type": "Ready", "status": "True"}]}},
                  ctype="application/merge-patch+json")


class Gateway:
    def __init__(self, build, root, sim, name, tls=True):
        self.root = root
        pf, hpf = os.path.join(root, name + ".port"), os.path.join(root, name + ".hport")
        key = os.path.join(root, "gw.key")
        with open(key, "wb") as f:
            f.write(KEY)
        env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(sim.port))
        argv = [os.path.join(build, "fedrouter-gateway"), "--cluster", CLUSTER, "--namespace", NS,
                "--key-file", key, "--listen", "127.0.0.1:0", "--port-file", pf, "--health-listen",
                "127.0.0.1:0", "--health-port-file", hpf, "--serviceaccount-dir", sim.sa, "--log-level", "warn",
                "--max-per-sandbox", "100000"]
        argv += ["--tls-cert", os.path.join(root, "tls.crt"), "--tls-key", os.path.join(root, "tls.key")] if tls \
            else ["--insecure-plaintext"]
        self.t0 = time.monotonic()
        self.proc = start(argv, os.path.join(root, name + ".log"), env)
        wait_for(lambda: os.path.exists(hpf), 20, "gateway " + name)
        self.port, self.hport = int(open(pf).read()), int(open(hpf).read())
        self.tls = tls

    def ready(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=5)
            c.request("GET", "/readyz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def conn(self):
        if self.tls:
            ctx = ssl.create_default_context(cafile=os.path.join(self.root, "tls.crt"))
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=300, context=ctx)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)


def envelope(msg):
    b = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(b)) + b


def exec_once(conn, path, headers):
    h = {"Content-Type": "application/connect+json", "X-Access-Token": AGENT_TOKEN}
    h.update(headers)
    t0 = time.perf_counter()
    conn.request("POST", path, body=envelope({"process": {"cmd": "echo", "args": ["hi"]}}), headers=h)
    r = conn.getresponse()
    body = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200 or b'"exitCode"' not in body and b'"end"' not in body:
        die(f"exec {path}: {r.status} {body[:200]!r}")
    return dt


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] * 1000


ROUTER_TOKEN = "bench-" + os.urandom(6).hex()
RCLUSTER = "rc"


def router_api(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Authorization": "Bearer " + ROUTER_TOKEN, "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status >= 300:
        die(f"router {method} {path}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else None


def start_router(build, root, name, kubeconfig, agent_key, gateway):
    conf = os.path.join(root, f"router-{name}.conf")
    sha = hashlib.sha256(ROUTER_TOKEN.encode()).hexdigest()
    pf = os.path.join(root, f"router-{name}.out")
    with open(conf, "w") as f:
        f.write(f'listen = "127.0.0.1:0";\nregion = "us";\n'
                f'tenants = ( {{ name = "b"; token_sha256 = "{sha}"; max_requests_in_flight = 1000000; '
                f'max_concurrent_execs = 1000000; }} );\n'
                f'clusters = ( {{ name = "{RCLUSTER}"; region = "us"; kubeconfig = "{kubeconfig}"; {gateway} }} );\n'
                f'agent = {{ image = "fedrouter-agent:bench"; key_file = "{agent_key}"; }};\n')
    p = subprocess.Popen([os.path.join(build, "fedrouter"), "--config", conf], stdin=subprocess.DEVNULL,
                         stdout=open(pf, "wb"), stderr=open(os.path.join(root, f"router-{name}.log"), "wb"),
                         start_new_session=True)
    PROCS.append(p)
    line = wait_for(lambda: open(pf).readline().strip(), 20, f"router {name}'s listening line")
    port = int(line.split()[-1].rsplit(":", 1)[1])

    def ready():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/readyz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False
    wait_for(ready, 60, f"router {name} ready")
    return port, p


def keepalive_execs(port, sid, n, c):
    """<n> `echo hi` execs over <c> kept-alive connections, one request at a
    time each: (ok, exec/s)."""
    body = json.dumps({"argv": ["echo", "hi"]})
    left = [n]
    ok = [0]
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if left[0] <= 0:
                    break
                left[0] -= 1
            conn.request("POST", f"/v1/sandboxes/{sid}/exec", body,
                         {"Authorization": "Bearer " + ROUTER_TOKEN, "Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status == 200 and b'"stdout":"hi\\n"' in data:
                with lock:
                    ok[0] += 1
        conn.close()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(c)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ok[0], n / (time.monotonic() - t0)


def sequential_execs(port, sid, n):
    body = json.dumps({"argv": ["echo", "hi"]})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", f"/v1/sandboxes/{sid}/exec", body,
                     {"Authorization": "Bearer " + ROUTER_TOKEN, "Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        lat.append(time.perf_counter() - t0)
        if r.status != 200:
            die(f"exec through the router: {r.status} {data[:200]!r}")
    conn.close()
    return lat


def router_section(build, root, smoke):
    """The data path through a router: gateway vs the API server's pod proxy."""
    n = 400 if smoke else int(os.environ.get("ROUTER_N", "4000"))
    c = int(os.environ.get("ROUTER_C", "32"))
    seq = 50 if smoke else 500
    d = os.path.join(root, "rsim")
    os.makedirs(d)
    kc, pf, apf, sa = (os.path.join(d, x) for x in ("kubeconfig", "port", "admin-port", "sa"))
    start([os.path.join(build, "kubesim"), "--tls", "--token", SIM_TOKEN, "--name", RCLUSTER, "--write-kubeconfig",
           kc, "--write-serviceaccount", sa, "--port-file", pf, "--admin-listen", "127.0.0.1:0", "--admin-port-file",
           apf, "--workdir", os.path.join(d, "wd"), "--agent-binary", os.path.join(build, "fedrouter-agent"),
           "--agent-mode", "process", "--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi",
           "--event-limit", "0", "--log-level", "warn"], os.path.join(d, "kubesim.log"))
    wait_for(lambda: os.path.exists(apf) and os.path.getsize(apf) > 0 and os.path.exists(sa), 20, "kubesim rc")
    sim_port, admin_port = int(open(pf).read()), int(open(apf).read())
    ctx = ssl.create_default_context(cafile=os.path.join(sa, "ca.crt"))

    def admin(method, path):
        cc = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=30)
        cc.request(method, path, headers={"Authorization": "Bearer " + SIM_TOKEN})
        r = cc.getresponse()
        data = r.read()
        cc.close()
        if r.status != 200:
            die(f"kubesim admin {method} {path}: {r.status}")
        return json.loads(data or b"null")

    def kube_requests():
        st = admin("GET", "/_sim/stats")
        total = sum(x["count"] for x in st["requests"])
        proxy = sum(x["count"] for x in st["requests"]
                    if x.get("resource") == "pods" and x.get("subresource") in ("proxy", "exec"))
        return total, proxy

    # The gateway of that cluster, in-cluster against it, TLS.
    key = os.path.join(d, "gw.key")
    with open(key, "wb") as f:
        f.write(KEY)
    gpf, ghpf = os.path.join(d, "gw.port"), os.path.join(d, "gw.hport")
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(sim_port))
    start([os.path.join(build, "fedrouter-gateway"), "--cluster", RCLUSTER, "--namespace", "default", "--key-file", key,
           "--listen", "127.0.0.1:0", "--port-file", gpf, "--health-listen", "127.0.0.1:0", "--health-port-file", ghpf,
           "--serviceaccount-dir", sa, "--log-level", "warn", "--tls-cert", os.path.join(root, "tls.crt"),
           "--tls-key", os.path.join(root, "tls.key")], os.path.join(d, "gateway.log"), env)
    wait_for(lambda: os.path.exists(ghpf) and os.path.getsize(ghpf) > 0, 20, "the router section's gateway")
    gw_port = int(open(gpf).read())
    agent_key = os.path.join(d, "agent.key")
    with open(agent_key, "w") as f:
        f.write(os.urandom(32).hex())
    gw_group = (f'gateway = {{ url = "https://127.0.0.1:{gw_port}"; ca_file = "{os.path.join(root, "tls.crt")}"; '
                f'key_file = "{key}"; }};')
    p_gw, proc_gw = start_router(build, root, "gw", kc, agent_key, gw_group)
    p_pp, _ = start_router(build, root, "pp", kc, agent_key, "")
    sb = router_api(p_gw, "POST", "/v1/sandboxes", {"image": "python:3.12", "name": "bench"})["sandboxes"][0]
    sid = sb["id"]
    for port, want in ((p_gw, "gateway"), (p_pp, "pod-proxy")):
        wait_for(lambda: router_api(port, "GET", "/v1/sandboxes/" + sid).get("data_path") == want, 30,
                 f"data_path {want}")
        keepalive_execs(port, sid, 40, 4)  # warm the connections
    rep = {"n": n, "concurrency": c}
    admin("DELETE", "/_sim/stats")
    good, rate = keepalive_execs(p_gw, sid, n, c)
    total, proxy = kube_requests()
    if good != n:
        die(f"{n - good} of {n} execs through the gateway failed")
    rep["gateway_exec_per_s"] = round(rate, 1)
    rep["apiserver_requests_per_exec"] = round(total / n, 4)
    rep["apiserver_requests_during_gateway_run"] = total
    rep["apiserver_proxy_requests_per_exec"] = round(proxy / n, 4)
    admin("DELETE", "/_sim/stats")
    good, rate = keepalive_execs(p_pp, sid, n, c)
    total, proxy = kube_requests()
    if good != n:
        die(f"{n - good} of {n} execs through the pod proxy failed")
    rep["apiserver_exec_per_s"] = round(rate, 1)
    rep["apiserver_path_requests_per_exec"] = round(total / n, 4)
    rep["gateway_speedup"] = round(rep["gateway_exec_per_s"] / rep["apiserver_exec_per_s"], 2)
    rep["gateway_router_rss_kib"] = rss_kib(proc_gw.pid)
    lg = sequential_execs(p_gw, sid, seq)
    lp = sequential_execs(p_pp, sid, seq)
    # Straight to the agent at its pod IP, as the gateway reaches it.
    pod = sid.split(".", 1)[1]
    kconn = http.client.HTTPSConnection("127.0.0.1", sim_port, timeout=30, context=ctx)
    kconn.request("GET", f"/api/v1/namespaces/default/pods/{pod}", headers={"Authorization": "Bearer " + SIM_TOKEN})
    ip = json.loads(kconn.getresponse().read())["status"]["podIP"]
    kconn.close()
    tok = hmac.new(open(agent_key, "rb").read().strip(), sid.encode(), hashlib.sha256).hexdigest()
    cd = http.client.HTTPConnection(ip, AGENT_PORT, timeout=60)
    cd.connect()
    cd.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    global AGENT_TOKEN
    saved, AGENT_TOKEN = AGENT_TOKEN, tok
    try:
        ld = [exec_once(cd, "/process.Process/Start", {}) for _ in range(seq)]
    finally:
        AGENT_TOKEN = saved
    cd.close()
    rep["seq_n"] = seq
    rep["gateway_p50_ms"], rep["gateway_p99_ms"] = round(pct(lg, 0.5), 3), round(pct(lg, 0.99), 3)
    rep["apiserver_p50_ms"], rep["apiserver_p99_ms"] = round(pct(lp, 0.5), 3), round(pct(lp, 0.99), 3)
    rep["direct_agent_p50_ms"], rep["direct_agent_p99_ms"] = round(pct(ld, 0.5), 3), round(pct(ld, 0.99), 3)
    rep["gateway_adds_p50_ms"] = round(rep["gateway_p50_ms"] - rep["direct_agent_p50_ms"], 3)
    return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    dur = 2 if a.smoke else int(os.environ.get("DURATION_S", "10"))
    file_mb = 32 if a.smoke else int(os.environ.get("FILE_MB", "1024"))
    npods = 2000 if a.smoke else int(os.environ.get("PODS", "50000"))
    n_exec = 50 if a.smoke else 500
    root = tempfile.mkdtemp(prefix="fr-gwbench-")
    report = {"scenario": "gateway", "smoke": a.smoke}
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", os.path.join(root, "tls.key"), "-out", os.path.join(root, "tls.crt"), "-days", "2",
                        "-subj", "/CN=gateway", "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                       capture_output=True)
        sim = Sim(build, root)
        ip = "127.%d.%d.%d" % (random.randint(16, 250), random.randint(0, 255), random.randint(2, 250))
        start([os.path.join(build, "fedrouter-agent"), "--allow-open-init", "--listen", f"{ip}:{AGENT_PORT}"],
              os.path.join(root, "agent.log"))

        def agent_up():
            try:
                c = http.client.HTTPConnection(ip, AGENT_PORT, timeout=2)
                c.request("POST", "/init", body=json.dumps({"accessToken": AGENT_TOKEN}),
                          headers={"Content-Type": "application/json"})
                ok = c.getresponse().status == 204
                c.close()
                return ok
            except OSError:
                return False
        wait_for(agent_up, 10, "the agent")
        sim.sandbox_pod("sb-bench", ip)
        gw = Gateway(build, root, sim, "gw")
        gwp = Gateway(build, root, sim, "gw-plain", tls=False)
        wait_for(lambda: gw.ready() and gwp.ready(), 20, "gateways ready")

        # ---- small requests
        auth = "Fr-Gateway-Auth: " + sign("sb-bench", AGENT_PORT)
        route = f"/v1/proxy/{NS}/sb-bench/{AGENT_PORT}/health"
        small = {}
        if shutil.which("wrk"):
            small["direct"] = bench_wrk(f"http://{ip}:{AGENT_PORT}/health", [], dur)
            small["gateway_tls"] = bench_wrk(f"https://127.0.0.1:{gw.port}{route}", [auth], dur)
            small["gateway_plain"] = bench_wrk(f"http://127.0.0.1:{gwp.port}{route}", [auth], dur)
        else:
            print("gateway_bench: wrk not installed: small requests skipped (apt-get install wrk)")
        report["small"] = small

        # ---- exec (Connect Start), sequential
        lat_direct, lat_gw = [], []
        cd = http.client.HTTPConnection(ip, AGENT_PORT, timeout=60)
        cg = gw.conn()
        # http.client writes head and body apart: without TCP_NODELAY the
        # body waits out a delayed ACK (40 ms) on the direct path.
        for c in (cd, cg):
            c.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n_exec):
            lat_direct.append(exec_once(cd, "/process.Process/Start", {}))
            lat_gw.append(exec_once(cg, f"/v1/proxy/{NS}/sb-bench/{AGENT_PORT}/process.Process/Start",
                                    {"Fr-Gateway-Auth": sign("sb-bench", AGENT_PORT)}))
        cd.close()
        cg.close()
        report["exec"] = {"n": n_exec, "direct_p50_ms": pct(lat_direct, 0.5), "gateway_p50_ms": pct(lat_gw, 0.5),
                          "direct_p99_ms": pct(lat_direct, 0.99), "gateway_p99_ms": pct(lat_gw, 0.99)}

        # ---- the whole data path through a router (its own kubesim)
        report["router"] = router_section(build, root, a.smoke)

        # ---- files through the gateway
        block = os.urandom(1 << 20)
        want = hashlib.sha256()
        for _ in range(file_mb):
            want.update(block)
        rss0 = rss_kib(gw.proc.pid)
        peak = [rss0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(gw.proc.pid))
                time.sleep(0.05)
        threading.Thread(target=sample, daemon=True).start()
        fpath = f"/v1/proxy/{NS}/sb-bench/{AGENT_PORT}/files?path=%2Ftmp%2Fgw-bench.bin"
        c = gw.conn()

        def gen():
            for _ in range(file_mb):
                yield block
        t0 = time.monotonic()
        c.request("POST", fpath, body=gen(), headers={"Content-Length": str(file_mb << 20), "X-Access-Token":
                                                      AGENT_TOKEN, "Fr-Gateway-Auth": sign("sb-bench", AGENT_PORT),
                                                      "Content-Type": "application/octet-stream"})
        r = c.getresponse()
        r.read()
        up_s = time.monotonic() - t0
        if r.status != 200:
            die(f"upload: {r.status}")
        t0 = time.monotonic()
        c.request("GET", fpath, headers={"X-Access-Token": AGENT_TOKEN, "Fr-Gateway-Auth": sign("sb-bench", AGENT_PORT)})
        r = c.getresponse()
        h, n = hashlib.sha256(), 0
        while True:
            d = r.read(1 << 20)
            if not d:
                break
            h.update(d)
            n += len(d)
        down_s = time.monotonic() - t0
        c.close()
        stop.set()
        if n != file_mb << 20 or h.hexdigest() != want.hexdigest():
            die(f"download: {n} bytes, digest {'ok' if h.hexdigest() == want.hexdigest() else 'WRONG'}")
        report["files"] = {"mib": file_mb, "upload_mb_s": file_mb / up_s, "download_mb_s": file_mb / down_s,
                           "rss_before_kib": rss0, "rss_peak_kib": peak[0], "rss_after_kib": rss_kib(gw.proc.pid)}

        # ---- many pods
        sim.kube("POST", f"/apis/apps/v1/namespaces/{NS}/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "many"},
            "spec": {"replicas": npods, "selector": {"matchLabels": {"bench": "many"}},
                     "template": {"metadata": {"labels": {"bench": "many", "fedrouter.io/sandbox": "true",
                                                           "fedrouter.io/agent": str(AGENT_PORT)}},
                                  "spec": {"containers": [{"name": "main", "image": "python:3.12",
                                                           "resources": {"requests": {"cpu": "10m",
                                                                                      "memory": "16Mi"}}}]}}}})
        t0 = time.monotonic()

        def count_running():
            st = sim.kube("GET", f"/apis/apps/v1/namespaces/{NS}/replicasets/many")
            return (st.get("status") or {}).get("readyReplicas", 0) >= npods
        wait_for(count_running, 600, f"{npods} pods ready")
        made_s = time.monotonic() - t0
        rss_gw_live = rss_kib(gw.proc.pid)   # the running gateway followed them by watch
        fresh = Gateway(build, root, sim, "gw-fresh")
        rss_before = rss_kib(fresh.proc.pid)
        wait_for(fresh.ready, 300, "the fresh gateway's first list")
        sync_s = time.monotonic() - fresh.t0
        time.sleep(1)
        report["pods"] = {"pods": npods, "created_in_s": made_s, "fresh_gateway_rss_at_start_kib": rss_before,
                          "fresh_gateway_rss_synced_kib": rss_kib(fresh.proc.pid), "fresh_gateway_sync_s": sync_s,
                          "watching_gateway_rss_kib": rss_gw_live}
    finally:
        stop_all()
        shutil.rmtree(root, ignore_errors=True)

    print("\nfedrouter-gateway benchmark%s" % (" (smoke)" if a.smoke else ""))
    for k, v in report.get("small", {}).items():
        print(f"  GET /health  {k:14s} {v['rps']:10.0f} req/s   p50 {v['p50_ms']:.3f} ms   p99 {v['p99_ms']:.3f} ms")
    e = report["exec"]
    print(f"  exec (Start echo, sequential, n={e['n']}): direct p50 {e['direct_p50_ms']:.2f} ms, "
          f"gateway p50 {e['gateway_p50_ms']:.2f} ms (p99 {e['direct_p99_ms']:.2f} / {e['gateway_p99_ms']:.2f})")
    f = report["files"]
    print(f"  files {f['mib']} MiB: up {f['upload_mb_s']:.0f} MB/s, down {f['download_mb_s']:.0f} MB/s; gateway RSS "
          f"{f['rss_before_kib'] // 1024} MiB before, {f['rss_peak_kib'] // 1024} peak, {f['rss_after_kib'] // 1024} after")
    r = report.get("router") or {}
    if r:
        print(f"  through a router (n={r['n']}, {r['concurrency']} in flight): gateway {r['gateway_exec_per_s']:.0f} exec/s, "
              f"pod proxy {r['apiserver_exec_per_s']:.0f} exec/s ({r['gateway_speedup']}x); API server requests per "
              f"exec on the gateway path {r['apiserver_requests_per_exec']} (pods/proxy+exec "
              f"{r['apiserver_proxy_requests_per_exec']}), on the pod proxy path {r['apiserver_path_requests_per_exec']}")
        print(f"  sequential exec p50 (n={r['seq_n']}): gateway {r['gateway_p50_ms']:.2f} ms, pod proxy "
              f"{r['apiserver_p50_ms']:.2f} ms, straight to the agent {r['direct_agent_p50_ms']:.2f} ms "
              f"(router + gateway add {r['gateway_adds_p50_ms']:.2f} ms)")
        report.update({k: r[k] for k in ("gateway_exec_per_s", "apiserver_exec_per_s", "apiserver_requests_per_exec",
                                         "gateway_p50_ms", "apiserver_p50_ms", "direct_agent_p50_ms")})
    p = report["pods"]
    print(f"  {p['pods']} pods: a fresh gateway {p['fresh_gateway_rss_at_start_kib'] // 1024} MiB at start, "
          f"{p['fresh_gateway_rss_synced_kib'] // 1024} MiB synced (first list {p['fresh_gateway_sync_s']:.1f} s); "
          f"the one that watched them arrive {p['watching_gateway_rss_kib'] // 1024} MiB")
    print(json.dumps(report))
    if a.json_out:
        with open(a.json_out, "w") as fo:
            json.dump(report, fo, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
