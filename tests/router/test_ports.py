#!/usr/bin/env python3
"""A sandbox's own ports, black-box: preview URLs by path and by host, the
E2B relay to a port, tokens, public ports, bounds.

One kubesim cluster "pt" whose pods run the real agent in their own
network namespaces; the router has an `agent` group and
`ports = { domain = "sbx.localhost"; ... }`. A sandbox runs
`python3 -m http.server 8000 --bind 0.0.0.0` (started through the API).

Proves (docs/api.md "Ports"):
- /v1/sandboxes/{id}/ports/8000/<path> reaches the server with the owner's
  token (its status, headers and body come back as they are; a POST is
  streamed to it); another tenant gets 404;
- a port nobody listens on is 502 port_not_open within a second; 0, 70000
  and the agent's 49983 are 400 invalid_port;
- Host: 8000-<short id>.sbx.localhost reaches the same server with the
  sandbox's traffic token or the owner's bearer token, and is a 404 for no
  token, a wrong token or another tenant's; a sandbox created with
  public_ports [8000] needs none;
- the E2B relay: E2b-Sandbox-Port: 8000 with the sandbox's access token
  sends the request as it came (path after /e2b) to that port;
- ports.max_requests_per_sandbox bounds requests in flight (429), and a
  client that leaves gives its place back;
- WebSockets: an RFC 6455 echo server in the sandbox (port 8003, Python's
  standard library) is reached by path and by host routing: the server's
  101 (its Sec-WebSocket-Accept, the path and query it saw) comes back, a
  text and a 1 MiB binary message echo unmodified, the client's close gets
  the server's close and then EOF; another tenant, no token or a wrong one
  get 404 before any upgrade; ports.max_tunnels_per_tenant and
  ports.max_tunnels bound open tunnels (429 naming each) and a closed
  tunnel gives its place back;
- a client that sends into a tunnel and never reads is stopped by
  backpressure: what it gets to send, and the router's RSS, stay bounded;
- a tunnel with no traffic is closed after ports.tunnel_idle_timeout_s
  (IDLE_S here), not before, and an upgrade the server takes but never
  answers is 504 port_timeout after as long; a tunnel still open when the router stops
  ends cleanly (exit 0, no sanitizer report).

Usage: test_ports.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import select
import socket
import struct
import sys
import threading
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 170  # ctest's TIMEOUT is 180
CLUSTER = "pt"
DOMAIN = "sbx.localhost"
PER_SANDBOX = 4
TUNNELS_PER_TENANT = 3
MAX_TUNNELS = 5
IDLE_S = 5
WS_PORT = 8003
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# An RFC 6455 echo server, standard library only: each message comes back
# with its opcode; a close is answered with a close, then the connection
# ends. The 101 carries the request target it saw (X-Echo-Target).
WS_ECHO = r'''
import base64, hashlib, socket, struct, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def frame(op, data):
    n = len(data)
    if n < 126: h = struct.pack("!BB", 0x80 | op, n)
    elif n < 65536: h = struct.pack("!BBH", 0x80 | op, 126, n)
    else: h = struct.pack("!BBQ", 0x80 | op, 127, n)
    return h + data
def serve(c):
    f = c.makefile("rb")
    try:
        line = f.readline()
        hs = {}
        while True:
            l = f.readline()
            if l in (b"\r\n", b""): break
            k, _, v = l.partition(b":")
            hs[k.strip().lower()] = v.strip()
        key = hs.get(b"sec-websocket-key")
        if b"/chunked" in line:
            c.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
                      b"\r\n5\r\nuse a\r\na\r\nnother way\r\n0\r\n\r\n")
            return
        if hs.get(b"upgrade", b"").lower() != b"websocket" or key is None:
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nnot websocket\n")
            return
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Accept: " + acc + b"\r\nX-Echo-Target: " + line.split(b" ")[1] + b"\r\n\r\n")
        msg, mop = b"", 0
        while True:
            b0, b1 = f.read(2)
            op, n = b0 & 15, b1 & 127
            if n == 126: n = struct.unpack("!H", f.read(2))[0]
            elif n == 127: n = struct.unpack("!Q", f.read(8))[0]
            mask = f.read(4) if b1 & 128 else b"\0\0\0\0"
            data = f.read(n)
            k = (mask * (n // 4 + 1))[:n]
            data = (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big") if n else b""
            if op == 8:
                c.sendall(frame(8, data[:2]))
                return
            if op == 9:
                c.sendall(frame(10, data)); continue
            if op != 0: mop = op
            msg += data
            if b0 & 0x80:
                c.sendall(frame(mop, msg)); msg = b""
    except Exception:
        pass
    finally:
        f.close(); c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


class PortsFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path, "a") as f:
            f.write(f'ports = {{ domain = "{DOMAIN}"; max_requests_per_sandbox = {PER_SANDBOX}; '
                    f'max_requests_per_tenant = 64; max_tunnels_per_tenant = {TUNNELS_PER_TENANT}; '
                    f'max_tunnels = {MAX_TUNNELS}; '
                    f'tunnel_idle_timeout_s = {IDLE_S}; }};\n')


def key(fed):
    with open(os.path.join(fed.root, "agent.key")) as f:
        return f.read().strip().encode()


def access_token(fed, sid):
    return hmac.new(key(fed), sid.encode(), hashlib.sha256).hexdigest()


def traffic_token(fed, sid):
    return hmac.new(key(fed), b"fedrouter-traffic\n" + sid.encode(), hashlib.sha256).hexdigest()


def short_id(fed, sid):
    """The sandbox's id as E2B shows it (one DNS label)."""
    st, r = tr.api_call(fed.router.port, "GET", "/e2b/sandboxes/" + sid, headers={"X-API-Key": tr.TOKEN_A})
    check(st == 200 and "." not in r["sandboxID"] and len(r["sandboxID"]) <= 57,
          f"E2B getInfo: {st} {short(r)}")
    return r["sandboxID"], r


