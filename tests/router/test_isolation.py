#!/usr/bin/env python3
"""Two tenants, probed as an attacker would: what a tenant can send never
reaches anything but its own sandbox's agent routes.

One kubesim cluster "iso" running the real fedrouter-agent in its pods, the
real router in front (an `agent` group, tenants a and b of test_router.py).
Tenant B holds only its own sandbox and that sandbox's access token (the
envdAccessToken the E2B API gives out, derived here from the agent key the
test wrote). Tenant A has a sandbox, and a Secret sits in the namespace.

Proves (docs/fuzzing.md, "The two-tenant probe"):
- every request path a server could normalize into another one (dot
  segments raw or percent-encoded in any case, double-encoded, encoded
  slashes and backslashes, ';' path parameters, NUL and control bytes) is
  refused with 400 before anything goes upstream, on /e2b and /v1 alike;
- the E2B relay reaches only the agent routes of its allow-list (exact
  paths; /init and other internal paths answer as unknown routes), and only
  the query parameters /files takes;
- kubesim, recording every request it served (GET /_sim/requests), saw no
  request outside /api/v1/namespaces/default/pods/<B's pod>:49983/proxy/
  while the probes ran: no Secret read, no DELETE or PATCH, nothing of A's;
- file paths with a NUL byte or bytes that are not UTF-8 answer 400
  invalid_path naming the problem, and nothing is written;
- the smaller findings of the same probes: amounts that round to nothing
  and bad image names are 400s; code that kills its agent gets 502
  agent_died (the breaker stays closed); a tenant sees only its own pools
  and sandbox count in /v1/clusters, and an open /metrics names no
  tenant's pool; E2B list limits out of range and a garbage connect body
  are 400s; a non-follow output answers what was kept (<= 1 MiB); a
  half-closing client gets its answer; a create on a replica that has not
  listed its pools is 503 not_synced, not 404.

Usage: test_isolation.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import hashlib
import hmac
import http.client
import json
import os
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, short  # noqa: E402

tr.WATCHDOG_S = 170  # ctest's TIMEOUT is 180
CLUSTER = "iso"
NS = "default"
SECRET_VALUE = "top-secret-" + os.urandom(6).hex()
DOMAIN = "iso.localhost"


class IsoFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path, "a") as f:
            f.write(f'ports = {{ domain = "{DOMAIN}"; }};\n')

# Paths after /e2b that must never leave the router: each would, after a
# server's normalization, land outside the sandbox's proxy prefix or on an
# internal agent route.
E2B_ATTACKS = [
    "/process.Process/../../../../../../../../../api/v1/namespaces/default/secrets/a-sandbox-secrets",
    "/process.Process/..%2f..%2f..%2f..%2f..%2f..%2f..%2fapi%2fv1%2fnamespaces%2fdefault%2fpods",
    "/process.Process/..%2F..%2F..%2Fapi/v1/pods",
    "/process.Process/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/api/v1/pods",
    "/process.Process/%2E%2E/%2E%2E/init",
    "/process.Process/.%2e/.%2e/init",
    "/process.Process/%252e%252e/%252e%252e/%252e%252e/api/v1/pods",
    "/process.Process/%25252e%25252e/api/v1/pods",
    "/process.Process/..;/..;/..;/api/v1/pods",
    "/process.Process/Start;/../../init",
    "/process.Process/Start%3b/../init",
    "/process.Process/..%5c..%5c..%5capi/v1/pods",
    "/process.Process/./Start",
    "/process.Process/Start/..",
    "/process.Process/Start/../../init",
    "/process.Process/Start%00/../../init",
    "/process.Process/Start%0d%0aX-Evil:%201",
    "/process.Process//Start",
    "/files/../init",
    "/filesystem.Filesystem/Stat/%2e%2e/%2e%2e/%2e%2e/api/v1/namespaces/default/pods",
]
# Reach the relay's route matching (no path tricks): must not be relayed.
E2B_UNKNOWN = ["/init", "/_fr/held", "/process.Process/", "/process.Process/Nope", "/filesystem.Filesystem",
               "/version", "/api/v1/pods", "/files/x", "/healthz"]


def token_of(fed, sid):
    with open(os.path.join(fed.root, "agent.key")) as f:
        key = f.read().strip().encode()
    return hmac.new(key, sid.encode(), hashlib.sha256).hexdigest()


def raw(fed, method, target, headers, body=b""):
    """Sends <target> exactly as given (no client-side normalization);
    returns (status, parsed body or text)."""
    s = socket.create_connection(("127.0.0.1", fed.router.port), timeout=15)
    try:
        head = f"{method} {target} HTTP/1.1\r\nConnection: close\r\n"
        if "Host" not in headers:
            head += "Host: 127.0.0.1\r\n"
        for k, v in headers.items():
            head += f"{k}: {v}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        s.sendall(head.encode("latin-1") + body)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    text = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode(errors="replace")


def sim_requests(fed):
    st, r = fed.sims[CLUSTER].admin("GET", "/_sim/requests")
    check(st == 200, f"/_sim/requests: {st} {short(r)}")
    return r["requests"]


def assert_only_own_proxy(fed, pod, what, ports=(49983,)):
    """Every request kubesim served since the log was cleared is either the
    router's own bookkeeping (watches, lists, probes) or a call through B's
    pod proxy prefix (for the agent's port or one of B's own <ports>)."""
    prefixes = tuple(f"/api/v1/namespaces/{NS}/pods/{pod}:{p}/proxy/" for p in ports)
    bad = []
    for line in sim_requests(fed):
        method, _, target = line.partition(" ")
        low = target.lower()
        if ("secret" in low or (method in ("DELETE", "PATCH", "PUT") and not target.startswith(prefixes))
                or ".." in target or "%2e" in low or "%2f" in low or "%5c" in low or ";" in target
                or "/init" in low or ("/proxy" in target and not target.startswith(prefixes))):
            bad.append(line)
    check(not bad, f"{what}: kubesim served requests outside B's proxy prefix: {bad[:5]}")


def test_setup(fed):
    # A Secret in the namespace, as a tenant's would be.
    st, r = tr.api_call(fed.router.port, "GET", "/healthz")
    check(st == 200, "router up")
    sim = fed.sims[CLUSTER]
    body = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a-sandbox-secrets"},
                       "data": {"HF_TOKEN": __import__("base64").b64encode(SECRET_VALUE.encode()).decode()}})
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=15, context=sim.ssl)
    c.request("POST", f"/api/v1/namespaces/{NS}/secrets", body=body,
              headers={"Authorization": "Bearer " + tr.SIM_TOKEN, "Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 201, f"create the Secret: {r.status} {r.read()[:200]}")
    c.close()
    fed.shared["a"] = fed.create_one(name="victim", token=tr.TOKEN_A)["id"]
    fed.shared["b"] = fed.create_one(name="attacker", token=tr.TOKEN_B)["id"]
    # B's own sandbox answers through the relay: the probes below are
    # refused for what they are, not because the relay is broken.
    b = fed.shared["b"]
    st, r = raw(fed, "GET", "/e2b/health", {"E2b-Sandbox-Id": b, "X-Access-Token": token_of(fed, b)})
    check(st == 204, f"B's /e2b/health: {st} {short(r)}")


def test_e2b_relay_refuses_path_tricks(fed):
    b = fed.shared["b"]
    _, pod = fed.sim_of(b)
    h = {"E2b-Sandbox-Id": b, "X-Access-Token": token_of(fed, b), "X-API-Key": tr.TOKEN_B,
         "Content-Type": "application/json"}
    check(fed.sims[CLUSTER].admin("DELETE", "/_sim/requests")[0] == 200, "clear kubesim's request log")
    for p in E2B_ATTACKS:
        for method in ("GET", "POST", "DELETE", "PATCH"):
            st, r = raw(fed, method, "/e2b" + p, h, b"{}" if method in ("POST", "PATCH") else b"")
            check(st == 400 and isinstance(r, dict) and r.get("error", {}).get("code") == "invalid_path",
                  f"{method} /e2b{p}: {st} {short(r)}")
    for p in E2B_UNKNOWN:
        st, r = raw(fed, "POST", "/e2b" + p, h, b"{}")
        check(st in (404, 405, 501) and SECRET_VALUE not in json.dumps(r), f"POST /e2b{p}: {st} {short(r)}")
    # Only /files takes a query, and only its own parameters.
    for method, p, why in (("GET", "/files?path=/tmp/x&extra=../../init", "an unknown parameter"),
                           ("POST", "/process.Process/List?path=/x", "a query on a Connect route"),
                           ("GET", "/files?path=/tmp/a%00b", "a NUL")):
        st, r = raw(fed, method, "/e2b" + p, h, b"{}" if method == "POST" else b"")
        check(st == 400 and r["error"]["code"] in ("invalid_query", "invalid_path"), f"{why}: {st} {short(r)}")
    assert_only_own_proxy(fed, pod, "after the /e2b probes")


def test_v1_refuses_path_tricks(fed):
    a, b = fed.shared["a"], fed.shared["b"]
    h = {"Authorization": "Bearer " + tr.TOKEN_B}
    check(fed.sims[CLUSTER].admin("DELETE", "/_sim/requests")[0] == 200, "clear kubesim's request log")
    for p in (f"/v1/sandboxes/{b}/../{a}", f"/v1/sandboxes/{b}/..%2f{a}", f"/v1/sandboxes/%2e%2e/{a}",
              f"/v1/sandboxes/{b}/files/..", f"/v1/sandboxes/{b}/processes/..%2f..%2finit",
              f"/v1/sandboxes/{b};x/exec", "/v1/pools/..%2f..%2fsecrets", f"/v1/sandboxes/{b}/%2e/files",
              f"/v1/sandboxes/{b}%00/files", f"/v1/sandboxes/{b}%5c..%5c{a}", f"/v1/sandboxes/{b}//files"):
        for method in ("GET", "POST", "DELETE"):
            st, r = raw(fed, method, p, h, b"{}" if method == "POST" else b"")
            check(st == 400 and isinstance(r, dict) and r["error"]["code"] == "invalid_path",
                  f"{method} {p}: {st} {short(r)}")
    _, pod = fed.sim_of(b)
    assert_only_own_proxy(fed, pod, "after the /v1 probes")
    # A's sandbox is still there and still A's.
    st, r = fed.api("GET", "/v1/sandboxes/" + a, token=tr.TOKEN_A)
    check(st == 200, f"A's sandbox after the probes: {st} {short(r)}")


def test_file_paths_nul_and_not_utf8(fed):
    b = fed.shared["b"]
    h = {"Authorization": "Bearer " + tr.TOKEN_B, "Content-Type": "application/octet-stream"}
    for method, q, body in (("PUT", "/tmp/a%00b", b"x"), ("GET", "/etc/passwd%00.txt", b""),
                            ("DELETE", "/tmp/a%00b", b""), ("GET", "/tmp/%ff", b""), ("PUT", "/tmp/%ff", b"y"),
                            ("GET", "/tmp/%c3%28", b"")):
        st, r = raw(fed, method, f"/v1/sandboxes/{b}/files?path={q}", h, body)
        check(st == 400 and r["error"]["code"] == "invalid_path" and ("NUL" in r["error"]["message"]
                                                                      or "UTF-8" in r["error"]["message"]),
              f"{method} files?path={q}: {st} {short(r)}")
    st, r = raw(fed, "GET", f"/v1/sandboxes/{b}/files?path=/tmp&list=1", h)
    check(st == 200, f"list /tmp: {st} {short(r)}")
    names = [e.get("name") for e in r.get("entries", [])]
    check("a" not in names and not any(n and n.startswith("a\x00") for n in names),
          f"a refused upload wrote something: {names}")
    # E2B's /files: the same paths refused by the relay.
    hb = {"E2b-Sandbox-Id": b, "X-Access-Token": token_of(fed, b)}
    for q in ("/tmp/%ff", "/tmp/a%00b"):
        st, r = raw(fed, "GET", f"/e2b/files?path={q}", hb)
        check(st == 400 and r["error"]["code"] in ("invalid_path", "invalid_query"), f"/e2b/files?path={q}: {st} {short(r)}")


def test_amounts_and_images_refused(fed):
    """Amounts that round to nothing (an unmetered pod) and image names
    that are not image references are 400s, not 201 or 503."""
    for body, field in (({"image": "python:3.12", "memory_gb": 1e-300}, "memory_gb"),
                        ({"image": "python:3.12", "cpus": 0.0004}, "cpus"),
                        ({"image": "python:3.12", "cpus": 0}, "cpus"),
                        ({"image": "python:3.12\nx"}, "image"),
                        ({"image": "a" * 2000}, "image"),
                        ({"image": "-flag"}, "image")):
        st, r = fed.api("POST", "/v1/sandboxes", body, token=tr.TOKEN_B)
        check(st == 400 and r["error"]["code"] == "invalid_field" and r["error"].get("field") == field,
              f"create {short(body, 80)}: {st} {short(r)}")
        st, r = fed.api("POST", "/v1/pools", dict(body, name="badpool", replicas=0), token=tr.TOKEN_B)
        check(st == 400 and r["error"].get("field") == field, f"pool {short(body, 80)}: {st} {short(r)}")
    # The smallest amounts that are something are taken.
    st, r = fed.api("POST", "/v1/placement/explain", {"image": "python:3.12", "cpus": 0.001,
                                                      "memory_gb": 1 / 1024}, token=tr.TOKEN_B)
    check(st == 200, f"explain with 1 millicore and 1 MiB: {st} {short(r)}")


def test_agent_killed_by_its_sandbox_is_agent_died(fed):
    """Code in the sandbox that kills its agent: the exec says the agent
    died (502 agent_died), not that the cluster is unavailable, and the
    cluster's breaker stays closed."""
    sid = fed.create_one(name="suicide", token=tr.TOKEN_B)["id"]
    st, r = fed.exec(sid, ["sh", "-c", "echo hi; pkill -9 -f fedrouter-agent; sleep 5"], token=tr.TOKEN_B)
    check(st == 502 and r["error"]["code"] == "agent_died" and "agent" in r["error"]["message"],
          f"exec that kills the agent: {st} {short(r)}")
    st, r = fed.api("GET", "/v1/clusters", token=tr.TOKEN_B)
    check(st == 200 and all(c["breaker"] == "closed" and c["healthy"] for c in r["clusters"]),
          f"the cluster's breaker after the agent died: {short(r)}")
    fed.api("DELETE", "/v1/sandboxes/" + sid, token=tr.TOKEN_B)


