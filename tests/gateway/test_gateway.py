#!/usr/bin/env python3
"""fedrouter-gateway black-box: the real gateway in front of sandbox pods
that kubesim lists, reached over TLS with the routers' signature
(docs/gateway.md is the contract).

Setup: one kubesim (TLS, a bearer token, --write-serviceaccount,
--agent-binary), the gateway started the way a pod starts it (in-cluster:
KUBERNETES_SERVICE_HOST and _PORT, a service-account directory with token,
ca.crt, namespace), watching namespace "sandboxes". Sandboxes with an
agent are pods kubesim runs the real fedrouter-agent in, each in a network
namespace of its own with its own status.podIP (as root; else a pod whose
status points at an agent the test runs on a loopback address of its
own), initialized through kubesim's pod proxy as the router does. For the
servers a test needs to control (slow readers, hang-ups, counters, a raw
Upgrade echo), pods are given a status.podIP on a loopback address of
their own (127.A.B.C, random per run) where the test serves them.

Proves: in kubesim's own pods, the agent, `python3 -m http.server` on
0.0.0.0:8000 in two pods at once and a WebSocket echo server started in a
pod, all through the gateway at the pods' IPs; exec (a Connect Start
stream) and files (50 MB each way, with a reader that stalls: the
gateway's RSS stays flat) through the gateway;
keep-alive towards the client across answers of every framing (length,
chunked, until close) and refusals; a user port; WebSocket and raw Upgrade
pass-through with half-close; every refusal (signature missing, wrong,
expired, too far ahead, for another cluster or target; namespace not
watched; a pod that is not a sandbox, not Ready, being deleted, on the host
network; a name that is an IP; the agent's /init and /_fr/ in every
spelling; dot segments, encoded slashes and backslashes, NUL and control
bytes, ';') answers with its JSON error and code before anything is
dialled, is counted in /metrics and logged; the per-sandbox limit (429);
key rotation through the key files and SIGHUP; a deleted pod answers 404
at once and a pod whose server is gone 502, never a hang; the in-cluster
token rotated (kubesim accepting only the new one) and the gateway carries
on; SIGTERM fails /readyz first, lets a streaming call finish, then exits 0.

Usage: test_gateway.py --gateway PATH --kubesim PATH --agent PATH [--only NAME ...] [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import argparse
import base64
import hashlib
import hmac
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

ARGS = None
CLUSTER = "gw-test"
NS = "sandboxes"
AGENT_PORT = 49983
SIM_TOKEN = "sim-" + os.urandom(8).hex()
AGENT_TOKEN = "agent-" + os.urandom(8).hex()
INIT_TOKEN = "init-" + os.urandom(8).hex()
PROCS = []
WATCHDOG_S = 280


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def wait_until(fn, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def short(x, n=300):
    s = x if isinstance(x, str) else repr(x)
    return s if len(s) <= n else s[:n] + "..."


def start_proc(argv, log, env=None):
    f = open(log, "ab")
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=env, start_new_session=True)
    f.close()
    PROCS.append(p)
    return p


def stop_proc(p, sig=signal.SIGTERM, timeout=20):
    if p.poll() is None:
        p.send_signal(sig)
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None


def tail(path, n=20):
    try:
        with open(path, "rb") as f:
            return "\n".join("    | " + l for l in f.read().decode(errors="replace").splitlines()[-n:])
    except OSError:
        return "    | (no log)"


def under_asan(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------
# addresses: one loopback address per pod, random per run so concurrent
# runs do not collide on a port

_ADDR_BASE = (random.randint(16, 250), random.randint(0, 255))
_addr_seq = [10]


def new_pod_ip():
    _addr_seq[0] += 1
    return "127.%d.%d.%d" % (_ADDR_BASE[0], _ADDR_BASE[1], _addr_seq[0])


# --------------------------------------------------------------------------
# kubesim and the gateway

class World:
    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="fr-gw-")
        self.sa = os.path.join(self.root, "sa")
        pf, apf = os.path.join(self.root, "port"), os.path.join(self.root, "admin-port")
        self.kubeconfig = os.path.join(self.root, "kubeconfig")
        self.sim_log = os.path.join(self.root, "kubesim.log")
        self.sim = start_proc([ARGS.kubesim, "--tls", "--token", SIM_TOKEN, "--write-kubeconfig", self.kubeconfig,
                               "--write-serviceaccount", self.sa, "--port-file", pf, "--admin-listen",
                               "127.0.0.1:0", "--admin-port-file", apf, "--workdir",
                               os.path.join(self.root, "wd"), "--terminate-ms", "1500", "--log-level", "warn",
                               "--agent-binary", ARGS.agent],
                              self.sim_log)
        if not wait_until(lambda: os.path.exists(pf) or self.sim.poll() is not None, 15):
            raise TestFailure("kubesim did not start:\n" + tail(self.sim_log))
        self.port = int(open(pf).read())
        self.admin_port = int(open(apf).read())
        self.sim_ssl = ssl.create_default_context(cafile=os.path.join(self.sa, "ca.crt"))
        self.kube("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": NS}}, expect=201)
        self.kube("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "other"}}, expect=201)
        # The gateway's TLS certificate, for 127.0.0.1.
        self.cert, self.key = os.path.join(self.root, "tls.crt"), os.path.join(self.root, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", self.key, "-out", self.cert, "-days", "2", "-subj", "/CN=gateway",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        self.gw_ssl = ssl.create_default_context(cafile=self.cert)
        # Key ring: current and (empty outside a rotation) previous.
        self.keys = [os.urandom(32).hex().encode(), b""]
        self.key_files = [os.path.join(self.root, "key-current"), os.path.join(self.root, "key-previous")]
        self.write_keys()
        self.backends = []
        self.gateways = []

    def write_keys(self):
        for path, k in zip(self.key_files, self.keys):
            with open(path + ".tmp", "wb") as f:
                f.write(k + b"\n" if k else b"")
            os.rename(path + ".tmp", path)

    # ---- the API (kubesim)
    def kube(self, method, path, body=None, expect=None, ctype="application/json", token=SIM_TOKEN, headers=None):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=15, context=self.sim_ssl)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers=dict({"Authorization": "Bearer " + token, "Content-Type": ctype}, **(headers or {})))
            r = c.getresponse()
            data = r.read()
            out = json.loads(data) if data else None
            if expect is not None:
                check(r.status == expect, f"{method} {path}: {r.status} {short(out)}")
            return r.status, out
        finally:
            c.close()

    def admin(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=15)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Authorization": "Bearer " + SIM_TOKEN, "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def make_pod(self, name, ip=None, ns=NS, sandbox=True, agent=True, ready=True, host_network=False):
        labels = {}
        if sandbox:
            labels["fedrouter.io/sandbox"] = "true"
        if agent:
            labels["fedrouter.io/agent"] = str(AGENT_PORT)
        spec = {"containers": [{"name": "main", "image": "python:3.12", "command": ["sleep", "infinity"]}]}
        if host_network:
            spec["hostNetwork"] = True
        self.kube("POST", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                            "metadata": {"name": name, "labels": labels},
                                                            "spec": spec}, expect=201)
        wait_until(lambda: (self.kube("GET", f"/api/v1/namespaces/{ns}/pods/{name}")[1] or {})
                   .get("status", {}).get("phase") == "Running", 10)
        if ip is not None:
            self.set_status(name, ip, ready, ns)
        return ip

    def agent_pod(self, name, command=()):
        """A sandbox pod as the router makes it: kubesim runs the real
        fedrouter-agent as its first process (with <command> after `--`),
        on the pod's own address. Waits until it is Ready; returns its IP."""
        cmd = ["/fr-agent/fedrouter-agent"] + (["--"] + list(command) if command else [])
        self.kube("POST", f"/api/v1/namespaces/{NS}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"fedrouter.io/sandbox": "true",
                                                  "fedrouter.io/agent": str(AGENT_PORT)}},
            "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": cmd,
                                     # As the router makes it: only a router, holding the
                                     # init token, may initialise the agent.
                                     "env": [{"name": "FR_AGENT_INIT_SHA256",
                                              "value": hashlib.sha256(INIT_TOKEN.encode()).hexdigest()}]}]}},
            expect=201)

        def ready():
            st = (self.kube("GET", f"/api/v1/namespaces/{NS}/pods/{name}")[1] or {}).get("status", {})
            ok = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions", []))
            return st.get("podIP") if ok else None
        ip = wait_until(ready, 20)
        check(ip, f"agent pod {name} not Ready: "
              f"{short((self.kube('GET', f'/api/v1/namespaces/{NS}/pods/{name}')[1] or {}).get('status'), 1500)}\n"
              + tail(self.sim_log))
        # What the router does through the API server's pod proxy: /init
        # with the sandbox's token (the gateway refuses /init).
        st, _ = self.kube("POST", f"/api/v1/namespaces/{NS}/pods/{name}:{AGENT_PORT}/proxy/init",
                          {"accessToken": AGENT_TOKEN}, headers={"X-Access-Token": INIT_TOKEN})
        check(st == 204, f"/init of {name} through the pod proxy: {st}")
        return ip

    def sandbox(self, name):
        """A Ready sandbox pod with the real agent, initialized: run by
        kubesim in a network namespace of its own when it has them (as
        root), else a pod whose status points at an agent this test runs on
        a loopback address of its own. Returns its IP."""
        if self.pod_network() == "bridge":
            return self.agent_pod(name)
        ip = self.make_pod(name, new_pod_ip())
        self.agent(ip)
        return ip

    def pod_network(self):
        if not hasattr(self, "_podnet"):
            self._podnet = ((self.admin("GET", "/_sim/state")[1] or {}).get("pod_network") or {}).get("mode")
        return self._podnet

    def set_status(self, name, ip, ready=True, ns=NS):
        """status.podIP (what the pod network gave it) and Ready."""
        st = {"podIP": ip, "podIPs": [{"ip": ip}],
              "conditions": [{"type": "Ready", "status": "True" if ready else "False"},
                             {"type": "ContainersReady", "status": "True" if ready else "False"},
                             {"type": "PodScheduled", "status": "True"}]}
        self.kube("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": st}, expect=200,
                  ctype="application/merge-patch+json")

    def delete_pod(self, name, ns=NS):
        self.kube("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", expect=200)

    # ---- what pods run
    def agent(self, ip):
        log = os.path.join(self.root, f"agent-{ip}.log")
        # The router initialises agents with an init token (agent/README.md);
        # this stand-in for it takes the first /init.
        p = start_proc([ARGS.agent, "--allow-open-init", "--listen", f"{ip}:{AGENT_PORT}"], log)
        self.backends.append(p)
        if not wait_until(lambda: can_connect(ip, AGENT_PORT) or p.poll() is not None, 10) or p.poll() is not None:
            raise TestFailure(f"agent on {ip} did not start:\n" + tail(log))
        # What the router does through the API server's pod proxy: /init
        # with the sandbox's token (the gateway refuses /init).
        c = http.client.HTTPConnection(ip, AGENT_PORT, timeout=10)
        c.request("POST", "/init", body=json.dumps({"accessToken": AGENT_TOKEN}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        check(r.status == 204, f"/init of the agent on {ip}: {r.status}")
        return p

    def gateway(self, extra=(), name="gw", sa=None, env_extra=None, tls=True):
        g = Gateway(self, extra, name, sa or self.sa, env_extra, tls)
        self.gateways.append(g)
        return g

    def teardown(self):
        problems = []
        for g in self.gateways:
            if g.proc.poll() is None:
                rc = stop_proc(g.proc, signal.SIGINT)
                if rc != 0:
                    problems.append(f"gateway {g.name} exited {rc} on SIGINT:\n{tail(g.log)}")
            elif not g.expected_exit and g.proc.returncode != 0:
                problems.append(f"gateway {g.name} died (rc {g.proc.returncode}):\n{tail(g.log)}")
        for p in self.backends:
            stop_proc(p, timeout=5)
        rc = stop_proc(self.sim)
        if rc != 0:
            problems.append(f"kubesim exited {rc}:\n{tail(self.sim_log)}")
        if not ARGS.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        return problems


def can_connect(ip, port):
    try:
        socket.create_connection((ip, port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Gateway:
    def __init__(self, world, extra, name, sa, env_extra, tls=True):
        self.w = world
        self.name = name
        self.log = os.path.join(world.root, f"{name}.log")
        pf, hpf = os.path.join(world.root, f"{name}.port"), os.path.join(world.root, f"{name}.hport")
        env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(world.port))
        env.pop("FR_SERVICEACCOUNT_DIR", None)
        if env.get("ASAN_OPTIONS"):
            # Freed blocks wait in ASan's quarantine (256 MiB by default):
            # keep it small so the RSS bounds still mean something.
            env["ASAN_OPTIONS"] += ":quarantine_size_mb=16"
        env.update(env_extra or {})
        tls_args = ["--tls-cert", world.cert, "--tls-key", world.key] if tls else []
        argv = [ARGS.gateway, "--cluster", CLUSTER, "--namespace", NS, "--key-file", world.key_files[0],
                "--key-file", world.key_files[1]] + tls_args + ["--listen", "127.0.0.1:0", "--port-file", pf, "--health-listen", "127.0.0.1:0",
                "--health-port-file", hpf, "--serviceaccount-dir", sa, "--log-level", "info"] + list(extra)
        self.proc = start_proc(argv, self.log, env=env)
        self.expected_exit = False
        if not wait_until(lambda: os.path.exists(hpf) or self.proc.poll() is not None, 15) or self.proc.poll() is not None:
            raise TestFailure(f"gateway {name} did not start (rc {self.proc.poll()}):\n" + tail(self.log))
        self.port = int(open(pf).read())
        self.hport = int(open(hpf).read())
        if not wait_until(lambda: self.health("/readyz")[0] == 200, 15):
            raise TestFailure(f"gateway {name}: /readyz not 200:\n" + tail(self.log))

    def health(self, path):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=5)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            c.close()
            return r.status, body.decode(errors="replace")
        except OSError as e:
            return 0, str(e)

    def metric(self, name, **labels):
        st, text = self.health("/metrics")
        check(st == 200, f"/metrics: {st}")
        total = 0.0
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"([a-z_]+)(\{[^}]*\})?\s+(\S+)$", line)
            if not m or m.group(1) != name:
                continue
            ls = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(ls.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def conn(self, timeout=30):
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.w.gw_ssl)

    def raw(self, timeout=30):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.w.gw_ssl.wrap_socket(s, server_hostname="127.0.0.1")


def sign(key, pod, port, ns=NS, cluster=CLUSTER, exp=None):
    exp = int(time.time()) + 60 if exp is None else exp
    msg = f"fedrouter-gateway/v1\n{cluster}\n{ns}\n{pod}\n{port}\n{exp}".encode()
    return f"v1.{exp}." + hmac.new(key, msg, hashlib.sha256).hexdigest()


def gpath(pod, port, route="", ns=NS):
    return f"/v1/proxy/{ns}/{pod}/{port}{route}"


def request(gw, method, pod, port, route="", body=None, headers=None, auth=True, key=None, conn=None, ns=NS,
            raw_path=None, read=True):
    """One request through <gw>; returns (status, headers, body bytes)."""
    c = conn or gw.conn()
    h = {}
    if auth:
        h["Fr-Gateway-Auth"] = sign(key or gw.w.keys[0], pod, port, ns=ns)
    h.update(headers or {})
    c.request(method, raw_path or gpath(pod, port, route, ns), body=body, headers=h)
    r = c.getresponse()
    data = r.read() if read else None
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    if conn is None and read:
        c.close()
    return r.status, hdrs, data if read else r


def expect_refusal(resp, status, code, what, by_server=False):
    """<by_server>: refused by the HTTP core before the gateway's handler
    (a path that does not even decode), so without Fr-Gateway-Error."""
    st, h, body = resp
    try:
        j = json.loads(body)
    except ValueError:
        j = None
    got = (j or {}).get("error", {}).get("code") if isinstance(j, dict) else None
    check(st == status and got == code and (by_server or h.get("fr-gateway-error") == code),
          f"{what}: expected {status} {code}, got {st} {h.get('fr-gateway-error')} {short(body)}")


# --------------------------------------------------------------------------
# things pods run (servers on the pod's address)

class Counting(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class Server(Counting):
    def stop(self):
        """What a pod's end does to its server: no listener, and every
        open connection closed."""
        self.shutdown()
        self.server_close()
        for s in list(self.open_socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(ip, port, handler_fn):
    """A TCP server on ip:port; handler_fn(sock) per connection. Returns
    (server, counter dict); server.stop() ends it and its connections."""
    stats = {"conns": 0}

    class H(socketserver.BaseRequestHandler):
        def handle(self):
            stats["conns"] += 1
            srv.open_socks.add(self.request)
            try:
                handler_fn(self.request)
            except OSError:
                pass
            finally:
                srv.open_socks.discard(self.request)

    srv = Server((ip, port), H)
    srv.open_socks = set()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, stats


def read_head(sock):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(4096)
        if not d:
            return None, buf
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head.decode(errors="replace"), rest


def ws_echo(sock):
    head, rest = read_head(sock)
    if head is None:
        return
    key = re.search(r"(?im)^sec-websocket-key:\s*(\S+)", head).group(1)
    acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {acc}\r\nX-Echo: yes\r\n\r\n").encode())
    buf = rest
    while True:
        frame, buf = ws_read_frame(sock, buf)
        if frame is None:
            return
        op, payload = frame
        if op == 8:
            ws_send(sock, 8, payload, mask=False)
            return
        ws_send(sock, op, payload, mask=False)


def ws_read_frame(sock, buf):
    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = sock.recv(65536)
            if not d:
                raise EOFError
            buf += d
    try:
        need(2)
        op, ln = buf[0] & 15, buf[1] & 127
        masked, off = buf[1] & 128, 2
        if ln == 126:
            need(4)
            ln, off = struct.unpack(">H", buf[2:4])[0], 4
        elif ln == 127:
            need(10)
            ln, off = struct.unpack(">Q", buf[2:10])[0], 10
        if masked:
            need(off + 4)
            mask, off = buf[off:off + 4], off + 4
        need(off + ln)
        payload = buf[off:off + ln]
        if masked:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return (op, payload), buf[off + ln:]
    except EOFError:
        return None, buf


def ws_send(sock, op, payload, mask=True):
    hdr = bytes([0x80 | op])
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        hdr += bytes([mbit | n])
    elif n < 65536:
        hdr += bytes([mbit | 126]) + struct.pack(">H", n)
    else:
        hdr += bytes([mbit | 127]) + struct.pack(">Q", n)
    if mask:
        m = os.urandom(4)
        hdr += m
        payload = bytes(b ^ m[i % 4] for i, b in enumerate(payload))
    sock.sendall(hdr + payload)


def raw_upgrade_echo(sock):
    """Upgrade: x-echo; echoes until the client's FIN, then says bye and
    closes: a half-close must reach it and the answer come back."""
    head, rest = read_head(sock)
    if head is None or "upgrade: x-echo" not in head.lower():
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        return
    sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x-echo\r\nConnection: Upgrade\r\n\r\n")
    if rest:
        sock.sendall(rest)
    while True:
        d = sock.recv(65536)
        if not d:
            break
        sock.sendall(d)
    sock.sendall(b"bye")
    sock.shutdown(socket.SHUT_WR)


def http_misc(sock):
    """Requests on one kept-alive connection until a close: /chunked: a
    chunked answer; /eof: a body ended by the close, no length (then the
    connection ends); /echo: the request body back (any framing in, length
    out, the Host it got in X-Seen-Host); /headers: the header lines that
    reached the pod; /hangup-second: answers the first request of a
    connection and closes without answering the second (a server closing
    an idle connection just as it is reused)."""
    buf, n = b"", 0
    while True:
        n += 1
        while b"\r\n\r\n" not in buf:
            d = sock.recv(4096)
            if not d:
                return
            buf += d
        head, _, buf = buf.partition(b"\r\n\r\n")
        head = head.decode(errors="replace")
        path = head.split("\r\n")[0].split()[1]
        hl = head.lower()
        m = re.search(r"(?m)^content-length:\s*(\d+)", hl)
        body = b""
        if m:
            ln = int(m.group(1))
            while len(buf) < ln:
                buf += sock.recv(65536)
            body, buf = buf[:ln], buf[ln:]
        elif "transfer-encoding: chunked" in hl:
            while True:
                while b"\r\n" not in buf:
                    buf += sock.recv(65536)
                size_s, _, buf = buf.partition(b"\r\n")
                size = int(size_s, 16)
                while len(buf) < size + 2:
                    buf += sock.recv(65536)
                body += buf[:size]
                buf = buf[size + 2:]
                if size == 0:
                    break
        if path == "/chunked":
            sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Test: 1\r\n\r\n"
                         b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        elif path == "/eof":
            sock.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close")
            return
        elif path == "/hangup-second":
            if n > 1:
                return
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        elif path == "/echo":
            host = re.search(r"(?im)^host:\s*(\S+)", head).group(1).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Seen-Host: %s\r\n\r\n" % (len(body), host)
                         + body)
        elif path == "/headers":
            seen = json.dumps(head.split("\r\n")[1:]).encode()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nFr-Gateway-Error: forged\r\n\r\n" % len(seen)
                         + seen)
        else:
            sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        if "connection: close" in hl:
            return


def slow_sink(sock):
    """Reads the request head, waits 2 s (the gateway must pause the
    client meanwhile), then reads the body and answers its length and
    SHA-256."""
    head, rest = read_head(sock)
    n = int(re.search(r"(?im)^content-length:\s*(\d+)", head).group(1))
    time.sleep(2)
    h = hashlib.sha256(rest)
    got = len(rest)
    while got < n:
        d = sock.recv(1 << 20)
        if not d:
            break
        h.update(d)
        got += len(d)
    body = json.dumps({"bytes": got, "sha256": h.hexdigest()}).encode()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


# --------------------------------------------------------------------------
# Connect streams through the gateway

def envelope(msg):
    b = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(b)) + b


