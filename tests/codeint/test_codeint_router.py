#!/usr/bin/python3
"""The E2B Code Interpreter through fedrouter, black-box: the official
`@e2b/code-interpreter` JS SDK (pinned, scripts/lib/code_interpreter_sdk.sh),
unmodified, with E2B_API_URL = E2B_SANDBOX_URL = <router>/e2b, against a
kubesim cluster whose code-interpreter pods run the real agent and
deploy/code-interpreter/server.py on port 49999.

Proves (docs/e2b.md "Code Interpreter"):
- the router's config maps the SDK's default template `code-interpreter-v1`
  to the pool `code-interpreter`, whose pods are Ready only once their
  server answers (the pool's `readiness` on 49999), and Sandbox.create()
  claims one of them warm;
- every SDK call (codeint_sdk.mjs: state, streamed logs, a matplotlib PNG,
  errors, per-call envs, contexts, the interrupt when the client gives up,
  kill) works through the router's relay to port 49999;
- that relay's access: the SDK's context calls carry only the traffic
  token, /execute the access token; either is enough (the owner's API key
  too), and a wrong token, no token or another tenant's key all get the
  same 404;
- the cell is interrupted when the client goes away (the next cell in the
  same context runs at once).

Usage: test_codeint_router.py --fedrouter PATH --kubesim PATH --agent PATH
Exit 0 pass, 1 fail, 77 skipped (no node / the SDK or the server's Debian
packages cannot be installed).
"""
import http.client
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "router"))
import ci_server as cs  # noqa: E402
import test_codeint_sdk as sdk  # noqa: E402
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 290  # ctest's TIMEOUT is 300
CLUSTER = "ci"
POOL = "code-interpreter"
IMAGE = "registry.example/fedrouter/code-interpreter:0.1.0"
DOMAIN = "sbx.localhost"
MODS = None


class CodeFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path, "a") as f:
            f.write(f'e2b = {{ templates = ( {{ name = "code-interpreter-v1"; pool = "{POOL}"; }} ); }};\n'
                    f'ports = {{ domain = "{DOMAIN}"; }};\n')


def e2b(fed, method, path, body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=timeout)
    try:
        c.request(method, "/e2b" + path, body=json.dumps(body) if body is not None else None,
                  headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_pool_is_ready_when_its_server_is(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": POOL, "image": IMAGE, "replicas": 2, "cpus": 0.5,
                                          "memory_gb": 1, "readiness": {"port": 49999, "path": "/health"}})
    check(st == 201, f"create the pool: {st} {short(r)}")
    st, r = fed.api("GET", "/v1/pools")
    pool = [p for p in r.get("pools", []) if p["name"] == POOL]
    check(st == 200 and pool and pool[0].get("readiness") == {"port": 49999, "path": "/health"},
          f"the pool shows its readiness: {st} {short(r)}")
    sim = fed.sims[CLUSTER]

    def ready_pods():
        st, lst = sim.kube("/api/v1/namespaces/default/pods")
        return [p for p in lst.get("items", []) if any(
            c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])]
    check(wait_until(lambda: len(ready_pods()) == 2, 120, 0.1), "the pool's pods did not turn Ready in 120 s")
    c = ready_pods()[0]["spec"]["containers"][0]
    check(c.get("readinessProbe", {}).get("httpGet") == {"path": "/health", "port": 49999}
          and any(p.get("containerPort") == 49999 for p in c.get("ports", [])),
          f"the pool pod's probe and ports: {short(c, 600)}")
    fed.shared["pool_pods"] = {p["metadata"]["name"] for p in ready_pods()}
    # Ready means the server answers: through the router at once.
    check(wait_until(lambda: fed.api("GET", "/v1/pools")[1]["pools"][0]["clusters"][0]["ready"] == 2, 30, 0.05),
          "the router did not see the pool's pods ready")