def request(fed, method, path, headers=None, body=None, timeout=15):
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def start_server(fed, sid, token, port=8000, cmd=None):
    argv = cmd or ["python3", "-m", "http.server", str(port), "--bind", "0.0.0.0", "--directory", "/tmp/www"]
    st, r = fed.exec(sid, ["mkdir", "-p", "/tmp/www"], token=token)
    check(st == 200 and r["exit_code"] == 0, f"mkdir: {st} {short(r)}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"argv": argv}, token=token)
    check(st == 201, f"start the server: {st} {short(r)}")


def test_setup(fed):
    sid = fed.create_one(name="web", token=tr.TOKEN_A)["id"]
    fed.shared["sid"] = sid
    st, r = fed.api("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/www/hello.txt", raw=b"hello from the sandbox\n",
                    token=tr.TOKEN_A)
    start_server(fed, sid, tr.TOKEN_A)
    check(wait_until(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/hello.txt",
                                     {"Authorization": "Bearer " + tr.TOKEN_A})[0] == 200, 20, 0.1),
          "the sandbox's server did not answer through its port in 20 s")


def test_path_routing(fed):
    sid = fed.shared["sid"]
    h = {"Authorization": "Bearer " + tr.TOKEN_A}
    st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/hello.txt", h)
    check(st == 200 and body == b"hello from the sandbox\n" and hd.get("content-type", "").startswith("text/plain")
          and "last-modified" in hd, f"GET a file: {st} {hd} {body[:100]!r}")
    st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/", h)
    check(st == 200 and b"hello.txt" in body, f"the directory listing: {st} {body[:200]!r}")
    st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/nope?x=1", h)
    check(st == 404 and b"File not found" in body, f"the server's own 404 comes back: {st} {body[:200]!r}")
    st, hd, body = request(fed, "POST", f"/v1/sandboxes/{sid}/ports/8000/", h, body=b"x" * 100000)
    check(st == 501, f"the server's own 501 for POST: {st} {body[:200]!r}")
    st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/hello.txt",
                           {"Authorization": "Bearer " + tr.TOKEN_B})
    check(st == 404 and json.loads(body)["error"]["code"] == "sandbox_not_found",
          f"another tenant: {st} {body[:200]!r}")


