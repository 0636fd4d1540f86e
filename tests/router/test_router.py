#!/usr/bin/env python3
"""fedrouter black-box tests: the real router in front of real kubesim clusters.

Each test starts from a federation (kubesim processes with TLS and tokens,
a router config naming them, a `fedrouter --config` process), talks to the
router over HTTP on 127.0.0.1 exactly as a client would (docs/api.md is the
contract), and checks the clusters behind it through kubesim's own REST and
/_sim/ admin APIs. kubesim runs exec'd commands as real local processes in
their own sessions; we find them by the directory kubesim gives each pod
(under this run's temporary directory): their HOME, or the command line of
the pod's supervisor they descend from.

Three federations, each started once and torn down with SIGTERM (every
process must exit 0 and leave no process behind):
  main   c1, c2 (region us): the sandbox, exec, auth, input and failover tests
  warm   cw (one node, slow image pull and container start): warm pools
  small  s1, s2 (one node of 50 pods each): the batch of 200

Usage: test_router.py --fedrouter PATH --kubesim PATH [--only NAME ...] [--keep]
Prints `ok NAME` / `FAIL NAME: details` per test and `N passed, M failed`;
exits 1 if any test failed. Python 3 standard library only.
"""
import argparse
import base64
import datetime
import hashlib
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request

# The shared harness: every kubesim and fedrouter of the black-box suites
# is started and stopped by it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk"))
import fedharness  # noqa: E402

ARGS = None
# The checkout: hidden from the kubesims' pods (--hide), as are the keys.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_PROCS = []          # every Popen we started, for the watchdog and atexit
WATCHDOG_S = 560        # ctest's TIMEOUT is 600: clean up ourselves before it
TOKEN_A = "tenant-a-" + os.urandom(8).hex()
TOKEN_B = "tenant-b-" + os.urandom(8).hex()
# A tenant with small limits (test_tenant_limits_hold_under_concurrency).
TOKEN_C = "tenant-c-" + os.urandom(8).hex()
C_MAX_SANDBOXES = 20
# An admin tenant (shared pools).
TOKEN_ADMIN = "tenant-ops-" + os.urandom(8).hex()
C_MAX_EXECS = 4
SIM_TOKEN = "kubesim-" + os.urandom(8).hex()
IMAGE = "python:3.12"
MAX_BODY = 65536
# limits.max_connections_per_ip of the test routers: small, so the idle flood
# test passes it with a few hundred sockets.
MAX_CONNS_PER_IP = 200
# limits.exec_output_budget_bytes: 1.5 x max_exec_output_bytes, so one exec
# filling both streams to their caps runs into it.
EXEC_BUDGET = 1572864


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def expect_error(resp, status, code, what):
    """<resp> is (status, body); asserts an API error with <status>/<code>."""
    st, body = resp
    got = body.get("error", {}).get("code") if isinstance(body, dict) and isinstance(body.get("error"), dict) else None
    check(st == status and got == code,
          f"{what}: expected {status} {code}, got {st} {short(body)}")
    return body["error"]


def short(obj, n=400):
    s = obj if isinstance(obj, str) else json.dumps(obj)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


def wait_until(fn, timeout, interval=0.1):
    """Calls <fn> until it returns a true value or <timeout> seconds pass;
    returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# --------------------------------------------------------------------------
# processes

def proc_stat(pid):
    """(session id, cmdline list, HOME or None, parent pid) of <pid>, or
    None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # comm may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(b")") + 2:].split()
        sid = int(fields[3])
        ppid = int(fields[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        home = None
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for kv in f.read().split(b"\0"):
                    if kv.startswith(b"HOME="):
                        home = kv[5:].decode(errors="replace")
        except OSError:
            pass
        if fields[0] == b"Z":
            return None  # a zombie is gone for our purposes
        return sid, cmd, home, ppid
    except (OSError, ValueError, IndexError):
        return None


def find_procs(sessions=(), home_prefix=None):
    """Live processes in any of <sessions>, or of this run's kubesims'
    pods: their HOME is under <home_prefix> (pods kubesim does not
    isolate), or they or an ancestor name <home_prefix> on the command line
    (an isolated pod's processes descend from its supervisor or an exec
    helper, both of which name the pod's directory). As [(pid, cmdline)]."""
    procs = {}
    me = os.getpid()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != me:
            st = proc_stat(int(d))
            if st is not None:
                procs[int(d)] = st

    def in_run(pid):
        for _ in range(64):
            st = procs.get(pid)
            if st is None:
                return False
            if any(home_prefix in a for a in st[1]):
                return True
            pid = st[3]
        return False
    out = []
    for pid, (sid, cmd, home, _) in procs.items():
        if sid in sessions or (home_prefix and ((home and home.startswith(home_prefix)) or in_run(pid))):
            out.append((pid, cmd))
    return out


def start_proc(argv, log_path, stdout=None):
    """fedharness.start_proc(), the process also in ALL_PROCS (for the
    watchdog and kill_leftovers())."""
    p = fedharness.start_proc(argv, log_path, stdout)
    ALL_PROCS.append(p)
    return p


stop_proc = fedharness.stop_proc
tail = fedharness.tail


# --------------------------------------------------------------------------
# kubesim

class Kubesim:
    def __init__(self, root, name, extra):
        self.name = name
        self.dir = os.path.join(root, name)
        try:
            k = fedharness.start_kubesim(ARGS.kubesim, self.dir, name, SIM_TOKEN,
                                         ["--schedule-ms", "20", "--start-ms", "50"] + list(extra),
                                         hide=(root, CHECKOUT))
        except RuntimeError as e:
            raise TestFailure(str(e))
        ALL_PROCS.append(k.proc)
        self.proc, self.port, self.admin_port = k.proc, k.port, k.admin_port
        self.kubeconfig, self.log, self.workdir = k.kubeconfig, k.log, k.workdir
        self.killed = False
        # The API is HTTPS with a generated CA: trust exactly that CA.
        m = re.search(r"certificate-authority-data:\s*(\S+)", open(self.kubeconfig).read())
        self.ssl = ssl.create_default_context(cadata=base64.b64decode(m.group(1)).decode())

    def admin(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=15)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Authorization": "Bearer " + SIM_TOKEN,
                               "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def state(self):
        st, body = self.admin("GET", "/_sim/state")
        check(st == 200, f"kubesim {self.name} /_sim/state: {st} {short(body)}")
        return body

    def kube(self, path):
        """GET on kubesim's Kubernetes API: (status, json)."""
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=15, context=self.ssl)
        try:
            c.request("GET", path, headers={"Authorization": "Bearer " + SIM_TOKEN})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def kube_delete(self, path):
        """DELETE on kubesim's Kubernetes API: (status, json)."""
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=15, context=self.ssl)
        try:
            c.request("DELETE", path, headers={"Authorization": "Bearer " + SIM_TOKEN})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def pod(self, name, ns="default"):
        """The pod object, or None when kubesim says 404."""
        st, body = self.kube(f"/api/v1/namespaces/{ns}/pods/{name}")
        check(st in (200, 404), f"kubesim {self.name} GET pod {name}: {st} {short(body)}")
        return body if st == 200 else None

    def pods(self, selector=None):
        q = "?labelSelector=" + urllib.parse.quote(selector) if selector else ""
        st, body = self.kube("/api/v1/namespaces/default/pods" + q)
        check(st == 200, f"kubesim {self.name} list pods: {st} {short(body)}")
        return body["items"]


def rss_kib(pid):
    """Resident set size of process <pid> in KiB (0 when unreadable)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------
# fedrouter

class Router:
    def __init__(self, config_path, log_path):
        self.log = log_path
        self.expected_dead = False   # set by tests that kill or stop it on purpose
        try:
            self.rp = fedharness.RouterProc(ARGS.fedrouter, config_path, log_path)
        except RuntimeError as e:
            raise TestFailure(str(e))
        ALL_PROCS.append(self.rp.proc)
        self.proc, self.port, self.lines = self.rp.proc, self.rp.port, self.rp.lines

    def wait_ready(self, timeout=30):
        last = [None]

        def ready():
            try:
                last[0] = api_call(self.port, "GET", "/readyz", token=None)
            except OSError as e:
                last[0] = (0, str(e))
            return last[0][0] == 200
        if not wait_until(ready, timeout, 0.1):
            raise TestFailure(f"fedrouter /readyz not 200 within {timeout} s: {last[0]}\n{tail(self.log)}")


def api_call(port, method, path, body=None, token=None, headers=None, raw=None,
             timeout=120, full=False):
    """One request on a fresh connection. <body> is JSON-encoded unless
    <raw> (bytes) is given. Returns (status, json-or-text) or, with <full>,
    (status, json-or-text, headers dict with lower-case names)."""
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text.decode(errors="replace")
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        return (r.status, parsed, hdrs) if full else (r.status, parsed)
    finally:
        c.close()


class Fed:
    """kubesim clusters + a router config + running router(s)."""

    def __init__(self, name, clusters, sandbox_lifetime=(600, 3600)):
        self.name = name
        self.root = tempfile.mkdtemp(prefix=f"fr-bb-{name}-")
        self.sims = {}
        self.routers = []
        for cname, region, extra in clusters:
            self.sims[cname] = Kubesim(self.root, cname, extra)
            self.sims[cname].region = region
        self.config = os.path.join(self.root, "fedrouter.conf")
        self.write_config(self.config, sandbox_lifetime)
        self.router = self.start_router()

    def write_config(self, path, lifetime):
        def sha(t):
            return hashlib.sha256(t.encode()).hexdigest()
        cl = ",\n".join(f'  {{ name = "{n}"; region = "{s.region}"; kubeconfig = "{s.kubeconfig}"; }}'
                        for n, s in self.sims.items())
        with open(path, "w") as f:
            f.write(f"""# written by tests/router/test_router.py
listen = "127.0.0.1:0";
region = "us";
sandbox = {{ default_lifetime_s = {lifetime[0]}; max_lifetime_s = {lifetime[1]}; }};
limits = {{ max_batch = 5000; max_body_bytes = {MAX_BODY}; max_exec_output_bytes = 1048576;
           max_exec_timeout_s = 600; max_connections_per_ip = {MAX_CONNS_PER_IP};
           exec_output_budget_bytes = {EXEC_BUDGET}; }};