def test_official_sdk(fed):
    env = dict(os.environ, FR_CI_NODE_MODULES=MODS, E2B_API_URL=f"http://127.0.0.1:{fed.router.port}/e2b",
               E2B_SANDBOX_URL=f"http://127.0.0.1:{fed.router.port}/e2b", E2B_API_KEY=tr.TOKEN_A)
    env.pop("FR_CI_URL", None)
    t0 = time.monotonic()
    out = subprocess.run(["node", os.path.join(HERE, "codeint_sdk.mjs")], env=env, capture_output=True,
                         timeout=200, stdin=subprocess.DEVNULL)
    text = out.stdout.decode(errors="replace")
    for line in text.splitlines():
        print("     " + line, flush=True)
    check(out.returncode == 0 and "PASS" in text,
          f"the SDK run failed (exit {out.returncode}): {out.stderr.decode(errors='replace')[-1500:]}")
    print(f"     SDK run took {time.monotonic() - t0:.1f} s")
    sid = [line.split()[1] for line in text.splitlines() if line.startswith("sandbox ")]
    # The short id names the pod ("p-" for "fr-pool-", then "-<cluster code>").
    pod = "fr-pool-" + sid[0][2:].rsplit("-", 1)[0] if sid and sid[0].startswith("p-") else None
    check(pod in fed.shared.get("pool_pods", ()), f"the sandbox {sid} was not a warm pool pod "
          f"{sorted(fed.shared.get('pool_pods', ()))}")


def test_relay_tokens(fed):
    st, body = e2b(fed, "POST", "/sandboxes", {"templateID": "code-interpreter-v1", "timeout": 300},
                   {"X-API-Key": tr.TOKEN_A})
    r = json.loads(body)
    check(st == 201, f"create: {st} {body[:300]!r}")
    sid, access, traffic = r["sandboxID"], r["envdAccessToken"], r["trafficAccessToken"]
    port = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"}
    # The SDK's context calls: the traffic token alone.
    st, body = e2b(fed, "GET", "/contexts", headers=dict(port, **{"E2B-Traffic-Access-Token": traffic}))
    check(st == 200 and isinstance(json.loads(body), list), f"contexts with the traffic token: {st} {body[:200]!r}")
    # /execute: the access token (the SDK sends both; each is enough).
    st, body = e2b(fed, "POST", "/execute", {"code": "21 * 2"}, dict(port, **{"X-Access-Token": access}))
    lines = [json.loads(x) for x in body.decode().splitlines() if x.strip()]
    check(st == 200 and any(x.get("type") == "result" and x.get("text") == "42" for x in lines),
          f"execute with the access token: {st} {lines}")
    # The owner's API key reaches the sandbox's ports too.
    st, body = e2b(fed, "GET", "/contexts", headers=dict(port, **{"X-API-Key": tr.TOKEN_A}))
    check(st == 200, f"contexts with the owner's API key: {st} {body[:200]!r}")
    for what, h in (("a wrong traffic token", {"E2B-Traffic-Access-Token": "0" * 64}),
                    ("the access token of another id", {"X-Access-Token": "0" * 64}),
                    ("another tenant's key", {"X-API-Key": tr.TOKEN_B, "E2B-Traffic-Access-Token": traffic}),
                    ("no token", {})):
        st, body = e2b(fed, "GET", "/contexts", headers=dict(port, **h))
        err = json.loads(body) if body.startswith(b"{") else {}
        check(st == 404 and "sandbox_not_found" in body.decode(errors="replace"),
              f"{what}: {st} {body[:200]!r} {err}")
    st, body = e2b(fed, "GET", "/contexts", headers=dict(port, **{"E2b-Sandbox-Port": "70000",
                                                                 "E2B-Traffic-Access-Token": traffic}))
    check(st == 400 and b"invalid_port" in body, f"port 70000: {st} {body[:200]!r}")
    fed.shared["relay"] = (sid, access, traffic)