def test_closed_and_invalid_ports(fed):
    sid = fed.shared["sid"]
    h = {"Authorization": "Bearer " + tr.TOKEN_A}
    t0 = time.monotonic()
    st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8001/", h)
    took = time.monotonic() - t0
    check(st == 502 and json.loads(body)["error"]["code"] == "port_not_open" and "8001" in
          json.loads(body)["error"]["message"], f"a port nobody listens on: {st} {body[:200]!r}")
    print(f"     port_not_open answered in {took * 1000:.0f} ms")
    for port in ("0", "70000", "49983", "x"):
        st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/{port}/", h)
        check(st == 400 and json.loads(body)["error"]["code"] == "invalid_port", f"port {port}: {st} {body[:200]!r}")
    st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/../../../../init", h)
    check(st == 400 and json.loads(body)["error"]["code"] == "invalid_path", f"dot segments: {st} {body[:200]!r}")


def test_host_routing(fed):
    sid = fed.shared["sid"]
    sh, info = short_id(fed, sid)
    check(info.get("domain") == DOMAIN and info.get("trafficAccessToken") == traffic_token(fed, sid),
          f"E2B's domain and traffic token: {short(info)}")
    host = f"8000-{sh}.{DOMAIN}:{fed.router.port}"
    for hdrs, want in (({}, 404), ({"E2B-Traffic-Access-Token": "0" * 64}, 404),
                       ({"Authorization": "Bearer " + tr.TOKEN_B}, 404),
                       ({"E2B-Traffic-Access-Token": traffic_token(fed, sid)}, 200),
                       ({"Authorization": "Bearer " + tr.TOKEN_A}, 200)):
        st, hd, body = request(fed, "GET", "/hello.txt", dict(hdrs, Host=host))
        check(st == want and (want != 200 or body == b"hello from the sandbox\n"),
              f"Host {host} with {list(hdrs)}: {st} {body[:200]!r}")
    # A guessed id is the same 404.
    st, hd, body = request(fed, "GET", "/hello.txt", {"Host": f"8000-sb-nope000000-abcd.{DOMAIN}",
                                                      "E2B-Traffic-Access-Token": traffic_token(fed, sid)})
    check(st == 404, f"a guessed id: {st}")


