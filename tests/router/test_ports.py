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
  client that leaves gives its place back.

Usage: test_ports.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import hashlib
import hmac
import http.client
import json
import os
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 170  # ctest's TIMEOUT is 180
CLUSTER = "pt"
DOMAIN = "sbx.localhost"
PER_SANDBOX = 4


class PortsFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path, "a") as f:
            f.write(f'ports = {{ domain = "{DOMAIN}"; max_requests_per_sandbox = {PER_SANDBOX}; '
                    'max_requests_per_tenant = 64; };\n')


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


TESTS = [test_setup, test_path_routing, test_closed_and_invalid_ports, test_host_routing, test_public_port,
         test_e2b_port_relay, test_requests_in_flight_bounded]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: PortsFed("ports", [(CLUSTER, "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory",
                                                            "256Gi", "--agent-binary",
                                                            os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--agent"]))
