#!/usr/bin/env python3
"""The router's data path through a member cluster's fedrouter-gateway,
black-box (docs/gateway.md, "The router's side").

Two kubesim clusters whose pods run the real agent: "gw" with two
fedrouter-gateway replicas in front of it (TLS with a test CA, in-cluster
against kubesim, a key ring of current and previous key files) and a
`gateway` group with `urls` naming both in the router's config; "pp"
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
- the routers' key rotated under a running router and gateways (the
  gateways take the new key beside the old, the router's key file is
  rewritten and re-read without a restart, the gateways drop the old key):
  no signature refused; a key file holding no key keeps the old key;
- one replica killed with -9 while 8 execs run: those it carried fail at
  once with a JSON error naming the gateway and never run twice, the others
  finish, new calls go to the other replica with no failure (a connection
  refused before any byte is sent there) and none reaches the API server;
- the /readyz checks alone (no call running): a replica back up is used
  again, one killed is left;
- every replica killed: exec, files and a port go through the pod proxy at
  once, data_path says "pod-proxy", the metric counts them, creates still
  place in the cluster; once the gateways are back (their /readyz probed)
  calls go to them again;
- a sandbox whose pod was deleted: exec answers 404 sandbox_not_found at
  once, not a hang.

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

tr.WATCHDOG_S = 290  # ctest's TIMEOUT is 300
GW, PP = "gw", "pp"
SIM_EXTRA = ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi"]
# A refused or failed call must be answered well within this (no hang).
PROMPT_S = 10
# Gateway replicas of "gw" (its `urls`).
NGW = 2


class GatewayFed(tap.AgentFed):
    """Clusters "gw" (behind two gateway replicas, `urls = [A, B]`) and "pp"
    (pod proxy)."""

    def write_config(self, path, lifetime):
        # The router signs with gw.key; the gateways hold a ring of
        # gw-current.key and gw-previous.key (empty: no key), as the
        # Secrets of a deployment do.
        self.gw_key_file = os.path.join(self.root, "gw.key")
        self.gw_cur = os.path.join(self.root, "gw-current.key")
        self.gw_prev = os.path.join(self.root, "gw-previous.key")
        key = os.urandom(32).hex() + "\n"
        for p, text in ((self.gw_key_file, key), (self.gw_cur, key), (self.gw_prev, "")):
            with open(p, "w") as f:
                f.write(text)
        self.cert, self.tls_key = os.path.join(self.root, "gw.crt"), os.path.join(self.root, "gw-tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", self.tls_key, "-out", self.cert, "-days", "2", "-subj", "/CN=gateway",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        self.gws, self.gw_ports, self.gw_hports, self.gw_logs = [None] * NGW, [None] * NGW, [None] * NGW, [None] * NGW
        for i in range(NGW):
            self.start_gateway(i)
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        sim = self.sims[GW]
        old = f'{{ name = "{GW}"; region = "{sim.region}"; kubeconfig = "{sim.kubeconfig}"; }}'
        check(old in text, "the cluster line to extend is not in the config")
        urls = ", ".join(f'"https://127.0.0.1:{p}"' for p in self.gw_ports)
        text = text.replace(old, old[:-1] + f'gateway = {{ urls = [{urls}]; '
                            f'ca_file = "{self.cert}"; key_file = "{self.gw_key_file}"; }}; }}')
        with open(path, "w") as f:
            f.write(text)

    def start_gateway(self, i, keys=None):
        """Gateway replica <i> of "gw", in-cluster against its kubesim, on
        the port it had before when restarted; <keys>: its --key-file ring
        (default: current and previous)."""
        sim = self.sims[GW]
        d = os.path.join(self.root, f"gateway{i}")
        os.makedirs(d, exist_ok=True)
        pf, hpf = os.path.join(d, "port"), os.path.join(d, "hport")
        for p in (pf, hpf):
            if os.path.exists(p):
                os.unlink(p)
        self.gw_logs[i] = os.path.join(d, "gateway.log")
        listen = f"127.0.0.1:{self.gw_ports[i] or 0}"
        key_args = []
        for k in keys or (self.gw_cur, self.gw_prev):
            key_args += ["--key-file", k]
        # In-cluster against kubesim, as a gateway pod reads its cluster.
        argv = ["env", "KUBERNETES_SERVICE_HOST=127.0.0.1", f"KUBERNETES_SERVICE_PORT={sim.port}",
                tr.ARGS.gateway, "--cluster", GW, "--namespace", "default"] + key_args + [
                "--tls-cert", self.cert, "--tls-key", self.tls_key, "--listen", listen, "--port-file", pf,
                "--health-listen", "127.0.0.1:0", "--health-port-file", hpf, "--serviceaccount-dir",
                os.path.join(sim.dir, "sa"), "--log-level", "info", "--shutdown-delay-ms", "0"]
        self.gws[i] = tr.start_proc(argv, self.gw_logs[i])
        if not wait_until(lambda: os.path.exists(hpf) and os.path.getsize(hpf) > 0 or self.gws[i].poll() is not None,
                          15):
            raise tr.TestFailure("the gateway did not start:\n" + tr.tail(self.gw_logs[i]))
        check(self.gws[i].poll() is None, "the gateway exited:\n" + tr.tail(self.gw_logs[i]))
        self.gw_ports[i] = int(open(pf).read())
        self.gw_hports[i] = int(open(hpf).read())
        check(wait_until(lambda: self.gw_health("/readyz", i)[0] == 200, 15),
              "the gateway's /readyz is not 200:\n" + tr.tail(self.gw_logs[i]))

    def stop_gateway(self, i, sig=None):
        """SIGTERM (drained) or <sig> (e.g. SIGKILL) to replica <i>; waits for its exit."""
        p = self.gws[i]
        if p is None or p.poll() is not None:
            return
        if sig is None:
            tr.stop_proc(p)
        else:
            p.send_signal(sig)
            p.wait(15)

    def stop_gateways(self, sig=None):
        for i in range(NGW):
            self.stop_gateway(i, sig)

    def start_gateways(self, keys=None):
        for i in range(NGW):
            self.start_gateway(i, keys)

    def gw_health(self, path, i=0):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.gw_hports[i], timeout=5)
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            c.close()
            return r.status, body
        except OSError as e:
            return 0, str(e)

    def gw_metric(self, name, only=None, **labels):
        """<name> summed over the running replicas (or replica <only>)."""
        total = 0.0
        for i in range(NGW) if only is None else (only,):
            if self.gws[i] is None or self.gws[i].poll() is not None:
                continue
            st, text = self.gw_health("/metrics", i)
            check(st == 200, f"the gateway's /metrics: {st}")
            total += sum_metric(text, name, labels)
        return total

    def teardown(self):
        problems = []
        for i, p in enumerate(getattr(self, "gws", None) or []):
            if p is not None and p.poll() is None:
                rc = tr.stop_proc(p)
                if rc != 0:
                    problems.append(f"gateway {i} exited {rc} on SIGTERM:\n{tr.tail(self.gw_logs[i])}")
        return problems + super().teardown()


def sum_metric(text, name, labels):
    import re
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") and not labels:
            total += float(line.split()[-1])
            continue
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
    other = os.path.join(fed.root, "gw-other.key")
    with open(other, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    # The gateways get a key of their own: restart them reading another file.
    fed.stop_gateways()
    fed.start_gateways(keys=[other])
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
    # A refusal is an answer: the gateway stays the data path (no fallback
    # to the API server for a key problem).
    st, r = fed.api("GET", "/v1/sandboxes/" + sid)
    check(st == 200 and r.get("data_path") == "gateway", f"data_path after refusals: {short(r)}")
    # The right key back: calls work again.
    fed.stop_gateways()
    fed.start_gateways()
    check(wait_until(lambda: fed.exec(sid, ["true"])[0] == 200, 15), "exec after the key came back")


def router_log_has(fed, text):
    return text in open(fed.routers[0].log, errors="replace").read()


def execs_ok(fed, sid, n):
    """<n> execs in a row all answered 200 (round-robin: every replica)."""
    for _ in range(n):
        st, r = fed.exec(sid, ["true"])
        if st != 200:
            return False
    return True


def test_router_key_rotation_without_restart(fed):
    """The routers' key rotated under a running router and gateways: the
    gateways take the new key beside the old, the router's key file is
    rewritten and the router signs with the new key by itself (no restart,
    no reload), then the gateways drop the old key: calls work throughout."""
    sid = fed.shared[GW]
    old = open(fed.gw_key_file).read()
    new = os.urandom(32).hex() + "\n"
    refused_before = fed.gw_metric("fedrouter_gateway_auth_failures_total")

    def hup_and_wait_keys(n):
        for p in fed.gws:
            p.send_signal(signal.SIGHUP)
        return wait_until(lambda: fed.gw_metric("fedrouter_gateway_keys") == n * NGW, 10)

    # 1. The gateways: new key current, the old one previous.
    for path, text in ((fed.gw_cur, new), (fed.gw_prev, old)):
        with open(path, "w") as f:
            f.write(text)
    check(hup_and_wait_keys(2), "the gateways did not take two keys")
    check(execs_ok(fed, sid, 4), "exec with the gateways holding both keys")
    # 2. The router's key file: rewritten in place (as a Secret volume's
    #    update lands), picked up by the running router.
    with open(fed.gw_key_file + ".tmp", "w") as f:
        f.write(new)
    os.replace(fed.gw_key_file + ".tmp", fed.gw_key_file)
    check(wait_until(lambda: router_log_has(fed, "changed: signing with the new key"), 10),
          "the router did not re-read its gateway key file:\n" + tr.tail(fed.routers[0].log))
    check(execs_ok(fed, sid, 4), "exec right after the router's key changed")
    # 3. The gateways drop the old key: only the new one opens them now.
    with open(fed.gw_prev, "w") as f:
        f.write("")
    check(hup_and_wait_keys(1), "the gateways did not drop the old key")
    check(execs_ok(fed, sid, 4), "exec with only the new key at the gateways: the router still signs with the old one")
    check(fed.gw_metric("fedrouter_gateway_auth_failures_total") == refused_before,
          "a signature was refused during the rotation")
    # A key file that holds no valid key keeps the key read before.
    with open(fed.gw_key_file, "w") as f:
        f.write("short\n")
    check(wait_until(lambda: router_log_has(fed, "no key of 32 to 4096 bytes in it"), 10),
          "the router did not say its key file holds no key")
    check(execs_ok(fed, sid, 2), "exec with a broken key file: the old key is kept")
    with open(fed.gw_key_file, "w") as f:
        f.write(new)
    check(wait_until(lambda: router_log_has(fed, "reads again"), 10), "the router did not read the key file again")


def data_path(fed, sid):
    st, r = fed.api("GET", "/v1/sandboxes/" + sid)
    check(st == 200, f"GET sandbox: {st} {short(r)}")
    return r.get("data_path")


def test_gateway_killed_under_load(fed):
    """kill -9 of one replica while execs run through it: each exec it
    carried fails at once with a clear JSON error and never runs twice;
    the others finish; new calls go to the other replica at once (a
    connection refused by the dead one is sent there, nothing having left);
    the API server sees none of it."""
    import threading
    sid = fed.shared[GW]
    sim = fed.sims[GW]
    fed.exec_ok(sid, ["rm", "-f", "/tmp/runs"])
    st, _ = sim.admin("DELETE", "/_sim/stats")
    n = 8
    results = [None] * n

    def one(i):
        t0 = time.monotonic()
        st, r = fed.exec(sid, ["sh", "-c", f"echo {i} >> /tmp/runs; sleep 4; echo done-{i}"])
        results[i] = (st, r, time.monotonic())

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    # Every exec is being forwarded, some by replica 0.
    check(wait_until(lambda: fed.gw_metric("fedrouter_gateway_exchanges") >= n and
                     fed.gw_metric("fedrouter_gateway_exchanges", only=0) >= 1, 15),
          f"the execs are not all in flight: {fed.gw_metric('fedrouter_gateway_exchanges')}")
    on_a = fed.gw_metric("fedrouter_gateway_exchanges", only=0)
    killed_at = time.monotonic()
    fed.stop_gateway(0, signal.SIGKILL)
    # New calls right away: the dead replica refuses connections, which go
    # to the other one; none fails.
    for k in range(4):
        (st, r), dt = timed(lambda: fed.exec(sid, ["echo", "new"]))
        check(st == 200 and r.get("stdout") == "new\n" and dt < PROMPT_S,
              f"new exec {k} after the kill: {st} {short(r)} in {dt:.1f} s")
    for t in threads:
        t.join(PROMPT_S + 10)
    check(all(r is not None for r in results), f"an exec hung after the kill: {results}")
    failed = [(st, r) for st, r, _ in results if st != 200]
    for i, (st, r, t_end) in enumerate(results):
        if st == 200:
            check(r.get("stdout") == f"done-{i}\n", f"exec {i}: {short(r)}")
        else:
            code = r.get("error", {}).get("code") if isinstance(r, dict) else None
            check(st in (502, 503) and code in ("agent_died", "cluster_unavailable", "agent_unavailable") and
                  "gateway" in r["error"].get("message", ""), f"exec {i} cut by the kill: {st} {short(r)}")
            check(t_end - killed_at < PROMPT_S, f"exec {i} answered {t_end - killed_at:.1f} s after the kill")
    check(len(failed) >= 1 and len(failed) <= on_a, f"{len(failed)} execs failed, {on_a} were on the killed replica")
    runs = fed.exec_ok(sid, ["cat", "/tmp/runs"])["stdout"].split()
    for i in range(n):
        check(runs.count(str(i)) <= 1, f"exec {i} ran {runs.count(str(i))} times: replayed")
        if results[i][0] == 200:
            check(runs.count(str(i)) == 1, f"exec {i} succeeded but did not run once: {runs}")
    check(data_path(fed, sid) == "gateway", "data_path with one replica left")
    n_api = proxy_requests(sim)
    check(n_api == 0, f"{n_api} calls went through the API server with a replica left")
    print(f"     {len(failed)} of {n} execs cut by the kill (clear errors), new calls on the other replica")


def breaker_lines(fed, i, to):
    """Lines of the router's log where replica <i>'s breaker went to <to>."""
    text = open(fed.routers[0].log, errors="replace").read()
    return sum(1 for line in text.splitlines()
               if f"gateway https://127.0.0.1:{fed.gw_ports[i]}: breaker " in line and f"-> {to}" in line)


def test_replicas_checked_without_traffic(fed):
    """Each URL in use is asked /readyz every 2 s: a replica back up is used
    again (its breaker closes) and one killed while no call runs is left
    (its breaker opens) without a call finding out."""
    sid = fed.shared[GW]
    closed_before = breaker_lines(fed, 0, "closed")
    if fed.gws[0].poll() is not None:
        fed.start_gateway(0)
    check(wait_until(lambda: breaker_lines(fed, 0, "closed") > closed_before, 10),
          "replica 0's breaker did not close once it was back:\n" + tr.tail(fed.routers[0].log))
    opened_before = breaker_lines(fed, 1, "open")
    fed.stop_gateway(1, signal.SIGKILL)
    check(wait_until(lambda: breaker_lines(fed, 1, "open") > opened_before, 10),
          "replica 1 killed with no traffic: its breaker did not open:\n" + tr.tail(fed.routers[0].log))
    check(data_path(fed, sid) == "gateway", "data_path with replica 0 up")
    check(execs_ok(fed, sid, 4), "exec with replica 1 gone")


def test_all_gateways_down_falls_back_to_the_pod_proxy(fed):
    """Every replica gone: new calls take the API server's pod proxy within
    seconds (exec, files, a port), data_path says so and the metric counts
    them; once the gateways are back (their /readyz probed), calls go to
    them again."""
    sid = fed.shared[GW]
    sim = fed.sims[GW]
    fed.stop_gateways(signal.SIGKILL)
    st, _ = sim.admin("DELETE", "/_sim/stats")
    before = router_metric(fed, GW, "pod-proxy")
    (st, r), dt = timed(lambda: fed.exec(sid, ["echo", "via-pod-proxy"]))
    check(st == 200 and r.get("stdout") == "via-pod-proxy\n" and dt < PROMPT_S,
          f"exec with every gateway down: {st} {short(r)} in {dt:.1f} s")
    check(data_path(fed, sid) == "pod-proxy", "data_path with every gateway down")
    (st, body), dt = timed(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/files?path=/tmp/www/blob.bin"))
    check(st == 200 and len(body) == 300000 and dt < PROMPT_S, f"download with every gateway down: {st} {txt(body)}")
    (st, body), dt = timed(lambda: request(fed, "GET", f"/v1/sandboxes/{sid}/ports/8000/blob.bin"))
    check(st == 200 and len(body) == 300000 and dt < PROMPT_S, f"a port with every gateway down: {st} {txt(body)}")
    check(router_metric(fed, GW, "pod-proxy") - before >= 3, "the pod proxy calls were not counted")
    check(proxy_requests(sim) >= 3, "kubesim did not serve the pod proxy calls")
    # The cluster itself stays healthy: creates still place there.
    sb = fed.create_one(name="sb-gw-down", clusters=[GW])
    check(sb["id"].startswith(GW + "."), f"create with the gateways down: {short(sb)}")
    fed.shared["gw-down"] = sb["id"]
    # Back: the probes close the breakers, new calls take the gateways.
    fed.start_gateways()
    check(wait_until(lambda: data_path(fed, sid) == "gateway", 15, 0.2), "data_path did not come back to gateway")
    st, _ = sim.admin("DELETE", "/_sim/stats")
    check(execs_ok(fed, sid, 4), "exec once the gateways are back")
    n_api = proxy_requests(sim)
    check(n_api == 0, f"{n_api} calls still went through the API server with the gateways back")


def deleted_behind_the_router(fed, sid):
    """Deletes <sid>'s pod while the router's pod watch is down (kubesim
    refuses watches) and restarts the gateways (they list the cluster
    afresh: no pod), then execs: (status, body, seconds, gateway logs)."""
    sim, pod = fed.sim_of(sid)
    watchers = sim.state()["watchers"]
    st, r = sim.admin("POST", "/_sim/faults", {"reject_watches": True, "drop_watches": True})
    check(st == 200, f"kubesim faults: {st} {short(r)}")
    try:
        check(wait_until(lambda: sim.state()["watchers"] == 0, 10, 0.05),
              f"watches still open after drop_watches: {short(sim.state())}")
        fed.stop_gateways(signal.SIGKILL)
        st, body = sim.kube_delete(f"/api/v1/namespaces/default/pods/{pod}?gracePeriodSeconds=0")
        check(st in (200, 202), f"delete the pod in kubesim: {st} {short(body)}")
        fed.start_gateways()
        (st, r), dt = timed(lambda: fed.exec(sid, ["true"]))
        logs = "".join(open(p, errors="replace").read() for p in fed.gw_logs)
    finally:
        sim.admin("POST", "/_sim/faults", {"reject_watches": False, "drop_watches": False})
    check(wait_until(lambda: sim.state()["watchers"] >= watchers, 30, 0.1),
          f"the watches did not come back within 30 s: {short(sim.state())}")
    return st, r, dt, logs, pod


def test_deleted_pod_is_404_not_a_hang(fed):
    """A sandbox whose pod was deleted while the router's cache still holds
    it: the exec goes to a gateway, which answers 404 sandbox_not_found
    (its cache listed afresh), and the router answers 404
    sandbox_not_found at once, not a hang. The router's informer relists
    within its backoff (100 ms and up) while watches are refused, so it may
    learn of the deletion first and answer from its own cache (also 404,
    at the lookup or when the exec starts): up to five sandboxes are tried
    until one shows the gateway's path."""
    for attempt in range(5):
        sid = fed.create_one(name=f"sb-stale{attempt}", clusters=[GW])["id"]
        fed.exec_ok(sid, ["true"])
        st, r, dt, logs, pod = deleted_behind_the_router(fed, sid)
        check(st == 404 and isinstance(r, dict) and r.get("error", {}).get("code") == "sandbox_not_found" and
              dt < PROMPT_S, f"exec in a deleted pod: {st} {short(r)} in {dt:.1f} s")
        if not (f"/{pod}/" in logs) and r["error"].get("message", "") in (
                f"no sandbox {sid} for this tenant", "the sandbox no longer exists"):
            print(f"     attempt {attempt}: the router's cache had caught up; again")
            continue
        check(f"/{pod}/" in logs and "404 sandbox_not_found" in logs,
              f"the router answered {short(r)} but no gateway refused the exec")
        return
    check(False, "five times the router's cache caught up before the exec: the gateway's 404 was not seen")


TESTS = [test_setup, test_data_path_reported, test_gateway_cluster_skips_the_api_server,
         test_gateway_gets_no_cluster_credentials, test_upgrade_through_the_gateway, test_pod_proxy_cluster_unchanged,
         test_wrong_key_is_a_clear_error, test_router_key_rotation_without_restart, test_gateway_killed_under_load,
         test_replicas_checked_without_traffic, test_all_gateways_down_falls_back_to_the_pod_proxy,
         test_deleted_pod_is_404_not_a_hang]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(__doc__, start_gateway_fed, TESTS, ["--agent", "--gateway"]))