def test_host_auto_resume(fed):
    """A paused sandbox created with auto_resume: a call to one of its
    ports by someone who may reach it (its traffic token, the owner's
    token, anyone for a public port; by host, by path, or E2B's
    E2b-Sandbox-Port with the access token) resumes it first;
    a wrong token gets 404 and resumes nothing. Nothing listens in the
    resumed pod (processes are not kept): 502 port_not_open, after the
    resume."""
    sid = fed.create_one(name="auto", token=tr.TOKEN_A, workspace={"path": "/workspace", "size": "1Gi"},
                         on_timeout="pause", auto_resume=True, public_ports=[8001])["id"]
    sh, _ = short_id(fed, sid)

    def state():
        st, r = fed.api("GET", "/v1/sandboxes/" + sid, token=tr.TOKEN_A)
        return r.get("state") if st == 200 else st

    def pause():
        st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause", token=tr.TOKEN_A)
        check(st == 200, f"pause: {st} {short(r)}")
        check(wait_until(lambda: state() == "paused", 20, 0.1), f"paused: {state()}")

    host = f"8000-{sh}.{DOMAIN}"
    for how, path, hdrs in (("by host with the traffic token", "/x", {"Host": host,
                                                                      "E2B-Traffic-Access-Token": traffic_token(fed, sid)}),
                            ("by host, a public port, no token", "/x", {"Host": f"8001-{sh}.{DOMAIN}"}),
                            ("by path with the owner's token", f"/v1/sandboxes/{sid}/ports/8000/x",
                             {"Authorization": "Bearer " + tr.TOKEN_A}),
                            ("E2B to port 8000 with the access token", "/e2b/x",
                             {"E2b-Sandbox-Id": sh, "E2b-Sandbox-Port": "8000",
                              "X-Access-Token": access_token(fed, sid)})):
        pause()
        st, _, body = request(fed, "GET", "/x", {"Host": host, "E2B-Traffic-Access-Token": "0" * 64})
        check(st == 404 and state() == "paused", f"a wrong token: {st}, then {state()}")
        st, _, body = request(fed, "GET", "/x", {"Host": f"8000-{sh}.{DOMAIN}"})
        check(st == 404 and state() == "paused", f"a private port without a token: {st}, then {state()}")
        st, _, body = request(fed, "GET", "/e2b/x", {"E2b-Sandbox-Id": sh, "E2b-Sandbox-Port": "8000",
                                                     "X-Access-Token": "0" * 64})
        check(st == 404 and state() == "paused", f"E2B with a wrong access token: {st}, then {state()}")
        st, _, body = request(fed, "GET", path, hdrs, timeout=60)
        j = json.loads(body) if body[:1] == b"{" else {}
        code = j["error"]["code"] if isinstance(j.get("error"), dict) else j.get("code", body[:100])
        check(st == 502 and code in ("port_not_open", 502) and state() == "running",
              f"{how}: {st} {code}, then {state()}")
    fed.api("DELETE", "/v1/sandboxes/" + sid, token=tr.TOKEN_A)


def test_public_port(fed):
    sid = fed.create_one(name="pub", token=tr.TOKEN_A, public_ports=[8000])["id"]
    start_server(fed, sid, tr.TOKEN_A)
    fed.api("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/www/pub.txt", raw=b"public\n", token=tr.TOKEN_A)
    sh, _ = short_id(fed, sid)
    check(wait_until(lambda: request(fed, "GET", "/pub.txt", {"Host": f"8000-{sh}.{DOMAIN}"})[0] == 200, 20, 0.1),
          "a public port needs no token")
    st, hd, body = request(fed, "GET", "/", {"Host": f"8001-{sh}.{DOMAIN}"})
    check(st == 404, f"another port of the same sandbox is still private: {st}")
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "public_ports": [49983]}, token=tr.TOKEN_A)
    check(st == 400 and r["error"].get("field") == "public_ports", f"the agent's port cannot be public: {st}")
    fed.api("DELETE", "/v1/sandboxes/" + sid, token=tr.TOKEN_A)


def test_e2b_port_relay(fed):
    sid = fed.shared["sid"]
    sh, _ = short_id(fed, sid)
    for ident in (sid, sh):
        st, hd, body = request(fed, "GET", "/e2b/hello.txt", {"E2b-Sandbox-Id": ident, "E2b-Sandbox-Port": "8000",
                                                              "X-Access-Token": access_token(fed, sid)})
        check(st == 200 and body == b"hello from the sandbox\n", f"E2B to port 8000 as {ident}: {st} {body[:200]!r}")
    st, hd, body = request(fed, "GET", "/e2b/hello.txt", {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "8000",
                                                          "X-Access-Token": "0" * 64})
    check(st == 404, f"E2B with a wrong access token: {st}")
    st, hd, body = request(fed, "GET", "/e2b/", {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "8009",
                                                 "X-Access-Token": access_token(fed, sid)})
    check(st == 502 and json.loads(body).get("code") == 502, f"E2B to a closed port, in E2B's shape: {st} {body!r}")