def start_stream(gw, pod, cmd, args, conn=None):
    c = conn or gw.conn(timeout=60)
    c.request("POST", gpath(pod, AGENT_PORT, "/process.Process/Start"),
              body=envelope({"process": {"cmd": cmd, "args": args}}),
              headers={"Content-Type": "application/connect+json", "X-Access-Token": AGENT_TOKEN,
                       "Fr-Gateway-Auth": sign(gw.w.keys[0], pod, AGENT_PORT)})
    return c, c.getresponse()


def read_events(r):
    """Every envelope of a Start answer: (stdout bytes, exit event, end)."""
    out, exit_ev = b"", None

    def exact(n):
        b = b""
        while len(b) < n:
            d = r.read(n - len(b))
            check(d, "the stream ended inside an envelope")
            b += d
        return b
    while True:
        flags, n = struct.unpack(">BI", exact(5))
        obj = json.loads(exact(n))
        if flags & 2:
            check(r.read() == b"", "bytes after the end-stream envelope")  # and the chunked body's end
            return out, exit_ev, obj
        ev = obj.get("event", {})
        if "data" in ev and "stdout" in ev["data"]:
            out += base64.b64decode(ev["data"]["stdout"])
        if "end" in ev:
            exit_ev = ev["end"]


# --------------------------------------------------------------------------
# tests

