"""Starts a federation for black-box tests and benchmarks: kubesim clusters
(TLS + token) and a real fedrouter in front of them on 127.0.0.1. The one
place that starts and stops those processes: ``start_kubesim()`` and
``RouterProc`` (used by ``Federation`` here, by tests/router/test_router.py's
harness and so by every black-box suite built on it). Every process runs in
its own session and is stopped with SIGTERM by ``Federation.stop()``
(SIGKILL after 20 s), also from ``atexit`` and from a watchdog; the
temporary directory is removed.

Python 3 standard library only.
"""
from __future__ import annotations

import atexit
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

_ALL: List[subprocess.Popen] = []
# The checkout: hidden from the kubesims' pods (--hide), as are the keys.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _kill_all() -> None:
    for p in _ALL:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


atexit.register(_kill_all)


def start_watchdog(seconds: float) -> None:
    """Kills every process started here and exits 1 after <seconds>."""
    def run() -> None:
        time.sleep(seconds)
        print(f"FAIL watchdog: over {seconds:.0f} s; killing everything", flush=True)
        _kill_all()
        os._exit(1)
    threading.Thread(target=run, daemon=True).start()


def wait_until(fn, timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def call(port: int, method: str, path: str, body: Any = None, token: Optional[str] = None,
         timeout: float = 60) -> Tuple[int, Any]:
    """One JSON request to 127.0.0.1:<port> on a fresh connection:
    (status, decoded JSON or text); (0, why) when it could not be made."""
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data.decode(errors="replace")
    except OSError as e:
        return 0, str(e)
    finally:
        c.close()


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def tail(path: str, n: int = 25) -> str:
    try:
        with open(path, "rb") as f:
            return "\n".join("    | " + ln for ln in f.read().decode(errors="replace").splitlines()[-n:])
    except OSError:
        return "    | (no log)"


def log_report(path: str, n: int = 25) -> str:
    """What a dead process's log says: from its first sanitizer report (the
    stack and where the memory came from; 60 lines) when it has one, else
    its last <n> lines."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "    | (no log)"
    for i, ln in enumerate(lines):
        if "ERROR: AddressSanitizer" in ln or "ERROR: LeakSanitizer" in ln or "runtime error:" in ln:
            return "\n".join("    | " + x for x in lines[i:i + 60])
    return "\n".join("    | " + x for x in lines[-n:])


def start_proc(argv: Sequence[str], log_path: str, stdout: Any = None) -> subprocess.Popen:
    """Starts <argv> in its own session (so its processes can be found and
    none is ours by accident), stderr (and stdout unless piped) appended to
    <log_path>; killed at exit if still running."""
    log = open(log_path, "ab")
    p = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=stdout if stdout is not None else log,
                         stderr=log, start_new_session=True)
    log.close()
    _ALL.append(p)
    return p


def stop_proc(p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> Optional[int]:
    """Sends <sig> and waits; returns the exit code, or None if it had to
    be SIGKILLed after <timeout> s."""
    if p.poll() is None:
        try:
            p.send_signal(sig)
        except ProcessLookupError:
            pass
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        return None


_start = start_proc
_stop = stop_proc


class KubesimProc:
    """One running kubesim: its process, ports, kubeconfig and log."""

    def __init__(self, name: str, proc: subprocess.Popen, port: int, admin_port: int, kubeconfig: str,
                 log: str, workdir: str) -> None:
        self.name, self.proc, self.port, self.admin_port = name, proc, port, admin_port
        self.kubeconfig, self.log, self.workdir = kubeconfig, log, workdir


def start_kubesim(kubesim: str, d: str, name: str, token: str, extra: Sequence[str] = (), tls: bool = True,
                  wrap: Sequence[str] = (), agent: Optional[str] = None, fast_exec: bool = False,
                  timeout: float = 20, hide: Sequence[str] = ()) -> KubesimProc:
    """Starts kubesim <name> in directory <d> (made here) with bearer
    <token>, an API port and an admin port picked by the kernel, and waits
    until it has written both port files. <wrap> is a command prefix
    (unshare ...); <extra> more kubesim flags; <hide> paths kept out of the
    pods' sight (--hide: this run's tokens and keys, the checkout). Raises RuntimeError with the
    log's tail if it does not start."""
    os.makedirs(d)
    pf, apf = os.path.join(d, "port"), os.path.join(d, "admin-port")
    kc = os.path.join(d, "kubeconfig")
    log = os.path.join(d, "kubesim.log")
    workdir = os.path.join(d, "wd")
    argv = [kubesim] + (["--tls"] if tls else []) + ["--token", token, "--write-kubeconfig", kc, "--port-file", pf,
            "--admin-listen", "127.0.0.1:0", "--admin-port-file", apf, "--name", name,
            "--workdir", workdir, "--log-level", "warn"] + \
        [a for h in hide for a in ("--hide", h)] + \
        (["--fast-exec"] if fast_exec else []) + \
        (["--agent-binary", os.path.abspath(agent)] if agent else []) + list(extra)
    p = start_proc(list(wrap) + argv, log)
    ok = wait_until(lambda: p.poll() is not None or (os.path.exists(pf) and os.path.getsize(pf) > 0 and
                                                     os.path.exists(apf) and os.path.getsize(apf) > 0), timeout, 0.02)
    if not ok or p.poll() is not None:
        raise RuntimeError(f"kubesim {name} did not start (rc {p.poll()}):\n{tail(log)}")
    return KubesimProc(name, p, int(_read(pf)), int(_read(apf)), kc, log, workdir)