def test_requests_in_flight_bounded(fed):
    sid = fed.shared["sid"]
    h = {"Authorization": "Bearer " + tr.TOKEN_A}
    # A server that takes connections and never answers.
    start_server(fed, sid, tr.TOKEN_A, cmd=["python3", "-c", "import socket,time\n"
                                            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                                            "s.bind(('0.0.0.0', 8002)); s.listen(64); c=[]\n"
                                            "while True: c.append(s.accept())\n"])
    check(wait_until(lambda: fed.exec_ok(sid, ["python3", "-c", "import socket\n"
                                              "socket.create_connection(('127.0.0.1', 8002)).close()"],
                                         token=tr.TOKEN_A)["exit_code"] == 0, 20, 0.2),
          "the never-answering server did not listen")
    socks = []
    try:
        for _ in range(PER_SANDBOX):
            sk = socket.create_connection(("127.0.0.1", fed.router.port), timeout=10)
            sk.sendall(f"GET /v1/sandboxes/{sid}/ports/8002/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                       f"{tr.TOKEN_A}\r\n\r\n".encode())
            socks.append(sk)

        def full():
            st, hd, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/hello.txt", h)
            return st == 429 and "ports.max_requests_per_sandbox" in body.decode()
        check(wait_until(full, 15, 0.1), "the sandbox's bound on requests in flight did not take effect")
    finally:
        for sk in socks:
            sk.close()
    check(wait_until(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/hello.txt", h)[0] == 200, 15, 0.1),
          "clients that left did not give their places back")


class WS:
    """A WebSocket client on a raw socket to the router."""

    def __init__(self, fed, target, headers, timeout=20, addr=None):
        self.sk = socket.create_connection(addr or ("127.0.0.1", fed.router.port), timeout=timeout)
        self.key = base64.b64encode(os.urandom(16))
        lines = [f"GET {target} HTTP/1.1", "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: " + self.key.decode()]
        if not any(k.lower() == "host" for k in headers):
            lines.append("Host: x")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sk.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.f = self.sk.makefile("rb")
        status = self.f.readline()
        self.status = int(status.split()[1])
        self.headers = {}
        clen = 0
        while True:
            ln = self.f.readline()
            if ln in (b"\r\n", b""):
                break
            k, _, v = ln.decode().partition(":")
            self.headers[k.strip().lower()] = v.strip()
        if "content-length" in self.headers:
            clen = int(self.headers["content-length"])
        self.body = self.f.read(clen) if self.status != 101 and clen else b""

    def accepted(self):
        want = base64.b64encode(hashlib.sha1(self.key + GUID).digest()).decode()
        return self.status == 101 and self.headers.get("sec-websocket-accept") == want

    def send(self, op, data):
        n, mask = len(data), os.urandom(4)
        if n < 126:
            h = struct.pack("!BB", 0x80 | op, 0x80 | n)
        elif n < 65536:
            h = struct.pack("!BBH", 0x80 | op, 0x80 | 126, n)
        else:
            h = struct.pack("!BBQ", 0x80 | op, 0x80 | 127, n)
        k = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big") if n else b""
        self.sk.sendall(h + mask + masked)

    def recv(self):
        hd = self.f.read(2)
        if len(hd) < 2:
            return None, b""
        op, n = hd[0] & 15, hd[1] & 127
        if n == 126:
            n = struct.unpack("!H", self.f.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.f.read(8))[0]
        return op, self.f.read(n)

    def close(self):
        self.f.close()
        self.sk.close()


def start_ws_echo(fed, sid, token=tr.TOKEN_A):
    st, r = fed.api("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/ws_echo.py", raw=WS_ECHO.encode(), token=token)
    check(st in (200, 201, 204), f"upload the echo server: {st} {short(r)}")
    start_server(fed, sid, token, cmd=["python3", "/tmp/ws_echo.py", str(WS_PORT)])
    check(wait_until(lambda: fed.exec_ok(sid, ["python3", "-c", "import socket\n"
                                              f"socket.create_connection(('127.0.0.1', {WS_PORT})).close()"],
                                         token=token)["exit_code"] == 0, 20, 0.2),
          "the WebSocket echo server did not listen")


def echo_both_ways(ws, what):
    check(ws.accepted(), f"{what}: no 101 with the right accept: {ws.status} {ws.headers} {ws.body[:200]!r}")
    ws.send(1, "héllo through the tunnel".encode())
    op, data = ws.recv()
    check(op == 1 and data.decode() == "héllo through the tunnel", f"{what}: text echo: {op} {data[:100]!r}")
    big = os.urandom(1 << 20)
    ws.send(2, big)
    op, data = ws.recv()
    check(op == 2 and data == big, f"{what}: 1 MiB binary echo: {op} {len(data)} bytes")
    ws.send(8, struct.pack("!H", 1000))
    op, data = ws.recv()
    check(op == 8 and data == struct.pack("!H", 1000), f"{what}: the close is answered: {op} {data!r}")
    op, data = ws.recv()
    check(op is None, f"{what}: EOF after the close: {op} {data[:100]!r}")
    ws.close()


def test_websocket_path(fed):
    sid = fed.shared["sid"]
    start_ws_echo(fed, sid)
    ws = WS(fed, f"/v1/sandboxes/{sid}/ports/{WS_PORT}/echo/a?x=1&y=%20z", {"Authorization": "Bearer " + tr.TOKEN_A})
    check(ws.headers.get("x-echo-target") == "/echo/a?x=1&y=%20z", f"the target the server saw: {ws.headers}")
    echo_both_ways(ws, "path routing")
    for hdrs in ({"Authorization": "Bearer " + tr.TOKEN_B}, {}):
        ws = WS(fed, f"/v1/sandboxes/{sid}/ports/{WS_PORT}/", hdrs)
        check(ws.status in (401, 404) and ws.status != 101, f"path routing with {list(hdrs)}: {ws.status} {ws.body!r}")
        if hdrs:
            check(ws.status == 404 and json.loads(ws.body)["error"]["code"] == "sandbox_not_found",
                  f"another tenant: {ws.status} {ws.body!r}")
        ws.close()
    # The sandbox's own refusal comes back as it is.
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=15)
    c.request("GET", f"/v1/sandboxes/{sid}/ports/{WS_PORT}/", headers={
        "Authorization": "Bearer " + tr.TOKEN_A, "Connection": "Upgrade", "Upgrade": "h2c"})
    r = c.getresponse()
    body = r.read()
    c.close()
    check(r.status == 400 and body == b"not websocket\n", f"a refused upgrade: {r.status} {body!r}")
    ws = WS(fed, f"/v1/sandboxes/{sid}/ports/{WS_PORT}/chunked", {"Authorization": "Bearer " + tr.TOKEN_A})
    check(ws.status == 426 and ws.body == b"use another way" and ws.headers.get("content-type") == "text/plain",
          f"a refused upgrade with a chunked body: {ws.status} {ws.headers} {ws.body!r}")
    ws.close()
    # Nothing listens: the same 502 as for any request.
    ws = WS(fed, f"/v1/sandboxes/{sid}/ports/8009/", {"Authorization": "Bearer " + tr.TOKEN_A})
    check(ws.status == 502 and json.loads(ws.body)["error"]["code"] == "port_not_open",
          f"an upgrade to a closed port: {ws.status} {ws.body!r}")
    ws.close()


def test_websocket_host(fed):
    sid = fed.shared["sid"]
    sh, _ = short_id(fed, sid)
    host = f"{WS_PORT}-{sh}.{DOMAIN}:{fed.router.port}"
    for hdrs in ({}, {"E2B-Traffic-Access-Token": "0" * 64}, {"Authorization": "Bearer " + tr.TOKEN_B}):
        ws = WS(fed, "/", dict(hdrs, Host=host))
        check(ws.status == 404, f"host routing with {list(hdrs)}: {ws.status} {ws.body!r}")
        ws.close()
    ws = WS(fed, "/ws?q=1", {"Host": host, "E2B-Traffic-Access-Token": traffic_token(fed, sid)})
    check(ws.headers.get("x-echo-target") == "/ws?q=1", f"the target the server saw: {ws.headers}")
    echo_both_ways(ws, "host routing")
    # The E2B relay with the sandbox's access token takes the same way.
    ws = WS(fed, "/e2b/relay", {"E2b-Sandbox-Id": sh, "E2b-Sandbox-Port": str(WS_PORT),
                                "X-Access-Token": access_token(fed, sid)})
    check(ws.headers.get("x-echo-target") == "/relay", f"the E2B relay's target: {ws.headers}")
    echo_both_ways(ws, "the E2B relay")


def test_tunnels_bounded(fed):
    sid = fed.shared["sid"]
    h = {"Authorization": "Bearer " + tr.TOKEN_A}
    target = f"/v1/sandboxes/{sid}/ports/{WS_PORT}/"
    open_ = []
    try:
        for _ in range(TUNNELS_PER_TENANT):
            ws = WS(fed, target, h)
            check(ws.accepted(), f"tunnel {len(open_) + 1}: {ws.status} {ws.body!r}")
            open_.append(ws)
        ws = WS(fed, target, h)
        check(ws.status == 429 and "ports.max_tunnels_per_tenant" in ws.body.decode(),
              f"one tunnel more than the bound: {ws.status} {ws.body!r}")
        ws.close()
        # Another tenant's request to it is a 404, not a 429.
        ws = WS(fed, target, {"Authorization": "Bearer " + tr.TOKEN_B})
        check(ws.status == 404, f"another tenant: {ws.status}")
        ws.close()
        # Tenant B, within its own bound, meets the router's (MAX_TUNNELS).
        sid_b = fed.create_one(name="web-b", token=tr.TOKEN_B)["id"]
        start_ws_echo(fed, sid_b, tr.TOKEN_B)
        hb = {"Authorization": "Bearer " + tr.TOKEN_B}
        target_b = f"/v1/sandboxes/{sid_b}/ports/{WS_PORT}/"
        while len(open_) < MAX_TUNNELS:
            ws = WS(fed, target_b, hb)
            check(ws.accepted(), f"tenant B's tunnel: {ws.status} {ws.body!r}")
            open_.append(ws)
        ws = WS(fed, target_b, hb)
        check(ws.status == 429 and json.loads(ws.body)["error"].get("limit") == "ports.max_tunnels",
              f"past the router's bound: {ws.status} {ws.body!r}")
        ws.close()
        n = gauge(fed, "fedrouter_port_tunnels")
        check(n == MAX_TUNNELS, f"fedrouter_port_tunnels {n}, want {MAX_TUNNELS}")
        open_.pop(0).close()   # one of tenant A's

        def room_b():
            w = WS(fed, target_b, hb)
            ok = w.accepted()
            w.close()
            return ok
        check(wait_until(room_b, 15, 0.1), "a closed tunnel of another tenant did not make room")
        open_.pop(0).close()   # A has one left open: room for one more of A's

        def room():
            w = WS(fed, target, h)
            ok = w.accepted()
            w.close()
            return ok
        check(wait_until(room, 15, 0.1), "a closed tunnel did not give its place back")
    finally:
        for ws in open_:
            ws.close()


def gauge(fed, name):
    """The value of the label-less sample <name> on the router's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{fed.router.port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_tunnel_backpressure(fed):
    sid = fed.shared["sid"]
    got = []

    def opened():
        # The previous test's tunnels close asynchronously (429 until then).
        w = WS(fed, f"/v1/sandboxes/{sid}/ports/{WS_PORT}/", {"Authorization": "Bearer " + tr.TOKEN_A})
        if w.status == 429:
            w.close()
            return False
        got.append(w)
        return True
    check(wait_until(opened, 15, 0.1), "no tunnel could be opened")
    ws = got[0]
    check(ws.accepted(), f"open: {ws.status}")
    ws.sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    before = rss_kib(fed.router.proc.pid)
    frame_ = struct.pack("!BBQ", 0x82, 0x80 | 127, 1 << 20) + b"\0\0\0\0"  # 1 MiB messages, zero mask
    chunk = frame_ + b"\0" * (1 << 20)
    sent, limit = 0, 256 << 20
    ws.sk.setblocking(False)
    try:
        # Send (never reading) until the router stops taking bytes: every
        # byte echoed back waits in some buffer, so the sending stalls.
        stalled = False
        while sent < limit and not stalled:
            _, w, _ = select.select([], [ws.sk], [], 3.0)
            if not w:
                stalled = True
                break
            try:
                sent += ws.sk.send(chunk[sent % len(chunk):])
            except BlockingIOError:
                pass
        grown = rss_kib(fed.router.proc.pid) - before
        print(f"     a client that does not read: {sent >> 20} MiB taken before the tunnel stalled; "
              f"router RSS +{grown >> 10} MiB")
        check(stalled and sent < 128 << 20, f"no backpressure: {sent} bytes taken")
        # ASan's quarantine keeps freed memory resident: RSS says nothing there.
        with open(f"/proc/{fed.router.proc.pid}/maps") as f:
            asan = "libasan" in f.read()
        check(asan or grown < 48 << 10, f"the router's memory grew by {grown} KiB")
    finally:
        ws.close()


def test_tunnel_idle_timeout(fed):
    sid = fed.shared["sid"]
    ws = WS(fed, f"/v1/sandboxes/{sid}/ports/{WS_PORT}/", {"Authorization": "Bearer " + tr.TOKEN_A}, timeout=60)
    check(ws.accepted(), f"open: {ws.status}")
    t0 = time.monotonic()
    ws.send(9, b"still here")               # traffic restarts the clock
    op, data = ws.recv()
    check(op == 10 and data == b"still here", f"the ping's pong: {op} {data!r}")
    op, data = ws.recv()                    # blocks until the router closes
    took = time.monotonic() - t0
    ws.close()
    print(f"     an idle tunnel closed after {took:.1f} s (tunnel_idle_timeout_s = {IDLE_S})")
    check(op is None and IDLE_S - 0.5 <= took <= IDLE_S + 10, f"idle close: {op} {data!r} after {took:.1f} s")


def test_upgrade_unanswered(fed):
    sid = fed.shared["sid"]
    # 8002 takes connections and never answers (test_requests_in_flight_bounded).
    t0 = time.monotonic()
    ws = WS(fed, f"/v1/sandboxes/{sid}/ports/8002/", {"Authorization": "Bearer " + tr.TOKEN_A}, timeout=60)
    took = time.monotonic() - t0
    ws.close()
    print(f"     an unanswered upgrade got {ws.status} after {took:.1f} s")
    check(ws.status == 504 and json.loads(ws.body)["error"]["code"] == "port_timeout" and
          IDLE_S - 0.5 <= took <= IDLE_S + 10, f"an unanswered upgrade: {ws.status} {ws.body!r} after {took:.1f} s")


def test_tunnel_open_at_shutdown(fed):
    sid = fed.shared["sid"]
    ws = WS(fed, f"/v1/sandboxes/{sid}/ports/{WS_PORT}/", {"Authorization": "Bearer " + tr.TOKEN_A})
    check(ws.accepted(), f"open: {ws.status}")
    ws.send(1, b"left open")
    op, data = ws.recv()
    check(op == 1 and data == b"left open", f"echo: {op} {data!r}")
    fed.shared["open_ws"] = ws              # the teardown stops the router with it open


TESTS = [test_setup, test_path_routing, test_closed_and_invalid_ports, test_host_routing, test_host_auto_resume,
         test_public_port,
         test_e2b_port_relay, test_requests_in_flight_bounded, test_websocket_path, test_websocket_host,
         test_tunnels_bounded, test_tunnel_backpressure, test_tunnel_idle_timeout,
         test_upgrade_unanswered, test_tunnel_open_at_shutdown]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: PortsFed("ports", [(CLUSTER, "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory",
                                                            "256Gi", "--agent-binary",
                                                            os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--agent"]))