def test_exec_through_the_gateway(w, gw):
    w.sandbox("sb-exec")
    c, r = start_stream(gw, "sb-exec", "sh", ["-c", "echo one; sleep 0.3; echo two; exit 3"])
    check(r.status == 200 and r.getheader("Content-Type") == "application/connect+json",
          f"Start through the gateway: {r.status} {r.getheaders()}")
    t0 = time.monotonic()
    out, ex, end = read_events(r)
    check(out == b"one\ntwo\n" and ex and ex.get("exitCode") == 3 and end == {}, f"events: {out} {ex} {end}")
    check(time.monotonic() - t0 >= 0.25, "the answer did not stream")
    # The same connection carries the next call (keep-alive towards the router).
    c.request("GET", gpath("sb-exec", AGENT_PORT, "/health"),
              headers={"Fr-Gateway-Auth": sign(w.keys[0], "sb-exec", AGENT_PORT)})
    r = c.getresponse()
    r.read()
    check(r.status == 204, f"/health on the same connection: {r.status}")
    # The agent's token is passed through untouched: a wrong one is the agent's 401.
    st, h, body = request(gw, "POST", "sb-exec", AGENT_PORT, "/process.Process/List", body=b"{}",
                          headers={"Content-Type": "application/json", "X-Access-Token": "wrong"})
    check(st == 401 and "fr-gateway-error" not in h, f"the agent's own 401 is passed on: {st} {h} {body}")
    c.close()
    before = gw.metric("fedrouter_gateway_connections")
    check(before >= 0, "connections gauge")


