"""ci_server.py - starts deploy/code-interpreter/server.py on a loopback
port for the code interpreter suites, and talks HTTP to it.

The server needs Debian's python3-jupyter-client, python3-ipykernel and
python3-matplotlib under /usr/bin/python3. When one is missing the suites
try apt-get (as root, as scripts/lib/packages.sh would); when that is not
possible they exit SKIP (77), saying which package is missing.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(ROOT, "deploy", "code-interpreter", "server.py")
PYTHON = "/usr/bin/python3"
PACKAGES = {"jupyter_client": "python3-jupyter-client", "ipykernel": "python3-ipykernel",
            "matplotlib": "python3-matplotlib"}
SKIP = 77


def missing_packages():
    """The Debian packages whose module /usr/bin/python3 cannot import."""
    if not os.path.exists(PYTHON):
        return ["python3"]
    out = []
    for mod, pkg in PACKAGES.items():
        if subprocess.run([PYTHON, "-c", "import " + mod], capture_output=True).returncode != 0:
            out.append(pkg)
    return out


def ensure_packages():
    """Returns when the server's packages are there; exits SKIP (loudly)
    when they are not and apt-get cannot install them."""
    missing = missing_packages()
    if not missing:
        return
    print("code interpreter: missing Debian packages %s; trying apt-get" % " ".join(missing), flush=True)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=600)
        missing = missing_packages()
        if not missing:
            return
    print("SKIP: the code interpreter needs the Debian packages %s, which are not installed and "
          "apt-get could not install (not root, or no package mirror): apt-get install %s "
          "(scripts/lib/packages.sh lists them)" % (" ".join(missing), " ".join(missing)), flush=True)
    sys.exit(SKIP)


def wait_for(pred, timeout, what):
    """Polls <pred> until it is true; fails the suite after <timeout> s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.02)


class Server:
    """The server as a child process in its own session, on 127.0.0.1:0."""

    def __init__(self, *flags):
        self.dir = tempfile.mkdtemp(prefix="fr-codeint-")
        self.cwd = os.path.join(self.dir, "work")
        os.mkdir(self.cwd)
        self.port_file = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([PYTHON, SERVER, "--listen", "127.0.0.1:0", "--port-file", self.port_file,
                                      "--cwd", self.cwd, *flags], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for(lambda: os.path.exists(self.port_file) or self.proc.poll() is not None, 90,
                     "the server's port file")
            if self.proc.poll() is not None:
                raise AssertionError("the server exited with %s:\n%s" % (self.proc.returncode, self.log_text()))
            with open(self.port_file) as f:
                self.port = int(f.read())
        except BaseException:
            self.stop()
            raise

    def log_text(self):
        if self.log.closed:
            return getattr(self, "final_log", "")
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")[-4000:]

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stops the server with <sig> and waits; returns its exit code.
        Whatever is left of its session is killed."""
        rc = None
        if self.log.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            rc = self.proc.returncode
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(10)
        self.final_log = self.log_text()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    # ---- HTTP

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method, path, body=None, raw=None, headers=None):
        """One request on its own connection: (status, headers, decoded JSON
        body or None)."""
        c = self.conn()
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            c.request(method, path, body=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
            r = c.getresponse()
            text = r.read()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), json.loads(text) if text else None
        finally:
            c.close()

    def execute(self, code, **kw):
        """POST /execute; every line of the answer, parsed. Asserts a 200
        NDJSON stream ending with end_of_execution."""
        status, lines = self.execute_raw(dict(kw, code=code))
        assert status == 200, "execute %r: %s %s" % (code[:60], status, lines)
        return lines

    def execute_raw(self, body):
        c = self.conn()
        try:
            c.request("POST", "/execute", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                return r.status, json.loads(r.read() or b"null")
            assert r.getheader("Content-Type") == "application/x-ndjson", r.getheader("Content-Type")
            lines = [json.loads(x) for x in r.read().decode().splitlines() if x.strip()]
            assert lines and lines[-1] == {"type": "end_of_execution"}, "no end_of_execution last: %s" % lines[-3:]
            assert sum(1 for x in lines if x["type"] == "end_of_execution") == 1, lines
            return 200, lines
        finally:
            c.close()


class Stream:
    """An /execute answer read line by line as it arrives."""

    def __init__(self, server, body, timeout=60):
        self.c = server.conn(timeout)
        self.c.request("POST", "/execute", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        self.r = self.c.getresponse()
        assert self.r.status == 200, (self.r.status, self.r.read())

    def next(self):
        """The next line, parsed, or None at the end of the answer."""
        line = self.r.readline()
        return json.loads(line) if line.strip() else None

    def until(self, pred):
        """Lines up to and including the first one <pred> accepts."""
        got = []
        while True:
            x = self.next()
            assert x is not None, "the answer ended before the line looked for: %s" % got
            got.append(x)
            if pred(x):
                return got

    def rest(self):
        got = []
        while True:
            x = self.next()
            if x is None:
                return got
            got.append(x)

    def hang_up(self):
        import socket
        try:
            self.c.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.c.close()


def of(lines, kind):
    return [x for x in lines if x["type"] == kind]


def main_result(lines):
    res = [x for x in lines if x["type"] == "result" and x.get("is_main_result")]
    assert len(res) == 1, "want one main result: %s" % lines
    return res[0]


def count(lines):
    n = of(lines, "number_of_executions")
    assert len(n) == 1, lines
    return n[0]["execution_count"]