tenants = (
  {{ name = "a"; token_sha256 = "{sha(TOKEN_A)}"; }},
  {{ name = "b"; token_sha256 = "{sha(TOKEN_B)}"; }},
  {{ name = "c"; token_sha256 = "{sha(TOKEN_C)}"; max_sandboxes = {C_MAX_SANDBOXES};
     max_concurrent_execs = {C_MAX_EXECS}; max_queued_execs = 0; }},
  {{ name = "ops"; token_sha256 = "{sha(TOKEN_ADMIN)}"; admin = true; }}
);
clusters = (
{cl}
);
""")

    def start_router(self, config=None):
        n = len(self.routers)
        r = Router(config or self.config, os.path.join(self.root, f"fedrouter-{n}.log"))
        self.routers.append(r)
        r.wait_ready()
        return r

    def api(self, method, path, body=None, token=TOKEN_A, headers=None, router=None, **kw):
        return api_call((router or self.router).port, method, path, body, token, headers, **kw)

    # helpers on top of the API ------------------------------------------

    def create(self, body, token=TOKEN_A, expect=201):
        b = dict(body)
        if "pool" not in b:
            b.setdefault("image", IMAGE)
        st, resp = self.api("POST", "/v1/sandboxes", b, token=token)
        check(st == expect, f"POST /v1/sandboxes {short(b)}: expected {expect}, got {st} {short(resp)}")
        if expect == 201:
            n = b.get("num_sandboxes", 1)
            sbs = resp.get("sandboxes") if isinstance(resp, dict) else None
            check(isinstance(sbs, list) and (len(sbs) == n or b.get("partial_ok")),
                  f"create of {n}: sandboxes list wrong: {short(resp)}")
        return resp

    def create_one(self, token=TOKEN_A, **fields):
        return self.create(fields, token=token)["sandboxes"][0]

    def exec(self, sid, argv, token=TOKEN_A, router=None, **fields):
        body = dict(fields, argv=argv)
        return self.api("POST", f"/v1/sandboxes/{sid}/exec", body, token=token, router=router)

    def exec_ok(self, sid, argv, **kw):
        st, r = self.exec(sid, argv, **kw)
        check(st == 200 and isinstance(r, dict), f"exec {argv} in {sid}: {st} {short(r)}")
        return r

    def list_ids(self, query="", token=TOKEN_A, router=None):
        st, r = self.api("GET", "/v1/sandboxes" + query, token=token, router=router)
        check(st == 200 and isinstance(r, dict) and isinstance(r.get("sandboxes"), list),
              f"GET /v1/sandboxes{query}: {st} {short(r)}")
        return {s.get("id") for s in r["sandboxes"]}

    def sim_of(self, sid):
        cluster, _, pod = sid.partition(".")
        check(cluster in self.sims and pod, f"sandbox id {sid!r} does not name a cluster of ours")
        return self.sims[cluster], pod

    def teardown(self):
        """Stops every router then every kubesim with SIGTERM; returns a list
        of problems (wrong exit codes, leftover processes)."""
        problems = []
        sessions = set()
        for i, r in enumerate(self.routers):
            sessions.add(r.proc.pid)
            if r.proc.poll() is not None:
                if not r.expected_dead:
                    problems.append(f"fedrouter #{i} died during the tests (rc {r.proc.poll()}):\n"
                                    f"{fedharness.log_report(r.log)}")
                continue
            rc = stop_proc(r.proc)
            if rc is None:
                problems.append(f"fedrouter #{i} did not exit within 20 s of SIGTERM (SIGKILLed):\n{tail(r.log)}")
            elif rc != 0:
                problems.append(f"fedrouter #{i} exited {rc} on SIGTERM (want 0):\n{fedharness.log_report(r.log)}")
        for s in self.sims.values():
            sessions.add(s.proc.pid)
            if s.killed:
                continue
            rc = stop_proc(s.proc)
            if rc is None:
                problems.append(f"kubesim {s.name} did not exit within 20 s of SIGTERM (SIGKILLed):\n{tail(s.log)}")
            elif rc != 0:
                problems.append(f"kubesim {s.name} exited {rc} on SIGTERM (want 0):\n{fedharness.log_report(s.log)}")
        # kubesim kills its exec'd processes on exit; they live in their
        # own sessions, so look for them by their pod directories too.
        if not wait_until(lambda: not find_procs(sessions, self.root + "/"), 5):
            left = find_procs(sessions, self.root + "/")
            problems.append(f"processes left behind 5 s after exit: {left}")
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not ARGS.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        return problems


# --------------------------------------------------------------------------
# tests on the main federation (c1, c2)

def test_create_exec_python(fed):
    """create -> exec python3 -c 'print(2+2)' -> "4\\n", exit 0."""
    st, resp, hdrs = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "name": "calc"},
                             headers={"X-Request-Id": "req-t1-create"}, full=True)
    check(st == 201, f"create: {st} {short(resp)}")
    check(hdrs.get("x-request-id") == "req-t1-create",
          f"X-Request-Id not echoed: {hdrs.get('x-request-id')!r}")
    sb = resp["sandboxes"][0]
    check(re.fullmatch(r"(c1|c2)\.[a-z0-9]([-a-z0-9]*[a-z0-9])?", sb.get("id", "")) is not None,
          f"id is not <cluster>.<pod> of ours: {sb}")
    check(sb.get("cluster") == sb["id"].split(".")[0] and sb.get("region") == "us",
          f"cluster/region fields: {sb}")
    check(sb.get("name") == "calc" and sb.get("state") == "running" and sb.get("warm") is False,
          f"name/state/warm: {sb}")
    pl = resp.get("placement", {})
    check(pl.get("requested") == 1 and pl.get("created") == 1, f"placement: {pl}")
    # exec-ready on return: kubesim has the pod Running already.
    sim, pod = fed.sim_of(sb["id"])
    p = sim.pod(pod)
    check(p is not None and p["status"].get("phase") == "Running",
          f"kubesim pod {pod} after create: {short(p['status'] if p else None)}")
    r = fed.exec_ok(sb["id"], ["python3", "-c", "print(2+2)"])
    check(r.get("stdout") == "4\n" and r.get("exit_code") == 0 and r.get("stderr") == "" and
          r.get("timed_out") is False and r.get("stdout_truncated") is False,
          f"exec result: {r}")
    check(isinstance(r.get("duration_ms"), (int, float)), f"duration_ms missing: {r}")
    if os.geteuid() == 0:
        # As root kubesim's python:3.12 pods have the image's `python`.
        r = fed.exec_ok(sb["id"], ["python", "-c", "print(2 ** 10)"])
        check(r.get("stdout") == "1024\n" and r.get("exit_code") == 0, f"exec python: {r}")
    st, got = fed.api("GET", "/v1/sandboxes/" + sb["id"])
    check(st == 200 and got.get("id") == sb["id"], f"GET sandbox: {st} {short(got)}")
    fed.shared["calc"] = sb["id"]


def test_exit_code_and_stderr(fed):
    """non-zero exits are a 200 with that exit_code; stderr kept apart."""
    sid = fed.shared.get("calc") or fed.create_one()["id"]
    r = fed.exec_ok(sid, ["sh", "-c", "echo out; echo err >&2; exit 7"])
    check(r.get("exit_code") == 7 and r.get("stdout") == "out\n" and r.get("stderr") == "err\n",
          f"sh -c '... exit 7': {r}")
    r = fed.exec_ok(sid, ["false"])
    check(r.get("exit_code") == 1 and r.get("timed_out") is False, f"false: {r}")
    r = fed.exec_ok(sid, ["python3", "-c", "import sys; sys.stderr.write('e' * 3); sys.exit(42)"])
    check(r.get("exit_code") == 42 and r.get("stderr") == "eee" and r.get("stdout") == "",
          f"python exit 42: {r}")


def test_exec_stdin_env_workdir(fed):
    """stdin is passed; env and workdir are applied; argv is not shell-parsed."""
    sid = fed.shared.get("calc") or fed.create_one()["id"]
    r = fed.exec_ok(sid, ["cat"], stdin="hello\nworld")
    check(r.get("stdout") == "hello\nworld" and r.get("exit_code") == 0, f"cat with stdin: {r}")
    r = fed.exec_ok(sid, ["sh", "-c", 'echo "$FR_T"; pwd'], env={"FR_T": "v 1"}, workdir="/tmp")
    check(r.get("stdout") == "v 1\n/tmp\n", f"env+workdir: {r}")
    r = fed.exec_ok(sid, ["echo", "$HOME", "a;b", "*"])
    check(r.get("stdout") == "$HOME a;b *\n", f"argv went through a shell: {r}")


def test_exec_timeout_kills(fed):
    """sleep 30 with timeout_s 1: timed_out in well under 30 s, and the
    process is gone from the machine."""
    sid = fed.shared.get("calc") or fed.create_one()["id"]
    home = fed.root + "/"

    def sleepers():
        return [(pid, cmd) for pid, cmd in find_procs(home_prefix=home) if cmd[-2:] == ["sleep", "30"]]
    check(not sleepers(), f"a 'sleep 30' runs before the test: {sleepers()}")
    result = {}

    def run():
        t0 = time.monotonic()
        try:
            result["resp"] = fed.exec(sid, ["sleep", "30"], timeout_s=1)
        except Exception as e:  # reported below
            result["resp"] = (0, repr(e))
        result["elapsed"] = time.monotonic() - t0
    th = threading.Thread(target=run)
    th.start()
    # While it runs the sleep must be visible to this check, or the
    # "gone afterwards" check below would prove nothing.
    seen = wait_until(sleepers, 5, 0.02)
    th.join(45)
    check(not th.is_alive(), "exec of sleep 30 with timeout_s 1 did not return within 45 s")
    st, r = result["resp"]
    check(st == 200 and isinstance(r, dict) and r.get("timed_out") is True,
          f"expected 200 timed_out:true, got {st} {short(r)}")
    check(result["elapsed"] < 10, f"timed out after {result['elapsed']:.1f} s, not well under 30 s")
    check(bool(seen), "never saw the 'sleep 30' process while the exec ran")
    # kubesim kills the timed-out command's process group when the exec
    # ends; give that kill a bounded time to land, then it must be gone.
    wait_until(lambda: not sleepers(), 10, 0.05)
    left = sleepers()
    check(not left, f"'sleep 30' still running 10 s after the timeout: {left}")
    # The sandbox still works afterwards.
    r = fed.exec_ok(sid, ["echo", "alive"])
    check(r.get("stdout") == "alive\n", f"exec after a timeout: {r}")


def test_output_caps_and_binary(fed):
    """stdout/stderr each capped with *_truncated; non-UTF-8 as base64."""
    sid = fed.shared.get("calc") or fed.create_one()["id"]
    r = fed.exec_ok(sid, ["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a"], max_output_bytes=1000)
    out = r.get("stdout")
    check(out == "a" * 1000 and r.get("stdout_truncated") is True and r.get("stderr_truncated") is False,
          f"capped stdout: len {len(out) if isinstance(out, str) else out!r}, "
          f"flags {r.get('stdout_truncated')}/{r.get('stderr_truncated')}")
    r = fed.exec_ok(sid, ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' b >&2; echo ok"],
                    max_output_bytes=1000)
    check(r.get("stderr") == "b" * 1000 and r.get("stderr_truncated") is True and
          r.get("stdout") == "ok\n" and r.get("stdout_truncated") is False,
          f"capped stderr: stdout {r.get('stdout')!r} stderr len {len(r.get('stderr') or '')} "
          f"flags {r.get('stdout_truncated')}/{r.get('stderr_truncated')}")
    r = fed.exec_ok(sid, ["sh", "-c", "head -c 999 /dev/zero | tr '\\0' c"], max_output_bytes=1000)
    check(r.get("stdout") == "c" * 999 and r.get("stdout_truncated") is False and r.get("exit_code") == 0,
          f"999 bytes under a 1000 cap: flags {r.get('stdout_truncated')}, exit {r.get('exit_code')}")
    r = fed.exec_ok(sid, ["printf", "\\377\\376"])
    check(r.get("stdout_encoding") == "base64", f"non-UTF-8 stdout without base64 encoding: {r}")
    check(base64.b64decode(r.get("stdout", "")) == b"\xff\xfe", f"base64 stdout decodes wrong: {r}")
    r = fed.exec_ok(sid, ["sh", "-c", "printf '\\377x' >&2; printf 'h\\303\\251'"])
    check(r.get("stderr_encoding") == "base64" and base64.b64decode(r.get("stderr", "")) == b"\xffx",
          f"non-UTF-8 stderr: {r}")
    check(r.get("stdout") == "h\u00e9" and r.get("stdout_encoding") in (None, "utf-8", "utf8"),
          f"valid UTF-8 stdout next to binary stderr: {r}")
    # NUL bytes are UTF-8 but six bytes each as JSON: base64 keeps the answer
    # small; ordinary text (here all newlines) stays text.
    r = fed.exec_ok(sid, ["head", "-c", "100000", "/dev/zero"])
    check(r.get("stdout_encoding") == "base64" and base64.b64decode(r.get("stdout", "")) == b"\0" * 100000,
          f"100,000 NUL bytes: encoding {r.get('stdout_encoding')}, {len(r.get('stdout') or '')} chars")
    r = fed.exec_ok(sid, ["sh", "-c", "yes '' | head -n 5000"])
    check(r.get("stdout") == "\n" * 5000 and r.get("stdout_encoding") is None,
          f"5000 newlines: encoding {r.get('stdout_encoding')}")
    # The router-wide budget bounds what all execs hold at once: both streams
    # at their 1 MiB caps need 2 MiB, the budget is 1.5 MiB.
    r = fed.exec_ok(sid, ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' o; head -c 1048576 /dev/zero | tr '\\0' e >&2"])
    total = len(r.get("stdout") or "") + len(r.get("stderr") or "")
    check(total == EXEC_BUDGET and (r.get("stdout_truncated") or r.get("stderr_truncated")),
          f"over the output budget: {total} bytes kept (budget {EXEC_BUDGET}), flags "
          f"{r.get('stdout_truncated')}/{r.get('stderr_truncated')}")


def test_terminate_removes_pod(fed):
    """DELETE -> 200 terminated; GET -> 404; the pod is gone from kubesim."""
    sb = fed.create_one(name="doomed")
    sid = sb["id"]
    sim, pod = fed.sim_of(sid)
    check(sim.pod(pod) is not None, f"kubesim has no pod {pod} right after create")
    st, r = fed.api("DELETE", "/v1/sandboxes/" + sid)
    check(st == 200 and r == {"id": sid, "terminated": True}, f"DELETE: {st} {short(r)}")
    gone = wait_until(lambda: fed.api("GET", "/v1/sandboxes/" + sid)[0] == 404, 10)
    expect_error(fed.api("GET", "/v1/sandboxes/" + sid), 404, "sandbox_not_found",
                 f"GET after DELETE (waited {'0-10' if gone else '10'} s)")
    check(wait_until(lambda: sim.pod(pod) is None, 10), f"kubesim still has pod {pod} 10 s after DELETE")
    check(sid not in fed.list_ids(), "terminated sandbox still listed")
    expect_error(fed.api("DELETE", "/v1/sandboxes/" + sid), 404, "sandbox_not_found", "second DELETE")
    expect_error(fed.exec(sid, ["true"]), 404, "sandbox_not_found", "exec after DELETE")
    # Terminate by label.
    tag = "t7-" + os.urandom(3).hex()
    made = {s["id"] for s in fed.create({"num_sandboxes": 3, "name": "bylabel",
                                        "labels": {"run": tag}})["sandboxes"]}
    check(fed.list_ids(f"?label=run={tag}") == made, "label filter does not list exactly the batch")
    st, r = fed.api("DELETE", f"/v1/sandboxes?label=run={tag}")
    check(st == 200 and r.get("terminated") == 3 and set(r.get("ids", [])) == made,
          f"DELETE by label: {st} {short(r)}")
    check(wait_until(lambda: not fed.list_ids(f"?label=run={tag}"), 10), "label batch still listed")
    for sid in made:
        s, p = fed.sim_of(sid)
        check(wait_until(lambda: s.pod(p) is None, 10), f"kubesim still has {p}")
    st, r = fed.api("DELETE", "/v1/sandboxes")
    check(st == 400, f"DELETE /v1/sandboxes without a filter must be refused: {st} {short(r)}")


def test_tenant_isolation(fed):
    """tenant B gets 404 sandbox_not_found on A's ids and does not list them."""
    sid = fed.create_one(name="private", token=TOKEN_A)["id"]
    mine_b = fed.create_one(name="bees", token=TOKEN_B)["id"]
    expect_error(fed.api("GET", "/v1/sandboxes/" + sid, token=TOKEN_B), 404, "sandbox_not_found", "B GET A's id")
    expect_error(fed.exec(sid, ["echo", "x"], token=TOKEN_B), 404, "sandbox_not_found", "B exec A's id")
    expect_error(fed.api("DELETE", "/v1/sandboxes/" + sid, token=TOKEN_B), 404, "sandbox_not_found",
                 "B DELETE A's id")
    b_list = fed.list_ids(token=TOKEN_B)
    check(sid not in b_list and mine_b in b_list, f"B's list: {sorted(b_list)}")
    a_list = fed.list_ids(token=TOKEN_A)
    check(sid in a_list and mine_b not in a_list, f"A's list: {sorted(a_list)}")
    # B's DELETE by label cannot reach A's sandboxes either.
    st, r = fed.api("DELETE", "/v1/sandboxes?name_prefix=private", token=TOKEN_B)
    check(st == 200 and r.get("terminated") == 0, f"B's DELETE ?name_prefix=private: {st} {short(r)}")
    st, got = fed.api("GET", "/v1/sandboxes/" + sid, token=TOKEN_A)
    check(st == 200 and got.get("id") == sid, f"A's sandbox after B's attempts: {st} {short(got)}")
    r = fed.exec_ok(sid, ["echo", "still mine"])
    check(r.get("stdout") == "still mine\n", f"A exec: {r}")
    fed.api("DELETE", "/v1/sandboxes/" + mine_b, token=TOKEN_B)