def test_interrupt_when_client_leaves(fed):
    sid, access, traffic = fed.shared["relay"]
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "X-Access-Token": access,
         "E2B-Traffic-Access-Token": traffic, "Content-Type": "application/json"}
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=30)
    c.request("POST", "/e2b/execute", body=json.dumps({"code": "import time\nprint('started', flush=True)\n"
                                                              "while True:\n    time.sleep(0.01)"}), headers=h)
    r = c.getresponse()
    first = r.fp.readline()
    while first and b"started" not in first:
        first = r.fp.readline()
    check(b"started" in first, f"the cell's first line did not stream: {first!r}")
    r.close()
    c.close()  # the client goes away mid-cell
    # The kernel was interrupted: the next cell in the default context runs
    # (a kernel still in the loop would never run it).
    t0 = time.monotonic()
    st, body = e2b(fed, "POST", "/execute", {"code": "'free'"}, h, timeout=60)
    lines = [json.loads(x) for x in body.decode().splitlines() if x.strip()]
    check(st == 200 and any(x.get("text") == "free" for x in lines),
          f"the next cell after the client left: {st} {lines} after {time.monotonic() - t0:.1f} s")
    st, body = e2b(fed, "DELETE", "/sandboxes/" + sid, headers={"X-API-Key": tr.TOKEN_A})
    check(st == 204, f"kill: {st} {body[:200]!r}")