def test_keep_alive_across_framings_and_refusals(w, gw):
    ip = w.make_pod("sb-http", new_pod_ip(), agent=False)
    srv, stats = serve(ip, 8080, http_misc)
    c = gw.conn()
    seen = []
    for route, want in (("/chunked", b"hello world"), ("/eof", b"until the close"), ("/chunked", b"hello world")):
        st, h, body = request(gw, "GET", "sb-http", 8080, route, conn=c)
        check(st == 200 and body == want, f"{route}: {st} {body!r}")
        seen.append(h)
    check(seen[0].get("x-test") == "1" and "transfer-encoding" in seen[0], f"chunked head: {seen[0]}")
    check(seen[1].get("content-type") == "text/plain", f"eof answer's head: {seen[1]}")
    # A refusal on the same connection does not end it.
    st, h, body = request(gw, "GET", "no-such-pod", 8080, "/", conn=c)
    check(st == 404, f"refusal: {st}")
    st, h, body = request(gw, "POST", "sb-http", 8080, "/echo", body=b"x" * 10000, conn=c)
    check(st == 200 and body == b"x" * 10000, f"echo with a length: {st} {len(body)}")
    check(h.get("x-seen-host") == f"{ip}:8080", f"Host sent upstream: {h.get('x-seen-host')}")

    def gen():
        for i in range(5):
            yield b"chunk-%d;" % i
    st, h, body = request(gw, "POST", "sb-http", 8080, "/echo", body=gen(), conn=c)  # no length: chunked
    check(st == 200 and body == b"chunk-0;chunk-1;chunk-2;chunk-3;chunk-4;", f"chunked request body: {body!r}")
    # What goes upstream: no credential, no hop-by-hop headers; what comes
    # back: a sandbox cannot forge the gateway's error header.
    st, h, body = request(gw, "GET", "sb-http", 8080, "/headers", conn=c,
                          headers={"Connection": "keep-alive, X-Drop", "X-Drop": "1", "X-Keep": "2",
                                   "Keep-Alive": "timeout=5", "Fr-Gateway-Other": "3"})
    sent = [l.lower() for l in json.loads(body)]
    check(any(l == "x-keep: 2" for l in sent), f"end-to-end header lost: {sent}")
    check(not any(l.startswith(("fr-gateway", "x-drop", "keep-alive")) for l in sent),
          f"credential or hop-by-hop header forwarded: {sent}")
    check("connection: keep-alive" in sent, f"the gateway does not keep its pod connection: {sent}")
    check("fr-gateway-error" not in h, f"a sandbox forged Fr-Gateway-Error: {h}")
    # Six answers over three connections to the pod: /chunked kept its
    # connection for the refused-then-/echo requests, /eof ended one, the
    # chunked upload dialled a new one (a streamed body is never sent on a
    # kept-alive connection: it could not be sent again).
    check(stats["conns"] == 3, f"pod connections: {stats['conns']}, want 3 (kept alive)")
    check(gw.metric("fedrouter_gateway_upstream_reused_total") >= 3, "no request reused a pod connection")
    check(gw.metric("fedrouter_gateway_connections") >= 1, "connections gauge")
    c.close()
    srv.stop()


def test_kept_alive_pod_connection_closed_by_the_pod_is_retried(w, gw):
    """A pod server that closes an idle kept-alive connection just as the
    gateway reuses it: an idempotent request goes again on a new
    connection, once, and the client sees only the answer; a POST gets
    502 upstream_closed rather than a second run."""
    ip = w.make_pod("sb-hangup", new_pod_ip(), agent=False)
    srv, stats = serve(ip, 8080, http_misc)
    retries0 = gw.metric("fedrouter_gateway_upstream_retries_total")
    c = gw.conn()
    for i in range(3):
        st, h, body = request(gw, "GET", "sb-hangup", 8080, "/hangup-second", conn=c)
        check(st == 200 and body == b"ok", f"request {i}: {st} {body!r}")
    c.close()
    check(stats["conns"] == 3, f"pod connections: {stats['conns']}, want 3")
    check(gw.metric("fedrouter_gateway_upstream_retries_total") - retries0 == 2, "the stale connections were not retried")
    srv.stop()
    # A POST is not idempotent: never sent twice (a command must not run
    # again); with an Idempotency-Key it is. (A server of its own: no
    # connection pooled by the GETs above.)
    srv, stats = serve(ip, 8081, http_misc)
    c = gw.conn()
    st, h, body = request(gw, "POST", "sb-hangup", 8081, "/hangup-second", body=b"x" * 100, conn=c)
    check(st == 200 and body == b"ok", f"first POST: {st} {body!r}")
    resp = request(gw, "POST", "sb-hangup", 8081, "/hangup-second", body=b"x" * 100, conn=c)
    expect_refusal(resp, 502, "upstream_closed", "a POST on a connection the pod closed")
    st, h, body = request(gw, "POST", "sb-hangup", 8081, "/hangup-second", body=b"x" * 100, conn=c)
    check(st == 200, f"a POST after: {st} {body!r}")
    st, h, body = request(gw, "POST", "sb-hangup", 8081, "/hangup-second", body=b"x" * 100, conn=c,
                          headers={"Idempotency-Key": "k1"})
    check(st == 200 and body == b"ok", f"a POST with an Idempotency-Key is sent again: {st} {body!r}")
    c.close()
    srv.stop()


def test_user_port_http_server(w, gw):
    ip = w.make_pod("sb-web", new_pod_ip(), agent=False)
    d = os.path.join(w.root, "www")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write("hello from the sandbox\n")
    p = start_proc([sys.executable, "-m", "http.server", "8000", "--bind", ip, "--directory", d],
                   os.path.join(w.root, "http.server.log"))
    w.backends.append(p)
    check(wait_until(lambda: can_connect(ip, 8000), 10), "python3 -m http.server did not start")
    st, h, body = request(gw, "GET", "sb-web", 8000, "/hello.txt")
    check(st == 200 and body == b"hello from the sandbox\n", f"GET /hello.txt: {st} {body!r}")
    st, h, body = request(gw, "GET", "sb-web", 8000, "")
    check(st == 200 and b"hello.txt" in body, f"GET / (the empty route): {st} {short(body)}")
    st, h, body = request(gw, "HEAD", "sb-web", 8000, "/hello.txt")
    check(st == 200 and body == b"" and h.get("content-length") == "23", f"HEAD: {st} {h} {body!r}")
    st, h, body = request(gw, "GET", "sb-web", 8000, "/missing")
    check(st == 404 and "fr-gateway-error" not in h, f"the server's own 404: {st} {h}")
    st, h, body = request(gw, "GET", "sb-web", 8000, "/hello.txt?x=1&y=%2Fz")
    check(st == 200, f"a query: {st}")