def raw_request(port, head, body, wait_early=1.0):
    """Sends <head> (bytes) and then <body> on a raw socket, returning
    (status, json) of the response. A server may answer and close before
    the body is sent (e.g. 413 from Content-Length): the response is read
    first if it arrives within <wait_early> s."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(head)
        r, _, _ = select.select([s], [], [], wait_early)
        if not r:
            try:
                s.sendall(body)
            except OSError:
                pass
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data:
                    hdr, _, rest = data.partition(b"\r\n\r\n")
                    m = re.search(rb"content-length:\s*(\d+)", hdr, re.I)
                    if m and len(rest) >= int(m.group(1)):
                        break
        except OSError:
            pass
        hdr, _, rest = data.partition(b"\r\n\r\n")
        m = re.match(rb"HTTP/1\.[01] (\d{3})", hdr)
        check(m is not None, f"no HTTP response (got {data[:200]!r})")
        try:
            return int(m.group(1)), json.loads(rest) if rest else None
        except ValueError:
            return int(m.group(1)), rest[:200].decode(errors="replace")
    finally:
        s.close()


def test_bad_input(fed):
    """malformed JSON, wrong types, unknown fields, big bodies, bad argv,
    bad ids, wrong methods, missing or unknown tokens -> 4xx with codes."""
    sid = fed.shared.get("calc") or fed.create_one()["id"]
    P = "/v1/sandboxes"
    expect_error(fed.api("POST", P, raw=b'{"image": "python:3.12",'), 400, "invalid_json", "truncated JSON")
    expect_error(fed.api("POST", P, raw=b'[1, 2]'), 400, "invalid_json", "JSON array body")
    expect_error(fed.api("POST", P, raw=b'not json'), 400, "invalid_json", "not JSON")
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "num_sandboxes": "3"}), 400, "invalid_field",
                     "num_sandboxes as a string")
    check(e.get("field") == "num_sandboxes", f"field for num_sandboxes: {e}")
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "num_sandboxes": 0}), 400, "invalid_field",
                     "num_sandboxes 0")
    check(e.get("field") == "num_sandboxes", f"field for num_sandboxes 0: {e}")
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "labels": "run=x"}), 400, "invalid_field",
                     "labels as a string")
    check(e.get("field") == "labels", f"field for labels: {e}")
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "bogus_field": 1}), 400, "invalid_field",
                     "unknown create field")
    check(e.get("field") == "bogus_field" or "bogus_field" in e.get("message", ""),
          f"unknown field not named: {e}")
    # This federation runs no agent, and secrets reach a sandbox only through one.
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "secrets": ["HF_TOKEN"]}), 400, "agent_required",
                     "secrets without an agent")
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "secrets": ["HF-TOKEN"]}), 400, "invalid_field",
                     "a secret name that is no env var name")
    check(e.get("field") == "secrets", f"field for secrets: {e}")
    e = expect_error(fed.api("POST", P, {"image": IMAGE, "clusters": ["nowhere"]}), 404, "cluster_not_found",
                     "clusters naming an unknown cluster")
    e = expect_error(fed.exec(sid, ["true"], colour="blue"), 400, "invalid_field", "unknown exec field")
    check(e.get("field") == "colour" or "colour" in e.get("message", ""), f"exec unknown field not named: {e}")
    e = expect_error(fed.exec(sid, ["true"], timeout_s="1"), 400, "invalid_field", "exec timeout_s as string")
    # Oversized bodies: limits.max_body_bytes is 64 KiB in this config.
    big = json.dumps({"image": IMAGE, "labels": {"pad": "x" * 10}, "name": "y" * (MAX_BODY + 1000)}).encode()
    head = (f"POST {P} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(big)}\r\n\r\n").encode()
    expect_error(raw_request(fed.router.port, head, big), 413, "body_too_large", "body over max_body_bytes")
    big_exec = json.dumps({"argv": ["true"], "stdin": "z" * (MAX_BODY * 2)}).encode()
    head = (f"POST {P}/{sid}/exec HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(big_exec)}\r\n\r\n").encode()
    expect_error(raw_request(fed.router.port, head, big_exec), 413, "body_too_large", "exec body over limit")
    # The router still serves after those.
    check(fed.api("GET", "/healthz", token=None)[0] == 200, "healthz after oversized bodies")
    # argv
    for bad, what in (([], "empty argv"), ([""], 'argv [""]'), ("echo hi", "argv a string"),
                      (["echo", 3], "argv with a number"), (["echo", None], "argv with null"),
                      (["ec\u0000ho"], "argv with NUL")):
        expect_error(fed.exec(sid, bad), 400, "invalid_argv", what)
    expect_error(fed.api("POST", f"{P}/{sid}/exec", {"stdin": ""}), 400, "invalid_argv", "argv missing")
    # Too long for the pods/exec URL: a clear 400 naming the limit, not a 502 from the cluster.
    e = expect_error(fed.exec(sid, ["echo", "x" * 20000]), 400, "invalid_argv", "argv of 20 KB")
    check("14336" in e.get("message", ""), f"the limit is named: {e}")
    r = fed.exec_ok(sid, ["sh", "-c", "echo ${#1}", "sh", "y" * 10000])
    check(r.get("stdout") == "10000\n", f"argv of 10 KB runs: {short(r)}")
    expect_error(fed.api("POST", f"{P}/{sid}/exec", raw=b"{argv"), 400, "invalid_json", "exec malformed JSON")
    # ids
    expect_error(fed.api("GET", P + "/no-dot-here"), 400, "invalid_id", "id without a cluster part")
    st, r = fed.api("GET", P + "/c1.Bad_Name!")
    check((st, (r or {}).get("error", {}).get("code")) in ((400, "invalid_id"), (404, "sandbox_not_found")),
          f"id with an impossible pod name: {st} {short(r)}")
    st, r = fed.api("GET", P + "/zz9.fr-nothing")
    check((st, (r or {}).get("error", {}).get("code")) in ((404, "sandbox_not_found"), (400, "invalid_id")),
          f"id naming an unknown cluster: {st} {short(r)}")
    expect_error(fed.api("GET", P + "/c1.fr-does-not-exist"), 404, "sandbox_not_found", "unknown pod in c1")
    expect_error(fed.exec("c2.fr-does-not-exist", ["true"]), 404, "sandbox_not_found", "exec unknown pod")
    # methods
    st, r, h = fed.api("PUT", P, {}, full=True)
    check(st == 405 and r.get("error", {}).get("code") == "method_not_allowed" and "POST" in h.get("allow", ""),
          f"PUT /v1/sandboxes: {st} {short(r)} Allow={h.get('allow')!r}")
    expect_error(fed.api("PATCH", f"{P}/{sid}", {}), 405, "method_not_allowed", "PATCH a sandbox")
    expect_error(fed.api("GET", f"{P}/{sid}/exec"), 405, "method_not_allowed", "GET exec")
    expect_error(fed.api("POST", "/healthz", {}), 405, "method_not_allowed", "POST /healthz")
    for path in ("/metrics", "/dashboard", "/v1/events"):
        expect_error(fed.api("POST", path, {}), 405, "method_not_allowed", f"POST {path}")
    expect_error(fed.api("GET", "/v1/no-such-thing"), 404, "not_found", "unknown endpoint")
    # auth
    for path in (P, f"{P}/{sid}", "/v1/pools", "/v1/clusters"):
        expect_error(fed.api("GET", path, token=None), 401, "unauthorized", f"GET {path} without a token")
        expect_error(fed.api("GET", path, token="wrong-" + TOKEN_A), 401, "unauthorized",
                     f"GET {path} with an unknown token")
    expect_error(fed.exec(sid, ["true"], token=None), 401, "unauthorized", "exec without a token")
    expect_error(fed.api("GET", P, headers={"Authorization": "Basic " + TOKEN_A}, token=None), 401,
                 "unauthorized", "Basic instead of Bearer")
    # Nothing was created by any of the rejected creates.
    st, r = fed.api("GET", P + "?name_prefix=y")
    check(st == 200 and r.get("sandboxes") == [], f"a rejected create left sandboxes: {short(r)}")


def test_expired_reaped(fed):
    """timeout_s 2: the sandbox is gone from the list and from kubesim soon
    after its lifetime."""
    sb = fed.create_one(name="shortlived", timeout_s=2)
    sid = sb["id"]
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    try:
        life = (datetime.datetime.strptime(sb["expires_at"], fmt) -
                datetime.datetime.strptime(sb["created_at"], fmt)).total_seconds()
    except (KeyError, ValueError) as e:
        raise TestFailure(f"created_at/expires_at unusable ({e}): {sb}")
    check(1 <= life <= 3, f"expires_at - created_at is {life} s for timeout_s 2: {sb}")
    sim, pod = fed.sim_of(sid)
    check(sim.pod(pod) is not None, "kubesim has no pod right after create")
    p = sim.pod(pod)
    check(p["spec"].get("activeDeadlineSeconds") is not None,
          f"pod has no activeDeadlineSeconds (lifetime not enforced in the cluster): {short(p['spec'])}")
    t0 = time.monotonic()
    gone = wait_until(lambda: sid not in fed.list_ids() and sim.pod(pod) is None, 40, 0.5)
    check(gone, f"40 s after a 2 s lifetime: listed={sid in fed.list_ids()}, "
          f"kubesim pod={short((sim.pod(pod) or {}).get('status'))}")
    check(fed.api("GET", "/v1/sandboxes/" + sid)[0] == 404, "GET of the reaped sandbox is not 404")
    print(f"    (reaped {time.monotonic() - t0:.1f} s after create returned)")


def test_router_kill9_restart(fed):
    """kill -9 the router mid-run (an exec in flight), restart it with the
    same config: every sandbox is still listed and exec-able."""
    made = [s["id"] for s in fed.create({"num_sandboxes": 2, "name": "survivor", "clusters": ["c1"]})["sandboxes"]]
    made += [s["id"] for s in fed.create({"num_sandboxes": 2, "name": "survivor2", "clusters": ["c2"]})["sandboxes"]]
    before = fed.list_ids()
    check(set(made) <= before, "new sandboxes not listed before the kill")
    old = fed.router
    th = threading.Thread(target=lambda: _swallow(lambda: fed.exec(made[0], ["sleep", "3"], timeout_s=10)))
    th.start()
    # Killed with the exec in flight: its 'sleep 3' runs in the sandbox.
    check(wait_until(lambda: any(cmd[-2:] == ["sleep", "3"] for _, cmd in find_procs(home_prefix=fed.root + "/")),
                     10, 0.02), "the exec's 'sleep 3' never ran")
    old.expected_dead = True
    old.proc.kill()
    check(old.proc.wait(10) == -signal.SIGKILL, "router did not die of SIGKILL")
    th.join(30)
    left = find_procs({old.proc.pid})
    check(not left, f"processes left in the killed router's session: {left}")
    fed.router = fed.start_router()
    after = fed.list_ids()
    check(before <= after, f"missing after restart: {sorted(before - after)}")
    for sid in sorted(before):
        r = fed.exec_ok(sid, ["echo", sid])
        check(r.get("stdout") == sid + "\n" and r.get("exit_code") == 0, f"exec in {sid} after restart: {r}")
    fed.shared["survivors"] = made


def _swallow(fn):
    try:
        fn()
    except Exception:
        pass


def test_second_router_same_sandboxes(fed):
    """a second router (same config but its own port) serves the same
    sandboxes: list, get, exec, terminate, both ways."""
    cfg2 = os.path.join(fed.root, "fedrouter-2.conf")
    shutil.copy(fed.config, cfg2)
    r2 = fed.start_router(cfg2)
    check(r2.port != fed.router.port, "second router on the same port")
    ids1 = fed.list_ids()
    ids2 = fed.list_ids(router=r2)
    check(ids1 and ids1 == ids2, f"lists differ: only in 1 {sorted(ids1 - ids2)}, only in 2 {sorted(ids2 - ids1)}")
    for sid in sorted(ids1)[:4]:
        r = fed.exec_ok(sid, ["sh", "-c", "echo $HOSTNAME"], router=r2)
        check(r.get("stdout") == sid.split(".", 1)[1] + "\n", f"exec via router 2 in {sid}: {r}")
    st, resp = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "name": "via-two"}, router=r2)
    check(st == 201, f"create via router 2: {st} {short(resp)}")
    sid = resp["sandboxes"][0]["id"]
    check(wait_until(lambda: sid in fed.list_ids(), 10), "router 1 does not list a sandbox created via router 2")
    r = fed.exec_ok(sid, ["echo", "one"])
    check(r.get("stdout") == "one\n", f"exec via router 1 in a sandbox from router 2: {r}")
    st, r = fed.api("DELETE", "/v1/sandboxes/" + sid)
    check(st == 200, f"DELETE via router 1: {st} {short(r)}")
    check(wait_until(lambda: fed.api("GET", "/v1/sandboxes/" + sid, router=r2)[0] == 404, 10),
          "router 2 still serves a sandbox terminated via router 1")
    expect_error(fed.api("GET", "/v1/sandboxes/" + (fed.shared.get("calc") or "c1.x"), token=TOKEN_B, router=r2),
                 404, "sandbox_not_found", "tenant isolation on router 2")
    r2.expected_dead = True
    rc = stop_proc(r2.proc)
    check(rc == 0, f"second router exited {rc} on SIGTERM:\n{tail(r2.log)}")


def start_router_nowait(fed, extra_config=""):
    """Another router on the federation's config plus <extra_config>, not
    waited ready."""
    cfg = os.path.join(fed.root, f"fedrouter-{len(fed.routers)}.conf")
    with open(fed.config) as src, open(cfg, "w") as dst:
        dst.write(src.read() + extra_config)
    r = Router(cfg, os.path.join(fed.root, f"fedrouter-{len(fed.routers)}.log"))
    fed.routers.append(r)
    return r


def test_unsynced_cluster_lookup_is_503_not_404(fed):
    """a router whose cache of c2 has not completed its first list (every
    c2 API call fails) answers lookups of c2 sandboxes with 503 not_synced
    and Retry-After, never 404; c1 is served; once c2 answers, the same
    sandbox is found, untouched."""
    sid = fed.create_one(name="unsynced", clusters=["c2"])["id"]
    c1sid = fed.create_one(name="synced", clusters=["c1"])["id"]
    c2 = fed.sims["c2"]
    st, _ = c2.admin("POST", "/_sim/faults", {"error_rate": 1.0})
    check(st == 200, f"set c2 faults: {st}")
    r = None
    try:
        r = start_router_nowait(fed)
        check(wait_until(lambda: fed.api("GET", "/v1/sandboxes/" + c1sid, router=r)[0] == 200, 20),
              f"the new router does not serve c1's {c1sid}:\n{tail(r.log)}")
        st, body = api_call(r.port, "GET", "/readyz")
        expect_error((st, body), 503, "not_ready", "readyz with c2 unsynced")
        for method, path, body in (("GET", "/v1/sandboxes/" + sid, None),
                                   ("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["echo", "x"]}),
                                   ("DELETE", "/v1/sandboxes/" + sid, None)):
            st, resp, hdrs = fed.api(method, path, body, router=r, full=True)
            expect_error((st, resp), 503, "not_synced", f"{method} {path} on the unsynced router")
            check(hdrs.get("retry-after") == "1", f"{method} {path}: Retry-After {hdrs.get('retry-after')!r}")
        # An id naming no configured cluster is still a plain 404.
        expect_error(fed.api("GET", "/v1/sandboxes/c9.nope", router=r), 404, "sandbox_not_found",
                     "unknown cluster on the unsynced router")
        st, resp = fed.api("GET", "/v1/sandboxes", router=r)
        check(st == 200 and resp.get("not_synced") == ["c2"] and c1sid in {s["id"] for s in resp["sandboxes"]},
              f"list on the unsynced router: {st} {short(resp)}")
    finally:
        c2.admin("POST", "/_sim/faults", {"error_rate": 0})
    check(wait_until(lambda: fed.api("GET", "/v1/sandboxes/" + sid, router=r)[0] == 200, 30),
          f"after c2 recovered the new router still does not find {sid}: {fed.api('GET', '/v1/sandboxes/' + sid, router=r)}")
    st, resp = fed.api("GET", "/v1/sandboxes", router=r)
    check(st == 200 and "not_synced" not in resp, f"list still says not_synced: {short(resp)}")
    check(c2.pod(sid.split(".", 1)[1]) is not None, f"{sid} is gone from c2")
    r.expected_dead = True
    rc = stop_proc(r.proc)
    check(rc == 0, f"the extra router exited {rc} on SIGTERM:\n{tail(r.log)}")


def test_sigterm_fails_readyz_then_drains(fed):
    """SIGTERM: for shutdown_delay_ms /readyz is 503 shutting_down while
    every other request is served (new connections too); then the listener
    closes, idle keep-alive connections are closed, an exec started before
    finishes with its answer and Connection: close, and the router exits 0."""
    sid = fed.create_one(name="drain")["id"]
    r = start_router_nowait(fed, "shutdown_delay_ms = 1500;\n")
    r.wait_ready()
    busy = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
    idle = socket.create_connection(("127.0.0.1", r.port), timeout=10)
    idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < int(
            re.search(rb"Content-Length: (\d+)", got).group(1)):
        piece = idle.recv(4096)
        check(piece, f"the idle connection closed during its first answer: {got!r}")
        got += piece
    check(got.startswith(b"HTTP/1.1 200 "), f"GET /healthz on the idle connection: {got!r}")
    t0 = time.monotonic()
    r.expected_dead = True
    r.proc.send_signal(signal.SIGTERM)
    # The signal reaches the loop a moment later.
    check(wait_until(lambda: api_call(r.port, "GET", "/readyz")[0] == 503, 1, 0.02),
          "readyz still 200 1 s after SIGTERM")
    st, body = api_call(r.port, "GET", "/readyz")
    expect_error((st, body), 503, "shutting_down", "readyz after SIGTERM")
    # Still served during the delay, on new connections and kept ones.
    busy.request("POST", f"/v1/sandboxes/{sid}/exec", body=json.dumps({"argv": ["sleep", "2.5"]}),
                 headers={"Authorization": "Bearer " + TOKEN_A, "Content-Type": "application/json"})
    st, resp = fed.api("GET", "/v1/sandboxes/" + sid, router=r)
    check(st == 200 and resp.get("id") == sid, f"GET during the delay: {st} {short(resp)}")
    check(time.monotonic() - t0 < 1.2, "the checks during the delay took too long to mean anything")

    def refused():
        try:
            api_call(r.port, "GET", "/healthz", timeout=2)
            return False
        except OSError:
            return True
    check(wait_until(refused, 5, 0.05), "the listener is still open 5 s after SIGTERM")
    el = time.monotonic() - t0
    check(el >= 1.4, f"the listener closed {el:.2f} s after SIGTERM, before shutdown_delay_ms (1.5 s)")
    check(idle.recv(4096) == b"", "the idle keep-alive connection is still open while draining")
    idle.close()
    resp = busy.getresponse()
    body = json.loads(resp.read())
    check(resp.status == 200 and body.get("exit_code") == 0,
          f"the exec in flight across the drain: {resp.status} {short(body)}")
    check((resp.getheader("Connection") or "").lower() == "close",
          f"an answer while draining does not close its connection: {resp.getheaders()}")
    busy.close()
    rc = r.proc.wait(20)
    check(rc == 0, f"exited {rc} after the drain:\n{tail(r.log)}")


def test_killed_cluster_failover(fed):
    """SIGKILL c2's kubesim: exec into a c2 sandbox is a quick 503
    cluster_unavailable, and creates go to c1."""
    sid = fed.create_one(name="on-c2", clusters=["c2"])["id"]
    check(sid.startswith("c2."), f"clusters:[c2] placed {sid}")
    c2 = fed.sims["c2"]
    c2.proc.kill()
    c2.killed = True
    c2.proc.wait(10)
    t0 = time.monotonic()
    st, r = fed.exec(sid, ["echo", "hi"], timeout_s=30)
    el = time.monotonic() - t0
    expect_error((st, r), 503, "cluster_unavailable", "exec into a sandbox of the killed cluster")
    check(el < 10, f"cluster_unavailable took {el:.1f} s")
    t0 = time.monotonic()
    resp = fed.create({"num_sandboxes": 3, "name": "after-kill"})
    el = time.monotonic() - t0
    where = [s["id"].split(".")[0] for s in resp["sandboxes"]]
    check(where == ["c1"] * 3, f"creates after c2 died went to {where}")
    check(el < 20, f"create with a dead cluster took {el:.1f} s")
    for s in resp["sandboxes"]:
        out = fed.exec_ok(s["id"], ["echo", "ok"])
        check(out.get("stdout") == "ok\n", f"exec in {s['id']}: {out}")

    def c2_unhealthy():
        st, r = fed.api("GET", "/v1/clusters")
        return st == 200 and any(c.get("name") == "c2" and c.get("healthy") is False for c in r["clusters"])
    check(wait_until(c2_unhealthy, 15, 0.5), f"/v1/clusters still says c2 is healthy: {short(fed.api('GET', '/v1/clusters')[1], 800)}")
    check(fed.api("GET", "/healthz", token=None)[0] == 200, "router not alive")


# --------------------------------------------------------------------------
# warm pools (one slow cluster)

COLD_START_MS = 2000   # --start-ms of the warm federation (image pull 3000 on top, once per node)


def pool_ready(fed, name, cluster):
    st, r = fed.api("GET", "/v1/pools")
    if st != 200:
        return None
    for p in r.get("pools", []):
        if p.get("name") == name:
            for c in p.get("clusters", []):
                if c.get("cluster") == cluster:
                    return c.get("ready")
    return None


def test_warm_pool_claim(fed):
    """a create from a pool with ready pods claims one (warm:true) far below
    the cold-start delay, and the pool refills to 2."""
    st, r = fed.api("POST", "/v1/pools", {"name": "hot", "image": IMAGE, "cpus": 1, "memory_gb": 1,
                                          "replicas": 2, "clusters": ["cw"]})
    check(st == 201 and r.get("name") == "hot", f"POST /v1/pools: {st} {short(r)}")
    expect_error(fed.api("POST", "/v1/pools", {"name": "hot", "image": IMAGE, "replicas": 1}), 409,
                 "pool_exists", "second POST of the same pool")
    ok = wait_until(lambda: pool_ready(fed, "hot", "cw") == 2, 40, 0.25)
    check(ok, f"pool not ready 2 within 40 s: {short(fed.api('GET', '/v1/pools')[1])}")
    sim = fed.sims["cw"]
    check(sim.state()["pods"] == 2, f"kubesim pods with a pool of 2: {sim.state()['pods']}")
    t0 = time.monotonic()
    resp = fed.create({"pool": "hot", "name": "warm1"})
    el = time.monotonic() - t0
    sb = resp["sandboxes"][0]
    check(sb.get("warm") is True and sb.get("pool") == "hot", f"claimed sandbox: {sb}")
    check(resp.get("placement", {}).get("warm") == 1, f"placement: {resp.get('placement')}")
    check(el < COLD_START_MS / 2000, f"warm create took {el * 1000:.0f} ms; a cold start takes >= {COLD_START_MS} ms")
    print(f"    (warm create {el * 1000:.0f} ms)")
    r = fed.exec_ok(sb["id"], ["echo", "warm"])
    check(r.get("stdout") == "warm\n", f"exec in the warm sandbox: {r}")
    # The claimed pod left the pool; the ReplicaSet replaces it.
    ok = wait_until(lambda: pool_ready(fed, "hot", "cw") == 2 and sim.state()["pods"] == 3, 30, 0.25)
    check(ok, f"pool did not refill to 2 (ready {pool_ready(fed, 'hot', 'cw')}, kubesim pods {sim.state()['pods']})")
    st, p = fed.api("GET", "/v1/pools/hot")
    check(st == 200 and p.get("name") == "hot" and p.get("image") == IMAGE, f"GET /v1/pools/hot: {st} {short(p)}")
    expect_error(fed.api("GET", "/v1/pools/nope"), 404, "pool_not_found", "unknown pool")
    # The sandbox is the tenant's now: listed with pool "hot" and warm.
    listed = fed.list_ids("?pool=hot")
    check(listed == {sb["id"]}, f"?pool=hot lists {sorted(listed)}")
    # A cold create (no pool) cannot be exec-ready before the container starts.
    t0 = time.monotonic()
    cold = fed.create_one(name="cold1", cpus=1, memory_gb=1)
    el = time.monotonic() - t0
    check(cold.get("warm") is False, f"create without a pool says warm: {cold}")
    check(el >= COLD_START_MS / 1000 * 0.9, f"cold create returned after {el:.2f} s, before the container could start")
    r = fed.exec_ok(cold["id"], ["echo", "cold"])
    check(r.get("stdout") == "cold\n", f"exec right after a cold create: {r}")
    # Delete: unclaimed pods go, the claimed sandbox stays.
    st, r = fed.api("DELETE", "/v1/pools/hot")
    check(st == 200, f"DELETE /v1/pools/hot: {st} {short(r)}")
    ok = wait_until(lambda: sim.state()["pods"] == 2, 15, 0.25)
    check(ok, f"kubesim pods after pool delete: {sim.state()['pods']} (want the 2 sandboxes)")
    check(fed.api("GET", "/v1/sandboxes/" + sb["id"])[0] == 200, "claimed sandbox gone with its pool")


def test_claim_seen_while_watch_lags(fed):
    """a warm claim answered 201 is this tenant's sandbox at once, even when
    the router's pod watch is down (ended, new watches refused 429, as
    right after a cluster outage): exec, GET and list find it, and it is
    still there after the watch is back."""
    sim = fed.sims["cw"]
    st, r = fed.api("POST", "/v1/pools", {"name": "lag", "image": IMAGE, "cpus": 1, "memory_gb": 1,
                                          "replicas": 2, "clusters": ["cw"]})
    check(st == 201, f"POST /v1/pools lag: {st} {short(r)}")
    ok = wait_until(lambda: pool_ready(fed, "lag", "cw") == 2, 40, 0.25)
    check(ok, f"pool lag not ready 2 within 40 s: {short(fed.api('GET', '/v1/pools')[1])}")
    watchers = sim.state()["watchers"]
    check(watchers > 0, f"the router holds no watch on cw before the outage: {short(sim.state())}")
    st, r = sim.admin("POST", "/_sim/faults", {"reject_watches": True, "drop_watches": True})
    check(st == 200, f"kubesim faults: {st} {short(r)}")
    try:
        # The watches have ended; re-watches get 429 and back off.
        check(wait_until(lambda: sim.state()["watchers"] == 0, 10, 0.05),
              f"watches still open on cw after drop_watches: {short(sim.state())}")
        ids = []
        for i in range(2):
            sb = fed.create_one(pool="lag", name=f"lag{i}")
            check(sb.get("warm") is True, f"claim {i} while the watch is down: {sb}")
            r = fed.exec_ok(sb["id"], ["echo", f"seen{i}"])
            check(r.get("stdout") == f"seen{i}\n", f"exec right after the claim: {r}")
            st, g = fed.api("GET", "/v1/sandboxes/" + sb["id"])
            check(st == 200 and g.get("name") == f"lag{i}", f"GET right after the claim: {st} {short(g)}")
            ids.append(sb["id"])
        check(set(ids) <= fed.list_ids("?pool=lag"), f"list while the watch is down lacks {ids}")
    finally:
        sim.admin("POST", "/_sim/faults", {"reject_watches": False})
    # The watch comes back (after its backoff) and changes nothing: the
    # router's watches are open on cw again, and a change made in the
    # cluster after the outage (ids[1]'s pod deleted behind the router's
    # back) reaches the router through them; by then the relist that
    # reopened the watch has been applied too, and ids[0] is still there.
    check(wait_until(lambda: sim.state()["watchers"] >= watchers, 30, 0.1),
          f"the router's watches on cw did not come back within 30 s: {short(sim.state())}")
    _, gone_pod = fed.sim_of(ids[1])
    st, r = sim.kube_delete(f"/api/v1/namespaces/default/pods/{gone_pod}")
    check(st == 200, f"kubesim DELETE pod {gone_pod}: {st} {short(r)}")
    check(wait_until(lambda: ids[1] not in fed.list_ids("?pool=lag"), 15, 0.1),
          f"the router does not see {ids[1]} deleted 15 s after: its watch is not back")
    check(fed.list_ids("?pool=lag") == {ids[0]}, f"list after the watch is back: {fed.list_ids('?pool=lag')}")
    r = fed.exec_ok(ids[0], ["echo", "later"])
    check(r.get("stdout") == "later\n", f"exec after the watch is back: {r}")
    ids = ids[:1]
    for sid in ids:
        st, r = fed.api("DELETE", "/v1/sandboxes/" + sid)
        check(st == 200, f"terminate {sid}: {st} {short(r)}")
    st, r = fed.api("DELETE", "/v1/pools/lag")
    check(st == 200, f"DELETE /v1/pools/lag: {st} {short(r)}")
    ok = wait_until(lambda: not sim.pods("fedrouter.io/pool=lag"), 20, 0.25)
    check(ok, f"pods of pool lag left: {[p['metadata']['name'] for p in sim.pods('fedrouter.io/pool=lag')]}")


# --------------------------------------------------------------------------
# the batch of 200 (two one-node clusters of 50 pods)

def post_batch(fed, body, timeout=60):
    """POST /v1/sandboxes for a batch, bounded: a router that never answers
    is a failure that says what the clusters hold, not a hung suite.
    Returns (status, json, headers, seconds)."""
    t0 = time.monotonic()
    try:
        st, r, h = fed.api("POST", "/v1/sandboxes", body, full=True, timeout=timeout)
    except socket.timeout:
        counts = {n: (s.state()["pods"], s.state()["unschedulable"]) for n, s in fed.sims.items()}
        raise TestFailure(f"POST {short(body)}: no answer within {timeout} s (kubesim (pods, unschedulable) "
                          f"now {counts}, router lists {len(fed.list_ids())})")
    return st, r, h, time.monotonic() - t0


def batch_200(fed, shape, base, tag):
    """The batch of 200 on room for ~96: 503 no_capacity with per-cluster
    reasons and nothing of the batch left; then with partial_ok what fits
    plus the shortfall, cleaned up by label. <shape> is {"pool":..} or
    {"image":..}; <base> the kubesim pod counts to come back to."""
    def counts():
        return {n: s.state()["pods"] for n, s in fed.sims.items()}

    def post(body):
        return post_batch(fed, dict(shape, **body))

    def clean():
        return fed.list_ids() == set() and counts() == base
    st, r, h, el = post({"name": tag, "num_sandboxes": 200, "labels": {"run": tag}})
    e = expect_error((st, r), 503, "no_capacity", f"batch of 200 on room for ~96 (after {el:.1f} s)")
    check("retry-after" in h, f"no Retry-After on no_capacity: {h}")
    reasons = json.dumps(e.get("clusters"))
    check(e.get("clusters") and "s1" in reasons and "s2" in reasons,
          f"no per-cluster reasons for s1 and s2: {short(e)}")
    check(wait_until(clean, 30, 0.3),
          f"after the failed batch: listed {len(fed.list_ids())}, kubesim pods {counts()} (want {base})")
    print(f"    ({tag}: all-or-nothing answer after {el:.1f} s)")
    st, r, h, el = post({"name": tag + "p", "num_sandboxes": 200, "labels": {"run": tag + "p"},
                         "partial_ok": True})
    check(st == 201 and isinstance(r, dict), f"partial_ok batch: {st} {short(r)}")
    sbs, pl = r.get("sandboxes", []), r.get("placement", {})
    n = len(sbs)
    check(80 <= n <= 100, f"partial_ok created {n} (room is ~96-100)")
    check(pl.get("shortfall") == 200 - n and pl.get("created", n) == n, f"placement: {short(pl)}")
    names = sorted(s.get("name") for s in sbs)
    check(len(set(names)) == n and all(re.fullmatch(tag + r"p-\d{4}", x or "") for x in names),
          f"batch names: {names[:5]}...")
    try:
        check(all(s.get("state") == "running" for s in sbs), "a returned sandbox is not running")
        returned = {s["id"] for s in sbs}
        listed = fed.list_ids(f"?label=run={tag}p")
        if listed != returned:
            # The list is served from the watch cache; report how far it
            # lagged behind the create's answer, then wait for it.
            lag = (f"right after the 201 the list lacked {len(returned - listed)} "
                   f"(e.g. {sorted(returned - listed)[:3]}) and had {len(listed - returned)} extra")
            ok = wait_until(lambda: fed.list_ids(f"?label=run={tag}p") == returned, 10, 0.2)
            check(ok, f"listed batch differs from the returned one 10 s later; {lag}")
            print(f"    (note: {lag}; consistent later)")
    finally:
        st, d = fed.api("DELETE", f"/v1/sandboxes?label=run={tag}p", timeout=120)
    check(st == 200 and d.get("terminated") == n, f"cleanup: {st} {short(d)}")
    check(wait_until(clean, 30, 0.3), f"sandboxes left after DELETE by label: kubesim pods {counts()}")


def test_batch_pool_all_or_nothing(fed):
    """200 sandboxes from a warm pool (2 per cluster) on two clusters of 50
    pods: no_capacity, claimed pods rolled back too, the pool refills."""
    st, r = fed.api("POST", "/v1/pools", {"name": "base", "image": IMAGE, "cpus": 1, "memory_gb": 2,
                                          "replicas": 2})
    check(st == 201, f"POST /v1/pools: {st} {short(r)}")
    def both_ready():
        return pool_ready(fed, "base", "s1") == 2 and pool_ready(fed, "base", "s2") == 2
    check(wait_until(both_ready, 30, 0.2), f"pool base not ready: {short(fed.api('GET', '/v1/pools')[1])}")
    base = {n: s.state()["pods"] for n, s in fed.sims.items()}
    check(base == {"s1": 2, "s2": 2}, f"pool-only pod counts: {base}")
    batch_200(fed, {"pool": "base"}, base, "warmbig")
    check(wait_until(both_ready, 20, 0.2), "pool did not come back to 2 ready per cluster")


def test_batch_cold_all_or_nothing(fed):
    """200 cold sandboxes (no pool) on two clusters of 50 pods (the pool
    from the previous test holds 2 of each): no_capacity and nothing left;
    partial_ok gives what fits."""
    left = fed.list_ids()
    check(not left, f"{len(left)} sandboxes left by an earlier test; cannot count from here")
    check(wait_until(lambda: pool_ready(fed, "base", "s1") == 2 and pool_ready(fed, "base", "s2") == 2, 20, 0.2),
          "the pool from the previous test is not at 2 ready per cluster")
    base = {n: s.state()["pods"] for n, s in fed.sims.items()}
    check(base == {"s1": 2, "s2": 2}, f"pool-only pod counts: {base}")
    batch_200(fed, {"image": IMAGE}, base, "coldbig")


def test_batch_quota_rollback(fed):
    """200 sandboxes where the nodes have room (2 x 110 pods) but each
    namespace quota allows 60. The router either sees the quotas in its
    capacity view and refuses at once (shortfall 80), or learns them from the
    clusters' 403s while creating and deletes what it made; either way the
    answer names the quota and nothing is left. With partial_ok it keeps what
    the quotas admit."""
    base = {n: s.state()["pods"] for n, s in fed.sims.items()}
    check(base == {"q1": 0, "q2": 0}, f"pods before: {base}")
    rv0 = {n: s.state()["resource_version"] for n, s in fed.sims.items()}
    st, r, h, el = post_batch(fed, {"image": IMAGE, "name": "quota", "num_sandboxes": 200,
                                    "cpus": 1, "memory_gb": 1, "labels": {"run": "q"}})
    e = expect_error((st, r), 503, "no_capacity", f"batch of 200 over two quotas of 60 (after {el:.1f} s)")
    check("retry-after" in h, f"no Retry-After on no_capacity: {h}")
    reasons = json.dumps(e.get("clusters") or e.get("placement", {}).get("clusters"))
    check("q1" in reasons and "q2" in reasons and "quota" in reasons.lower(),
          f"per-cluster reasons do not name both clusters and the quota: {short(e, 800)}")
    grew = {n: s.state()["resource_version"] - rv0[n] for n, s in fed.sims.items()}
    if all(g >= 60 for g in grew.values()):
        print(f"    (tried and rolled back: answer after {el:.1f} s; resourceVersions grew by {grew})")
    else:
        check(e.get("shortfall") == 80, f"refused up front without the right shortfall: {short(e, 800)}")
        print(f"    (refused up front from the capacity view after {el:.1f} s: shortfall {e.get('shortfall')})")

    def clean():
        return fed.list_ids() == set() and all(s.state()["pods"] == 0 for s in fed.sims.values())
    check(wait_until(clean, 30, 0.3),
          f"after the failed batch: listed {len(fed.list_ids())}, kubesim pods "
          f"{ {n: s.state()['pods'] for n, s in fed.sims.items()} } (want 0 everywhere)")
    st, r, _, _ = post_batch(fed, {"image": IMAGE, "name": "qpart", "num_sandboxes": 200, "cpus": 1,
                                   "memory_gb": 1, "labels": {"run": "qp"}, "partial_ok": True})
    check(st == 201 and isinstance(r, dict), f"partial_ok batch: {st} {short(r)}")
    n, pl = len(r.get("sandboxes", [])), r.get("placement", {})
    where = {c: sum(1 for s in r["sandboxes"] if s["id"].startswith(c + ".")) for c in ("q1", "q2")}
    check(where == {"q1": 60, "q2": 60}, f"partial_ok placed {where} (quota 60 each)")
    check(pl.get("shortfall") == 200 - n, f"placement: {short(pl, 800)}")
    st, d = fed.api("DELETE", "/v1/sandboxes?label=run=qp", timeout=120)
    check(st == 200 and d.get("terminated") == n, f"cleanup: {st} {short(d)}")
    check(wait_until(clean, 30, 0.3), "sandboxes left after DELETE by label")


def metric(fed, name, labels=""):
    """One sample of /metrics (labels as printed, e.g. 'action="evicted"')."""
    with urllib.request.urlopen(f"http://127.0.0.1:{fed.router.port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    key = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    raise TestFailure(f"/metrics has no {key}")


def test_idle_connection_flood_does_not_lock_out(fed):
    """Twice the per-address connection limit held idle (no token needed to
    open a socket): new clients still get in, because each new connection
    closes the longest-idle one; the router's descriptors stay bounded."""
    socks = []
    try:
        for _ in range(2 * MAX_CONNS_PER_IP):
            socks.append(socket.create_connection(("127.0.0.1", fed.router.port), timeout=5))
        t0 = time.monotonic()
        st, r = fed.api("GET", "/healthz", token=None)
        check(st == 200, f"/healthz under an idle flood: {st} {short(r)}")
        st, r = fed.api("GET", "/v1/clusters")
        check(st == 200, f"/v1/clusters under an idle flood: {st} {short(r)}")
        elapsed = time.monotonic() - t0
        check(elapsed < 10, f"answers under the flood took {elapsed:.1f} s")
        check(metric(fed, "fedrouter_http_connections", 'state="open"') <= MAX_CONNS_PER_IP,
              "more connections open than the per-address limit")
        check(metric(fed, "fedrouter_http_connections_limited_total", 'action="evicted"') >= MAX_CONNS_PER_IP,
              "idle connections were not evicted")
        # The oldest of the flood were closed by the router.
        closed = 0
        for sk in socks[:MAX_CONNS_PER_IP // 2]:
            sk.settimeout(5)
            try:
                closed += sk.recv(1) == b""
            except (ConnectionResetError, socket.timeout):
                closed += 1
        check(closed == MAX_CONNS_PER_IP // 2, f"only {closed} of the oldest idle connections were closed")
    finally:
        for sk in socks:
            sk.close()


def test_tenant_limits_hold_under_concurrency(fed):
    """max_sandboxes counts creates in flight: 80 concurrent creates by a
    tenant limited to 20 make at most 20; max_concurrent_execs bounds execs
    running at once. Both answer 429 tenant_limit naming the limit."""
    results = []
    lock = threading.Lock()

    def one_create(i):
        st, r = fed.api("POST", "/v1/sandboxes", {"image": IMAGE, "name": f"lim-{i}", "labels": {"run": "limits"}},
                        token=TOKEN_C, timeout=120)
        with lock:
            results.append((st, r))

    threads = [threading.Thread(target=one_create, args=(i,)) for i in range(80)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    made = [r for st, r in results if st == 201]
    refused = [r for st, r in results if st == 429]
    check(len(results) == 80, f"{len(results)} of 80 creates answered")
    check(len(made) <= C_MAX_SANDBOXES, f"{len(made)} sandboxes made for a tenant limited to {C_MAX_SANDBOXES}")
    check(len(made) + len(refused) == 80, f"other answers: {[st for st, _ in results if st not in (201, 429)]}")
    check(all(r.get("error", {}).get("code") == "tenant_limit" and r["error"].get("limit") == "max_sandboxes"
              for r in refused), f"429 bodies: {short(refused[:2])}")
    st, r = fed.api("GET", "/v1/sandboxes?label=run=limits", token=TOKEN_C)
    check(st == 200 and len(r.get("sandboxes", [])) == len(made) <= C_MAX_SANDBOXES,
          f"the tenant lists {len(r.get('sandboxes', []))} sandboxes, {len(made)} made")
    # Execs: C_MAX_EXECS * 3 at once, each running 2 s.
    sid = made[0]["sandboxes"][0]["id"]
    ex = []

    def one_exec():
        st, r = fed.api("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["sleep", "2"]}, token=TOKEN_C, timeout=60)
        with lock:
            ex.append((st, r))

    threads = [threading.Thread(target=one_exec) for _ in range(C_MAX_EXECS * 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ok = [r for st, r in ex if st == 200]
    limited = [r for st, r in ex if st == 429]
    check(1 <= len(ok) and len(limited) >= 1 and len(ok) + len(limited) == len(ex),
          f"execs: {len(ok)} ran, {len(limited)} refused, others {[st for st, _ in ex if st not in (200, 429)]}")
    check(all(r["error"].get("limit") == "max_concurrent_execs" for r in limited), f"exec 429s: {short(limited[:2])}")
    # Another tenant is not affected by c's limits.
    st, r = fed.api("GET", "/v1/sandboxes")
    check(st == 200, f"tenant a while c is limited: {st}")
    st, d = fed.api("DELETE", "/v1/sandboxes?label=run=limits", token=TOKEN_C, timeout=120)
    check(st == 200, f"cleanup: {st} {short(d)}")


def test_pools_belong_to_their_tenant(fed):
    """A pool is its creator's: other tenants neither see, use, resize nor
    delete it; warm replicas count against max_pool_replicas; only an admin
    token makes a shared pool, which every tenant uses and only admins change."""
    st, r = fed.api("POST", "/v1/pools", {"name": "mine", "image": IMAGE, "replicas": 0})
    check(st == 201 and r.get("shared") is False, f"a creates pool mine: {st} {short(r)}")
    check(wait_until(lambda: fed.api("GET", "/v1/pools/mine")[0] == 200, 10), "pool mine not visible to a")
    for method, body in (("GET", None), ("PATCH", {"replicas": 5}), ("DELETE", None)):
        expect_error(fed.api(method, "/v1/pools/mine", body, token=TOKEN_B), 404, "pool_not_found",
                     f"{method} another tenant's pool")
    st, r = fed.api("GET", "/v1/pools", token=TOKEN_B)
    check(st == 200 and "mine" not in [p["name"] for p in r.get("pools", [])], f"b lists a's pool: {short(r)}")
    expect_error(fed.api("POST", "/v1/sandboxes", {"pool": "mine"}, token=TOKEN_B), 404, "pool_not_found",
                 "create from another tenant's pool")
    expect_error(fed.api("POST", "/v1/pools", {"name": "mine", "image": IMAGE, "replicas": 0}, token=TOKEN_B),
                 409, "pool_exists", "a pool name taken by another tenant")
    # max_pool_replicas (default 1000) over every cluster: 600 x 2 clusters is too many.
    e = expect_error(fed.api("POST", "/v1/pools", {"name": "huge", "image": IMAGE, "replicas": 600}, token=TOKEN_B),
                     429, "tenant_limit", "a pool past max_pool_replicas")
    check(e.get("limit") == "max_pool_replicas", f"limit named: {e}")
    e = expect_error(fed.api("PATCH", "/v1/pools/mine", {"replicas": 100000}), 429, "tenant_limit",
                     "a resize past max_pool_replicas")
    # Shared pools: admin only.
    expect_error(fed.api("POST", "/v1/pools", {"name": "common", "image": IMAGE, "replicas": 0, "shared": True}),
                 403, "forbidden", "a shared pool from a non-admin token")
    st, r = fed.api("POST", "/v1/pools", {"name": "common", "image": IMAGE, "replicas": 0, "shared": True},
                    token=TOKEN_ADMIN)
    check(st == 201 and r.get("shared") is True, f"admin creates shared pool: {st} {short(r)}")
    check(wait_until(lambda: fed.api("GET", "/v1/pools/common", token=TOKEN_B)[0] == 200, 10),
          "the shared pool is not visible to b")
    expect_error(fed.api("PATCH", "/v1/pools/common", {"replicas": 1}, token=TOKEN_B), 403, "forbidden",
                 "a tenant resizing a shared pool")
    st, r = fed.api("PATCH", "/v1/pools/common", {"replicas": 0}, token=TOKEN_ADMIN)
    check(st == 200, f"admin resizes the shared pool: {st} {short(r)}")
    for name, token in (("common", TOKEN_ADMIN), ("mine", TOKEN_A)):
        st, r = fed.api("DELETE", f"/v1/pools/{name}", token=token)
        check(st == 200, f"DELETE pool {name}: {st} {short(r)}")


def test_metrics_token_guards_metrics(fed):
    """With metrics_token_sha256 in the config, /metrics wants that bearer
    token (Prometheus' bearer_token); /healthz stays open; tenant tokens do
    not open it."""
    token = "metrics-" + os.urandom(6).hex()
    cfg2 = os.path.join(fed.root, "fedrouter-metrics.conf")
    with open(fed.config) as f:
        text = f.read()
    with open(cfg2, "w") as f:
        f.write(text + f'metrics_token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}";\n')
    r2 = fed.start_router(cfg2)
    try:
        for tok, what in ((None, "no token"), ("wrong", "a wrong token"), (TOKEN_A, "a tenant token")):
            st, body = api_call(r2.port, "GET", "/metrics", None, tok, None)
            check(st == 401 and isinstance(body, dict) and body.get("error", {}).get("code") == "unauthorized",
                  f"/metrics with {what}: {st} {short(body)}")
        conn = http.client.HTTPConnection("127.0.0.1", r2.port, timeout=10)
        conn.request("GET", "/metrics", headers={"Authorization": "Bearer " + token})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        check(resp.status == 200 and "fedrouter_build_info" in text, f"/metrics with the token: {resp.status}")
        check(api_call(r2.port, "GET", "/healthz", None, None, None)[0] == 200, "/healthz needs no token")
    finally:
        r2.expected_dead = True
        stop_proc(r2.proc)


def test_probe_defects_answered_cleanly(fed):
    """Inputs found by probing the router as an attacker would: each gets a
    clear 4xx, never a crash (the ASan build aborts on a use-after-free),
    a 503 out_of_memory, or a silent "everything"."""
    # PATCH /v1/pools/{name} with a bad body read the body after freeing it.
    st, r = fed.api("POST", "/v1/pools", {"name": "probe", "image": IMAGE, "replicas": 0})
    check(st == 201, f"create pool probe: {st} {short(r)}")
    for body, what, field in (({"replicas": -1}, "replicas -1", "replicas"),
                              ({"replicas": "3"}, "replicas as a string", "replicas"),
                              ({"replicas": 1, "x": 2}, "an extra field", "x")):
        e = expect_error(fed.api("PATCH", "/v1/pools/probe", body), 400, "invalid_field", f"PATCH pool with {what}")
        check(e.get("field") == field, f"PATCH pool with {what}: field {e.get('field')!r}, expected {field!r}")
    expect_error(fed.api("PATCH", "/v1/pools/probe", raw=b"[1"), 400, "invalid_json", "PATCH pool with bad JSON")
    check(fed.api("GET", "/healthz", token=None)[0] == 200, "router alive after the PATCH probes")
    # Pool bodies that cannot be used are refused, not accepted with nothing made.
    for clusters in ("c1", [], [3]):
        st, r = fed.api("POST", "/v1/pools", {"name": "probe2", "image": IMAGE, "replicas": 1, "clusters": clusters})
        check(st in (400, 404) and r.get("error", {}).get("code") in ("invalid_field", "cluster_not_found"),
              f"POST pool with clusters={clusters!r}: {st} {short(r)}")
    check(fed.api("GET", "/v1/pools/probe2")[0] == 404, "a refused pool was created anyway")
    st, r = fed.api("DELETE", "/v1/pools/probe")
    check(st == 200, f"delete pool probe: {st} {short(r)}")
    # A long image reference: its pool spec annotation was hand-made JSON
    # cut at ~190 characters; now it round-trips. One with a tab is no
    # image reference at all: refused.
    st, r = fed.api("POST", "/v1/pools", {"name": "probe3", "image": "registry.example.com/" + "a" * 280 + "\t:tag",
                                          "replicas": 0, "clusters": ["c1"]})
    expect_error((st, r), 400, "invalid_field", "create pool with a tab in its image")
    img = "registry.example.com/" + "a" * 480 + ":tag"
    st, r = fed.api("POST", "/v1/pools", {"name": "probe3", "image": img, "replicas": 0, "clusters": ["c1"]})
    check(st == 201, f"create pool with a long image: {st} {short(r)}")
    check(wait_until(lambda: fed.api("GET", "/v1/pools/probe3")[1].get("image") == img, 10),
          f"pool image round trip: {short(fed.api('GET', '/v1/pools/probe3')[1])}")
    fed.api("DELETE", "/v1/pools/probe3")
    # Ids with bytes that are not UTF-8, or cut mid-character: 400 invalid_id, not 503.
    for raw_id in ("%FF.x", "c1.%C3", "c1.%FF%FE", "C1.Upper"):
        st, r = fed.api("GET", "/v1/sandboxes/" + raw_id)
        check(st == 400 and r.get("error", {}).get("code") == "invalid_id",
              f"GET /v1/sandboxes/{raw_id}: expected 400 invalid_id, got {st} {short(r)}")
    # Empty filter values are refused; above all for DELETE, where "" meant "all of them".
    keep = fed.create_one(name="keepme")
    for q in ("name_prefix=", "pool=", "cluster=", "label="):
        expect_error(fed.api("DELETE", "/v1/sandboxes?" + q), 400, "invalid_field", f"DELETE ?{q}")
        expect_error(fed.api("GET", "/v1/sandboxes?" + q), 400, "invalid_field", f"GET ?{q}")
    st, r = fed.api("GET", "/v1/sandboxes/" + keep["id"])
    check(st == 200 and r.get("state") in ("running", "pending"), f"sandbox survived the empty filters: {st} {short(r)}")
    fed.api("DELETE", "/v1/sandboxes/" + keep["id"])
    # A region nobody knows is placed without preference, and said so.
    r = fed.create({"name": "where", "region": "eu"})
    pl = r.get("placement", {})
    check(pl.get("client_region") == "eu" and pl.get("client_region_known") is False,
          f"create with region eu: placement {short(pl)}")
    fed.api("DELETE", "/v1/sandboxes/" + r["sandboxes"][0]["id"])
    st, r = fed.api("POST", "/v1/placement/explain", {"image": IMAGE}, headers={"X-Client-Region": "eu"})
    check(st == 200 and r.get("request", {}).get("region_known") is False, f"explain for eu: {st} {short(r)}")
    st, r = fed.api("POST", "/v1/placement/explain", {"image": IMAGE, "region": "us"})
    check(st == 200 and r.get("request", {}).get("region_known") is True, f"explain for us: {st} {short(r)}")
    # /v1/events: a tenant sees its own events only.
    st, r = fed.api("GET", "/v1/events", token=TOKEN_B)
    check(st == 200 and all(isinstance(e, dict) for e in r.get("events", [])), f"events for b: {st} {short(r)}")
    mine = {e.get("request_id") for e in fed.api("GET", "/v1/events")[1].get("events", [])}
    theirs = {e.get("request_id") for e in r.get("events", [])}
    check(not (mine & theirs), f"tenant b sees tenant a's events: {sorted(mine & theirs)[:3]}")


# --------------------------------------------------------------------------
# runner

MAIN_TESTS = [test_create_exec_python, test_exit_code_and_stderr, test_exec_stdin_env_workdir,
              test_exec_timeout_kills, test_output_caps_and_binary, test_terminate_removes_pod,
              test_tenant_isolation, test_bad_input, test_probe_defects_answered_cleanly,
              test_idle_connection_flood_does_not_lock_out, test_tenant_limits_hold_under_concurrency,
              test_pools_belong_to_their_tenant, test_metrics_token_guards_metrics, test_expired_reaped, test_router_kill9_restart,
              test_second_router_same_sandboxes, test_unsynced_cluster_lookup_is_503_not_404,
              test_sigterm_fails_readyz_then_drains, test_killed_cluster_failover]

BIG = ["--node-cpu", "64", "--node-memory", "256Gi"]
FEDERATIONS = [
    ("main", [("c1", "us", ["--nodes", "2"] + BIG), ("c2", "us", ["--nodes", "2"] + BIG)], MAIN_TESTS),
    ("warm", [("cw", "us", ["--nodes", "1", "--image-pull-ms", "3000", "--start-ms", str(COLD_START_MS)] + BIG)],
     [test_warm_pool_claim, test_claim_seen_while_watch_lags]),
    ("small", [("s1", "us", ["--nodes", "1", "--node-pods", "50"] + BIG),
               ("s2", "us", ["--nodes", "1", "--node-pods", "50"] + BIG)],
     [test_batch_pool_all_or_nothing, test_batch_cold_all_or_nothing]),
    ("quota", [("q1", "us", ["--nodes", "1", "--node-pods", "110", "--namespace-quota", "pods=60"] + BIG),
               ("q2", "us", ["--nodes", "1", "--node-pods", "110", "--namespace-quota", "pods=60"] + BIG)],
     [test_batch_quota_rollback]),
]


def run_test(fn, fed, results):
    t0 = time.monotonic()
    try:
        fn(fed)
        results.append((fn.__name__, True, ""))
        print(f"ok   {fn.__name__} ({time.monotonic() - t0:.1f} s)", flush=True)
    except TestFailure as e:
        results.append((fn.__name__, False, str(e)))
        print(f"FAIL {fn.__name__} ({time.monotonic() - t0:.1f} s): {e}", flush=True)
    except Exception as e:
        detail = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        results.append((fn.__name__, False, detail))
        print(f"FAIL {fn.__name__} ({time.monotonic() - t0:.1f} s): {detail}", flush=True)


def kill_leftovers():
    """SIGKILLs the process group of every process the suite started that
    still runs."""
    for p in ALL_PROCS:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


def run_one_federation(doc, make_fed, tests, extra_paths=()):
    """The main() of a suite of <tests> on one federation: parses
    --fedrouter, --kubesim, each of <extra_paths> ("--agent"), --only and
    --keep into ARGS, runs the tests on make_fed(), tears it down, prints
    `N passed, M failed` and kills whatever it started that is left.
    Returns the exit code."""
    global ARGS
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    for opt in ("--fedrouter", "--kubesim") + tuple(extra_paths):
        ap.add_argument(opt, required=True)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()

    def make():
        fed = make_fed()
        fed.shared = {}
        return fed
    try:
        return run_suite(make, [t for t in tests if not ARGS.only or t.__name__ in ARGS.only])
    finally:
        kill_leftovers()


def watchdog():
    time.sleep(WATCHDOG_S)
    print(f"FAIL watchdog: the suite ran over {WATCHDOG_S} s; killing everything", flush=True)
    for p in ALL_PROCS:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def run_suite(make_fed, tests):
    """Makes a federation with <make_fed>(), runs <tests> on it, tears it
    down, prints `N passed, M failed` and returns the exit code."""
    results = []
    fed = None
    try:
        fed = make_fed()
        for t in tests:
            run_test(t, fed, results)
    except TestFailure as e:
        results.append(("federation", False, str(e)))
        print(f"FAIL federation: {e}", flush=True)
    finally:
        if fed is not None:
            problems = fed.teardown()
            results.append(("teardown", not problems, "; ".join(problems)))
            print("ok   teardown" if not problems else "FAIL teardown: " + "; ".join(problems), flush=True)
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--only", action="append", default=[], help="run only these tests (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories (logs)")
    ARGS = ap.parse_args()
    threading.Thread(target=watchdog, daemon=True).start()
    results = []
    t_all = time.monotonic()
    for name, clusters, tests in FEDERATIONS:
        if ARGS.only:
            tests = [t for t in tests if t.__name__ in ARGS.only]
        if not tests:
            continue
        print(f"# federation {name}: {', '.join(c[0] for c in clusters)}", flush=True)
        fed = None
        try:
            fed = Fed(name, clusters)
            fed.shared = {}
        except Exception as e:
            for t in tests:
                results.append((t.__name__, False, f"federation {name} did not start: {e}"))
                print(f"FAIL {t.__name__}: federation {name} did not start: {e}", flush=True)
        if fed is not None:
            for t in tests:
                if fed.router.proc.poll() is not None:
                    results.append((t.__name__, False, "the router is not running"))
                    print(f"FAIL {t.__name__}: the router died (rc {fed.router.proc.poll()}):\n"
                          f"{tail(fed.router.log)}", flush=True)
                    continue
                run_test(t, fed, results)
            problems = fed.teardown() if fed else []
            tname = f"teardown_{name}"
            results.append((tname, not problems, "; ".join(problems)))
            print(f"ok   {tname}" if not problems else f"FAIL {tname}: " + "\n".join(problems), flush=True)
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed ({time.monotonic() - t_all:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        kill_leftovers()
    sys.exit(rc)
