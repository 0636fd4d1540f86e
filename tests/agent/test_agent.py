#!/usr/bin/env python3
"""fedrouter-agent black-box tests: the real binary on 127.0.0.1:0, spoken
to over HTTP exactly as the E2B SDK (Connect JSON, /files) and the router
speak to it. agent/README.md is the contract.

Usage: test_agent.py --agent PATH [--only NAME ...]
Prints `ok NAME` / `FAIL NAME: details` per test and `N passed, M failed`;
exits 1 if any test failed. Python 3 standard library only. Every agent
started is stopped with SIGTERM and must exit 0; every temporary file is
removed.
"""
import argparse
import base64
import hashlib
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ARGS = None
TMP = None
TOKEN = "tok-" + os.urandom(12).hex()
# What the router sends on /init; the agent knows only its SHA-256.
INIT_TOKEN = "init-" + os.urandom(16).hex()
INIT_SHA256 = hashlib.sha256(INIT_TOKEN.encode()).hexdigest()
SECRET_VALUE = "s3cr3t-" + os.urandom(12).hex()
WATCHDOG_S = 110
LIVE = []  # every Agent started, for the watchdog


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def wait_until(cond, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise TestFailure("timed out waiting for " + what)


def pid_alive(pid):
    """True while the process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class Agent:
    def __init__(self, extra=(), cmd=None, name="agent", init_sha256=INIT_SHA256, preexec=None, wrap=()):
        self.port_file = os.path.join(TMP, name + ".port")
        self.log_path = os.path.join(TMP, name + ".log")
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        argv = list(wrap) + [ARGS.agent, "--listen", "127.0.0.1:0", "--port-file", self.port_file] + list(extra)
        if cmd:
            argv += ["--"] + cmd
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        env["HOME"] = TMP
        if init_sha256 is not None:
            env["FR_AGENT_INIT_SHA256"] = init_sha256
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, env=env, preexec_fn=preexec)
        LIVE.append(self)
        wait_until(lambda: os.path.exists(self.port_file) or self.proc.poll() is not None,
                   what="the agent's port file")
        check(self.proc.poll() is None, "agent exited at start: " + self.logtext())
        self.port = int(open(self.port_file).read())

    def logtext(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, token=TOKEN):
        h = dict(headers or {})
        if token is not None:
            h["X-Access-Token"] = token
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def init(self, env=None, token=TOKEN, auth=INIT_TOKEN, **more):
        body = {"accessToken": token, "envVars": env or {}}
        body.update(more)
        return self.request("POST", "/init", json.dumps(body),
                            {"Content-Type": "application/json"}, token=auth)

    def rpc(self, method, msg, token=TOKEN):
        st, h, body = self.request("POST", "/" + method, json.dumps(msg),
                                   {"Content-Type": "application/json"}, token=token)
        try:
            j = json.loads(body) if body else None
        except ValueError:
            j = None
        return st, j

    def held(self):
        """What the agent holds by its own count (GET /_fr/held)."""
        st, _, body = self.request("GET", "/_fr/held")
        check(st == 200, "/_fr/held: %d %r" % (st, body))
        return json.loads(body)

    def stream(self, method, msg, headers=None, token=TOKEN):
        return Stream(self, method, msg, headers, token)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise TestFailure("agent did not stop on SIGTERM")
        self.log.close()
        return self.proc.returncode


def envelope(msg):
    b = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(b)) + b


class Stream:
    """A server-streaming Connect call; events are read one by one."""

    def __init__(self, agent, method, msg, headers, token):
        self.c = agent.conn()
        h = {"Content-Type": "application/connect+json"}
        if token is not None:
            h["X-Access-Token"] = token
        h.update(headers or {})
        self.c.request("POST", "/" + method, body=envelope(msg), headers=h)
        self.r = self.c.getresponse()
        self.headers = dict((k.lower(), v) for k, v in self.r.getheaders())
        self.status = self.r.status
        self.end = None       # end-stream JSON once read
        self.out = {"stdout": bytearray(), "stderr": bytearray(), "pty": bytearray()}
        self.exit = None      # the end event

    def _read_exact(self, n):
        b = b""
        while len(b) < n:
            chunk = self.r.read(n - len(b))
            if not chunk:
                raise TestFailure("stream ended inside an envelope")
            b += chunk
        return b

    def next(self):
        """Returns ('msg', obj) or ('end', obj)."""
        flags, n = struct.unpack(">BI", self._read_exact(5))
        obj = json.loads(self._read_exact(n))
        if flags & 2:
            self.end = obj
            return "end", obj
        ev = obj.get("event", {})
        if "data" in ev:
            for k, v in ev["data"].items():
                self.out[k] += base64.b64decode(v)
        if "end" in ev:
            self.exit = ev["end"]
        return "msg", obj

    def until(self, pred, what="event"):
        while True:
            kind, obj = self.next()
            if pred(kind, obj):
                return kind, obj
            if kind == "end":
                raise TestFailure("stream ended before " + what + ": " + json.dumps(obj))

    def drain(self):
        while self.end is None:
            self.next()
        return self

    def close(self):
        self.c.close()


def start(agent, cmd, args=(), **kw):
    msg = {"process": {"cmd": cmd, "args": list(args)}}
    headers = kw.pop("headers", None)
    msg.update(kw)
    s = agent.stream("process.Process/Start", msg, headers)
    check(s.status == 200, "Start status %d" % s.status)
    kind, obj = s.next()
    check(kind == "msg" and "start" in obj["event"], "first event is not start: %r" % (obj,))
    s.pid = obj["event"]["start"]["pid"]
    return s


def run(agent, script, **kw):
    s = start(agent, "/bin/sh", ["-c", script], **kw)
    s.drain()
    s.close()
    return s


def b64(b):
    return base64.b64encode(b).decode()


def under_asan(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


# What the agent may hold behind a client that does not read, beyond its
# connections' fixed size, in every build: the high-water mark of a
# connection's output (256 KiB) plus one event or file piece, and the
# process output ring. Measured by the agent itself (GET /_fr/held): RSS
# also counts the allocator's caches, which under ASan (its quarantine of
# freed blocks) grow by tens of MiB with no byte held.
HELD_BOUND = 1 << 20


def held_beyond_conns(agent):
    h = agent.held()
    return h["total_bytes"] - h["connection_bytes"], h


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- tests

def test_auth(a):
    st, _, _ = a.request("GET", "/health", token=None)
    check(st == 204, "health before init: %d" % st)
    st, _, _ = a.request("GET", "/version", token=None)
    check(st == 401, "version before init: %d" % st)
    st, j = a.rpc("process.Process/List", {}, token="whatever")
    check(st == 401 and j["code"] == "unauthenticated", "List before init: %d %r" % (st, j))
    st, _, _ = a.request("GET", "/files?path=/etc/hostname", token=None)
    check(st == 401, "files before init: %d" % st)
    # Only the router initialises an agent: /init carries the token whose
    # SHA-256 the pod was made with, before and after the first one.
    for auth in (None, "wrong", TOKEN, INIT_TOKEN + "x", INIT_TOKEN[:-1]):
        st, _, body = a.init({"https_proxy": "http://127.0.0.1:9"}, token="attacker", auth=auth)
        check(st == 401 and json.loads(body) == {"code": 401, "message": "invalid or missing init token"},
              "/init before the router's with token %r: %d %r" % (auth, st, body))
    st, _, body = a.request("POST", "/init", json.dumps({"accessToken": "attacker"}),
                            {"Content-Type": "application/json", "Authorization": "Bearer wrong"}, token=None)
    check(st == 401, "/init with a wrong Bearer token: %d %r" % (st, body))
    st, _, _ = a.init({"FOO": "bar", "SECRET_TOKEN": SECRET_VALUE}, secretNames=["SECRET_TOKEN"])
    check(st == 204, "first /init: %d" % st)
    st, j = a.rpc("process.Process/List", {})
    check(st == 200 and j == {"processes": []}, "List with token: %d %r" % (st, j))
    st, j = a.rpc("process.Process/List", {}, token=TOKEN + "x")
    check(st == 401, "wrong token: %d" % st)
    st, j = a.rpc("process.Process/List", {}, token=None)
    check(st == 401, "no token: %d" % st)
    st, _, _ = a.request("POST", "/process.Process/List", "{}",
                         {"Content-Type": "application/json", "Authorization": "Bearer " + TOKEN},
                         token=None)
    check(st == 200, "Bearer token refused: %d" % st)
    # after it too, and the access token (the sandbox's code may hold it) is not the init token
    for auth in (None, "wrong", TOKEN):
        st, _, body = a.init({"FOO": "evil"}, token="attacker", auth=auth)
        check(st == 401 and json.loads(body)["message"] == "invalid or missing init token",
              "/init after the router's with token %r: %d %r" % (auth, st, body))
    st, j = a.rpc("process.Process/List", {})
    check(st == 200, "the access token changed by a refused /init: %d" % st)
    st, _, body = a.request("GET", "/envs")
    check(st == 200 and json.loads(body) == {"FOO": "bar"}, "GET /envs (no secret): %d %r" % (st, body))
    st, _, body = a.request("GET", "/envs", token=None)
    check(st == 401, "GET /envs without the token: %d" % st)
    st, _, body = a.request("GET", "/version")
    check(st == 200 and json.loads(body)["version"] == "0.5.7", "version: %d %r" % (st, body))


def test_init_replaces_env(a):
    # A second /init replaces the env whole: nothing the first set survives.
    st, _, _ = a.init({"EXTRA": "1", "https_proxy": "http://127.0.0.1:9"}, defaultWorkdir="/tmp")
    check(st == 204, "second /init: %d" % st)
    s = run(a, 'echo "${FOO-unset}/${SECRET_TOKEN-unset}/$EXTRA/$https_proxy"; pwd')
    check(s.out["stdout"] == b"unset/unset/1/http://127.0.0.1:9\n/tmp\n", "env after a second /init: %r" % s.out)
    st, _, body = a.request("GET", "/envs")
    check(st == 200 and json.loads(body) == {"EXTRA": "1", "https_proxy": "http://127.0.0.1:9"},
          "GET /envs after a second /init: %d %r" % (st, body))
    # The third on a connection kept open: once answered, the init token is
    # not left in the agent's memory, not in the request it parsed nor in
    # its input buffer (release build: under ASan the memory is too large
    # to scan).
    body = json.dumps({"accessToken": TOKEN, "envVars": {"FOO": "bar", "SECRET_TOKEN": SECRET_VALUE, "EXTRA": "1"},
                       "secretNames": ["SECRET_TOKEN"]}).encode()
    sk = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    try:
        # (the token after more head than the body is long: the body moving
        # to the front of the input buffer does not overwrite it)
        sk.sendall(("POST /init HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\nX-Access-Token: %s\r\n"
                    "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % ("p" * len(body), INIT_TOKEN, len(body))).encode() + body)
        got = b""
        while b"\r\n\r\n" not in got:
            got += sk.recv(4096)
        check(got.startswith(b"HTTP/1.1 204"), "third /init: %r" % got)
        if not under_asan(a.proc.pid) and os.geteuid() == 0:
            found = memory_holds(a.proc.pid, INIT_TOKEN.encode())
            check(not found, "the init token stays in the agent's memory at %s" % found)
    finally:
        sk.close()
    s = run(a, 'echo "${https_proxy-unset}"; pwd')
    home = pwd.getpwuid(os.getuid()).pw_dir  # the agent's default cwd (its user's home)
    check(s.out["stdout"] == ("unset\n%s\n" % home).encode(), "env and workdir after a third /init: %r" % s.out)
    st, _, body = a.request("GET", "/envs")
    check(st == 200 and json.loads(body) == {"FOO": "bar", "EXTRA": "1"}, "GET /envs: %d %r" % (st, body))
    check(SECRET_VALUE not in a.logtext(), "secret value in the agent log")


def memory_holds(pid, needle):
    """Addresses of <needle> in the writable memory of <pid> (root only)."""
    found = []
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            f = line.split()
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if f[1][:2] != "rw" or hi - lo > 256 << 20:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                continue
            at = data.find(needle)
            if at >= 0:
                found.append("%x (%s)" % (lo + at, f[-1] if len(f) > 5 else "anon"))
    return found


def test_init_without_hash(a):
    # An agent started without FR_AGENT_INIT_SHA256 refuses every /init...
    b = Agent(name="nohash", init_sha256=None)
    try:
        for auth in (None, INIT_TOKEN):
            st, _, body = b.init(auth=auth)
            check(st == 403 and "FR_AGENT_INIT_SHA256" in json.loads(body)["message"],
                  "/init of an agent without the hash: %d %r" % (st, body))
        st, _, _ = b.request("GET", "/version")
        check(st == 401, "uninitialised agent answered: %d" % st)
    finally:
        check(b.stop() == 0, "nohash agent exit status")
    # ... unless told otherwise: the first caller, then the access token.
    b = Agent(["--allow-open-init"], name="open", init_sha256=None)
    try:
        st, _, _ = b.init({"A": "1"}, auth=None)
        check(st == 204, "open /init: %d" % st)
        st, _, _ = b.init({"A": "2"}, token="other", auth=None)
        check(st == 401, "second open /init without the token: %d" % st)
        st, _, _ = b.init({"B": "2"}, auth=TOKEN)
        check(st == 204, "second open /init with the access token: %d" % st)
        s = run(b, 'echo "${A-unset}$B"')
        check(s.out["stdout"] == b"unset2\n", "env of an open agent: %r" % s.out)
    finally:
        check(b.stop() == 0, "open agent exit status")
    # A malformed hash is refused at start.
    p = subprocess.run([ARGS.agent, "--listen", "127.0.0.1:0"], env={"FR_AGENT_INIT_SHA256": "abc"},
                       capture_output=True, timeout=10)
    check(p.returncode == 2 and b"FR_AGENT_INIT_SHA256" in p.stderr, "bad hash: %r" % (p,))


def test_init_env_inherited(a):
    s = run(a, 'echo "$FOO/$EXTRA/$REQ"; printf %s "$SECRET_TOKEN" | wc -c',
            process={"cmd": "/bin/sh", "args": ["-c", 'echo "$FOO/$EXTRA/$REQ"; printf %s "$SECRET_TOKEN" | wc -c'],
                     "envs": {"REQ": "r1"}})
    lines = s.out["stdout"].decode().split()
    check(lines[0] == "bar/1/r1", "env not inherited: %r" % s.out)
    check(int(lines[1]) == len(SECRET_VALUE), "secret env not inherited: %r" % s.out)
    check(SECRET_VALUE not in a.logtext(), "secret value in the agent log")


def test_start_streams_before_end(a):
    s = start(a, "/bin/sh", ["-c", "echo a; sleep 1; echo b"])
    kind, obj = s.until(lambda k, o: k == "msg" and "data" in o["event"], "first data")
    check(s.out["stdout"] == b"a\n", "first chunk %r" % s.out)
    check(s.exit is None, "end before the first chunk")
    # streamed, not buffered: the command is still running when "a" arrives
    st, j = a.rpc("process.Process/List", {})
    check(any(p["pid"] == s.pid for p in j["processes"]), "process not running at first chunk")
    s.drain()
    check(s.out["stdout"] == b"a\nb\n", "output %r" % s.out)
    check(s.exit["exitCode"] == 0 and s.exit["exited"] is True, "end %r" % s.exit)
    check(s.end == {}, "end-stream %r" % s.end)
    s.close()


def test_exit_codes(a):
    s = run(a, "echo out; echo err >&2; exit 7")
    check(s.exit["exitCode"] == 7 and s.exit["status"] == "exit status 7", "exit 7: %r" % s.exit)
    check(s.out["stdout"] == b"out\n" and s.out["stderr"] == b"err\n", "split: %r" % s.out)
    s = run(a, "kill -9 $$")
    check(s.exit["exitCode"] == -1 and s.exit["exited"] is False and
          s.exit["status"] == "signal: killed", "killed: %r" % s.exit)


def test_missing_command(a):
    s = a.stream("process.Process/Start", {"process": {"cmd": "/nonexistent/cmd"}})
    kind, obj = s.next()
    check(kind == "end" and obj["error"]["code"] == "not_found", "missing command: %r" % (obj,))
    s.close()
    s = a.stream("process.Process/Start", {"process": {"cmd": "/bin/true", "cwd": "/nonexistent-dir"}})
    kind, obj = s.next()
    check(kind == "end" and "error" in obj, "bad cwd: %r" % (obj,))
    s.close()


def test_stdin_and_close(a):
    s = start(a, "/bin/cat", stdin=True)
    st, j = a.rpc("process.Process/SendInput",
                  {"process": {"pid": s.pid}, "input": {"stdin": b64(b"hello\n\x00bin")}})
    check(st == 200 and j == {}, "SendInput: %d %r" % (st, j))
    st, j = a.rpc("process.Process/CloseStdin", {"process": {"pid": s.pid}})
    check(st == 200, "CloseStdin: %d %r" % (st, j))
    s.drain()
    check(s.out["stdout"] == b"hello\n\x00bin" and s.exit["exitCode"] == 0, "cat: %r %r" % (s.out, s.exit))
    s.close()
    # stdinData: all of stdin in the Start request, then EOF
    s = start(a, "/bin/sh", ["-c", "wc -c; cat /dev/null"], stdinData=b64(b"z" * 300000))
    s.drain()
    check(s.out["stdout"].strip() == b"300000" and s.exit["exitCode"] == 0, "stdinData: %r" % s.out)
    # stdin not asked for: /dev/null, and SendInput is refused
    s = start(a, "/bin/sh", ["-c", "cat; echo done"])
    s.drain()
    check(s.out["stdout"] == b"done\n", "stdin not /dev/null: %r" % s.out)
    st, j = a.rpc("process.Process/SendInput", {"process": {"pid": 999999999}, "input": {"stdin": "YQ=="}})
    check(st == 404 and j["code"] == "not_found", "SendInput unknown pid: %d %r" % (st, j))


def test_pty(a):
    s = start(a, "/bin/sh", ["-c", "tty; stty size; read x; stty size"],
              pty={"size": {"cols": 100, "rows": 30}})
    s.until(lambda k, o: b"30 100" in s.out["pty"], "first stty size")
    check(b"/dev/pts/" in s.out["pty"], "tty does not report a pty: %r" % s.out["pty"])
    st, j = a.rpc("process.Process/Update", {"process": {"pid": s.pid}, "pty": {"size": {"cols": 120, "rows": 50}}})
    check(st == 200, "Update: %d %r" % (st, j))
    st, j = a.rpc("process.Process/SendInput", {"process": {"pid": s.pid}, "input": {"pty": b64(b"go\n")}})
    check(st == 200, "SendInput pty: %d %r" % (st, j))
    s.drain()
    check(b"50 120" in s.out["pty"], "resize not visible: %r" % s.out["pty"])
    check(s.exit["exitCode"] == 0, "pty exit %r" % s.exit)
    st, j = a.rpc("process.Process/Update", {"process": {"pid": s.pid}, "pty": {"size": {"cols": 0, "rows": 5}}})
    check(st == 400, "bad size accepted: %d" % st)
    s.close()


def test_connect_reattach(a):
    s = start(a, "/bin/sh", ["-c", "echo one; echo two >&2; read x; echo three"], stdin=True, tag="re1")
    pid = s.pid
    s.close()  # the client goes away; the process keeps running
    time.sleep(0.3)
    st, j = a.rpc("process.Process/List", {})
    check(any(p["pid"] == pid and p.get("tag") == "re1" for p in j["processes"]),
          "process gone after disconnect: %r" % j)
    c = a.stream("process.Process/Connect", {"process": {"tag": "re1"}})
    check(c.headers.get("fr-output-dropped") == "0", "dropped header: %r" % c.headers)
    kind, obj = c.next()
    check(obj["event"]["start"]["pid"] == pid, "connect start %r" % obj)
    c.until(lambda k, o: c.out["stdout"] == b"one\n" and c.out["stderr"] == b"two\n", "replay")
    a.rpc("process.Process/SendInput", {"process": {"pid": pid}, "input": {"stdin": b64(b"x\n")}})
    c.drain()
    check(c.out["stdout"] == b"one\nthree\n" and c.exit["exitCode"] == 0, "after attach: %r %r" % (c.out, c.exit))
    c.close()
    # a finished process can still be read back, exit code included
    c = a.stream("process.Process/Connect", {"process": {"pid": pid}})
    c.drain()
    check(c.out["stdout"] == b"one\nthree\n" and c.exit["exitCode"] == 0, "finished replay: %r" % c.out)
    c.close()
    c = a.stream("process.Process/Connect", {"process": {"pid": 999999999}})
    kind, obj = c.next()
    check(kind == "end" and obj["error"]["code"] == "not_found", "unknown pid: %r" % obj)
    c.close()


def test_connect_loss_flag(a):
    b = Agent(["--max-buffer", "8192"], name="small")
    try:
        b.init()
        # One write of all 2,000 lines (18,890 bytes, over twice the bound):
        # what the agent gets in one read must still be dropped in steps,
        # not kept whole because it is a single piece.
        s = start(b, sys.executable, ["-c", "import os, time\n"
                                      "os.write(1, ''.join('line-%d\\n' % i for i in range(2000)).encode())\n"
                                      "time.sleep(30)"])
        pid = s.pid
        s.close()
        total = sum(len("line-%d\n" % i) for i in range(2000))

        def written():  # all of it read by the agent (a Connect without follow answers at once)
            w = b.stream("process.Process/Connect", {"process": {"pid": pid}, "follow": False})
            w.close()
            return int(w.headers.get("fr-output-end", "0")) == total
        wait_until(written, 20, "the command's 18,890 bytes")
        c = b.stream("process.Process/Connect", {"process": {"pid": pid}})
        dropped = int(c.headers.get("fr-output-dropped", "-1"))
        check(dropped > 0, "no loss flagged: %r" % c.headers)
        first = int(c.headers["fr-output-start"])
        check(first == dropped, "start %d != dropped %d" % (first, dropped))
        c.next()
        c.until(lambda k, o: c.out["stdout"].endswith(b"line-1999\n"), "tail of the output")
        check(len(c.out["stdout"]) == total - dropped, "replayed %d + dropped %d != %d" % (len(c.out["stdout"]), dropped, total))
        check(len(c.out["stdout"]) <= 8192 + 70000, "kept more than the bound: %d" % len(c.out["stdout"]))
        st, j = b.rpc("process.Process/SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        check(st == 200, "kill: %d" % st)
        c.drain()
        check(c.exit["exitCode"] == -1, "exit after kill %r" % c.exit)
        c.close()
    finally:
        check(b.stop() == 0, "small agent exit status")


def test_slow_reader_backpressure(a):
    b = Agent(["--max-buffer", "8192"], name="slow")
    try:
        b.init()
        base = rss_kb(b.proc.pid)
        total = 10 * 1024 * 1024
        s = start(b, "/bin/sh", ["-c", "dd if=/dev/zero bs=65536 count=160 2>/dev/null; echo done >&2"])
        s.until(lambda k, o: len(s.out["stdout"]) > 0, "first output")
        time.sleep(1)  # a slow reader: the command must wait, not the agent's memory grow
        held, h = held_beyond_conns(b)
        check(held < HELD_BOUND, "the agent holds %d bytes behind a slow reader: %r" % (held, h))
        check(h["output_queued"] < HELD_BOUND, "output queued behind a slow reader: %r" % h)
        if not under_asan(b.proc.pid):  # RSS means something only without ASan's quarantine
            grew = rss_kb(b.proc.pid) - base
            check(grew < 8 * 1024, "agent RSS grew by %d KiB behind a slow reader" % grew)
        s.drain()
        check(len(s.out["stdout"]) == total and s.out["stdout"].count(b"\0") == total,
              "lost output behind a slow reader: %d of %d bytes" % (len(s.out["stdout"]), total))
        check(s.out["stderr"] == b"done\n" and s.exit["exitCode"] == 0, "end %r" % s.exit)
        s.close()
    finally:
        check(b.stop() == 0, "slow agent exit status")


def test_list(a):
    s = start(a, "/bin/sleep", ["30"], tag="lister", process={"cmd": "/bin/sleep", "args": ["30"], "envs": {"K": "v"}, "cwd": "/tmp"})
    st, j = a.rpc("process.Process/List", {})
    mine = [p for p in j["processes"] if p["pid"] == s.pid]
    check(len(mine) == 1, "List: %r" % j)
    p = mine[0]
    check(p["tag"] == "lister" and p["config"] == {"cmd": "/bin/sleep", "args": ["30"], "envs": {"K": "v"}, "cwd": "/tmp"},
          "List entry %r" % p)
    check(SECRET_VALUE not in json.dumps(j), "secret in List")
    st, j = a.rpc("process.Process/SendSignal", {"process": {"pid": s.pid}, "signal": "SIGNAL_SIGTERM"})
    check(st == 200, "SendSignal: %d %r" % (st, j))
    s.drain()
    check(s.exit["status"] == "signal: terminated", "sleep end %r" % s.exit)
    s.close()
    st, j = a.rpc("process.Process/List", {})
    check(all(p["pid"] != s.pid for p in j["processes"]), "ended process still listed")


def test_signal_kills_group(a):
    s = start(a, "/bin/sh", ["-c", "sleep 300 & echo $!; wait"])
    s.until(lambda k, o: s.out["stdout"].endswith(b"\n"), "child pid")
    child = int(s.out["stdout"])
    check(pid_alive(child), "child not running")
    st, j = a.rpc("process.Process/SendSignal", {"process": {"pid": s.pid}, "signal": "SIGNAL_SIGTERM"})
    check(st == 200, "SendSignal %d" % st)
    s.drain()
    wait_until(lambda: not pid_alive(child), 5, "the group's sleep to die")
    s.close()
    st, j = a.rpc("process.Process/SendSignal", {"process": {"pid": s.pid}, "signal": "SIGNAL_SIGKILL"})
    check(st == 404, "signal to an ended process: %d" % st)
    st, j = a.rpc("process.Process/SendSignal", {"process": {"pid": 1}, "signal": "SIGNAL_NOPE"})
    check(st == 400, "unknown signal: %d" % st)


def test_timeout_kills_escaped_grandchild(a):
    s = start(a, "/bin/sh", ["-c", "setsid sleep 300 & echo $!; sleep 300"], timeoutMs=1500)
    s.until(lambda k, o: s.out["stdout"].endswith(b"\n"), "grandchild pid")
    gc = int(s.out["stdout"])
    check(pid_alive(gc), "grandchild not running")
    def own_session():
        return int(open("/proc/%d/stat" % gc).read().rsplit(")", 1)[1].split()[3]) == gc
    wait_until(own_session, 5, "the grandchild to leave the session (setsid)")
    s.drain()
    check(s.exit["status"] == "signal: killed" and "timed out" in s.exit.get("error", ""), "timeout end %r" % s.exit)
    wait_until(lambda: not pid_alive(gc), 5, "the setsid grandchild to die")
    s.close()


def test_background_grandchild_does_not_hold_stream(a):
    s = start(a, "/bin/bash", ["-c", "(sleep 304 &); echo started"])
    s.drain()
    check(s.out["stdout"] == b"started\n" and s.exit["exitCode"] == 0, "got %r %r" % (s.out, s.exit))
    # the backgrounded sleep is still running: the stream did not wait for it
    # (its exec may still be under way when the stream ends: poll)
    def sleepers():
        found = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if open("/proc/%s/cmdline" % d, "rb").read() == b"sleep\x00304\x00" and \
                            b"FR_AGENT_PROC=" in open("/proc/%s/environ" % d, "rb").read():
                        found.append(int(d))
                except OSError:
                    pass
        return found
    found = wait_until(sleepers, 5, "the backgrounded sleep 304 to show up")
    s.close()
    for p in found:  # the agent's shutdown would kill it too; do not wait
        os.kill(p, signal.SIGKILL)


def test_kill_on_disconnect(a):
    s = start(a, "/bin/sleep", ["300"], killOnDisconnect=True)
    pid = s.pid
    s.close()
    wait_until(lambda: not pid_alive(pid), 5, "killOnDisconnect to kill")
    s = start(a, "/bin/sleep", ["300"])
    pid = s.pid
    s.close()
    time.sleep(0.3)
    check(pid_alive(pid), "process died on disconnect without killOnDisconnect")
    a.rpc("process.Process/SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    wait_until(lambda: not pid_alive(pid), 5, "kill")


def test_keepalive_and_deadline(a):
    # Connect-Timeout-Ms on Start is the command's lifetime (envd)
    s = start(a, "/bin/sleep", ["300"], headers={"Keepalive-Ping-Interval": "1", "Connect-Timeout-Ms": "2500"})
    kind, obj = s.next()
    check(kind == "msg" and obj == {"event": {"keepalive": {}}}, "keepalive: %r" % obj)
    s.drain()
    check(s.exit["status"] == "signal: killed" and "deadline" in s.exit.get("error", "") and s.end == {},
          "deadline end: %r %r" % (s.exit, s.end))
    s.close()
    # ... even when the client left before it
    s = start(a, "/bin/sleep", ["300"], headers={"Connect-Timeout-Ms": "800"})
    pid = s.pid
    s.close()
    check(pid_alive(pid), "killed on disconnect")
    wait_until(lambda: not pid_alive(pid), 5, "the deadline to kill the command")
    # on Connect it is only the stream's deadline
    s = start(a, "/bin/sleep", ["300"])
    s.close()
    c = a.stream("process.Process/Connect", {"process": {"pid": s.pid}}, headers={"Connect-Timeout-Ms": "700"})
    c.drain()
    check(c.end["error"]["code"] == "deadline_exceeded", "Connect deadline: %r" % c.end)
    c.close()
    check(pid_alive(s.pid), "a Connect deadline killed the process")
    a.rpc("process.Process/SendSignal", {"process": {"pid": s.pid}, "signal": "SIGNAL_SIGKILL"})
    wait_until(lambda: not pid_alive(s.pid), 5, "kill")


def test_files_round_trip(a):
    d = os.path.join(TMP, "files")
    data = bytes(range(256)) * 40 + b"\x00\x00end"
    st, _, body = a.request("POST", "/files?path=" + d + "/sub/bin.dat", data,
                            {"Content-Type": "application/octet-stream"})
    check(st == 200, "raw upload: %d %r" % (st, body))
    j = json.loads(body)
    check(j == [{"name": "bin.dat", "type": "file", "path": d + "/sub/bin.dat"}], "upload answer %r" % j)
    st, h, got = a.request("GET", "/files?path=" + d + "/sub/bin.dat")
    check(st == 200 and got == data and h["content-type"] == "application/octet-stream", "download differs")
    # multipart, as the SDK sends it (two files named by their paths)
    bnd = "----fr" + os.urandom(8).hex()
    parts = b""
    for name, content in (("m1.txt", b"hello\r\n--not-a-boundary\r\n"), ("m2.bin", b"\x00\xff" * 1000)):
        parts += ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s/%s\"\r\n"
                  "Content-Type: application/octet-stream\r\n\r\n" % (bnd, d, name)).encode() + content + b"\r\n"
    parts += ("--%s--\r\n" % bnd).encode()
    st, _, body = a.request("POST", "/files", parts, {"Content-Type": "multipart/form-data; boundary=" + bnd})
    check(st == 200 and len(json.loads(body)) == 2, "multipart upload: %d %r" % (st, body))
    check(open(d + "/m1.txt", "rb").read() == b"hello\r\n--not-a-boundary\r\n", "multipart m1")
    check(open(d + "/m2.bin", "rb").read() == b"\x00\xff" * 1000, "multipart m2")
    # a quoted filename left open on its line does not take in the next
    # header line (found by fuzz_agent): refused, nothing written
    bad = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s/m3\r\n"
           "Content-Type: text/plain\"\r\n\r\nx\r\n--%s--\r\n" % (bnd, d, bnd)).encode()
    st, _, body = a.request("POST", "/files", bad, {"Content-Type": "multipart/form-data; boundary=" + bnd})
    check(st == 400 and "bad filename" in json.loads(body)["message"], "open-quoted filename: %d %r" % (st, body))
    check(not any(n.startswith("m3") for n in os.listdir(d)), "open-quoted filename wrote a file")
    st, _, body = a.request("GET", "/files?path=" + d + "/missing")
    check(st == 404 and (d + "/missing") in json.loads(body)["message"], "missing: %d %r" % (st, body))
    st, _, body = a.request("GET", "/files?path=relative/x")
    check(st == 400, "relative path: %d" % st)
    st, _, body = a.request("POST", "/files?path=relative/x", b"x", {"Content-Type": "application/octet-stream"})
    check(st == 400, "relative upload path: %d" % st)
    st, _, body = a.request("GET", "/files?path=" + d)
    check(st == 400, "directory download: %d" % st)
    if os.geteuid() != 0:
        os.makedirs(d + "/ro", exist_ok=True)
        os.chmod(d + "/ro", 0o500)
        st, _, body = a.request("POST", "/files?path=" + d + "/ro/x", b"x", {"Content-Type": "application/octet-stream"})
        check(st == 403, "permission error: %d" % st)
    # empty file
    st, _, _ = a.request("POST", "/files?path=" + d + "/empty", b"", {"Content-Type": "application/octet-stream"})
    st, h, got = a.request("GET", "/files?path=" + d + "/empty")
    check(st == 200 and got == b"" and h["content-length"] == "0", "empty file")


def test_files_large_flat_memory(a):
    size = 50 * 1024 * 1024
    path = os.path.join(TMP, "big.bin")
    block = os.urandom(1 << 20)
    sha = hashlib.sha256()
    peak = [0]
    peak_held = [0]
    base = rss_kb(a.proc.pid)

    def sample():
        peak[0] = max(peak[0], rss_kb(a.proc.pid))
        peak_held[0] = max(peak_held[0], held_beyond_conns(a)[0])

    def gen():
        for i in range(size // len(block)):
            b = block[:1] + bytes([i & 255]) + block[2:]
            sha.update(b)
            sample()
            yield b

    c = a.conn(120)
    c.request("POST", "/files?path=" + path, body=gen(),
              headers={"Content-Type": "application/octet-stream", "X-Access-Token": TOKEN,
                       "Transfer-Encoding": "chunked"}, encode_chunked=True)
    r = c.getresponse()
    check(r.status == 200, "big upload: %d %r" % (r.status, r.read()))
    r.read()
    check(os.path.getsize(path) == size, "size on disk %d" % os.path.getsize(path))
    # download, reading slowly at first so the agent must hold back
    c.request("GET", "/files?path=" + path, headers={"X-Access-Token": TOKEN})
    r = c.getresponse()
    check(r.status == 200 and int(r.getheader("Content-Length")) == size, "big download head")
    dsha = hashlib.sha256()
    n = 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        n += len(b)
        dsha.update(b)
        sample()
        if n < 4 << 20:
            time.sleep(0.05)
    c.close()
    check(n == size and dsha.digest() == sha.digest(), "download differs (%d bytes)" % n)
    check(peak_held[0] < HELD_BOUND, "the agent held %d bytes moving 50 MiB" % peak_held[0])
    if not under_asan(a.proc.pid):  # ASan's quarantine and shadow make RSS meaningless here
        grew = peak[0] - base
        check(grew < 16 * 1024, "agent RSS grew by %d KiB moving 50 MiB" % grew)
    os.unlink(path)


def test_filesystem_rpcs(a):
    d = os.path.join(TMP, "fs")
    st, j = a.rpc("filesystem.Filesystem/MakeDir", {"path": d + "/a/b"})
    check(st == 200 and j["entry"]["type"] == "FILE_TYPE_DIRECTORY" and j["entry"]["path"] == d + "/a/b",
          "MakeDir: %d %r" % (st, j))
    st, j = a.rpc("filesystem.Filesystem/MakeDir", {"path": d + "/a/b"})
    check(st == 409 and j["code"] == "already_exists", "MakeDir twice: %d %r" % (st, j))
    with open(d + "/a/f.txt", "wb") as f:
        f.write(b"12345")
    st, j = a.rpc("filesystem.Filesystem/Stat", {"path": d + "/a/f.txt"})
    e = j["entry"]
    check(st == 200 and e["name"] == "f.txt" and e["type"] == "FILE_TYPE_FILE" and e["size"] == "5"
          and e["permissions"].startswith("-rw") and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$", e["modifiedTime"]),
          "Stat: %r" % j)
    os.symlink("f.txt", d + "/a/link")
    st, j = a.rpc("filesystem.Filesystem/ListDir", {"path": d, "depth": 1})
    check(st == 200 and [x["path"] for x in j["entries"]] == [d + "/a"], "ListDir depth 1: %r" % j)
    st, j = a.rpc("filesystem.Filesystem/ListDir", {"path": d, "depth": 3})
    paths = sorted(x["path"] for x in j["entries"])
    check(paths == sorted([d + "/a", d + "/a/b", d + "/a/f.txt", d + "/a/link"]), "ListDir depth 3: %r" % paths)
    link = [x for x in j["entries"] if x["name"] == "link"][0]
    check(link["type"] == "FILE_TYPE_SYMLINK" and link["symlinkTarget"] == "f.txt", "symlink %r" % link)
    st, j = a.rpc("filesystem.Filesystem/Move", {"source": d + "/a/f.txt", "destination": d + "/c/g.txt"})
    check(st == 200 and j["entry"]["path"] == d + "/c/g.txt" and os.path.exists(d + "/c/g.txt"), "Move: %r" % j)
    st, j = a.rpc("filesystem.Filesystem/Move", {"source": d + "/nope", "destination": d + "/x"})
    check(st == 404, "Move missing: %d" % st)
    st, j = a.rpc("filesystem.Filesystem/Remove", {"path": d + "/a"})
    check(st == 200 and not os.path.exists(d + "/a"), "Remove tree: %d %r" % (st, j))
    st, j = a.rpc("filesystem.Filesystem/Stat", {"path": d + "/a"})
    check(st == 404 and j["code"] == "not_found" and d + "/a" in j["message"], "Stat removed: %d %r" % (st, j))
    st, j = a.rpc("filesystem.Filesystem/Remove", {"path": d + "/a"})
    check(st == 404, "Remove missing: %d" % st)
    st, j = a.rpc("filesystem.Filesystem/ListDir", {"path": "rel"})
    check(st == 400 and j["code"] == "invalid_argument", "relative ListDir: %d" % st)


def fd_count(agent):
    return len(os.listdir("/proc/%d/fd" % agent.proc.pid))


def inotify_fds(agent):
    n = 0
    for fd in os.listdir("/proc/%d/fd" % agent.proc.pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (agent.proc.pid, fd)) == "anon_inode:inotify"
        except OSError:
            pass
    return n


def fs_events(s, marker):
    """(name, type) of a WatchDir stream's events up to <marker>'s CREATE."""
    got = []
    while True:
        kind, obj = s.next()
        check(kind == "msg", "the watch stream ended early: %r (after %r)" % (obj, got))
        if "keepalive" in obj:
            continue
        ev = obj.get("filesystem")
        check(ev is not None and set(obj) == {"filesystem"}, "not a filesystem event: %r" % obj)
        t = ev["type"].replace("EVENT_TYPE_", "")
        if ev["name"] == marker and t == "CREATE":
            return got
        if ev["name"] != marker:
            got.append((ev["name"], t))


def in_order(got, want):
    """<want> appears in <got> as a subsequence."""
    it = iter(got)
    return all(any(x == w for x in it) for w in want)


def test_watch_dir_stream(a):
    d = os.path.join(TMP, "watch")
    os.makedirs(d + "/pre")
    base = 6   # 0-2, listener, epoll, signalfd: earlier tests' connections closed
    wait_until(lambda: fd_count(a) == base, 5, "the agent's fds back to 6 (now %d)" % fd_count(a))
    s = a.stream("filesystem.Filesystem/WatchDir", {"path": d, "recursive": False})
    check(s.status == 200 and s.headers.get("content-type") == "application/connect+json", "status %d" % s.status)
    kind, obj = s.next()
    check(kind == "msg" and obj == {"start": {}}, "first message is not the start event: %r" % obj)
    check(inotify_fds(a) == 1, "inotify instances while watching: %d" % inotify_fds(a))
    with open(d + "/f", "w") as f:
        f.write("x")
    os.rename(d + "/f", d + "/g")
    os.chmod(d + "/g", 0o600)
    os.mkdir(d + "/sub")
    with open(d + "/sub/x", "w") as f:
        f.write("not seen: below a non-recursive watch")
    with open(d + "/pre/y", "w") as f:
        f.write("not seen either")
    os.unlink(d + "/g")
    open(d + "/m1", "w").close()
    got = fs_events(s, "m1")
    want = [("f", "CREATE"), ("f", "WRITE"), ("f", "RENAME"), ("g", "CREATE"), ("g", "CHMOD"),
            ("sub", "CREATE"), ("g", "REMOVE")]
    check(in_order(got, want), "non-recursive events: %r" % got)
    check(not any("/" in n for n, _ in got), "a non-recursive watch reported below its directory: %r" % got)
    s.close()
    wait_until(lambda: fd_count(a) == base and inotify_fds(a) == 0, 5,
               "the watch to be freed when its client left (fds %d, was %d)" % (fd_count(a), base))

    # recursive: existing and new subdirectories, moves and removals
    s = a.stream("filesystem.Filesystem/WatchDir", {"path": d + "/", "recursive": True})
    check(s.next() == ("msg", {"start": {}}), "start (recursive)")
    # paced as a client is: each change waits for its events (a directory
    # renamed before the agent saw it appear cannot be watched under its
    # first name, with inotify as with envd's fsnotify)
    def step(change, want):
        change()
        got = []
        while not all(w in got for w in want):
            kind, obj = s.next()
            check(kind == "msg", "the watch stream ended: %r (saw %r, want %r)" % (obj, got, want))
            if "filesystem" in obj:
                got.append((obj["filesystem"]["name"], obj["filesystem"]["type"].replace("EVENT_TYPE_", "")))
        return got

    def write(path, text):
        with open(path, "w") as f:
            f.write(text)
    step(lambda: write(d + "/pre/y2", "y"), [("pre/y2", "CREATE"), ("pre/y2", "WRITE")])
    step(lambda: os.makedirs(d + "/new/deep"), [("new", "CREATE"), ("new/deep", "CREATE")])
    step(lambda: write(d + "/new/deep/z", "z"), [("new/deep/z", "CREATE"), ("new/deep/z", "WRITE")])
    got = step(lambda: os.rename(d + "/new", d + "/moved"), [("new", "RENAME"), ("moved", "CREATE")])
    check(in_order(got, [("new", "RENAME"), ("moved", "CREATE")]), "rename order: %r" % got)
    got += step(lambda: write(d + "/moved/deep/w", "w"), [("moved/deep/w", "CREATE")])
    check(("moved/deep", "CREATE") not in got and ("moved/deep/z", "CREATE") not in got,
          "a directory moved within reported its entries again: %r" % got)
    got = step(lambda: shutil.rmtree(d + "/moved"), [("moved/deep/w", "REMOVE"), ("moved/deep/z", "REMOVE"),
                                                      ("moved/deep", "REMOVE"), ("moved", "REMOVE")])
    check(in_order(got, [("moved/deep", "REMOVE"), ("moved", "REMOVE")]), "remove order: %r" % got)
    check(not any(n.startswith("new/") for n, _ in got), "a moved directory kept its old name: %r" % got)
    s.close()

    # errors as envd gives them, before any start message
    for msg, code in (({"path": d + "/missing"}, "not_found"), ({"path": d + "/m1"}, "invalid_argument"),
                      ({"path": "relative"}, "invalid_argument"), ({"path": d, "recursive": "yes"}, "invalid_argument")):
        e = a.stream("filesystem.Filesystem/WatchDir", msg)
        kind, obj = e.next()
        check(e.status == 200 and kind == "end" and obj["error"]["code"] == code, "%r: %r" % (msg, obj))
        e.close()

    # keepalives and the deadline (the SDK's timeoutMs)
    s = a.stream("filesystem.Filesystem/WatchDir", {"path": d},
                 headers={"Keepalive-Ping-Interval": "1", "Connect-Timeout-Ms": "2500"})
    check(s.next() == ("msg", {"start": {}}), "start (deadline)")
    check(s.next() == ("msg", {"keepalive": {}}), "keepalive")
    s.drain()
    check(s.end["error"]["code"] == "deadline_exceeded", "deadline: %r" % s.end)
    s.close()

    # the watched directory itself removed: REMOVE "." and the stream ends
    os.mkdir(d + "/gone")
    s = a.stream("filesystem.Filesystem/WatchDir", {"path": d + "/gone"})
    check(s.next() == ("msg", {"start": {}}), "start (gone)")
    os.rmdir(d + "/gone")
    kinds = []
    while s.end is None:
        kinds.append(s.next()[1])
    check({"filesystem": {"name": ".", "type": "EVENT_TYPE_REMOVE"}} in kinds and s.end == {},
          "watched directory removed: %r" % kinds)
    s.close()
    wait_until(lambda: fd_count(a) == base and inotify_fds(a) == 0, 5, "watches freed (fds %d)" % fd_count(a))
    shutil.rmtree(d)


def test_watchers_polling_and_limits(a):
    b = Agent(name="watch")
    try:
        b.init()
        d = os.path.join(TMP, "pwatch")
        os.makedirs(d)
        base = 6   # 0-2, listener, epoll, signalfd
        wait_until(lambda: fd_count(b) == base, 5, "a fresh agent's fds (%d)" % fd_count(b))
        st, j = b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d, "recursive": True})
        check(st == 200 and re.match(r"^w[0-9a-f]+$", j.get("watcherId", "")) and set(j) == {"watcherId"},
              "CreateWatcher: %d %r" % (st, j))
        wid = j["watcherId"]
        os.mkdir(d + "/s")
        st, j = b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        check(st == 200 and j == {"events": [{"name": "s", "type": "EVENT_TYPE_CREATE"}]},
              "GetWatcherEvents after mkdir: %d %r" % (st, j))
        with open(d + "/s/f", "w") as f:
            f.write("1")
        os.rename(d + "/s/f", d + "/s/g")
        st, j = b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        got = [(e["name"], e["type"].replace("EVENT_TYPE_", "")) for e in j["events"]]
        check(st == 200 and got == [("s/f", "CREATE"), ("s/f", "WRITE"), ("s/f", "RENAME"), ("s/g", "CREATE")],
              "GetWatcherEvents: %d %r" % (st, got))
        st, j = b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        check(st == 200 and j == {"events": []}, "second GetWatcherEvents: %d %r" % (st, j))
        st, j = b.rpc("filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
        check(st == 200 and j == {}, "RemoveWatcher: %d %r" % (st, j))
        for m in ("RemoveWatcher", "GetWatcherEvents"):
            st, j = b.rpc("filesystem.Filesystem/" + m, {"watcherId": wid})
            check(st == 404 and j["code"] == "not_found" and wid in j["message"], "%s after remove: %d %r" % (m, st, j))
        st, j = b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": 7})
        check(st == 400 and j["code"] == "invalid_argument", "numeric id: %d %r" % (st, j))
        st, j = b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d + "/nope"})
        check(st == 404 and j["code"] == "not_found", "missing dir: %d %r" % (st, j))
        st, j = b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d + "/s/g"})
        check(st == 400 and j["code"] == "invalid_argument" and "not a directory" in j["message"], "file: %d %r" % (st, j))
        wait_until(lambda: fd_count(b) == base, 5, "fds after RemoveWatcher: %d, was %d" % (fd_count(b), base))

        # at most 64 watchers per agent, streams included
        ids = []
        for i in range(63):
            st, j = b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d})
            check(st == 200, "watcher %d: %d %r" % (i, st, j))
            ids.append(j["watcherId"])
        s = b.stream("filesystem.Filesystem/WatchDir", {"path": d})
        check(s.next() == ("msg", {"start": {}}), "the 64th watcher, a stream")
        st, j = b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d})
        check(st == 429 and j["code"] == "resource_exhausted", "65th watcher: %d %r" % (st, j))
        e = b.stream("filesystem.Filesystem/WatchDir", {"path": d})
        kind, obj = e.next()
        check(kind == "end" and obj["error"]["code"] == "resource_exhausted", "65th watcher, a stream: %r" % obj)
        e.close()
        s.close()
        for w in ids:
            check(b.rpc("filesystem.Filesystem/RemoveWatcher", {"watcherId": w})[0] == 200, "remove " + w)
        wait_until(lambda: inotify_fds(b) == 0, 5, "all inotify instances closed (%d left)" % inotify_fds(b))

        # a polling watcher keeps at most 10,000 events, then fails for good
        st, j = b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d})
        wid = j["watcherId"]
        open(d + "/p", "w").close()
        open(d + "/q", "w").close()
        for i in range(5100):   # alternating: the kernel does not merge them
            os.utime(d + "/p", (i, i))
            os.utime(d + "/q", (i, i))
        st, j = b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        check(st == 429 and j["code"] == "resource_exhausted" and "lost" in j["message"], "overflow: %d %r" % (st, j))
        check(inotify_fds(b) == 0, "the failed watcher kept its inotify fd")
        st, j = b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        check(st == 429, "a failed watcher recovered: %d %r" % (st, j))
        check(b.rpc("filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})[0] == 200, "remove the failed one")

        # at most 50,000 events wait over all polling watchers: six watchers
        # of 9,000 each cannot all keep theirs
        ids = [b.rpc("filesystem.Filesystem/CreateWatcher", {"path": d})[1]["watcherId"] for _ in range(6)]
        for i in range(4500):
            os.utime(d + "/p", (i, i))
            os.utime(d + "/q", (i, i))
        answers = [b.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": w}) for w in ids]
        failed = [j for st, j in answers if st == 429 and "over all watchers" in j["message"]]
        kept = sum(len(j["events"]) for st, j in answers if st == 200)
        check(len(failed) >= 1 and kept <= 50000 and len(failed) + sum(st == 200 for st, _ in answers) == 6,
              "the agent-wide event bound: %d failed, %d events kept, %r" % (len(failed), kept, [a[0] for a in answers]))
        for w in ids:
            check(b.rpc("filesystem.Filesystem/RemoveWatcher", {"watcherId": w})[0] == 200, "remove " + w)

        # a directory moved in holding more than 10,000 entries: they cannot
        # all be reported as created; the watch ends saying so
        big = os.path.join(TMP, "big")
        os.makedirs(big)
        for i in range(10001):
            open("%s/%d" % (big, i), "w").close()
        s = b.stream("filesystem.Filesystem/WatchDir", {"path": d, "recursive": True})
        check(s.next() == ("msg", {"start": {}}), "start (big)")
        os.rename(big, d + "/big")
        created = 0
        while s.end is None:
            kind, obj = s.next()
            created += kind == "msg" and obj.get("filesystem", {}).get("type") == "EVENT_TYPE_CREATE"
        check(s.end["error"]["code"] == "resource_exhausted" and "more than 10000 entries" in s.end["error"]["message"]
              and created == 10001, "big directory moved in: %d creates, %r" % (created, s.end))
        s.close()
        shutil.rmtree(d + "/big")

        # a stream whose client stops reading: the agent stops reading the
        # kernel queue (what it holds stays flat); the kernel's overflow
        # ends the stream
        nw = b.held()["watchers"]
        sk = socket.socket()
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sk.connect(("127.0.0.1", b.port))
        req = envelope({"path": d})
        sk.sendall(("POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
                    "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
                    % (TOKEN, len(req))).encode() + req)
        wait_until(lambda: b.held()["watchers"] == nw + 1, 10, "the stream's watcher")
        rss0 = rss_kb(b.proc.pid)
        with open("/proc/sys/fs/inotify/max_queued_events") as f:
            kq = int(f.read())
        # Events in batches the kernel can queue, each followed by waiting
        # until the agent has taken them (the kernel holds none) or has
        # stopped reading for its lagging client: one that stops at its
        # high-water mark (256 KiB of output queued) pauses and holds about
        # that; one that kept reading would take everything (up to 120,000
        # events of ~60 bytes), more than the kernel's socket buffers, and
        # hold it. The same in every build, however fast it runs.
        n = 0
        h = b.held()
        while not h["watch_streams_paused"] and n < 120000:
            for _ in range(2000):  # p and q in turn: the kernel merges repeats of one event
                os.utime(d + "/p", (n, n))
                os.utime(d + "/q", (n, n))
                n += 2
            wait_until(lambda: b.held()["watch_kernel_bytes"] == 0 or b.held()["watch_streams_paused"], 20,
                       "the agent to take the events or pause")
            h = b.held()
        held, h = held_beyond_conns(b)
        check(h["watch_streams_paused"] == 1 and h["output_queued"] < 384 * 1024 and held < HELD_BOUND,
              "behind a client that does not read, after %d events the agent holds %d bytes (%d queued): %r"
              % (n, held, h["output_queued"], h))
        # Then past the kernel's queue: the overflow ends the stream.
        while n < kq + 60000:
            os.utime(d + "/p", (n, n))
            os.utime(d + "/q", (n, n))
            n += 2
        held, h = held_beyond_conns(b)
        check(held < HELD_BOUND, "the agent holds %d bytes past the kernel's queue: %r" % (held, h))
        if not under_asan(b.proc.pid):  # ASan's quarantine keeps every freed event: RSS says nothing there
            grew = rss_kb(b.proc.pid) - rss0
            check(grew < 8 * 1024, "agent RSS grew by %d KiB behind a client that does not read" % grew)
        sk.settimeout(10)
        data = b""
        while True:
            chunk = sk.recv(1 << 20)
            if not chunk:
                break
            data += chunk
            if data.endswith(b"0\r\n\r\n"):
                break
        sk.close()
        events = data.count(b"EVENT_TYPE_CHMOD")
        check(b'"code":"internal"' in data and b"overflowed" in data and events < n,
              "a lagging stream: %d events of %d, tail %r" % (events, n, data[-300:]))
        print("     lagging stream: %d of %d events delivered, then the overflow error; the agent held %d bytes"
              % (events, n, held))
        wait_until(lambda: fd_count(b) == base, 5, "fds back to %d (now %d)" % (base, fd_count(b)))
    finally:
        check(b.stop() == 0, "watch agent exit status")


# ------------------------------------------------ paths, uploads, limits

BAD_PATHS = [("a%00b", "a%00b"), ("x%ff", "x%FF"), ("o%C0%AFz", "o%C0%AFz"), ("s%ED%A0%80", "s%ED%A0%80")]


def test_paths_not_text_refused(a):
    """A path with a NUL byte (open(2) would stop there) or bytes that are
    not UTF-8 (no protobuf string holds them) is a 400 naming it, on every
    files route and filesystem RPC, and nothing is written."""
    d = os.path.join(TMP, "badpaths")
    os.makedirs(d)
    passwd = open("/etc/passwd", "rb").read()
    for raw, shown in BAD_PATHS + [("/etc/passwd%00.txt", "/etc/passwd%00.txt")]:
        q = raw if raw.startswith("/") else d + "/" + raw
        want = "invalid path %s: a path is UTF-8 text without NUL bytes" % (q.replace(raw, shown))
        st, _, body = a.request("GET", "/files?path=" + q)
        check(st == 400 and json.loads(body) == {"code": 400, "message": want}, "GET %s: %d %r" % (q, st, body))
        for m in ("PUT", "POST"):
            st, _, body = a.request(m, "/files?path=" + q, b"data", {"Content-Type": "application/octet-stream"})
            check(st == 400 and json.loads(body) == {"code": 400, "message": want}, "%s %s: %d %r" % (m, q, st, body))
    check(os.listdir(d) == [] and open("/etc/passwd", "rb").read() == passwd, "written: %r" % os.listdir(d))
    # multipart: a filename that is not UTF-8 is named; one with a NUL is malformed
    bnd = "b" + os.urandom(6).hex()
    for fname, want in ((d.encode() + b"/m\xff", "invalid path %s/m%%FF" % d), (d.encode() + b"/n\x00x", "bad filename")):
        body = (b"--" + bnd.encode() + b"\r\nContent-Disposition: form-data; name=\"file\"; filename=" + fname +
                b"\r\n\r\nxyz\r\n--" + bnd.encode() + b"--\r\n")
        st, _, got = a.request("POST", "/files", body, {"Content-Type": "multipart/form-data; boundary=" + bnd})
        check(st == 400 and json.loads(got)["message"].startswith(want), "multipart %r: %d %r" % (fname, st, got))
    check(os.listdir(d) == [], "multipart wrote: %r" % os.listdir(d))
    # the filesystem service: a NUL in a JSON string
    bad = d + "/a\u0000b"
    want = "invalid path %s/a%%00b: a path is UTF-8 text without NUL bytes" % d
    for method, msg in (("Stat", {"path": bad}), ("MakeDir", {"path": bad}), ("ListDir", {"path": bad}),
                        ("Remove", {"path": bad}), ("Move", {"source": bad, "destination": d + "/c"}),
                        ("Move", {"source": d, "destination": bad}), ("CreateWatcher", {"path": bad})):
        st, j = a.rpc("filesystem.Filesystem/" + method, msg)
        check(st == 400 and j == {"code": "invalid_argument", "message": want}, "%s %r: %d %r" % (method, msg, st, j))
    s = a.stream("filesystem.Filesystem/WatchDir", {"path": bad})
    kind, obj = s.next()
    check(kind == "end" and obj["error"] == {"code": "invalid_argument", "message": want}, "WatchDir: %r" % obj)
    s.close()
    check(os.listdir(d) == [] and not os.path.exists(d + "/a"), "MakeDir made %r" % os.listdir(d))


def no_temp_left(d):
    return not [n for n in os.listdir(d) if n.startswith(".fr-upload")]


def test_upload_all_or_nothing(a):
    """Uploads go to a temporary name and are renamed at the end: a cut or
    refused upload leaves nothing, a file it would replace is untouched."""
    d = os.path.join(TMP, "atomic")
    os.makedirs(d)
    f = d + "/f"
    with open(f, "wb") as fh:
        fh.write(b"original")
    os.chmod(f, 0o640)
    # a chunked upload whose client leaves half-way
    sk = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    sk.sendall(("PUT /files?path=%s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\nContent-Type: application/octet-stream\r\n"
                "Transfer-Encoding: chunked\r\n\r\n" % (f, TOKEN)).encode())
    for _ in range(8):
        sk.sendall(b"10000\r\n" + b"z" * 0x10000 + b"\r\n")
    wait_until(lambda: not no_temp_left(d), 5, "the upload's temporary file")
    sk.close()
    wait_until(lambda: no_temp_left(d), 5, "the cut upload's temporary file to go")
    check(open(f, "rb").read() == b"original", "a cut upload changed the file")
    # a multipart upload cut in its second part: neither file appears
    bnd = "b" + os.urandom(6).hex()
    part = lambda name, data: (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n"
                                % (bnd, name)).encode() + data + b"\r\n")
    sk = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    body = part(d + "/m1", b"one") + part(f, b"two" * 1000)
    sk.sendall(("POST /files HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\nContent-Type: multipart/form-data; boundary=%s\r\n"
                "Content-Length: %d\r\n\r\n" % (TOKEN, bnd, len(body) + 100)).encode() + body)
    wait_until(lambda: len([n for n in os.listdir(d) if n.startswith(".fr-upload")]) == 2, 5, "two temporary files")
    sk.close()
    wait_until(lambda: no_temp_left(d), 5, "the cut multipart upload's temporary files to go")
    check(sorted(os.listdir(d)) == ["f"] and open(f, "rb").read() == b"original", "after a cut multipart: %r"
          % os.listdir(d))
    # a whole one replaces the file, keeping its mode; through a link too
    st, _, body = a.request("PUT", "/files?path=" + f, b"new", {"Content-Type": "application/octet-stream"})
    check(st == 200 and open(f, "rb").read() == b"new" and os.stat(f).st_mode & 0o777 == 0o640,
          "replace: %d %r %o" % (st, body, os.stat(f).st_mode))
    os.symlink("f", d + "/link")
    st, _, body = a.request("PUT", "/files?path=" + d + "/link", b"via link", {"Content-Type": "application/octet-stream"})
    check(st == 200 and os.path.islink(d + "/link") and open(f, "rb").read() == b"via link",
          "through a link: %d %r" % (st, body))
    check(no_temp_left(d), "temporary files left: %r" % os.listdir(d))


def test_upload_seen_by_watchers(a):
    """Watchers see an upload as envd's in-place write shows it: CREATE and
    WRITE of a new file, WRITE of a replaced one, nothing of the temporary
    name; a cut upload shows nothing."""
    d = os.path.join(TMP, "watched-uploads")
    os.makedirs(d)
    s = a.stream("filesystem.Filesystem/WatchDir", {"path": d})
    check(s.next() == ("msg", {"start": {}}), "watch start")
    st, j = a.rpc("filesystem.Filesystem/CreateWatcher", {"path": d})
    wid = j["watcherId"]
    # a cut one first: its temporary file comes and goes unseen
    sk = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    sk.sendall(("PUT /files?path=%s/cut HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
                "Content-Length: 100\r\n\r\nabc" % (d, TOKEN)).encode())
    wait_until(lambda: not no_temp_left(d), 5, "the cut upload's temporary file")
    sk.close()
    wait_until(lambda: no_temp_left(d), 5, "the cut upload's temporary file to go")
    for body in (b"new", b"replaced"):
        st, _, _ = a.request("PUT", "/files?path=%s/f" % d, body, {"Content-Type": "application/octet-stream"})
        check(st == 200, "upload: %d" % st)
    st, _, _ = a.request("PUT", "/files?path=%s/empty" % d, b"", {"Content-Type": "application/octet-stream"})
    with open(d + "/end", "w") as f:
        f.write("e")
    want = [("f", "EVENT_TYPE_CREATE"), ("f", "EVENT_TYPE_WRITE"), ("f", "EVENT_TYPE_WRITE"),
            ("empty", "EVENT_TYPE_CREATE"), ("end", "EVENT_TYPE_CREATE"), ("end", "EVENT_TYPE_WRITE")]
    got = []
    while len(got) < len(want):
        kind, obj = s.next()
        check(kind == "msg", "stream ended: %r" % obj)
        if "filesystem" in obj:
            got.append((obj["filesystem"]["name"], obj["filesystem"]["type"]))
    s.close()
    check(got == want, "events of uploads: %r" % got)
    st, j = a.rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    polled = [(e["name"], e["type"]) for e in j["events"]]
    check(polled == want, "polled events of uploads: %r" % polled)
    a.rpc("filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})


def test_upload_over_a_mount_point(a):
    """A file bind-mounted over another (/etc/hosts in a pod) cannot be
    renamed over: it is written in place. The agent runs in a mount
    namespace of its own for this (root only)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("  (not root or no unshare: the mount point case is skipped)")
        return
    d = os.path.join(TMP, "mounts")
    os.makedirs(d)
    for n in ("src", "dst"):
        with open(os.path.join(d, n), "w") as f:
            f.write(n)
    script = 'mount --bind "$0/src" "$0/dst" && exec "$@"'
    b = Agent(name="mnt", wrap=["unshare", "-m", "--propagation", "private", "sh", "-c", script, d])
    try:
        b.init()
        st, _, body = b.request("PUT", "/files?path=" + d + "/dst", b"through the mount",
                                {"Content-Type": "application/octet-stream"})
        check(st == 200, "upload over a mount point: %d %r" % (st, body))
        # outside the agent's namespace there is no mount: what it wrote is in src
        check(open(d + "/src").read() == "through the mount" and open(d + "/dst").read() == "dst" and no_temp_left(d),
              "after: src %r, dst %r, %r" % (open(d + "/src").read(), open(d + "/dst").read(), os.listdir(d)))
    finally:
        check(b.stop() == 0, "mnt agent exit status")


def test_upload_over_limit_and_stalled(a):
    """Past the file size limit (RLIMIT_FSIZE here: EFBIG) the upload is a
    413 and leaves nothing; one that stalls is a 408 after --body-timeout,
    and leaves nothing."""
    import resource

    def fsize():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    b = Agent(["--body-timeout", "700"], name="fsize", preexec=fsize)
    try:
        b.init()
        d = os.path.join(TMP, "limits")
        os.makedirs(d)
        f = d + "/f"
        with open(f, "wb") as fh:
            fh.write(b"original")
        big = b"q" * (2 << 20)
        st, _, body = b.request("PUT", "/files?path=" + f, big, {"Content-Type": "application/octet-stream"})
        check(st == 413 and json.loads(body)["message"].startswith("write %s: File too large" % f),
              "raw upload over the limit: %d %r" % (st, body))
        bnd = "b" + os.urandom(6).hex()
        body = b""
        for name, data in ((d + "/small", b"s"), (f, big)):
            body += (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n" % (bnd, name))
                     .encode() + data + b"\r\n")
        body += ("--%s--\r\n" % bnd).encode()
        st, _, got = b.request("POST", "/files", body, {"Content-Type": "multipart/form-data; boundary=" + bnd})
        check(st == 413, "multipart over the limit: %d %r" % (st, got))
        check(sorted(os.listdir(d)) == ["f"] and open(f, "rb").read() == b"original",
              "after refused uploads: %r" % os.listdir(d))
        # Content-Length 1,000,000, 100,000 bytes sent, then nothing
        sk = socket.create_connection(("127.0.0.1", b.port), timeout=10)
        sk.sendall(("PUT /files?path=%s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\nContent-Type: application/octet-stream\r\n"
                    "Content-Length: 1000000\r\n\r\n" % (d + "/stall", TOKEN)).encode() + b"s" * 100000)
        got = b""
        while b"\r\n\r\n" not in got or not got.endswith(b"}"):
            chunk = sk.recv(4096)
            if not chunk:
                break
            got += chunk
        sk.close()
        check(got.startswith(b"HTTP/1.1 408") and b"request not received in time" in got, "stalled upload: %r" % got)
        wait_until(lambda: no_temp_left(d), 5, "the stalled upload's temporary file to go")
        check(sorted(os.listdir(d)) == ["f"], "after a stalled upload: %r" % os.listdir(d))
    finally:
        check(b.stop() == 0, "fsize agent exit status")


def test_upload_to_fifo_refused(a):
    """A FIFO (or device) is not a file to upload to: refused at once, and
    the agent goes on serving (it once blocked in open(2) for a writer)."""
    d = os.path.join(TMP, "fifo")
    os.makedirs(d)
    os.mkfifo(d + "/ff")
    c = a.conn(timeout=5)
    try:
        c.request("PUT", "/files?path=" + d + "/ff", b"x",
                  {"X-Access-Token": TOKEN, "Content-Type": "application/octet-stream"})
        r = c.getresponse()
        body = r.read()
    finally:
        c.close()
    check(r.status == 400 and json.loads(body) == {"code": 400, "message": "not a regular file: %s/ff" % d},
          "PUT to a FIFO: %d %r" % (r.status, body))
    st, _, body = a.request("GET", "/files?path=" + d + "/ff")
    check(st == 400, "GET of a FIFO: %d %r" % (st, body))
    st, _, body = a.request("PUT", "/files?path=/dev/null", b"x", {"Content-Type": "application/octet-stream"})
    check(st == 400 and "not a regular file" in json.loads(body)["message"], "PUT to /dev/null: %d %r" % (st, body))
    st, _, _ = a.request("GET", "/health", token=None)
    check(st == 204 and stat_is_fifo(d + "/ff") and no_temp_left(d), "after: %d %r" % (st, os.listdir(d)))


def stat_is_fifo(p):
    import stat as st_mod
    return st_mod.S_ISFIFO(os.lstat(p).st_mode)


def test_process_limit(a):
    b = Agent(["--max-procs", "3"], name="procs")
    try:
        b.init()
        ss = [start(b, "/bin/sleep", ["300"]) for _ in range(3)]
        s = b.stream("process.Process/Start", {"process": {"cmd": "/bin/sleep", "args": ["300"]}})
        kind, obj = s.next()
        check(s.status == 200 and kind == "end" and obj == {"error": {
            "code": "resource_exhausted", "message": "too many running processes: at most 3 run at once in this "
            "sandbox; wait for one to end or stop one"}}, "a 4th process: %d %r" % (s.status, obj))
        s.close()
        st, _ = b.rpc("process.Process/SendSignal", {"process": {"pid": ss[0].pid}, "signal": "SIGNAL_SIGKILL"})
        ss[0].drain()
        s = start(b, "/bin/true")
        s.drain()
        check(s.exit["exitCode"] == 0, "after one ended: %r" % s.exit)
        for x in ss:
            x.close()
    finally:
        check(b.stop() == 0, "procs agent exit status")


def test_connect_without_follow_is_bounded(a):
    """A Connect with follow: false answers what the ring held at attach
    (at most --max-buffer) and ends, even behind a `yes`."""
    s = start(a, "/usr/bin/yes", ["y" * 100])
    pid = s.pid
    s.close()
    wait_until(lambda: a.held()["process_output_bytes"] >= 512 << 10, 10, "yes to fill its ring")
    c = a.stream("process.Process/Connect", {"process": {"pid": pid}, "follow": False})
    n, t0 = 0, time.monotonic()
    try:
        while c.end is None and len(c.out["stdout"]) < 8 << 20:
            c.next()
    finally:
        c.close()
    got = len(c.out["stdout"])
    end = int(c.headers["fr-output-end"]) - int(c.headers["fr-output-start"])
    check(c.end == {} and c.exit is None and got == end and got <= (1 << 20) + 65536,
          "without follow behind yes: %d bytes (%d at attach), end %r, exit %r" % (got, end, c.end, c.exit))
    st, _ = a.rpc("process.Process/SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    check(st == 200, "kill yes: %d" % st)
    # ended: all of it, and the end event
    s = run(a, "echo once")
    c = a.stream("process.Process/Connect", {"process": {"pid": s.pid}, "follow": False})
    c.drain()
    c.close()
    check(c.out["stdout"] == b"once\n" and c.exit["exitCode"] == 0, "without follow, ended: %r %r" % (c.out, c.exit))
    s = a.stream("process.Process/Connect", {"process": {"pid": s.pid}, "follow": "no"})
    kind, obj = s.next()
    check(kind == "end" and obj["error"]["code"] == "invalid_argument", "follow not a boolean: %r" % obj)
    s.close()


def test_connect_envelopes_and_half_close(a):
    msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 0.3; echo late"]}}).encode()
    # a request envelope flagged end-stream is not a request
    out = raw_exchange(a, b"POST /process.Process/Start HTTP/1.1\r\nX-Access-Token: " + TOKEN.encode() +
                       b"\r\nContent-Type: application/connect+json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                       % (len(msg) + 5) + struct.pack(">BI", 2, len(msg)) + msg)
    check(b'"code":"invalid_argument"' in out and b"flags 0x02" in out and b'"start"' not in out,
          "end-stream flag on a request: %r" % out[-300:])
    # a unary call takes JSON, never an envelope
    j = json.dumps({"path": "/"}).encode()
    st, _, body = a.request("POST", "/filesystem.Filesystem/Stat", struct.pack(">BI", 2, len(j)) + j,
                            {"Content-Type": "application/json"})
    check(st == 400 and "not a Connect envelope" in json.loads(body)["message"], "enveloped unary: %d %r" % (st, body))
    # Connection: close and a half-close after the whole request: the answer still comes whole
    sk = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    sk.sendall(b"POST /process.Process/Start HTTP/1.1\r\nX-Access-Token: " + TOKEN.encode() +
               b"\r\nContent-Type: application/connect+json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
               % (len(msg) + 5) + struct.pack(">BI", 0, len(msg)) + msg)
    sk.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        b = sk.recv(65536)
        if not b:
            break
        out += b
    sk.close()
    check(b64(b"late\n").encode() in out and b'"exitCode":0' in out and out.endswith(b"0\r\n\r\n"),
          "half-closed client: %r" % out[-300:])


def test_close_stdin_after_exit(a):
    """SendInput, then CloseStdin racing the exit: done when the input was
    delivered, an error naming what was not."""
    s = start(a, "/bin/sh", ["-c", "head -c 3 >/dev/null"], stdin=True)
    st, j = a.rpc("process.Process/SendInput", {"process": {"pid": s.pid}, "input": {"stdin": b64(b"abc")}})
    check(st == 200, "SendInput: %d %r" % (st, j))
    s.drain()
    s.close()
    st, j = a.rpc("process.Process/CloseStdin", {"process": {"pid": s.pid}})
    check(st == 200 and j == {}, "CloseStdin after the exit, input delivered: %d %r" % (st, j))
    # a process that exits without reading what it was sent (more than a
    # pipe holds: the rest waits in the agent)
    s = start(a, "/bin/sleep", ["300"], stdin=True)
    st, j = a.rpc("process.Process/SendInput", {"process": {"pid": s.pid}, "input": {"stdin": b64(b"w" * 300000)}})
    check(st == 200, "SendInput: %d %r" % (st, j))
    st, j = a.rpc("process.Process/SendSignal", {"process": {"pid": s.pid}, "signal": "SIGNAL_SIGKILL"})
    check(st == 200, "kill: %d %r" % (st, j))
    s.drain()
    s.close()
    st, j = a.rpc("process.Process/CloseStdin", {"process": {"pid": s.pid}})
    check(st == 404 and j["code"] == "not_found" and "bytes not delivered" in j["message"],
          "CloseStdin after an exit with input left: %d %r" % (st, j))
    st, j = a.rpc("process.Process/SendInput", {"process": {"pid": s.pid}, "input": {"stdin": b64(b"x")}})
    check(st == 404, "SendInput after the exit: %d %r" % (st, j))


def raw_exchange(a, data, read_until_close=True):
    s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
            if not read_until_close and b"\r\n\r\n" in out:
                break
    except socket.timeout:
        pass
    s.close()
    return out


def test_bad_input(a):
    st, j = a.rpc("filesystem.Filesystem/Stat", "not an object")
    check(st == 400 and j["code"] == "invalid_argument", "string body: %d %r" % (st, j))
    st, _, body = a.request("POST", "/filesystem.Filesystem/Stat", b"{bad json",
                            {"Content-Type": "application/json"})
    check(st == 400 and json.loads(body)["code"] == "invalid_argument", "bad json: %d" % st)
    st, _, body = a.request("POST", "/filesystem.Filesystem/Stat", b"\x08\x01", {"Content-Type": "application/proto"})
    check(st == 415, "proto codec: %d" % st)
    st, j = a.rpc("process.Process/NoSuch", {})
    check(st == 501 and j["code"] == "unimplemented", "unknown method: %d" % st)
    st, _, body = a.request("GET", "/nope")
    check(st == 404, "unknown path: %d" % st)
    s = a.stream("process.Process/Start", {"process": {"cmd": ""}})
    kind, obj = s.next()
    check(kind == "end" and obj["error"]["code"] == "invalid_argument", "empty cmd: %r" % obj)
    s.close()
    s = a.stream("process.Process/Start", {"process": {"cmd": "/bin/true", "args": [1, 2]}})
    kind, obj = s.next()
    check(kind == "end" and obj["error"]["code"] == "invalid_argument", "numeric args: %r" % obj)
    s.close()
    s = a.stream("process.Process/StreamInput", {})
    kind, obj = s.next()
    check(kind == "end" and obj["error"]["code"] == "unimplemented", "StreamInput: %r" % obj)
    s.close()
    # envelope whose length lies
    out = raw_exchange(a, b"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nX-Access-Token: " + TOKEN.encode() +
                       b"\r\nContent-Type: application/connect+json\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
                       b"\x00\x00\x00\x01\x00{}}}")
    check(b"invalid_argument" in out, "lying envelope: %r" % out[:300])
    out = raw_exchange(a, b"POST /process.Process/SendInput HTTP/1.1\r\nX-Access-Token: " + TOKEN.encode() +
                       b"\r\nContent-Type: application/json\r\nContent-Length: 9437184\r\n\r\n{")
    check(out.startswith(b"HTTP/1.1 413"), "huge body: %r" % out[:100])
    out = raw_exchange(a, b"GARBAGE\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 400"), "garbage: %r" % out[:100])
    out = raw_exchange(a, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 431"), "big head: %r" % out[:100])
    out = raw_exchange(a, b"POST /files?path=/tmp/x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 400"), "CL+TE: %r" % out[:100])
    # pipelined keep-alive requests are answered in order
    out = raw_exchange(a, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /version HTTP/1.1\r\nHost: x\r\nX-Access-Token: " +
                       TOKEN.encode() + b"\r\nConnection: close\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 204") and out.count(b"HTTP/1.1 ") == 2 and b"0.5.7" in out, "pipelined: %r" % out)
    # bad /init bodies
    st, _, _ = a.request("POST", "/init", b'{"envVars":{"A":1}}', {"Content-Type": "application/json"},
                         token=INIT_TOKEN)
    check(st == 400, "bad init env: %d" % st)
    st, _, _ = a.request("POST", "/init", b'{"secretNames":"A"}', {"Content-Type": "application/json"},
                         token=INIT_TOKEN)
    check(st == 400, "bad init secretNames: %d" % st)
    st, _, _ = a.request("GET", "/health")
    check(st == 204, "agent unhealthy after bad input")


def test_curl_speaks_to_it(a):
    if shutil.which("curl") is None:
        return
    path = os.path.join(TMP, "curl.txt")
    with open(path, "wb") as f:
        f.write(b"via curl\n" * 1000)
    out = subprocess.run(["curl", "-sS", "--fail", "-H", "X-Access-Token: " + TOKEN,
                          "-F", "file=@%s;filename=%s" % (path, path + ".up"),
                          "http://127.0.0.1:%d/files" % a.port], capture_output=True, timeout=30)
    check(out.returncode == 0 and json.loads(out.stdout)[0]["path"] == path + ".up", "curl -F: %r" % (out,))
    out = subprocess.run(["curl", "-sS", "--fail", "-H", "X-Access-Token: " + TOKEN,
                          "http://127.0.0.1:%d/files?path=%s" % (a.port, path + ".up")], capture_output=True, timeout=30)
    check(out.stdout == b"via curl\n" * 1000, "curl download")


NODE_SCRIPT = r'''
const [port, token, dir] = process.argv.slice(1);
const base = `http://127.0.0.1:${port}`;
const H = { 'X-Access-Token': token };
const must = (c, m) => { if (!c) { console.error('FAIL ' + m); process.exit(1); } };
(async () => {
  let r = await fetch(base + '/health');
  must(r.status === 204, 'health ' + r.status);
  // streamed upload (chunked, duplex half) as the SDK does for streams
  const parts = [new Uint8Array([0, 1, 2]), new Uint8Array(100000).fill(7)];
  const body = new ReadableStream({ pull(c) { const p = parts.shift(); if (p) c.enqueue(p); else c.close(); } });
  r = await fetch(base + '/files?path=' + dir + '/node.bin', { method: 'POST', body, duplex: 'half',
    headers: { ...H, 'Content-Type': 'application/octet-stream' } });
  const up = await r.text();
  must(r.status === 200 && JSON.parse(up)[0].path === dir + '/node.bin', 'upload ' + r.status + ' ' + up);
  r = await fetch(base + '/files?path=' + dir + '/node.bin', { headers: H });
  const got = new Uint8Array(await r.arrayBuffer());
  must(got.length === 100003 && got[2] === 2 && got[100002] === 7, 'download ' + got.length);
  // a Connect stream read as it comes, on a kept-alive connection
  const msg = new TextEncoder().encode(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'echo x; sleep 0.3; echo y'] } }));
  const env = new Uint8Array(5 + msg.length);
  new DataView(env.buffer).setUint32(1, msg.length);
  env.set(msg, 5);
  r = await fetch(base + '/process.Process/Start', { method: 'POST', body: env,
    headers: { ...H, 'Content-Type': 'application/connect+json' } });
  const buf = new Uint8Array(await r.arrayBuffer());
  let off = 0, events = [];
  while (off < buf.length) {
    const len = new DataView(buf.buffer, off + 1, 4).getUint32(0);
    events.push([buf[off], JSON.parse(new TextDecoder().decode(buf.slice(off + 5, off + 5 + len)))]);
    off += 5 + len;
  }
  const last = events[events.length - 1];
  must(last[0] === 2 && JSON.stringify(last[1]) === '{}', 'end-stream ' + JSON.stringify(last));
  must(events.some(e => e[1].event && e[1].event.end && e[1].event.end.exitCode === 0), 'end event');
  console.log('node ok');
})().catch(e => { console.error('FAIL ' + e); process.exit(1); });
'''


def test_node_fetch_speaks_to_it(a):
    node = shutil.which("node")
    if node is None:
        print("  (node not installed: Node fetch/undici check skipped)")
        return
    d = os.path.join(TMP, "node")
    os.makedirs(d, exist_ok=True)
    out = subprocess.run([node, "-e", NODE_SCRIPT, str(a.port), TOKEN, d], capture_output=True, timeout=60)
    check(out.returncode == 0 and b"node ok" in out.stdout, "node fetch: %r %r" % (out.stdout, out.stderr))


def test_e2b_sdk(a):
    mods = os.environ.get("FR_E2B_NODE_MODULES")
    node = shutil.which("node")
    if not mods or not node or not os.path.isdir(os.path.join(mods, "e2b")):
        print("  (FR_E2B_NODE_MODULES unset or without e2b: official E2B SDK check skipped)")
        return
    d = os.path.join(TMP, "e2b")
    os.makedirs(d, exist_ok=True)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2b_sdk_smoke.mjs")
    out = subprocess.run([node, script, str(a.port), TOKEN, d], capture_output=True, timeout=90)
    check(out.returncode == 0 and b"e2b sdk ok" in out.stdout, "E2B SDK: %r %r" % (out.stdout, out.stderr[-2000:]))


def test_connection_limit(a):
    socks = []
    try:
        for _ in range(256):
            socks.append(socket.create_connection(("127.0.0.1", a.port), timeout=10))
        # the agent has accepted all of them once one answers on the last
        socks[-1].sendall(b"GET /health HTTP/1.1\r\n\r\n")
        check(socks[-1].recv(100).startswith(b"HTTP/1.1 204"), "256th connection not served")
        extra = socket.create_connection(("127.0.0.1", a.port), timeout=10)
        got = b""
        while True:
            b = extra.recv(4096)
            if not b:
                break
            got += b
        extra.close()
        check(got.startswith(b"HTTP/1.1 503") and got.endswith(b"}") and b"too many" in got,
              "257th connection: %r" % got)
    finally:
        for s in socks:
            s.close()


def test_no_fd_leak(a):
    def count():
        return len(os.listdir("/proc/%d/fd" % a.proc.pid))
    # 0-2, listener, epoll, signalfd: every connection and pipe is closed
    wait_until(lambda: count() == 6, 5, "the agent's fds back to 6 (now %d)" % count())


def test_orphans_reaped(a):
    # the grandchild is orphaned at once and adopted by the agent (subreaper)
    s = run(a, "(sleep 0.3; exit 4) & echo $!")
    orphan = int(s.out["stdout"])

    def adopted_then_gone():
        try:
            st = open("/proc/%d/stat" % orphan).read().rsplit(")", 1)[1].split()
        except OSError:
            return True  # reaped
        check(int(st[1]) == a.proc.pid, "orphan not adopted by the agent (ppid %s)" % st[1])
        return False
    wait_until(adopted_then_gone, 10, "the orphan to be reaped")


def test_agent_killed_takes_commands(a):
    b = Agent(name="doomed")
    b.init()
    s = start(b, "/bin/sleep", ["300"])
    pid = s.pid
    s.close()
    check(pid_alive(pid), "sleep not running")
    b.proc.kill()  # SIGKILL: no chance to clean up
    b.proc.wait()
    b.log.close()
    wait_until(lambda: not pid_alive(pid), 5, "the command to die with its agent")


def test_main_command_mode(a):
    b = Agent(cmd=["/bin/sh", "-c", "(sleep 0.2; exit 0) & sleep 0.5; exit 5"], name="main")
    try:
        rc = b.proc.wait(10)
    except subprocess.TimeoutExpired:
        b.proc.kill()
        raise TestFailure("agent did not exit with its command")
    b.log.close()
    check(rc == 5, "exit status %d, want 5" % rc)


TESTS = [
    test_auth, test_init_replaces_env, test_init_without_hash, test_init_env_inherited, test_start_streams_before_end, test_missing_command,
    test_stdin_and_close, test_pty, test_connect_reattach, test_connect_loss_flag,
    test_slow_reader_backpressure, test_list,
    test_signal_kills_group, test_timeout_kills_escaped_grandchild,
    test_background_grandchild_does_not_hold_stream, test_kill_on_disconnect,
    test_keepalive_and_deadline, test_files_round_trip, test_files_large_flat_memory,
    test_filesystem_rpcs, test_watch_dir_stream, test_watchers_polling_and_limits,
    test_paths_not_text_refused, test_upload_all_or_nothing, test_upload_seen_by_watchers,
    test_upload_over_a_mount_point, test_upload_over_limit_and_stalled,
    test_upload_to_fifo_refused, test_process_limit, test_connect_without_follow_is_bounded,
    test_connect_envelopes_and_half_close, test_close_stdin_after_exit, test_bad_input, test_curl_speaks_to_it, test_node_fetch_speaks_to_it,
    test_e2b_sdk, test_connection_limit, test_no_fd_leak, test_orphans_reaped, test_agent_killed_takes_commands,
    test_main_command_mode,
]


def main():
    global ARGS, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ap.add_argument("--only", nargs="*")
    ARGS = ap.parse_args()
    TMP = tempfile.mkdtemp(prefix="fr-agent-test-")
    def watchdog():
        print("watchdog: giving up", flush=True)
        for ag in LIVE:
            if ag.proc.poll() is None:
                ag.proc.kill()
        shutil.rmtree(TMP, ignore_errors=True)
        os._exit(2)
    timer = threading.Timer(WATCHDOG_S, watchdog)
    timer.daemon = True
    timer.start()
    passed = failed = 0
    a = None
    try:
        a = Agent()
        for t in TESTS:
            name = t.__name__[5:]
            if ARGS.only and name not in ARGS.only and "auth" not in t.__name__:
                continue
            try:
                t(a)
                print("ok", name, flush=True)
                passed += 1
            except Exception as e:  # noqa: BLE001 - report and go on
                failed += 1
                print("FAIL %s: %s" % (name, e), flush=True)
                if not isinstance(e, TestFailure):
                    traceback.print_exc()
        rc = a.stop()
        if rc != 0:
            failed += 1
            print("FAIL shutdown: agent exit status %d\n%s" % (rc, a.logtext()[-3000:]))
        if SECRET_VALUE in a.logtext():
            failed += 1
            print("FAIL secret: the secret value reached the agent log")
    finally:
        if a and a.proc.poll() is None:
            a.proc.kill()
        shutil.rmtree(TMP, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