def fedctl(fed, *args, stdin=b""):
    exe = os.path.join(os.path.dirname(os.path.abspath(tr.ARGS.fedrouter)), "fedctl")
    env = dict(os.environ, FEDROUTER_URL=f"http://127.0.0.1:{fed.router.port}", FEDROUTER_TOKEN=tr.TOKEN_A)
    p = subprocess.run([exe] + list(args), input=stdin, capture_output=True, timeout=60, env=env)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def test_fedctl_run_code_and_url(fed):
    st, r = fed.api("POST", "/v1/sandboxes", {"pool": POOL, "name": "cli"})
    check(st == 201, f"create from the pool: {st} {short(r)}")
    sb = r["sandboxes"][0]
    sid = sb["id"]
    check(sb.get("short_id", "").startswith("p-" + POOL) and len(sb.get("traffic_token", "")) == 64
          and sb.get("domain") == DOMAIN, f"the create answer's port fields: {short(sb)}")
    rc, out, err = fedctl(fed, "run-code", sid, stdin=b"x = 41\nprint('hi')\nx + 1\n")
    check(rc == 0 and out == "hi\n42\n", f"run-code: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fedctl(fed, "run-code", sb["short_id"], stdin=b"x\n")
    check(rc == 0 and out == "41\n", f"run-code by short id keeps the state: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fedctl(fed, "run-code", sid, stdin=b"1 / 0\n")
    check(rc == 1 and "ZeroDivisionError" in err and out == "", f"a cell that raises: rc {rc} {out!r} {err!r}")
    rc, out, err = fedctl(fed, "run-code", sid, "--context", "no-such", stdin=b"1\n")
    check(rc == 1 and "context_not_found" in err, f"an unknown context: rc {rc} {err!r}")
    rc, out, err = fedctl(fed, "run-code", "Bad", stdin=b"1\n")
    check(rc == 2 and "is not a sandbox id" in err, f"a bad id: rc {rc} {err!r}")
    rc, out, err = fedctl(fed, "--json", "run-code", sid, stdin=b"print(1)\n")
    lines = [json.loads(x) for x in out.splitlines()]
    check(rc == 0 and [x["type"] for x in lines] == ["number_of_executions", "stdout", "end_of_execution"],
          f"run-code --json: rc {rc} {lines}")
    # The preview URL of port 49999: the host form, reached with the traffic
    # token through the router.
    rc, out, err = fedctl(fed, "url", sid, "49999")
    # (The domain has no port: the router URL's is used.)
    want = f"http://49999-{sb['short_id']}.{DOMAIN}:{fed.router.port}/"
    check(rc == 0 and out == want + "\n", f"fedctl url: rc {rc} {out!r} (want {want}) {err!r}")
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=30)
    c.request("GET", "/health", headers={"Host": f"49999-{sb['short_id']}.{DOMAIN}",
                                         "E2B-Traffic-Access-Token": sb["traffic_token"]})
    r2 = c.getresponse()
    body = r2.read()
    c.close()
    check(r2.status == 200 and json.loads(body) == "OK", f"GET the URL's /health: {r2.status} {body[:200]!r}")
    rc, out, err = fedctl(fed, "--json", "url", sid, "8000")
    j = json.loads(out) if rc == 0 else {}
    check(j.get("traffic_token") == sb["traffic_token"] and j.get("port") == 8000, f"url --json: {rc} {out!r}")
    rc, out, err = fedctl(fed, "url", sid, "70000")
    check(rc == 2, f"url with port 70000: rc {rc} {err!r}")
    st, r = fed.api("DELETE", "/v1/sandboxes/" + sid)
    check(st in (200, 202, 204), f"terminate: {st} {short(r)}")


def test_python_sdk_run_code_and_url(fed):
    sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
    import asyncio
    import fedrouter
    c = fedrouter.Client(f"http://127.0.0.1:{fed.router.port}", token=tr.TOKEN_A)
    sb = c.create(pool=POOL, name="py")
    try:
        seen = []
        ex = sb.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\nv = 20\nv + 1",
                         on_stdout=seen.append)
        check(isinstance(ex, fedrouter.Execution) and ex.text == "21" and ex.ok and ex.stdout == "out\n"
              and ex.stderr == "err\n" and seen == ["out\n"] and isinstance(ex.execution_count, int),
              f"run_code: {dict(ex)} seen {seen}")
        ex = sb.run_code("1 / 0")
        check(not ex.ok and ex.error.name == "ZeroDivisionError" and "ZeroDivisionError" in ex.error.traceback,
              f"a cell that raises: {dict(ex)}")
        ex = sb.run_code("import os\nos.environ['K']", env={"K": "v"})
        check(ex.text == "v", f"env for one cell: {dict(ex)}")
        ex = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
        check(len(ex.results) == 1 and ex.results[0].png.startswith("iVBOR"), f"a PNG: {str(dict(ex))[:300]}")

        async def aio():
            e = await sb.run_code.aio("v * 2")
            await c.aclose()
            return e
        ex = asyncio.run(aio())
        check(ex.text == "40", f"run_code.aio keeps the state: {dict(ex)}")
        try:
            sb.run_code("1", context="no-such-context")
            check(False, "an unknown context did not raise")
        except fedrouter.APIError as e:
            check(e.status == 404 and e.code == "context_not_found", f"unknown context: {e.status} {e.code}")
        u = sb.url(8080)
        check(u == f"http://8080-{sb.short_id}.{DOMAIN}:{fed.router.port}/" and len(sb.traffic_token) == 64,
              f"sb.url: {u} short {sb.short_id}")
        listed = [x for x in c.ls() if x.id == sb.id][0]
        check(listed.url(8080) == u, f"url of a listed sandbox: {listed.url(8080)}")
        try:
            sb.url(0)
            check(False, "url(0) did not raise")
        except ValueError:
            pass
    finally:
        sb.terminate()
        c.close()


TESTS = [test_pool_is_ready_when_its_server_is, test_official_sdk, test_relay_tokens,
         test_interrupt_when_client_leaves, test_fedctl_run_code_and_url, test_python_sdk_run_code_and_url]


def main():
    global MODS
    cs.ensure_packages()
    MODS = sdk.sdk_modules()
    if MODS is None:
        print("SKIPPED: the E2B Code Interpreter SDK could not be installed (node or npm missing, or the npm "
              "registry unreachable); the Code Interpreter through the router was NOT tested", flush=True)
        return cs.SKIP

    def make_fed():
        return CodeFed("codeint", [(CLUSTER, "us", [
            "--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi",
            "--agent-binary", os.path.abspath(tr.ARGS.agent), "--code-interpreter", cs.SERVER])])
    return tr.run_one_federation(__doc__, make_fed, TESTS, ["--agent"])


if __name__ == "__main__":
    sys.exit(main())