class RouterProc:
    """One running fedrouter: started on <conf>, its stdout read to the
    end on a thread (every line kept in ``lines``), ``port`` from its
    "listening" line and ``health_port`` from its "health" line (None
    without a health listener)."""

    def __init__(self, fedrouter: str, conf: str, log_path: str, timeout: float = 20) -> None:
        self.log = log_path
        self.proc = start_proc([fedrouter, "--config", conf], log_path, stdout=subprocess.PIPE)
        self.port: Optional[int] = None
        self.health_port: Optional[int] = None
        self.lines: List[str] = []
        got = threading.Event()

        def reader() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:   # read to the end: the router never blocks on it
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                m = re.match(r"fedrouter listening on http://127\.0\.0\.1:(\d+)$", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    got.set()
                m = re.match(r"fedrouter health on http://127\.0\.0\.1:(\d+)$", line)
                if m and self.health_port is None:
                    self.health_port = int(m.group(1))
            got.set()
        threading.Thread(target=reader, daemon=True).start()
        if not got.wait(timeout) or self.port is None:
            raise RuntimeError(f"fedrouter did not print its port (rc {self.proc.poll()}, stdout {self.lines}):\n"
                               f"{tail(log_path)}")

    def ready(self) -> bool:
        """GET /readyz answers 200."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", "/readyz")
            return c.getresponse().status == 200
        except OSError:
            return False
        finally:
            c.close()

    def wait_ready(self, timeout: float = 60) -> None:
        if not wait_until(self.ready, timeout, 0.1):
            raise RuntimeError(f"fedrouter /readyz not 200 within {timeout} s:\n{tail(self.log)}")


# Delays of loadtest/bench.sh's seed scenario (a real cluster's).
REALISTIC = ["--schedule-ms", "50", "--image-pull-ms", "3000", "--start-ms", "1500",
             "--scheduler-qps", "100", "--api-latency-ms", "20"]
FAST = ["--schedule-ms", "20", "--start-ms", "50"]


class Federation:
    """kubesim clusters + one fedrouter.

    clusters: [(name, region, extra kubesim flags)]; tenants: {name:
    (token, extra tenant config text)}; the router URL is ``self.url``.
    More router config: <lifetime> (default, max sandbox lifetime in s),
    <limits_conf> (more settings inside ``limits``), <cluster_conf>
    ({cluster: more settings inside its group}) and <config_extra>
    (top-level settings)."""

    def __init__(self, kubesim: str, fedrouter: str, clusters: Sequence[Tuple[str, str, Sequence[str]]],
                 tenants: Dict[str, Tuple[str, str]], prefix: str = "fr-sdk-", fast_exec: bool = False,
                 max_batch: int = 5000, python_alias: bool = False, tls: bool = True,
                 agent: Optional[str] = None, sandbox_conf: str = "",
                 lifetime: Tuple[int, int] = (900, 3600), limits_conf: str = "",
                 cluster_conf: Optional[Dict[str, str]] = None, config_extra: str = "") -> None:
        self.root = tempfile.mkdtemp(prefix=prefix)
        self.tls = tls
        # agent: the fedrouter-agent binary; kubesim runs it in agent pods
        # and the router gets an `agent` config (a fresh HMAC key).
        self.agent = agent
        # Sandboxes of a python:3.12 image have `python` (kubesim gives its
        # isolated pods, that is as root, the image's commands). With
        # python_alias that `python` is a stand-in (--image-command) that
        # answers the user programs the sky.sandbox snippets run (rollout.py,
        # train.py: files they assume the image has) without starting an
        # interpreter (0.2 s each on a loaded 2-core machine; the batch
        # snippet runs 1,000 of them) and runs python3 otherwise.
        self.python_alias = False
        self._image_args: List[str] = []
        if python_alias:
            self._image_args = self._python_stand_in()
        self.sim_token = "kubesim-" + os.urandom(8).hex()
        self.sims: Dict[str, Dict[str, Any]] = {}
        self.procs: List[subprocess.Popen] = []
        self.router: Optional[subprocess.Popen] = None
        self.url = ""
        self.sandbox_conf = sandbox_conf
        self.lifetime = lifetime
        self.limits_conf = limits_conf
        self.cluster_conf = cluster_conf or {}
        self.config_extra = config_extra
        self.routers: List[RouterProc] = []
        try:
            for name, region, extra in clusters:
                self._start_sim(kubesim, name, region, list(extra), fast_exec)
            self._start_router(fedrouter, tenants, max_batch)
        except BaseException:
            self.stop()
            raise

    def _python_stand_in(self) -> List[str]:
        import shutil as _sh
        py = _sh.which("python3", path="/usr/bin:/bin")
        if not py or os.geteuid() != 0:
            return []
        d = os.path.join(self.root, "image-bin")
        os.makedirs(d)
        with open(os.path.join(d, "python"), "w") as f:
            f.write("#!/bin/sh\n"
                    "# the user's programs of the sky.sandbox snippets: stand-ins\n"
                    'case "$1" in rollout.py|train.py) echo "$1: stand-in for the user\'s program"; exit 0;; esac\n'
                    f'exec {py} "$@"\n')
        os.chmod(os.path.join(d, "python"), 0o755)
        self.python_alias = True
        return [a for repo in ("python", "pytorch") for a in ("--image-command", f"{repo}={d}/python")]

    def _start_sim(self, kubesim: str, name: str, region: str, extra: List[str], fast_exec: bool) -> None:
        k = start_kubesim(kubesim, os.path.join(self.root, name), name, self.sim_token, self._image_args + extra,
                          tls=self.tls, agent=self.agent, fast_exec=fast_exec, hide=(self.root, CHECKOUT))
        self.procs.append(k.proc)
        self.sims[name] = {"region": region, "kubeconfig": k.kubeconfig, "proc": k.proc, "log": k.log,
                           "admin_port": k.admin_port, "port": k.port}

    def _start_router(self, fedrouter: str, tenants: Dict[str, Tuple[str, str]], max_batch: int) -> None:
        def sha(t: str) -> str:
            return hashlib.sha256(t.encode()).hexdigest()
        tl = ",\n".join(f'  {{ name = "{n}"; token_sha256 = "{sha(tok)}"; {extra} }}'
                        for n, (tok, extra) in tenants.items())
        cl = ",\n".join(f'  {{ name = "{n}"; region = "{s["region"]}"; kubeconfig = "{s["kubeconfig"]}"; '
                        f'{self.cluster_conf.get(n, "")} }}'
                        for n, s in self.sims.items())
        conf = os.path.join(self.root, "fedrouter.conf")
        agent = ""
        if self.agent:
            key = os.path.join(self.root, "agent.key")
            with open(key, "w") as f:
                f.write(os.urandom(32).hex())
            agent = f'agent = {{ image = "fedrouter-agent:test"; key_file = "{key}"; }};\n'
        with open(conf, "w") as f:
            f.write(f"""listen = "127.0.0.1:0";
region = "us";
sandbox = {{ default_lifetime_s = {self.lifetime[0]}; max_lifetime_s = {self.lifetime[1]}; {self.sandbox_conf} }};
limits = {{ max_batch = {max_batch}; max_exec_output_bytes = 1048576; max_exec_timeout_s = 600;
           {self.limits_conf} }};
tenants = (
{tl}
);
clusters = (
{cl}
);
{agent}{self.config_extra}
""")
        self.conf = conf
        self.router_log = os.path.join(self.root, "fedrouter.log")
        self.router, self.port = self.start_router(fedrouter)
        self.url = f"http://127.0.0.1:{self.port}"

    def start_router(self, fedrouter: str) -> Tuple[subprocess.Popen, int]:
        """Starts a router on the federation's config (one more replica, or
        the restart of a killed one); returns it with its port once ready
        (its RouterProc is the last of ``self.routers``)."""
        r = RouterProc(fedrouter, self.conf, self.router_log)
        self.procs.append(r.proc)
        self.routers.append(r)
        r.wait_ready()
        assert r.port is not None
        return r.proc, r.port

    def raw(self, method: str, path: str, body: Any = None, token: Optional[str] = None,
            timeout: float = 60, port: int = 0) -> Tuple[int, Any]:
        """One request on a fresh connection (to the router, or the one on
        <port>): (status, decoded JSON or text)."""
        return call(port or self.port, method, path, body, token, timeout)

    def sim_admin(self, name: str, method: str, path: str, body: Any = None) -> Tuple[int, Any]:
        c = http.client.HTTPConnection("127.0.0.1", self.sims[name]["admin_port"], timeout=15)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Authorization": "Bearer " + self.sim_token, "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            c.close()

    def pod_counts(self) -> Dict[str, int]:
        return {n: self.sim_admin(n, "GET", "/_sim/state")[1]["pods"] for n in self.sims}

    def wait_pool(self, token: str, name: str, timeout: float = 120) -> bool:
        def ready() -> bool:
            st, b = self.raw("GET", "/v1/pools/" + name, token=token)
            return st == 200 and bool(b.get("clusters")) and all(c["ready"] >= c["target"] for c in b["clusters"])
        return bool(wait_until(ready, timeout, 0.2))

    def router_pid(self) -> int:
        assert self.router is not None
        return self.router.pid

    def stop(self) -> List[str]:
        """Stops the router then the clusters; returns problems (exit codes)."""
        problems = []
        for p in reversed(self.procs):
            rc = _stop(p)
            if rc not in (0,):
                problems.append(f"{p.args[0]} exited {rc} on SIGTERM")
        self.procs = []
        if os.environ.get("FR_SDK_KEEP"):
            print("kept", self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        return problems