def test_websocket_and_upgrade_pass_through(w, gw):
    ip = w.make_pod("sb-ws", new_pod_ip(), agent=False)
    s1, _ = serve(ip, 8765, ws_echo)
    s2, _ = serve(ip, 8766, raw_upgrade_echo)
    sock = gw.raw()
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {gpath('sb-ws', 8765, '/chat')} HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Fr-Gateway-Auth: {sign(w.keys[0], 'sb-ws', 8765)}\r\n\r\n").encode())
    head, rest = read_head(sock)
    check(head is not None and head.startswith("HTTP/1.1 101") and "x-echo: yes" in head.lower(),
          f"101 through the gateway: {head}")
    buf = rest
    for payload in (b"hi", os.urandom(70000), b"x" * 200):
        ws_send(sock, 2, payload)
        frame, buf = ws_read_frame(sock, buf)
        check(frame == (2, payload), f"echo of {len(payload)} bytes: {frame and (frame[0], len(frame[1]))}")
    ws_send(sock, 8, struct.pack(">H", 1000))
    frame, buf = ws_read_frame(sock, buf)
    check(frame and frame[0] == 8, f"close echoed: {frame}")
    sock.close()
    check(wait_until(lambda: gw.metric("fedrouter_gateway_tunnels") == 0, 5), "the tunnel is still counted open")
    # A raw upgrade: bytes both ways (some sent with the request head),
    # then our half-close reaches the pod and its last words and its close
    # come back. TLS clients do not half-close, so through a plain-HTTP
    # gateway, with a TCP FIN.
    plain = w.gateway(["--insecure-plaintext"], name="gw-plain", tls=False)
    sock = socket.create_connection(("127.0.0.1", plain.port), timeout=10)
    sock.sendall((f"POST {gpath('sb-ws', 8766, '/')} HTTP/1.1\r\nHost: gw\r\nUpgrade: x-echo\r\n"
                  f"Connection: Upgrade\r\nContent-Length: 0\r\n"
                  f"Fr-Gateway-Auth: {sign(w.keys[0], 'sb-ws', 8766)}\r\n\r\nearly").encode())
    head, rest = read_head(sock)
    check(head is not None and head.startswith("HTTP/1.1 101"), f"raw upgrade: {head}")
    got = rest
    sock.sendall(b"-and-more")
    deadline = time.monotonic() + 5
    while len(got) < len(b"early-and-more") and time.monotonic() < deadline:
        got += sock.recv(100)
    check(got == b"early-and-more", f"echo before the half-close: {got!r}")
    sock.shutdown(socket.SHUT_WR)
    tail_bytes = b""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        d = sock.recv(100)
        if not d:
            break
        tail_bytes += d
    check(tail_bytes == b"bye", f"after our half-close: {tail_bytes!r} (want the pod's last words, then EOF)")
    sock.close()
    check(plain.metric("fedrouter_gateway_requests_total", outcome="tunnel") == 1, "the tunnel is not counted")
    check(wait_until(lambda: plain.metric("fedrouter_gateway_exchanges") == 0, 5), "the tunnel did not end")
    stop_proc(plain.proc, signal.SIGINT)
    check(gw.metric("fedrouter_gateway_requests_total", outcome="tunnel") >= 1, "tunnels not counted")
    for s in (s1, s2):
        s.stop()


def test_files_50mb_both_ways_rss_flat(w, gw):
    ip = w.sandbox("sb-files")
    size = 50 << 20
    block = os.urandom(1 << 20)
    digest = hashlib.sha256(block * 50).hexdigest()
    base = rss_kib(gw.proc.pid)
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(gw.proc.pid))
            time.sleep(0.02)
    threading.Thread(target=sample, daemon=True).start()
    try:
        # Up: to the agent (streamed, with a length).
        def gen():
            for _ in range(50):
                yield block
        st, h, body = request(gw, "POST", "sb-files", AGENT_PORT, "/files?path=%2Ftmp%2Fbig-" + ip,
                              body=gen(), headers={"Content-Length": str(size), "X-Access-Token": AGENT_TOKEN,
                                                   "Content-Type": "application/octet-stream"})
        check(st == 200, f"upload: {st} {short(body)}")
        # Down, by a reader that stalls 2 s first (the gateway must stop
        # reading the agent) and then reads slowly.
        st, h, r = request(gw, "GET", "sb-files", AGENT_PORT, "/files?path=%2Ftmp%2Fbig-" + ip,
                           headers={"X-Access-Token": AGENT_TOKEN}, read=False)
        check(st == 200 and h.get("content-length") == str(size), f"download head: {st} {h}")
        time.sleep(2)
        hh, n = hashlib.sha256(), 0
        while True:
            d = r.read(256 << 10)
            if not d:
                break
            hh.update(d)
            n += len(d)
        check(n == size and hh.hexdigest() == digest, f"download: {n} bytes, digest match {hh.hexdigest() == digest}")
        # Up again, to a pod server that stalls 2 s before reading: the
        # gateway must pause the client.
        sink_ip = w.make_pod("sb-sink", new_pod_ip(), agent=False)
        sink, _ = serve(sink_ip, 9000, slow_sink)
        st, h, body = request(gw, "PUT", "sb-sink", 9000, "/upload", body=gen(),
                              headers={"Content-Length": str(size)})
        res = json.loads(body)
        check(st == 200 and res == {"bytes": size, "sha256": digest}, f"upload to a slow sink: {st} {res}")
        sink.stop()
    finally:
        stop.set()
    grown = peak[0] - base
    print(f"     gateway RSS {base} KiB before, peak {peak[0]} KiB (+{grown} KiB) over 150 MB moved")
    # What the gateway may hold: ~HIGH_WATER + one read per direction and
    # connection; ASan adds shadow memory and its (16 MiB) quarantine.
    bound = (64 if under_asan(gw.proc.pid) else 24) * 1024
    check(grown < bound, f"gateway RSS grew {grown} KiB while moving 50 MB: a body was buffered")
    check(gw.metric("fedrouter_gateway_bytes_total", direction="to_sandbox") >= 2 * size, "bytes up not counted")
    check(gw.metric("fedrouter_gateway_bytes_total", direction="from_sandbox") >= size, "bytes down not counted")


