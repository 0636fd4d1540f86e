#!/usr/bin/python3
"""test_codeint_kubesim.py - kubesim runs the code interpreter in the pods of
the code-interpreter image: the agent's main command is the server
(kubesim --code-interpreter deploy/code-interpreter/server.py), the pod is
Ready only once the server is up when its readiness probe is on port 49999,
and pod port 49999 reaches the server through pods/proxy (state kept across
calls, NDJSON streamed through).

Usage: test_codeint_kubesim.py KUBESIM AGENT   (exit 0, 1, or 77 skipped)
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ci_server as cs  # noqa: E402

FAILS = []
NS = "/api/v1/namespaces/default"


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what, flush=True)
    return cond


class Kubesim:
    def __init__(self, binary, agent):
        self.dir = tempfile.mkdtemp(prefix="fr-codeint-kubesim-")
        port_file = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen([binary, "--port-file", port_file, "--workdir", os.path.join(self.dir, "work"),
                                      "--agent-binary", agent, "--code-interpreter", cs.SERVER, "--nodes", "1"],
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        cs.wait_for(lambda: (os.path.exists(port_file) and open(port_file).read().strip())
                    or self.proc.poll() is not None, 15, "kubesim")
        if self.proc.poll() is not None:
            raise AssertionError("kubesim exited: %s" % self.log_text())
        self.port = int(open(port_file).read())

    pod_uid = None

    def log_text(self):
        self.log.flush()
        return open(self.log.name, "rb").read().decode("utf-8", "replace")[-3000:]

    def call(self, method, path, body=None, raw=False):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if raw:
                return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
            return r.status, json.loads(data) if data else None
        finally:
            c.close()

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            check(self.proc.wait(30) == 0, "kubesim exit status %s" % self.proc.returncode)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            check(False, "kubesim did not stop on SIGTERM")
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def pod(name, image, probe_port):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{
                "name": "sandbox", "image": image,
                # What the router gives an agent pod: the image's command
                # is replaced, and kubesim puts the image's back.
                "command": ["/fr-agent/fedrouter-agent", "--listen", "0.0.0.0:49983", "--", "sleep", "infinity"],
                "ports": [{"name": "agent", "containerPort": 49983}, {"name": "jupyter", "containerPort": 49999}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": probe_port}, "periodSeconds": 1}}]}}


def conditions(p):
    return {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or []}


def main(argv):
    if len(argv) != 3:
        print("usage: test_codeint_kubesim.py KUBESIM AGENT", file=sys.stderr)
        return 2
    cs.ensure_packages()
    k = Kubesim(os.path.abspath(argv[1]), os.path.abspath(argv[2]))
    try:
        print("-- a code-interpreter pod with its readiness probe on 49999", flush=True)
        st, _ = k.call("POST", NS + "/pods", pod("ci", "registry.example/fedrouter/code-interpreter:0.1.0", 49999))
        check(st == 201, "create: %s" % st)
        seen_running_unready = False
        deadline = time.monotonic() + 90
        while True:
            st, p = k.call("GET", NS + "/pods/ci")
            cond = conditions(p)
            if p["status"].get("phase") == "Running" and cond.get("Ready") == "False":
                seen_running_unready = True
            if cond.get("Ready") == "True":
                break
            if p["status"].get("phase") in ("Failed", "Succeeded") or time.monotonic() > deadline:
                raise AssertionError("the pod did not turn Ready: %s\n%s" % (p["status"], k.log_text()))
            time.sleep(0.02)
        # Ready means the server answers: no retry here.
        st, hdr, body = k.call("GET", NS + "/pods/ci:49999/proxy/health", raw=True)
        check(st == 200 and json.loads(body) == "OK", "/health through the pod proxy when Ready: %s %r" % (st, body))
        check(seen_running_unready, "Running but not Ready while the server started (the agent was up first)")
        st, _, body = k.call("GET", NS + "/pods/ci:49983/proxy/health", raw=True)
        check(st == 204, "the agent still answers on 49983: %s" % st)

        print("-- /execute through the pod proxy", flush=True)
        st, hdr, body = k.call("POST", NS + "/pods/ci:49999/proxy/execute", {"code": "import os\nv = 20\nprint(os.getpid() > 1)\nv"}, raw=True)
        lines = [json.loads(x) for x in body.decode().splitlines()]
        check(st == 200 and hdr.get("content-type") == "application/x-ndjson", "execute: %s %s" % (st, hdr))
        check([x["type"] for x in lines] == ["number_of_executions", "stdout", "result", "end_of_execution"],
              "lines: %s" % lines)
        st, hdr, body = k.call("POST", NS + "/pods/ci:jupyter/proxy/execute", {"code": "v + 1"}, raw=True)
        lines = [json.loads(x) for x in body.decode().splitlines()]
        check(any(x.get("text") == "21" and x.get("is_main_result") for x in lines), "state kept: %s" % lines)
        # Streamed through kubesim's proxy: the first line arrives while the
        # cell still runs (it waits for a file only this test makes).
        c = http.client.HTTPConnection("127.0.0.1", k.port, timeout=60)
        c.request("POST", NS + "/pods/ci:49999/proxy/execute",
                  body=json.dumps({"code": "import os, time\nprint('first', flush=True)\n"
                                           "while not os.path.exists('/tmp/go'):\n    time.sleep(0.01)\n'second'"}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first = [json.loads(r.readline()) for _ in range(2)]
        check(first[1] == {"type": "stdout", "text": "first\n", "timestamp": first[1].get("timestamp")},
              "first line through the proxy before the cell ends: %s" % first)
        # The file, made by a second context's kernel in the same pod (the
        # pod's files are its own: the host does not see them).
        st, ctx = k.call("POST", NS + "/pods/ci:49999/proxy/contexts", {"language": "python"})
        check(st == 200 and "id" in ctx, "a second context: %s %s" % (st, ctx))
        st, _, body = k.call("POST", NS + "/pods/ci:49999/proxy/execute",
                             {"code": "open('/tmp/go', 'w').close()", "context_id": ctx["id"]}, raw=True)
        check(st == 200, "the second context made the file: %s %s" % (st, body[:200]))
        st, _ = k.call("DELETE", NS + "/pods/ci:49999/proxy/contexts/" + ctx["id"])
        check(st == 204, "the second context removed: %s" % st)
        rest = [json.loads(x) for x in r.read().decode().splitlines()]
        c.close()
        check(any(x.get("text") == "second" for x in rest) and rest[-1]["type"] == "end_of_execution",
              "then the rest: %s" % rest)
        # A client hanging up on kubesim's proxy reaches the server, which
        # interrupts the cell (state kept, KeyboardInterrupt).
        c = http.client.HTTPConnection("127.0.0.1", k.port, timeout=60)
        c.request("POST", NS + "/pods/ci:49999/proxy/execute",
                  body=json.dumps({"code": "import time\nspins = 0\nprint('spinning', flush=True)\n"
                                           "while True:\n    spins += 1\n    time.sleep(0.001)"}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first = [json.loads(r.readline()) for _ in range(2)]
        check(first[1].get("text") == "spinning\n", "the spinning cell runs: %s" % first)
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        st, hdr, body = k.call("POST", NS + "/pods/ci:49999/proxy/execute",
                               {"code": "import sys\n(spins > 0, type(sys.last_value).__name__)"}, raw=True)
        lines = [json.loads(x) for x in body.decode().splitlines()]
        check(any(x.get("text") == "(True, 'KeyboardInterrupt')" for x in lines),
              "a hang-up through the proxy interrupts the cell: %s" % lines)
        st, _, body = k.call("POST", NS + "/pods/ci:49999/proxy/contexts", {"cwd": "/nonexistent"}, raw=True)
        check(st == 400 and json.loads(body)["error"]["code"] == "invalid_cwd", "errors pass too: %s %s" % (st, body))

        print("-- deleting the pod ends the server and its kernels", flush=True)
        st, pj = k.call("GET", NS + "/pods/ci")
        k.pod_uid = pj["metadata"]["uid"]
        st, hdr, body = k.call("POST", NS + "/pods/ci:49999/proxy/execute", {"code": "os.getpid()"}, raw=True)
        kpid = int([json.loads(x) for x in body.decode().splitlines()][1]["text"])
        # The kernel's pid is in the pod's PID namespace when kubesim runs
        # as root: the host sees the pod's processes by their environment.
        check(len(pod_procs(k, b"ipykernel_launcher")) == 1 and len(pod_procs(k, b"server.py")) == 1,
              "one server and one kernel run for the pod (kernel pid %d in the pod; %d kernels, %d servers seen)"
              % (kpid, len(pod_procs(k, b"ipykernel_launcher")), len(pod_procs(k, b"server.py"))))
        st, _ = k.call("DELETE", NS + "/pods/ci?gracePeriodSeconds=0")
        check(st == 200, "delete: %s" % st)
        cs.wait_for(lambda: not pod_procs(k, b"ipykernel_launcher") and not pod_procs(k, b"server.py"), 20,
                    "the pod's server and kernel to end")
    except AssertionError as e:
        check(False, str(e))
    finally:
        if FAILS:
            print("---- kubesim log ----\n" + k.log_text())
        k.close()
    print("%d failure(s)" % len(FAILS) if FAILS else "PASS", flush=True)
    return 1 if FAILS else 0


def pod_procs(k, word):
    """Live python3 processes of <k>'s pod "ci" with <word> in their
    arguments."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read()
            with open("/proc/%s/stat" % d) as f:
                zombie = f.read().split(") ", 1)[1][0] == "Z"
        except OSError:
            continue
        argv = cmd.split(b"\0")
        # A pod's processes carry its uid (KUBESIM_POD_UID): this kubesim's
        # pod "ci", whose uid the test read.
        if argv[0] == cs.PYTHON.encode() and word in b" ".join(argv[1:3]) and k.pod_uid is not None \
                and b"KUBESIM_POD_UID=" + k.pod_uid.encode() in env and not zombie:
            out.append(int(d))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv))