def test_tenants_see_only_their_pools_and_sandboxes(fed):
    """/v1/clusters shows a tenant its own pools (and shared ones) and its
    own sandbox count; /metrics without a metrics token names no tenant's
    pool."""
    st, r = fed.api("POST", "/v1/pools", {"name": "a-secret-pool", "image": tr.IMAGE, "replicas": 1, "cpus": 0.1,
                                          "memory_gb": 0.1}, token=tr.TOKEN_A)
    check(st == 201, f"A's pool: {st} {short(r)}")
    check(tr.wait_until(lambda: any(p["name"] == "a-secret-pool" for c in fed.api("GET", "/v1/clusters")[1]["clusters"]
                                    for p in c["pools"]), 20), "A does not see its own pool")
    st, r = fed.api("GET", "/v1/clusters", token=tr.TOKEN_B)
    check(st == 200 and not any(p["name"] == "a-secret-pool" for c in r["clusters"] for p in c["pools"]),
          f"B sees A's pool: {short(r)}")
    mine = len(fed.list_ids(token=tr.TOKEN_B))
    check(sum(c["sandboxes"] for c in r["clusters"]) == mine,
          f"B's clusters count {[c['sandboxes'] for c in r['clusters']]} sandboxes, B has {mine}")
    st, text = tr.api_call(fed.router.port, "GET", "/metrics", token=None)
    body = text if isinstance(text, str) else json.dumps(text)
    check(st == 200 and "a-secret-pool" not in body, f"/metrics without a token names A's pool ({st})")
    fed.api("DELETE", "/v1/pools/a-secret-pool", token=tr.TOKEN_A)