def test_refusals_before_any_dial(w, gw):
    ip = new_pod_ip()
    w.make_pod("sb-guard", ip)
    # A fake agent that only counts connections: nothing refused may reach it.
    canary, stats = serve(ip, AGENT_PORT, lambda s: s.sendall(b"HTTP/1.1 204 No Content\r\n\r\n"))
    w.make_pod("not-a-sandbox", new_pod_ip(), sandbox=False)
    w.make_pod("sb-unready", new_pod_ip(), ready=False)
    w.make_pod("sb-hostnet", "127.0.0.1", host_network=True)
    w.make_pod("sb-elsewhere", new_pod_ip(), ns="other")
    wait_until(lambda: gw.metric("fedrouter_gateway_pods", namespace=NS) >= 4, 5)
    k = w.keys[0]
    now = int(time.time())
    fails0 = gw.metric("fedrouter_gateway_auth_failures_total")
    cases = [
        # credentials
        (dict(auth=False), 401, "unauthenticated", "no signature"),
        (dict(auth=False, headers={"Fr-Gateway-Auth": "v1.123.abc"}), 401, "unauthenticated", "malformed"),
        (dict(key=os.urandom(32).hex().encode()), 401, "unauthenticated", "another key"),
        (dict(auth=False, headers={"Fr-Gateway-Auth": sign(k, "sb-guard", AGENT_PORT, exp=now - 120)}), 401,
         "unauthenticated", "expired"),
        (dict(auth=False, headers={"Fr-Gateway-Auth": sign(k, "sb-guard", AGENT_PORT, exp=now + 3600)}), 401,
         "unauthenticated", "expiry an hour ahead"),
        (dict(auth=False, headers={"Fr-Gateway-Auth": sign(k, "sb-guard", AGENT_PORT, cluster="other")}), 401,
         "unauthenticated", "signed for another cluster"),
        (dict(auth=False, headers={"Fr-Gateway-Auth": sign(k, "sb-other", AGENT_PORT)}), 401, "unauthenticated",
         "signed for another pod"),
        (dict(auth=False, headers={"Fr-Gateway-Auth": sign(k, "sb-guard", 8080)}), 401, "unauthenticated",
         "signed for another port"),
        # the agent's internal routes
        (dict(route="/init", method="POST"), 403, "path_not_allowed", "/init"),
        (dict(route="/INIT", method="POST"), 403, "path_not_allowed", "/INIT"),
        (dict(route="/%69nit", method="POST"), 403, "path_not_allowed", "/%69nit"),
        (dict(route="/init/", method="POST"), 403, "path_not_allowed", "/init/"),
        (dict(route="/_fr/anything"), 403, "path_not_allowed", "/_fr/"),
        (dict(route="/%5Ffr/x"), 403, "path_not_allowed", "/%5Ffr/"),
        (dict(route="/_FR"), 403, "path_not_allowed", "/_FR"),
        # paths that could be normalized into another
        (dict(route="/a/../init"), 400, "invalid_path", "dot segments"),
        (dict(route="/a/%2e%2e/init"), 400, "invalid_path", "encoded dot segments"),
        (dict(route="/a/%2E%2e/x"), 400, "invalid_path", "encoded dot segments, mixed case"),
        (dict(route="/a/.%2E/x"), 400, "invalid_path", "half encoded"),
        (dict(route="/a/%252e%252e/x"), 400, "invalid_path", "double encoded"),
        (dict(route="/a%2finit"), 400, "invalid_path", "encoded slash"),
        (dict(route="/a%5cb"), 400, "invalid_path", "encoded backslash"),
        (dict(route="/a\\b"), 400, "invalid_path", "backslash"),
        (dict(route="/a;b"), 400, "invalid_path", "semicolon"),
        (dict(route="/a%3bb"), 400, "invalid_path", "encoded semicolon"),
        (dict(route="/a%00b"), 400, "invalid_path", "NUL", True),
        (dict(route="/a%0d%0aX:%20y"), 400, "invalid_path", "CR LF"),
        (dict(route="//x"), 400, "invalid_path", "empty segment"),
        (dict(route="/x?a=%00"), 400, "invalid_path", "NUL in the query"),
        (dict(raw_path="/v1/proxy/sandboxes/sb-guard/49983/../../other/x/1/"), 400, "invalid_path",
         "dot segments across the prefix"),
        (dict(raw_path="/v1/proxy/sandboxes/sb-guard/049983/"), 400, "invalid_target", "port with a zero"),
        (dict(raw_path="/v1/proxy/sandboxes/sb-guard/70000/"), 400, "invalid_target", "port out of range"),
        (dict(raw_path="/v1/proxy/Sandboxes/sb-guard/49983/"), 400, "invalid_target", "namespace case"),
        (dict(raw_path="/v1/proxy/sandboxes/SB/49983/"), 400, "invalid_target", "pod name case"),
        (dict(raw_path="/api/v1/namespaces/sandboxes/pods/sb-guard:49983/proxy/"), 400, "invalid_target",
         "the API server's proxy path"),
        (dict(raw_path="http://127.0.0.1/v1/proxy/sandboxes/sb-guard/49983/"), 400, "invalid_path",
         "absolute form", True),
        (dict(method="TRACE"), 405, "method_not_allowed", "TRACE"),
    ]
    for case in cases:
        kw, status, code, what = case[:4]
        method = kw.pop("method", "GET")
        resp = request(gw, method, "sb-guard", AGENT_PORT, **kw)
        expect_refusal(resp, status, code, what, by_server=len(case) > 4)
    # Targets that are not a Ready sandbox this gateway watches.
    for pod, port, ns, status, code, what in (
            ("not-a-sandbox", 8080, NS, 404, "sandbox_not_found", "a pod without the sandbox label"),
            ("sb-unready", AGENT_PORT, NS, 404, "sandbox_not_ready", "a pod not Ready"),
            ("sb-hostnet", 10250, NS, 403, "target_not_allowed", "a host-network pod (the kubelet's port)"),
            ("sb-elsewhere", AGENT_PORT, "other", 403, "namespace_not_allowed", "another namespace"),
            ("kube-system", 443, "kube-system", 403, "namespace_not_allowed", "kube-system"),
            ("10.0.0.1", 443, NS, 404, "sandbox_not_found", "an IP as pod name"),
            ("kubernetes.default.svc", 443, NS, 404, "sandbox_not_found", "the API server's name"),
            ("no-such-pod", AGENT_PORT, NS, 404, "sandbox_not_found", "an unknown pod")):
        expect_refusal(request(gw, "GET", pod, port, "/", ns=ns), status, code, what)
    check(stats["conns"] == 0, f"a refused request reached the pod ({stats['conns']} connections)")
    # The same pod, properly asked, is reached.
    st, h, body = request(gw, "GET", "sb-guard", AGENT_PORT, "/health")
    check(st == 204 and stats["conns"] == 1, f"the canary itself: {st}, {stats['conns']} connections")
    fails = gw.metric("fedrouter_gateway_auth_failures_total") - fails0
    check(fails == 8, f"auth failures counted: {fails}, want 8")
    check(gw.metric("fedrouter_gateway_auth_failures_total", reason="expired") >= 1 and
          gw.metric("fedrouter_gateway_auth_failures_total", reason="expiry_too_far") >= 1 and
          gw.metric("fedrouter_gateway_auth_failures_total", reason="missing") >= 1, "reasons not counted")
    check(gw.metric("fedrouter_gateway_requests_total", outcome="bad_request") >= 20 and
          gw.metric("fedrouter_gateway_requests_total", outcome="forbidden") >= 9 and
          gw.metric("fedrouter_gateway_requests_total", outcome="not_found") >= 4, "refusals not counted")
    log = open(gw.log, errors="replace").read()
    check("signature expired" in log and "signature bad_signature" in log and "path_not_allowed" in log,
          "refusals not logged:\n" + tail(gw.log))
    canary.stop()


def test_per_sandbox_limit(w, gw):
    g2 = w.gateway(["--max-per-sandbox", "2"], name="gw-limit")
    w.sandbox("sb-limit")
    streams = [start_stream(g2, "sb-limit", "sleep", ["1"]) for _ in range(2)]
    resp = request(g2, "GET", "sb-limit", AGENT_PORT, "/health")
    expect_refusal(resp, 429, "too_many_connections", "a third open request")
    check(resp[1].get("retry-after") == "1", f"429 without Retry-After: {resp[1]}")
    for c, r in streams:
        read_events(r)
        c.close()
    check(wait_until(lambda: request(g2, "GET", "sb-limit", AGENT_PORT, "/health")[0] == 204, 5),
          "the sandbox stays limited after its requests ended")
    check(g2.metric("fedrouter_gateway_requests_total", outcome="limited") == 1, "429 not counted")
    stop_proc(g2.proc, signal.SIGINT)


def test_key_rotation_without_restart(w, gw):
    ip = w.make_pod("sb-keys", new_pod_ip(), agent=False)
    srv, _ = serve(ip, 8080, http_misc)
    old, new = w.keys[0], os.urandom(32).hex().encode()
    check(request(gw, "GET", "sb-keys", 8080, "/chunked", key=new)[0] == 401, "the new key works before it is in")
    # The kubelet updates the Secret volume: current = new, previous = old.
    w.keys = [new, old]
    w.write_keys()
    gw.proc.send_signal(signal.SIGHUP)
    check(wait_until(lambda: request(gw, "GET", "sb-keys", 8080, "/chunked", key=new)[0] == 200, 10),
          "the new key is not accepted after SIGHUP:\n" + tail(gw.log))
    check(request(gw, "GET", "sb-keys", 8080, "/chunked", key=old)[0] == 200, "the previous key is refused mid-rotation")
    # The rotation ends: previous emptied.
    w.keys = [new, b""]
    w.write_keys()
    gw.proc.send_signal(signal.SIGHUP)
    check(wait_until(lambda: request(gw, "GET", "sb-keys", 8080, "/chunked", key=old)[0] == 401, 10),
          "the old key still works after the rotation")
    check(gw.metric("fedrouter_gateway_keys") == 1 and gw.metric("fedrouter_gateway_key_reloads_total", result="ok") == 2,
          "key reloads not counted")
    # A broken key file keeps the ring as it was.
    with open(w.key_files[1], "w") as f:
        f.write("short\n")
    gw.proc.send_signal(signal.SIGHUP)
    check(wait_until(lambda: gw.metric("fedrouter_gateway_key_reloads_total", result="error") == 1, 10),
          "a bad key file not reported")
    check(request(gw, "GET", "sb-keys", 8080, "/chunked", key=new)[0] == 200, "a bad key file broke the ring")
    w.write_keys()
    srv.stop()


