#!/usr/bin/env python3
"""The router's data path through a member cluster's fedrouter-gateway,
black-box (docs/gateway.md, "The router's side").

Two kubesim clusters whose pods run the real agent: "gw" with a
fedrouter-gateway in front of it (TLS with a test CA, in-cluster against
kubesim, a key file) and a `gateway` group in the router's config; "pp"
without one (the API server's pod proxy, as before).

Proves:
- GET /v1/sandboxes/{id} says data_path "gateway" / "pod-proxy";
- exec, a file upload and download, a process and a request to a port the
  sandbox serves all work through the gateway while kubesim (the "gw"
  cluster's API server) serves no pods/proxy request and no pods/exec for
  them, the gateway counts them, and the router's
  fedrouter_data_path_requests_total{cluster="gw",path="gateway"} grows;
  the same calls on "pp" do go through the pod proxy;
- an HTTP Upgrade to a port (a tunnel) goes through the gateway too;
- what reaches the sandbox through the gateway carries none of the
  cluster's credentials (no Authorization, not the cluster's token);
- a gateway that holds another key answers 401: the router answers at once
  with a clear error (exec 503 cluster_unavailable, files 503
  agent_unavailable, a port 502 port_unreachable) naming the gateway's
  refusal, not a hang; with the key back, calls work again;
- a gateway that is down: the same calls fail at once with 503 naming the
  gateway; nothing is replayed through the API server.

Usage: test_gateway_path.py --fedrouter PATH --kubesim PATH --agent PATH --gateway PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import http.client
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 230  # ctest's TIMEOUT is 240
GW, PP = "gw", "pp"
SIM_EXTRA = ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi"]
# A refused or failed call must be answered well within this (no hang).
PROMPT_S = 10


class GatewayFed(tap.AgentFed):
    """Clusters "gw" (behind a gateway) and "pp" (pod proxy)."""

    def write_config(self, path, lifetime):
        self.gw_key_file = os.path.join(self.root, "gw.key")
        with open(self.gw_key_file, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        self.cert, self.tls_key = os.path.join(self.root, "gw.crt"), os.path.join(self.root, "gw-tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", self.tls_key, "-out", self.cert, "-days", "2", "-subj", "/CN=gateway",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        self.gw_port = None
        self.start_gateway()
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        sim = self.sims[GW]
        old = f'{{ name = "{GW}"; region = "{sim.region}"; kubeconfig = "{sim.kubeconfig}"; }}'
        check(old in text, "the cluster line to extend is not in the config")
        text = text.replace(old, old[:-1] + f'gateway = {{ url = "https://127.0.0.1:{self.gw_port}"; '
                            f'ca_file = "{self.cert}"; key_file = "{self.gw_key_file}"; }}; }}')
        with open(path, "w") as f:
            f.write(text)

    def start_gateway(self):
        """The gateway of "gw", in-cluster against its kubesim, on the port
        it had before when restarted."""
        sim = self.sims[GW]
        d = os.path.join(self.root, "gateway")
        os.makedirs(d, exist_ok=True)
        pf, hpf = os.path.join(d, "port"), os.path.join(d, "hport")
        for p in (pf, hpf):
            if os.path.exists(p):
                os.unlink(p)
        self.gw_log = os.path.join(d, "gateway.log")
        listen = f"127.0.0.1:{self.gw_port or 0}"
        # In-cluster against kubesim, as a gateway pod reads its cluster.
        argv = ["env", "KUBERNETES_SERVICE_HOST=127.0.0.1", f"KUBERNETES_SERVICE_PORT={sim.port}",
                tr.ARGS.gateway, "--cluster", GW, "--namespace", "default", "--key-file", self.gw_key_file,
                "--tls-cert", self.cert, "--tls-key", self.tls_key, "--listen", listen, "--port-file", pf,
                "--health-listen", "127.0.0.1:0", "--health-port-file", hpf, "--serviceaccount-dir",
                os.path.join(sim.dir, "sa"), "--log-level", "info"]
        self.gw = tr.start_proc(argv, self.gw_log)
        if not wait_until(lambda: os.path.exists(hpf) and os.path.getsize(hpf) > 0 or self.gw.poll() is not None,
                          15):
            raise tr.TestFailure("the gateway did not start:\n" + tr.tail(self.gw_log))
        check(self.gw.poll() is None, "the gateway exited:\n" + tr.tail(self.gw_log))
        self.gw_port = int(open(pf).read())
        self.gw_hport = int(open(hpf).read())
        check(wait_until(lambda: self.gw_health("/readyz")[0] == 200, 15),
              "the gateway's /readyz is not 200:\n" + tr.tail(self.gw_log))

    def gw_health(self, path):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.gw_hport, timeout=5)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            c.close()
            return r.status, body
        except OSError as e:
            return 0, str(e)

    def gw_metric(self, name, **labels):
        st, text = self.gw_health("/metrics")
        check(st == 200, f"the gateway's /metrics: {st}")
        return sum_metric(text, name, labels)

    def teardown(self):
        problems = []
        if getattr(self, "gw", None) is not None and self.gw.poll() is None:
            rc = tr.stop_proc(self.gw)
            if rc != 0:
                problems.append(f"the gateway exited {rc} on SIGTERM:\n{tr.tail(self.gw_log)}")
        return problems + super().teardown()


def sum_metric(text, name, labels):
    import re
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        ls = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.rindex("}")]))
        if all(ls.get(k) == v for k, v in labels.items()):
            total += float(line.split()[-1])
    return total


def start_gateway_fed():
    sims = [(GW, "us", SIM_EXTRA + ["--agent-binary", os.path.abspath(tr.ARGS.agent)]),
            (PP, "us", SIM_EXTRA + ["--agent-binary", os.path.abspath(tr.ARGS.agent)])]
    # The gateway reads kubesim in-cluster: each kubesim writes a
    # service-account directory (token, ca.crt, namespace).
    fed_sims = []
    for name, region, extra in sims:
        fed_sims.append((name, region, extra + ["--write-serviceaccount", "SA_DIR_" + name]))
    return GatewayFed("gwpath", fed_sims)


# kubesim's --write-serviceaccount wants a path; Kubesim() makes the
# cluster's directory itself, so the placeholder becomes <dir>/sa there.
_orig_kubesim_init = tr.Kubesim.__init__


def _kubesim_init(self, root, name, extra):
    extra = [os.path.join(root, name, "sa") if a == "SA_DIR_" + name else a for a in extra]
    _orig_kubesim_init(self, root, name, extra)


tr.Kubesim.__init__ = _kubesim_init


def request(fed, method, path, body=None, headers=None, timeout=30):
    h = {"Authorization": "Bearer " + tr.TOKEN_A}
    h.update(headers or {})
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def txt(b):
    return b.decode(errors="replace")[:300] if isinstance(b, bytes) else short(b)


def proxy_requests(sim):
    """pods/proxy and pods/exec requests kubesim served since its stats were reset."""
    st, stats = sim.admin("GET", "/_sim/stats")
    check(st == 200, f"kubesim /_sim/stats: {st}")
    return sum(r["count"] for r in stats["requests"]
               if r["resource"] == "pods" and r["subresource"] in ("proxy", "exec"))


def router_metric(fed, cluster, path):
    return tap.metric(fed, "fedrouter_data_path_requests_total", cluster=cluster, path=path)


def test_setup(fed):
    for cl in (GW, PP):
        sb = fed.create_one(name="sb-" + cl, clusters=[cl])
        check(sb["id"].startswith(cl + "."), f"placed in {cl}: {short(sb)}")
        fed.shared[cl] = sb["id"]


def test_data_path_reported(fed):
    for cl, want in ((GW, "gateway"), (PP, "pod-proxy")):
        st, r = fed.api("GET", "/v1/sandboxes/" + fed.shared[cl])
        check(st == 200 and r.get("data_path") == want, f"{cl}: data_path {r.get('data_path')!r}, want {want!r}")


def calls(fed, sid):
    """exec, a file up and down, a process serving a port, a request to it."""
    r = fed.exec_ok(sid, ["sh", "-c", "echo $((6 * 7))"])
    check(r.get("stdout") == "42\n" and r.get("exit_code") == 0, f"exec: {short(r)}")
    data = os.urandom(300000)
    st, body = request(fed, "PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/www/blob.bin", body=data)
    check(st in (200, 201, 204), f"upload: {st} {txt(body)}")
    st, body = request(fed, "GET", f"/v1/sandboxes/{sid}/files?path=/tmp/www/blob.bin")
    check(st == 200 and body == data, f"download: {st}, {len(body)} bytes back of {len(data)}")
    st, body = request(fed, "POST", f"/v1/sandboxes/{sid}/processes",
                       body=b'{"argv":["python3","-m","http.server","8000","--bind","0.0.0.0","--directory",'
                            b'"/tmp/www"]}', headers={"Content-Type": "application/json"})
    check(st == 201, f"start a server: {st} {txt(body)}")
    got = wait_until(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/blob.bin") == (200, data), 20, 0.2)
    if not got:
        st, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/blob.bin")
        check(False, f"a request to port 8000: {st} {txt(body)}")


def test_gateway_cluster_skips_the_api_server(fed):
    sid = fed.shared[GW]
    sim = fed.sims[GW]
    st, _ = sim.admin("DELETE", "/_sim/stats")
    check(st == 200, f"reset kubesim's stats: {st}")
    before_gw, before_pp = router_metric(fed, GW, "gateway"), router_metric(fed, GW, "pod-proxy")
    gw_before = fed.gw_metric("fedrouter_gateway_requests_total")
    calls(fed, sid)
    # A client's own Fr-Gateway-* headers never reach the gateway as the
    # router's: the router signs alone.
    st, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/blob.bin",
                       headers={"Fr-Gateway-Auth": "v1.1." + "0" * 64, "fr-gateway-error": "x"})
    check(st == 200 and len(body) == 300000, f"a port request carrying a client's Fr-Gateway-Auth: {st} {txt(body)}")
    n = proxy_requests(sim)
    check(n == 0, f"kubesim served {n} pods/proxy or pods/exec requests for calls through the gateway")
    grew = router_metric(fed, GW, "gateway") - before_gw
    check(grew >= 5 and router_metric(fed, GW, "pod-proxy") == before_pp,
          f"router metric: gateway +{grew}, pod-proxy +{router_metric(fed, GW, 'pod-proxy') - before_pp}")
    gw_grew = fed.gw_metric("fedrouter_gateway_requests_total") - gw_before
    check(gw_grew >= 5, f"the gateway counted {gw_grew} requests")
    print(f"     {int(grew)} calls through the gateway, 0 pods/proxy requests at kubesim")


HEADER_ECHO = r"""
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = str(self.headers).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", 8001), H).serve_forever()
"""


def test_gateway_gets_no_cluster_credentials(fed):
    """What reaches the sandbox through the gateway carries none of the
    cluster's credentials (the gateway passes Authorization on): the
    router's client towards the gateway has no token of the cluster."""
    sid = fed.shared[GW]
    st, body = request(fed, "POST", f"/v1/sandboxes/{sid}/processes",
                       body=('{"argv":["python3","-c",%s]}' % __import__("json").dumps(HEADER_ECHO)).encode(),
                       headers={"Content-Type": "application/json"})
    check(st == 201, f"start the header echo: {st} {txt(body)}")
    got = wait_until(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8001/")[0] == 200, 20, 0.2)
    st, body = request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8001/")
    check(got and b"X-Forwarded-For" in body, f"the header echo: {st} {txt(body)}")
    check(b"authorization" not in body.lower() and tr.SIM_TOKEN.encode() not in body and
          b"fr-gateway" not in body.lower(), f"headers the sandbox got through the gateway: {txt(body)}")


UPGRADE_ECHO = r"""
import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8002))
s.listen(8)
def h(c):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(4096)
        if not d:
            return
        buf += d
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
    rest = buf.split(b"\r\n\r\n", 1)[1]
    if rest:
        c.sendall(rest)
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=h, args=(c,), daemon=True).start()
"""


def upgrade_echo(fed, sid, payload):
    """An Upgrade to port 8002 through the router: the 101's status line and
    what comes back of <payload>, or None when it did not open."""
    import socket
    sk = socket.create_connection(("127.0.0.1", fed.router.port), timeout=15)
    try:
        sk.sendall(f"GET /v1/sandboxes/{sid}/ports/8002/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                   f"{tr.TOKEN_A}\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = sk.recv(4096)
            if not d:
                return None
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            return head.split(b"\r\n")[0], b""
        sk.sendall(payload)
        while len(rest) < len(payload):
            d = sk.recv(65536)
            if not d:
                break
            rest += d
        return head.split(b"\r\n")[0], rest
    finally:
        sk.close()


def test_upgrade_through_the_gateway(fed):
    """An HTTP Upgrade to a sandbox's port (a tunnel) goes through the
    gateway too: 101, bytes both ways, no pods/proxy at kubesim."""
    sid = fed.shared[GW]
    sim = fed.sims[GW]
    st, body = request(fed, "POST", f"/v1/sandboxes/{sid}/processes",
                       body=('{"argv":["python3","-c",%s]}' % __import__("json").dumps(UPGRADE_ECHO)).encode(),
                       headers={"Content-Type": "application/json"})
    check(st == 201, f"start the upgrade echo: {st} {txt(body)}")
    check(wait_until(lambda: (upgrade_echo(fed, sid, b"x") or (b"",))[0].startswith(b"HTTP/1.1 101"), 20, 0.2),
          f"no 101 from the upgrade echo: {upgrade_echo(fed, sid, b'x')}")
    st, _ = sim.admin("DELETE", "/_sim/stats")
    before = router_metric(fed, GW, "gateway")
    payload = os.urandom(200000)
    line, back = upgrade_echo(fed, sid, payload)
    check(line.startswith(b"HTTP/1.1 101") and back == payload, f"tunnel: {line} {len(back)} bytes back")
    n = proxy_requests(sim)
    check(n == 0, f"kubesim served {n} pods/proxy requests for a tunnel through the gateway")
    check(router_metric(fed, GW, "gateway") > before, "the tunnel was not counted on the gateway path")


def test_pod_proxy_cluster_unchanged(fed):
    sid = fed.shared[PP]
    sim = fed.sims[PP]
    st, _ = sim.admin("DELETE", "/_sim/stats")
    check(st == 200, f"reset kubesim's stats: {st}")
    before = router_metric(fed, PP, "pod-proxy")
    calls(fed, sid)
    n = proxy_requests(sim)
    check(n >= 5, f"kubesim served only {n} pods/proxy requests for calls through the pod proxy")
    check(router_metric(fed, PP, "pod-proxy") - before >= 5 and router_metric(fed, PP, "gateway") == 0,
          "router metric for the pod proxy cluster")


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


def test_wrong_key_is_a_clear_error(fed):
    sid = fed.shared[GW]
    good = open(fed.gw_key_file).read()
    gw_key = fed.gw_key_file + ".gateway"
    # The gateway gets a key of its own: restart it reading another file.
    with open(gw_key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    tr.stop_proc(fed.gw)
    real = fed.gw_key_file
    fed.gw_key_file = gw_key
    try:
        fed.start_gateway()
    finally:
        fed.gw_key_file = real
    refused_before = fed.gw_metric("fedrouter_gateway_auth_failures_total")
    (st, r), dt = timed(lambda: fed.exec(sid, ["true"]))
    check(st == 503 and isinstance(r, dict) and r.get("error", {}).get("code") == "cluster_unavailable" and
          "refused this router" in r["error"].get("message", "") and "401" in r["error"]["message"],
          f"exec with a wrong key: {st} {short(r)}")
    check(dt < PROMPT_S, f"exec with a wrong key took {dt:.1f} s")
    (st, body), dt = timed(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/files?path=/tmp/www/blob.bin"))
    check(st == 503 and b"agent_unavailable" in body and b"refused this router" in body and dt < PROMPT_S,
          f"download with a wrong key: {st} {txt(body)} in {dt:.1f} s")
    (st, body), dt = timed(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/blob.bin"))
    check(st == 502 and b"port_unreachable" in body and b"refused this router" in body and dt < PROMPT_S,
          f"a port with a wrong key: {st} {txt(body)} in {dt:.1f} s")
    check(fed.gw_metric("fedrouter_gateway_auth_failures_total") >= refused_before + 3,
          "the gateway did not count the refusals")
    check(wait_until(lambda: "refused this router" in open(fed.routers[0].log, errors="replace").read(), 5),
          "the router did not log the refusal")
    # The right key back: calls work again.
    tr.stop_proc(fed.gw)
    with open(fed.gw_key_file, "w") as f:
        f.write(good)
    fed.start_gateway()
    check(wait_until(lambda: fed.exec(sid, ["true"])[0] == 200, 15), "exec after the key came back")


def test_gateway_down_fails_at_once(fed):
    sid = fed.shared[GW]
    sim = fed.sims[GW]
    tr.stop_proc(fed.gw)
    st, _ = sim.admin("DELETE", "/_sim/stats")
    (st, r), dt = timed(lambda: fed.exec(sid, ["true"]))
    check(st == 503 and isinstance(r, dict) and r.get("error", {}).get("code") == "cluster_unavailable" and
          "gateway" in r["error"].get("message", ""), f"exec with the gateway down: {st} {short(r)}")
    check(dt < PROMPT_S, f"exec with the gateway down took {dt:.1f} s")
    (st, body), dt = timed(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/files?path=/tmp/www/blob.bin"))
    check(st == 503 and b"gateway" in body and dt < PROMPT_S, f"download with the gateway down: {st} {txt(body)}")
    (st, body), dt = timed(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/blob.bin"))
    # 502 port_unreachable, or 503 cluster_unavailable once the failures
    # above opened the cluster's circuit breaker.
    check(st in (502, 503) and dt < PROMPT_S, f"a port with the gateway down: {st} {txt(body)}")
    n = proxy_requests(sim)
    check(n == 0, f"{n} calls were replayed through the API server")
    # Back up on the same address: calls work again.
    fed.start_gateway()
    check(wait_until(lambda: fed.exec(sid, ["true"])[0] == 200, 30, 0.5),
          f"exec once the gateway is back: {short(fed.exec(sid, ['true']))}")


TESTS = [test_setup, test_data_path_reported, test_gateway_cluster_skips_the_api_server,
         test_gateway_gets_no_cluster_credentials, test_upgrade_through_the_gateway, test_pod_proxy_cluster_unchanged, test_wrong_key_is_a_clear_error, test_gateway_down_fails_at_once]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(__doc__, start_gateway_fed, TESTS, ["--agent", "--gateway"]))