def test_e2b_bad_list_limit_and_connect_body(fed):
    b = fed.shared["b"]
    for q in ("limit=99999999999999999999", "limit=-1", "limit=0", "startedAfter=" + "9" * 60):
        st, r = tr.api_call(fed.router.port, "GET", "/e2b/v2/sandboxes?" + q, headers={"X-API-Key": tr.TOKEN_B})
        check(st == 400, f"list ?{q}: {st} {short(r)}")
    st, r = raw(fed, "POST", f"/e2b/sandboxes/{b}/connect", {"X-API-Key": tr.TOKEN_B,
                                                            "Content-Type": "application/json"}, b"garbage")
    check(st == 400 and r["error"]["code"] == "invalid_json", f"connect with a garbage body: {st} {short(r)}")


def test_non_follow_output_is_what_was_kept(fed):
    """GET .../output without follow on a process that writes without end
    answers what the agent kept (its 1 MiB buffer), not what the process
    writes while the answer is on its way."""
    b = fed.shared["b"]
    st, r = fed.api("POST", f"/v1/sandboxes/{b}/processes", {"argv": ["yes", "flood"]}, token=tr.TOKEN_B)
    check(st == 201, f"start yes: {st} {short(r)}")
    pid = r["pid"]
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=60)
    c.request("GET", f"/v1/sandboxes/{b}/processes/{pid}/output", headers={"Authorization": "Bearer " + tr.TOKEN_B})
    resp = c.getresponse()
    data = resp.read()
    c.close()
    lines = [json.loads(x) for x in data.splitlines() if x.strip()]
    out = sum(len(x.get("stdout", "")) for x in lines)
    check(resp.status == 200 and lines and lines[-1] == {"running": True} and out <= (1 << 20) + 65536,
          f"non-follow output of yes: {resp.status}, {len(data)} bytes, {out} of output, last {lines[-1:]}")
    fed.api("POST", f"/v1/sandboxes/{b}/processes/{pid}/signal", {"signal": "SIGKILL"}, token=tr.TOKEN_B)