def test_deleted_or_gone_pod_answers_at_once(w, gw):
    ip = w.make_pod("sb-gone", new_pod_ip(), agent=False)
    srv, _ = serve(ip, 8080, http_misc)
    check(request(gw, "GET", "sb-gone", 8080, "/chunked")[0] == 200, "before the delete")
    srv.stop()
    # Still cached and Ready, nothing listening: the dial fails fast.
    t0 = time.monotonic()
    expect_refusal(request(gw, "GET", "sb-gone", 8080, "/chunked"), 502, "upstream_unreachable", "server gone")
    check(time.monotonic() - t0 < 2, "a refused dial took long")
    # Deleted (kubesim keeps it Terminating for 1.5 s, then it is gone):
    # 404 as soon as the cache sees the deletion, never a dial.
    w.delete_pod("sb-gone")
    check(wait_until(lambda: request(gw, "GET", "sb-gone", 8080, "/chunked")[0] == 404, 5),
          "a pod being deleted is still served")
    expect_refusal(request(gw, "GET", "sb-gone", 8080, "/chunked"), 404, "sandbox_not_found", "while terminating")
    check(wait_until(lambda: w.kube("GET", f"/api/v1/namespaces/{NS}/pods/sb-gone")[0] == 404, 10),
          "kubesim did not remove the pod")
    expect_refusal(request(gw, "GET", "sb-gone", 8080, "/chunked"), 404, "sandbox_not_found", "after the delete")
    # A new pod that gets the old address while the old one is still
    # cached: neither is served until the cache agrees.
    ip2 = new_pod_ip()
    w.make_pod("sb-ip-a", ip2, agent=False)
    w.make_pod("sb-ip-b", ip2, agent=False)
    check(wait_until(lambda: request(gw, "GET", "sb-ip-a", 8080, "/")[0] == 503, 5), "an address held twice is served")
    expect_refusal(request(gw, "GET", "sb-ip-b", 8080, "/"), 503, "sandbox_address_conflict", "address conflict")


def test_token_rotation_in_cluster(w, gw):
    """The projected token changes: the file gets the new one, the API
    server stops accepting the old; the gateway re-reads on the 401 and its
    cache keeps following the cluster."""
    new_token = "sa-rotated-" + os.urandom(6).hex()
    unauthorized0 = w.admin("GET", "/_sim/state")[1]["unauthorized"]
    tok = os.path.join(w.sa, "token")
    with open(tok + ".tmp", "w") as f:
        f.write(new_token)
    os.rename(tok + ".tmp", tok)
    st, _ = w.admin("PUT", "/_sim/tokens", {"tokens": [new_token, SIM_TOKEN + "-admin-only"]})
    check(st == 200, f"kubesim tokens: {st}")
    # The open watch was authorized at its start; a new one must carry the new token.
    w.admin("POST", "/_sim/faults", {"drop_watches": True})
    try:
        # Our own API calls now need the new token too.
        def kube_new(method, path, body=None, expect=None, ctype="application/json"):
            return World.kube(w, method, path, body, expect, ctype, token=new_token)
        w.kube = kube_new
        ip = w.make_pod("sb-after-rotation", new_pod_ip(), agent=False)
        srv, _ = serve(ip, 8080, http_misc)
        check(wait_until(lambda: request(gw, "GET", "sb-after-rotation", 8080, "/chunked")[0] == 200, 15),
              "the gateway does not see pods made after the token rotation:\n" + tail(gw.log))
        st, state = w.admin("GET", "/_sim/state")
        check(state["unauthorized"] > unauthorized0, "no 401 was seen: the rotation was not exercised")
        check(gw.metric("fedrouter_gateway_cache_healthy", namespace=NS) == 1, "the cache is unhealthy")
        srv.stop()
    finally:
        del w.kube
        w.admin("PUT", "/_sim/tokens", {"tokens": [SIM_TOKEN, new_token]})


def test_sigterm_drain(w, gw):
    g2 = w.gateway(["--shutdown-delay-ms", "1500", "--drain-timeout-s", "20"], name="gw-drain")
    w.sandbox("sb-drain")
    c, r = start_stream(g2, "sb-drain", "sh", ["-c", "echo start; sleep 3; echo done"])
    check(r.status == 200, f"stream: {r.status}")
    t0 = time.monotonic()
    g2.proc.send_signal(signal.SIGTERM)
    check(wait_until(lambda: g2.health("/readyz")[0] == 503, 2), "/readyz still 200 after SIGTERM")
    # During the delay the gateway still serves new requests.
    check(request(g2, "GET", "sb-drain", AGENT_PORT, "/health")[0] == 204, "not serving during the delay")
    out, ex, end = read_events(r)
    check(out == b"start\ndone\n" and ex and ex.get("exitCode") == 0, f"the in-flight stream: {out} {ex}")
    c.close()
    rc = g2.proc.wait(15)
    g2.expected_exit = True
    check(rc == 0, f"exit {rc} after the drain:\n" + tail(g2.log))
    check(time.monotonic() - t0 >= 1.5, "exited before the shutdown delay")


def test_mutual_tls_when_asked(w, gw):
    """--client-ca: a router without a client certificate from that CA is
    refused at the handshake; with one, requests go through (the signature
    is still required)."""
    d = os.path.join(w.root, "mtls")
    os.makedirs(d)

    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
         "-out", "ca.crt", "-days", "2", "-subj", "/CN=routers-ca")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "r.key", "-out",
         "r.csr", "-subj", "/CN=router")
    ossl("x509", "-req", "-in", "r.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "r.crt",
         "-days", "2")
    g2 = w.gateway(["--client-ca", os.path.join(d, "ca.crt")], name="gw-mtls")
    ip = w.make_pod("sb-mtls", new_pod_ip(), agent=False)
    srv, _ = serve(ip, 8080, http_misc)
    try:
        request(g2, "GET", "sb-mtls", 8080, "/chunked")
        check(False, "a client without a certificate got through")
    except (ssl.SSLError, ConnectionError, OSError):
        pass
    ctx = ssl.create_default_context(cafile=w.cert)
    ctx.load_cert_chain(os.path.join(d, "r.crt"), os.path.join(d, "r.key"))
    c = http.client.HTTPSConnection("127.0.0.1", g2.port, timeout=10, context=ctx)
    st, h, body = request(g2, "GET", "sb-mtls", 8080, "/chunked", conn=c)
    check(st == 200 and body == b"hello world", f"with a client certificate: {st} {body!r}")
    expect_refusal(request(g2, "GET", "sb-mtls", 8080, "/chunked", conn=c, auth=False), 401, "unauthenticated",
                   "a certificate does not replace the signature")
    c.close()
    srv.stop()
    stop_proc(g2.proc, signal.SIGINT)


def test_router_in_cluster(w, gw):
    """The router's `in_cluster = true`: its cluster reached with the pod's
    service account, as the gateway does; a token rotation too."""
    if not ARGS.fedrouter:
        print("     (skipped: no --fedrouter)")
        return
    conf = os.path.join(w.root, "router.conf")
    with open(conf, "w") as f:
        f.write('listen = "127.0.0.1:0";\nregion = "us";\nshutdown_delay_ms = 0;\n'
                'clusters = ( { name = "home"; region = "us"; in_cluster = true; namespace = "%s"; } );\n' % NS)
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(w.port),
               FR_SERVICEACCOUNT_DIR=w.sa)
    chk = subprocess.run([ARGS.fedrouter, "config", "check", conf], env=env, capture_output=True, text=True)
    check(chk.returncode == 0, f"config check: {chk.stdout} {chk.stderr}")
    outside = dict(os.environ)
    outside.pop("KUBERNETES_SERVICE_HOST", None)
    chk = subprocess.run([ARGS.fedrouter, "config", "check", conf], env=outside, capture_output=True, text=True)
    check(chk.returncode == 0 and "in_cluster: not checked here" in chk.stdout,
          f"config check outside a pod: {chk.returncode} {chk.stdout} {chk.stderr}")
    log = os.path.join(w.root, "router.log")
    rp = subprocess.Popen([ARGS.fedrouter, "--config", conf], env=env, stdout=subprocess.PIPE,
                          stderr=open(log, "wb"), start_new_session=True)
    PROCS.append(rp)
    try:
        line = rp.stdout.readline().decode()
        m = re.search(r":(\d+)\s*$", line)
        check(m, f"router did not print its port: {line!r}\n" + tail(log))
        port = int(m.group(1))

        def api(method, path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            out = json.loads(r.read() or b"null")
            c.close()
            return r.status, out
        check(wait_until(lambda: api("GET", "/readyz")[0] == 200, 15), "router not ready:\n" + tail(log))
        st, cl = api("GET", "/v1/clusters")
        home = [c for c in cl.get("clusters", []) if c.get("name") == "home"]
        check(st == 200 and home and home[0].get("healthy") is True, f"/v1/clusters: {st} {short(cl)}")
        st, out = api("POST", "/v1/sandboxes", {"image": "python:3.12", "name": "ic"})
        check(st == 201, f"create through the in-cluster identity: {st} {short(out)}")
        pod = out["sandboxes"][0]["id"].split(".", 1)[1]
        check(w.kube("GET", f"/api/v1/namespaces/{NS}/pods/{pod}")[0] == 200, "the pod is not in the cluster")
        print(f"     sandbox {out['sandboxes'][0]['id']} made through the in-cluster identity")
    finally:
        rp.send_signal(signal.SIGTERM)
        rc = rp.wait(20)
        check(rc == 0, f"router exit {rc}:\n" + tail(log))


WS_ECHO_SERVER = r'''
import base64, hashlib, re, socket, socketserver, struct
class H(socketserver.BaseRequestHandler):
    def handle(self):
        s, buf = self.request, b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                return
            buf += d
        head, _, buf = buf.partition(b"\r\n\r\n")
        key = re.search(rb"(?im)^sec-websocket-key:\s*(\S+)", head).group(1)
        acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Accept: " + acc + b"\r\nX-In-Pod: yes\r\n\r\n")
        while True:
            while len(buf) < 2:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
            op, n, off = buf[0] & 15, buf[1] & 127, 2
            if n == 126:
                while len(buf) < 4: buf += s.recv(65536)
                n, off = struct.unpack(">H", buf[2:4])[0], 4
            elif n == 127:
                while len(buf) < 10: buf += s.recv(65536)
                n, off = struct.unpack(">Q", buf[2:10])[0], 10
            while len(buf) < off + 4 + n:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
            m, p = buf[off:off + 4], buf[off + 4:off + 4 + n]
            buf = buf[off + 4 + n:]
            p = bytes(b ^ m[i % 4] for i, b in enumerate(p))
            hdr = bytes([0x80 | op]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n) if n < 65536
                                        else bytes([127]) + struct.pack(">Q", n))
            s.sendall(hdr + p)
            if op == 8:
                return
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("0.0.0.0", 8765), H).serve_forever()
'''


def test_real_pods_agent_user_port_websocket(w, gw):
    """kubesim's pods with addresses of their own (a network namespace per
    pod on its bridge, as root): the real agent kubesim runs in the pod,
    `python3 -m http.server` the pod's own command on 0.0.0.0:8000 in two
    pods at once, a WebSocket echo server started in a pod through the
    agent; all reached through the gateway at the pods' IPs."""
    mode = w.pod_network()
    if mode != "bridge":
        print(f"     (skipped: kubesim's pod network is {mode!r}, not a bridge of namespaces: not root?)")
        return
    ips = [w.agent_pod(f"sb-real-{i}", ["python3", "-m", "http.server", "8000", "--directory", "/tmp"])
           for i in (1, 2)]
    check(ips[0] != ips[1] and all(ip.startswith(("10.", "172.", "192.168.")) for ip in ips),
          f"pod addresses: {ips}")
    for i, ip in enumerate(ips, 1):
        pod = f"sb-real-{i}"
        check(wait_until(lambda: request(gw, "GET", pod, AGENT_PORT, "/health")[0] == 204, 10),
              f"the gateway does not reach {pod}'s agent at {ip}")
        c, r = start_stream(gw, pod, "sh", ["-c", "echo $((6 * 7)); echo pod-%d" % i])
        out, ex, end = read_events(r)
        c.close()
        check(out == b"42\npod-%d\n" % i and ex.get("exitCode") == 0, f"exec in {pod}: {out} {ex}")
        body = b"hello from pod %d\n" % i
        st, h, _ = request(gw, "POST", pod, AGENT_PORT, "/files?path=%2Ftmp%2Fhello.txt", body=body,
                           headers={"X-Access-Token": AGENT_TOKEN, "Content-Type": "application/octet-stream"})
        check(st == 200, f"upload to {pod}: {st}")
        check(wait_until(lambda: request(gw, "GET", pod, 8000, "/hello.txt")[2] == body, 10),
              f"{pod}'s own http.server on 0.0.0.0:8000 through the gateway: "
              f"{request(gw, 'GET', pod, 8000, '/hello.txt')[:2]}")
    # A WebSocket echo server started in the first pod through its agent.
    c, r = start_stream(gw, "sb-real-1", "python3", ["-c", WS_ECHO_SERVER])
    check(r.status == 200, f"start the echo server: {r.status}")

    def ws_open():
        try:
            sock = gw.raw(timeout=5)
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall((f"GET {gpath('sb-real-1', 8765, '/')} HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                          f"Fr-Gateway-Auth: {sign(w.keys[0], 'sb-real-1', 8765)}\r\n\r\n").encode())
            head, rest = read_head(sock)
            if head is not None and head.startswith("HTTP/1.1 101") and "x-in-pod: yes" in head.lower():
                return sock, rest
            sock.close()
        except OSError:
            pass
        return None
    opened = wait_until(ws_open, 15, 0.2)
    check(opened, "no WebSocket to the echo server in the pod")
    sock, buf = opened
    for payload in (b"in-pod", os.urandom(100000)):
        ws_send(sock, 2, payload)
        frame, buf = ws_read_frame(sock, buf)
        check(frame == (2, payload), f"echo of {len(payload)} bytes from the pod")
    sock.close()
    c.close()
    for i in (1, 2):
        w.delete_pod(f"sb-real-{i}")


FIRST = [test_exec_through_the_gateway, test_real_pods_agent_user_port_websocket,
         test_keep_alive_across_framings_and_refusals,
         test_kept_alive_pod_connection_closed_by_the_pod_is_retried, test_user_port_http_server,
         test_websocket_and_upgrade_pass_through, test_files_50mb_both_ways_rss_flat, test_refusals_before_any_dial,
         test_per_sandbox_limit, test_key_rotation_without_restart, test_deleted_or_gone_pod_answers_at_once,
         test_token_rotation_in_cluster, test_mutual_tls_when_asked, test_router_in_cluster, test_sigterm_drain]


def watchdog():
    time.sleep(WATCHDOG_S)
    print(f"watchdog: {WATCHDOG_S} s passed, killing everything", flush=True)
    for p in PROCS:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(2)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--fedrouter", help="also check the router's in_cluster = true")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()
    for k in ("gateway", "kubesim", "agent", "fedrouter"):
        if getattr(ARGS, k):
            setattr(ARGS, k, os.path.abspath(getattr(ARGS, k)))
    threading.Thread(target=watchdog, daemon=True).start()
    results = []
    w = World()
    try:
        gw = w.gateway()
        for t in FIRST:
            if ARGS.only and t.__name__ not in ARGS.only:
                continue
            t0 = time.monotonic()
            try:
                check(gw.proc.poll() is None, "the gateway is not running:\n" + tail(gw.log))
                t(w, gw)
                results.append((t.__name__, True))
                print(f"ok   {t.__name__} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001
                results.append((t.__name__, False))
                detail = str(e) if isinstance(e, TestFailure) else traceback.format_exc()
                print(f"FAIL {t.__name__}: {detail}", flush=True)
    finally:
        problems = w.teardown()
    results.append(("teardown", not problems))
    print("ok   teardown" if not problems else "FAIL teardown: " + "\n".join(problems))
    failed = [n for n, ok in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