def test_half_closed_client_gets_its_answer(fed):
    """A client that sends Connection: close and half-closes (nc -N) gets
    its answer, also one that comes later (an exec)."""
    body = json.dumps({"argv": ["sh", "-c", "sleep 0.3; echo done"]}).encode()
    s = socket.create_connection(("127.0.0.1", fed.router.port), timeout=15)
    try:
        s.sendall(f"POST /v1/sandboxes/{fed.shared['b']}/exec HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer {tr.TOKEN_B}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    check(data.startswith(b"HTTP/1.1 200 ") and b'"stdout":"done\\n"' in data, f"half-closed client got: {data[:300]!r}")


def test_create_on_an_unsynced_router_is_503_not_404(fed):
    """A replica whose pool cache has not listed yet answers a create from
    a pool with 503 not_synced (the E2B SDK takes 404 as final)."""
    sim = fed.sims[CLUSTER]
    check(sim.admin("POST", "/_sim/faults", {"error_rate": 1.0})[0] == 200, "fault on")
    try:
        r = tr.start_router_nowait(fed)
        check(tr.wait_until(lambda: tr.api_call(r.port, "GET", "/healthz")[0] == 200 if r.port else False, 20),
              "the new router did not come up")
        st, resp, hdrs = fed.api("POST", "/v1/sandboxes", {"pool": "default-pool"}, token=tr.TOKEN_B, router=r,
                                 full=True)
        check(st == 503 and resp["error"]["code"] == "not_synced" and hdrs.get("retry-after") == "1",
              f"create from a pool on an unsynced router: {st} {short(resp)}")
        st, resp = tr.api_call(r.port, "POST", "/e2b/sandboxes", {"templateID": "default-pool"},
                               headers={"X-API-Key": tr.TOKEN_B})
        check(st == 503, f"E2B create on an unsynced router: {st} {short(resp)}")
    finally:
        sim.admin("POST", "/_sim/faults", {"error_rate": 0})
    r.expected_dead = True
    tr.stop_proc(r.proc)


def test_route_table_labels_and_405(fed):
    """The route table is the one place that knows paths: an upload is
    counted under the files route (not the sandbox GET's), process calls
    under theirs, and a wrong method gets 405 with the route's methods."""
    b = fed.shared["b"]
    st, r = raw(fed, "PUT", f"/v1/sandboxes/{b}/files?path=/tmp/label-check", {"Authorization": "Bearer " + tr.TOKEN_B},
                b"data")
    check(st == 201, f"upload: {st} {short(r)}")
    st, r = fed.api("GET", f"/v1/sandboxes/{b}/processes", token=tr.TOKEN_B)
    check(st == 200, f"process list: {st} {short(r)}")
    st, text = tr.api_call(fed.router.port, "GET", "/metrics", token=None)
    body = text if isinstance(text, str) else json.dumps(text)

    def count(route, method):
        total = 0.0
        for line in body.splitlines():
            if (line.startswith("fedrouter_http_requests_total{") and f'route="{route}"' in line
                    and f'method="{method}"' in line):
                total += float(line.split()[-1])
        return total
    check(count("/v1/sandboxes/{id}/files", "PUT") >= 1, "the upload is not counted under the files route")
    check(count("/v1/sandboxes/{id}/processes", "GET") >= 1, "the process list is not counted under its route")
    check(count("/v1/sandboxes/{id}", "PUT") == 0, "an upload is counted under the sandbox GET's route")
    for method, path, allow in (("PATCH", f"/v1/sandboxes/{b}/files", "GET, PUT, POST, DELETE"),
                                ("PUT", "/v1/sandboxes", "POST, GET, DELETE"),
                                ("POST", f"/v1/sandboxes/{b}/processes/7/output", "GET"),
                                ("POST", "/healthz", "GET")):
        st, r, h = tr.api_call(fed.router.port, method, path, {}, tr.TOKEN_B, full=True)
        check(st == 405 and r["error"]["code"] == "method_not_allowed" and h.get("allow") == allow,
              f"{method} {path}: {st} {short(r)} Allow {h.get('allow')!r}")
    st, r = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{b}/processes/x1/output", token=tr.TOKEN_B)
    check(st == 400 and r["error"]["code"] == "invalid_pid", f"a pid that is not a number: {st} {short(r)}")


def test_ports_stay_the_owners(fed):
    """A sandbox's ports (path routing, host routing, the E2B relay): B
    reaches none of A's, by any credential it holds; dot segments and the
    agent's port are refused before anything is sent; kubesim sees only
    calls through B's own pod's prefix."""
    a, b = fed.shared["a"], fed.shared["b"]
    _, pod = fed.sim_of(b)
    st, ra = fed.api("GET", "/v1/sandboxes/" + a, token=tr.TOKEN_A)
    st2, rb = fed.api("GET", "/v1/sandboxes/" + b, token=tr.TOKEN_B)
    check(st == 200 and st2 == 200 and ra.get("short_id") and rb.get("traffic_token"),
          f"the sandboxes' port fields: {short(ra)} {short(rb)}")
    a_short, b_traffic = ra["short_id"], rb["traffic_token"]
    check(fed.sims[CLUSTER].admin("DELETE", "/_sim/requests")[0] == 200, "clear kubesim's request log")
    hb = {"Authorization": "Bearer " + tr.TOKEN_B}
    for target, headers in (
            (f"/v1/sandboxes/{a}/ports/8000/", hb),
            (f"/v1/sandboxes/{a_short}/ports/8000/x", hb),
            ("/", dict(hb, Host=f"8000-{a_short}.{DOMAIN}")),
            ("/", {"Host": f"8000-{a_short}.{DOMAIN}", "E2B-Traffic-Access-Token": b_traffic}),
            ("/", {"Host": f"8000-{a_short}.{DOMAIN}", "X-Traffic-Token": b_traffic}),
            ("/", {"Host": f"8000-{a_short}.{DOMAIN}"}),
            ("/e2b/", {"E2b-Sandbox-Id": a, "E2b-Sandbox-Port": "8000", "X-API-Key": tr.TOKEN_B}),
            ("/e2b/", {"E2b-Sandbox-Id": a, "E2b-Sandbox-Port": "8000", "X-Access-Token": token_of(fed, b)}),
            ("/e2b/", {"E2b-Sandbox-Id": a_short, "E2b-Sandbox-Port": "8000",
                       "E2B-Traffic-Access-Token": b_traffic})):
        for method in ("GET", "POST", "DELETE"):
            st, r = raw(fed, method, target, headers, b"{}" if method == "POST" else b"")
            check(st == 404 and isinstance(r, dict) and "sandbox_not_found" in json.dumps(r),
                  f"B at A's port: {method} {target} {sorted(headers)}: {st} {short(r)}")
    # B's own sandbox: path tricks are refused whatever the surface.
    for target, headers in (
            (f"/v1/sandboxes/{b}/ports/8000/../../../../secrets", hb),
            (f"/v1/sandboxes/{b}/ports/8000/..%2f..%2f..%2fsecrets", hb),
            (f"/v1/sandboxes/{b}/ports/8000/%2e%2e/%2e%2e/init", hb),
            (f"/v1/sandboxes/{b}/ports/8000/x;y", hb),
            ("/../../../../api/v1/namespaces/default/secrets", {"Host": f"8000-{rb['short_id']}.{DOMAIN}",
                                                                 "E2B-Traffic-Access-Token": b_traffic}),
            ("/%2e%2e/%2e%2e/api/v1/pods", {"Host": f"8000-{rb['short_id']}.{DOMAIN}",
                                           "E2B-Traffic-Access-Token": b_traffic}),
            ("/e2b/../../api/v1/pods", {"E2b-Sandbox-Id": b, "E2b-Sandbox-Port": "8000",
                                        "X-Access-Token": token_of(fed, b)})):
        st, r = raw(fed, "GET", target, headers)
        check(st == 400 and isinstance(r, dict) and r.get("error", {}).get("code") == "invalid_path",
              f"B's own port, {target}: {st} {short(r)}")
    for target, headers in ((f"/v1/sandboxes/{b}/ports/49983/init", hb),
                            ("/init", {"Host": f"49983-{rb['short_id']}.{DOMAIN}",
                                       "E2B-Traffic-Access-Token": b_traffic})):
        st, r = raw(fed, "POST", target, headers, b"{}")
        check(st in (400, 404) and "invalid_port" in json.dumps(r) or st == 404,
              f"the agent's port as a user port: {target}: {st} {short(r)}")
    assert_only_own_proxy(fed, pod, "after the ports probes", ports=(49983, 8000))


TESTS = [test_setup, test_e2b_relay_refuses_path_tricks, test_v1_refuses_path_tricks, test_ports_stay_the_owners,
         test_file_paths_nul_and_not_utf8, test_amounts_and_images_refused,
         test_agent_killed_by_its_sandbox_is_agent_died, test_tenants_see_only_their_pools_and_sandboxes,
         test_e2b_bad_list_limit_and_connect_body, test_non_follow_output_is_what_was_kept,
         test_half_closed_client_gets_its_answer, test_create_on_an_unsynced_router_is_503_not_404,
         test_route_table_labels_and_405]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: IsoFed("iso", [(CLUSTER, "us", ["--nodes", "2", "--node-cpu", "64",
                                                              "--node-memory", "256Gi", "--agent-binary",
                                                              os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--agent"]))
