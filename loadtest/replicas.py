#!/usr/bin/env python3
"""loadtest/replicas.py - three fedrouter replicas behind HAProxy are one
service: rolling restarts fail nothing, kill -9 loses only what was on the
killed replica, nothing is left hidden in the clusters, and concurrent
bursts through every replica against nearly full clusters, measured.

Starts two kubesim clusters (c1 with a ResourceQuota as large as its nodes,
c2 with none), three routers on loopback with the same config (tenants "a"
and "b", an admin "ops" that makes a shared warm pool in both clusters),
and HAProxy in front with deploy/haproxy/haproxy.cfg (its addresses and
global maxconn replaced, everything else as shipped). Client threads of both tenants run
create -> exec -> terminate cycles on keep-alive connections through
HAProxy, never retrying, and every request is recorded. Phases:

  a  rolling restart: each router in turn gets SIGTERM (it fails /readyz
     for shutdown_delay_ms, then drains and exits 0) and is started again
     on the same port; the next one goes when HAProxy has it UP again.
     Failed requests: target 0.
  b  kill -9 of one replica mid-load, then it is started again. Failures
     are split: on the killed replica (HAProxy's X-Fedrouter-Replica) and
     in flight when it died, versus everything else (target 0).
     Then the load stops and the sweep: every sandbox a client was told
     about is terminated by it or visible through the API (all three
     replicas list the same); pods in the clusters (kubectl) that no
     replica shows are leaked.
  c  bursts: both clusters filled to a few free slots, then concurrent
     creates through all three replicas at once for twice the room; the
     Pending-unschedulable pods (kubesim's count, sampled) are the
     over-commit the clusters had to refuse.

Usage: replicas.py --build-dir DIR [--smoke] [--json-out FILE] [--keep]
Prints a short summary and writes the JSON report. Exit 0 when phase a had
no failure, phase b's failures were all on the killed replica and in
flight on it, and no sandbox a client was told about is hidden; 1
otherwise; 77 when haproxy is not installed. Python 3 standard library
only; loopback only; stops everything it started.
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

T_START = time.monotonic()  # report times are seconds since the start
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENS = {"a": "ta-" + os.urandom(8).hex(), "b": "tb-" + os.urandom(8).hex(),
          "ops": "tops-" + os.urandom(8).hex()}
SIM_TOKEN = "sim-" + os.urandom(8).hex()
RUN = "r" + os.urandom(4).hex()
PROCS = []
IMAGE = "python:3.12"


def die(msg):
    print(f"replicas.py: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(fn, timeout, interval=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if fn():
            return True
        time.sleep(interval)
    return fn()


def start(argv, log):
    with open(log, "ab") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    PROCS.append(p)
    return p


def stop(p, timeout=30):
    """SIGTERM, wait; SIGKILL after <timeout>. The exit code (None: killed)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except OSError:
            pass
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait(10)
        return None


def wait_exit(p, timeout):
    """The exit code of a process already signalled (None: SIGKILLed
    after <timeout>; a second SIGTERM would cut the router's drain)."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        return stop(p, 1)


def call(port, method, path, body=None, token=None, timeout=60):
    """One request on a fresh connection: (status, parsed body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        if token:
            h["Authorization"] = "Bearer " + token
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw.decode(errors="replace")
    finally:
        c.close()


# --------------------------------------------------------------------------
# the federation

class Sim:
    def __init__(self, root, name, nodes, node_pods, quota):
        self.name = name
        self.kubeconfig = os.path.join(root, f"{name}.kubeconfig")
        pf, apf = os.path.join(root, f"{name}.port"), os.path.join(root, f"{name}.admin")
        argv = [os.path.join(ARGS.build_dir, "kubesim"), "--name", name, "--tls", "--token", SIM_TOKEN,
                "--write-kubeconfig", self.kubeconfig, "--port-file", pf, "--admin-listen", "127.0.0.1:0",
                "--admin-port-file", apf, "--nodes", str(nodes), "--node-pods", str(node_pods),
                "--node-cpu", "256", "--node-memory", "1024Gi", "--fast-exec", "--event-limit", "0", "--schedule-ms", "10",
                "--start-ms", "50", "--workdir", os.path.join(root, f"{name}.wd"), "--log-level", "warn"]
        if quota:
            argv += ["--namespace-quota", f"pods={nodes * node_pods}"]
        self.capacity = nodes * node_pods
        self.proc = start(argv, os.path.join(root, f"{name}.log"))
        if not wait_until(lambda: os.path.exists(pf) and os.path.getsize(pf) > 0 and os.path.exists(apf), 20):
            die(f"kubesim {name} did not start")
        self.admin_port = int(open(apf).read())

    def state(self):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=10)
        try:
            c.request("GET", "/_sim/state", headers={"Authorization": "Bearer " + SIM_TOKEN})
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def pods(self):
        """Every pod of the namespace, through kubectl."""
        out = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "get", "pods", "-n", "default",
                              "-o", "json"], capture_output=True, timeout=60)
        if out.returncode != 0:
            die(f"kubectl get pods on {self.name}: {out.stderr.decode(errors='replace')[-500:]}")
        return json.loads(out.stdout)["items"]


class Router:
    def __init__(self, root, i, port, sims):
        self.name = f"r{i + 1}"
        self.port = port
        self.config = os.path.join(root, f"fedrouter-{self.name}.conf")
        self.log = os.path.join(root, f"fedrouter-{self.name}.log")
        sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
        cl = ",\n".join(f'  {{ name = "{s.name}"; region = "us"; kubeconfig = "{s.kubeconfig}"; }}' for s in sims)
        with open(self.config, "w") as f:
            f.write(f'listen = "127.0.0.1:{port}";\nregion = "us";\n'
                    f'sandbox = {{ default_lifetime_s = 900; max_lifetime_s = 3600; }};\n'
                    f'tenants = (\n'
                    f'  {{ name = "a"; token_sha256 = "{sha(TOKENS["a"])}"; }},\n'
                    f'  {{ name = "b"; token_sha256 = "{sha(TOKENS["b"])}"; }},\n'
                    f'  {{ name = "ops"; token_sha256 = "{sha(TOKENS["ops"])}"; admin = true; }}\n);\n'
                    f'clusters = (\n{cl}\n);\n')
        self.proc = None
        self.exits = []

    def start(self):
        self.proc = start([os.path.join(ARGS.build_dir, "fedrouter"), "--config", self.config,
                           "--log-level", "warn"], self.log)

    def ready(self):
        try:
            return call(self.port, "GET", "/readyz", timeout=5)[0] == 200
        except OSError:
            return False


class HAProxy:
    def __init__(self, root, port, stats_port, routers):
        with open(os.path.join(ROOT, "deploy/haproxy/haproxy.cfg")) as f:
            cfg = f.read()
        cfg, n = re.subn(r"(?m)^(\s*)bind 127\.0\.0\.1:8080\s*$", rf"\1bind 127.0.0.1:{port}", cfg)
        if n != 1:
            die("deploy/haproxy/haproxy.cfg: no `bind 127.0.0.1:8080` line to replace")
        cfg = re.sub(r"(?m)^\s*server r\d .*\n", "", cfg)
        # The example's global maxconn wants 2 x 20000 descriptors; a test
        # machine's limit may be lower, and a few hundred connections do.
        cfg = re.sub(r"(?m)^(\s*)maxconn 20000\s*$", r"\1maxconn 2000", cfg)
        # Every request's log line (termination state) into haproxy.log.
        cfg = cfg.replace("local0 notice", "local0 info")
        cfg = cfg.rstrip("\n") + "\n" + "".join(f"    server {r.name} 127.0.0.1:{r.port}\n" for r in routers)
        cfg += (f"\nfrontend stats\n    bind 127.0.0.1:{stats_port}\n    stats enable\n"
                f"    stats uri /stats\n")
        self.config = os.path.join(root, "haproxy.cfg")
        with open(self.config, "w") as f:
            f.write(cfg)
        self.port, self.stats_port = port, stats_port
        chk = subprocess.run([HAPROXY, "-c", "-f", self.config], capture_output=True, text=True)
        if chk.returncode != 0:
            die(f"haproxy -c: {chk.stdout}{chk.stderr}")
        self.proc = start([HAPROXY, "-db", "-f", self.config], os.path.join(root, "haproxy.log"))

    def status(self):
        """{server name: "UP"/"DOWN"/...} of the routers backend."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.stats_port, timeout=5)
            c.request("GET", "/stats;csv")
            text = c.getresponse().read().decode()
            c.close()
        except OSError:
            return {}
        lines = text.splitlines()
        head = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            if row.get("pxname") == "routers" and row.get("svname") not in ("FRONTEND", "BACKEND"):
                out[row["svname"]] = row.get("status", "")
        return out


# --------------------------------------------------------------------------
# load

class Recorder:
    def __init__(self):
        self.reqs = []
        self.lock = threading.Lock()
        self.told = set()        # ids clients got from creates
        self.terminated = set()  # ids clients terminated (200, or 404: already gone)

    def add(self, rec):
        with self.lock:
            self.reqs.append(rec)


class Worker(threading.Thread):
    """create -> exec -> terminate through HAProxy on one keep-alive
    connection (a new one after an error); never retries."""

    def __init__(self, rec, lb_port, tenant, idx, stop_ev):
        super().__init__(daemon=True)
        self.rec, self.lb_port, self.tenant, self.idx, self.stop_ev = rec, lb_port, tenant, idx, stop_ev
        self.conn = None
        self.cycles = 0

    def req(self, kind, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.lb_port, timeout=60)
        t0 = time.monotonic()
        rec = {"t0": t0, "kind": kind, "tenant": self.tenant, "status": 0, "replica": None, "error": None}
        try:
            self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                              headers={"Authorization": "Bearer " + TOKENS[self.tenant],
                                       "Content-Type": "application/json"})
            r = self.conn.getresponse()
            raw = r.read()
            rec["status"] = r.status
            rec["replica"] = r.getheader("X-Fedrouter-Replica")
            if (r.getheader("Connection") or "").lower() == "close":
                self.conn.close()
                self.conn = None
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = None
        except (OSError, http.client.HTTPException) as e:
            rec["error"] = f"{type(e).__name__}: {e}"
            parsed = None
            if self.conn is not None:
                self.conn.close()
            self.conn = None
        rec["t1"] = time.monotonic()
        if rec["status"] >= 300 and isinstance(parsed, dict):
            rec["error"] = (parsed.get("error") or {}).get("code")
        return rec, parsed

    def run(self):
        while not self.stop_ev.is_set():
            self.cycles += 1
            rec, body = self.req("create", "POST", "/v1/sandboxes",
                                 {"pool": "warm", "name": f"{self.tenant}-w{self.idx}", "labels": {"run": RUN},
                                  "timeout_s": 900})
            rec["ok"] = rec["status"] == 201
            sid = None
            if rec["ok"]:
                try:
                    sid = body["sandboxes"][0]["id"]
                    with self.rec.lock:
                        self.rec.told.add(sid)
                except (KeyError, IndexError, TypeError):
                    rec["ok"], rec["error"] = False, "create answer without a sandbox"
            self.rec.add(rec)
            if sid is None:
                time.sleep(0.05)
                continue
            word = f"{self.tenant}{self.idx}x{self.cycles}"
            rec, body = self.req("exec", "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["echo", word]})
            rec["ok"] = rec["status"] == 200 and isinstance(body, dict) and body.get("stdout") == word + "\n" \
                and body.get("exit_code") == 0
            if rec["status"] == 200 and not rec["ok"]:
                rec["error"] = f"wrong exec answer {str(body)[:200]}"
            self.rec.add(rec)
            rec, body = self.req("terminate", "DELETE", f"/v1/sandboxes/{sid}")
            rec["ok"] = rec["status"] in (200, 404)
            if rec["ok"]:
                with self.rec.lock:
                    self.rec.terminated.add(sid)
            self.rec.add(rec)
        if self.conn is not None:
            self.conn.close()


def summarize(reqs):
    out = {"requests": len(reqs), "failed": 0, "by_kind": {}, "failures": []}
    for r in reqs:
        k = out["by_kind"].setdefault(r["kind"], {"ok": 0, "failed": 0})
        if r["ok"]:
            k["ok"] += 1
        else:
            k["failed"] += 1
            out["failed"] += 1
            if len(out["failures"]) < 20:
                out["failures"].append(failure(r))
    return out


def failure(r):
    """A failed request as the report shows it."""
    f = {x: r.get(x) for x in ("kind", "status", "error", "replica")}
    f["t0"], f["t1"] = round(r["t0"] - T_START, 3), round(r["t1"] - T_START, 3)
    return f


def in_window(reqs, t0, t1):
    return [r for r in reqs if t0 <= r["t0"] < t1]


# --------------------------------------------------------------------------
# phases

def wait_up(lb, names, timeout=40):
    return wait_until(lambda: all(lb.status().get(n) == "UP" for n in names), timeout, 0.1)


def phase_rolling(routers, lb, report):
    steps = []
    for r in routers:
        t0 = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        at = round(t0 - T_START, 3)
        down = wait_until(lambda: lb.status().get(r.name, "").startswith("DOWN"), 10, 0.02)
        t_down = time.monotonic() - t0
        try:
            rc = r.proc.wait(45)
        except subprocess.TimeoutExpired:
            rc = None
        t_exit = time.monotonic() - t0
        r.exits.append(rc)
        r.start()
        ready = wait_until(r.ready, 30, 0.05)
        up = wait_up(lb, [x.name for x in routers])
        steps.append({"router": r.name, "sigterm_at": at, "exit_code": rc, "haproxy_down_after_s": round(t_down, 2) if down else None,
                      "exited_after_s": round(t_exit, 2), "ready": ready, "back_up_after_s": round(time.monotonic() - t0, 2)
                      if up else None})
        if rc != 0 or not up:
            report["problems"].append(f"rolling restart of {r.name}: exit {rc}, back up {up}")
        time.sleep(0.3)
    report["phase_a_steps"] = steps


def phase_kill(routers, lb, report, victim):
    # SIGKILL is delivered asynchronously: the process died somewhere
    # between kill() and the end of wait(), and a request that reached it
    # in that window was in flight on it.
    t_before = time.monotonic()
    victim.proc.kill()
    victim.proc.wait(10)
    t_kill = (t_before, time.monotonic())
    report["phase_b_kill_at"] = round(t_before - T_START, 4)
    report["phase_b_kill_window_ms"] = round((t_kill[1] - t_kill[0]) * 1000, 2)
    down = wait_until(lambda: lb.status().get(victim.name, "").startswith("DOWN"), 10, 0.02)
    report["phase_b_haproxy_down_after_s"] = round(time.monotonic() - t_before, 2) if down else None
    time.sleep(ARGS_PHASE["kill_hold_s"])
    victim.start()
    wait_until(victim.ready, 30, 0.05)
    if not wait_up(lb, [x.name for x in routers]):
        report["problems"].append(f"{victim.name} not UP again after its restart")
    return t_kill


def classify_kill(reqs, t_kill, victim):
    """Failures on the killed replica and in flight at the kill, versus the
    rest; and how many requests were in flight on it. HAProxy closes the
    client's connection without an answer when the replica dies under a
    request (so the request carries no X-Fedrouter-Replica): a failure
    without one that was in flight at the kill is counted as the killed
    replica's."""
    def spanning(r):
        return r["t0"] <= t_kill[1] and r["t1"] >= t_kill[0]
    out = {"inflight_at_kill_all_replicas": sum(1 for r in reqs if spanning(r)),
           "inflight_on_killed": 0, "failed_inflight_on_killed": 0, "failed_on_killed_after_kill": 0,
           "failed_elsewhere": 0, "failures_elsewhere": []}
    for r in reqs:
        spans = spanning(r)
        on_victim = r["replica"] == victim or (r["replica"] is None and spans and not r["ok"])
        if spans and on_victim:
            out["inflight_on_killed"] += 1
        if r["ok"]:
            continue
        if on_victim and spans:
            out["failed_inflight_on_killed"] += 1
        elif on_victim:
            out["failed_on_killed_after_kill"] += 1
        else:
            out["failed_elsewhere"] += 1
            if len(out["failures_elsewhere"]) < 20:
                out["failures_elsewhere"].append(failure(r))
    return out


def list_ids(port, tenant):
    st, body = call(port, "GET", "/v1/sandboxes?label=" + urllib.parse.quote(f"run={RUN}"), token=TOKENS[tenant])
    if st != 200 or not isinstance(body, dict):
        return None, f"{st} {str(body)[:200]}"
    return {s["id"] for s in body["sandboxes"]}, body.get("not_synced")


def sweep(routers, sims, rec, report):
    visible = None
    views = {}
    for r in routers:
        ids = set()
        for t in ("a", "b"):
            got, ns = list_ids(r.port, t)
            if got is None or ns:
                report["problems"].append(f"sweep: {r.name} list of {t}: {ns}")
                got = got or set()
            ids |= got
        views[r.name] = ids
        visible = ids if visible is None else visible
    same = all(v == visible for v in views.values())
    told_open = rec.told - rec.terminated
    hidden = sorted(told_open - visible)
    untold = sorted(visible - rec.told)
    leaked, warm, claimed_ok, gone = [], 0, 0, 0
    for s in sims:
        for p in s.pods():
            md = p["metadata"]
            labels = md.get("labels") or {}
            sid = f"{s.name}.{md['name']}"
            if md.get("deletionTimestamp") or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                gone += 1
            elif labels.get("fedrouter.io/state") == "warm":
                warm += 1
            elif sid in visible:
                claimed_ok += 1
            else:
                leaked.append({"id": sid, "labels": labels, "phase": p.get("status", {}).get("phase")})
    report["sweep"] = {"told": len(rec.told), "terminated_by_clients": len(rec.terminated & rec.told),
                       "told_and_open": len(told_open), "visible": len(visible), "replicas_agree": same,
                       "hidden": len(hidden), "hidden_ids": hidden[:20],
                       "visible_never_told": len(untold), "visible_never_told_ids": untold[:20],
                       "pods_warm": warm, "pods_visible": claimed_ok, "pods_finished_or_terminating": gone,
                       "pods_leaked": len(leaked), "pods_leaked_detail": leaked[:20]}
    if not same:
        report["problems"].append("sweep: the replicas list different sandboxes: " +
                                  str({k: len(v) for k, v in views.items()}))
    # Clean up everything of this run (the phase c clusters start empty).
    for t in ("a", "b"):
        call(routers[0].port, "DELETE", "/v1/sandboxes?label=" + urllib.parse.quote(f"run={RUN}"),
             token=TOKENS[t], timeout=120)


def phase_burst(routers, sims, report):
    """Fill both clusters to a few free slots, then creates through all
    three replicas at once for twice the room left."""
    room_each = ARGS_PHASE["burst_room"]
    for s in sims:
        used = s.state()["pods"]
        n = s.capacity - used - room_each
        made = 0
        while made < n:
            k = min(50, n - made)
            st, body = call(routers[0].port, "POST", "/v1/sandboxes",
                            {"image": IMAGE, "num_sandboxes": k, "name": f"fill-{s.name}", "clusters": [s.name],
                             "labels": {"run": RUN, "fill": "1"}}, token=TOKENS["a"], timeout=120)
            if st != 201:
                report["problems"].append(f"burst fill of {s.name}: {st} {str(body)[:300]}")
                return
            made += k
    time.sleep(0.5)  # every replica's watch sees the fill
    room = sum(s.capacity - s.state()["pods"] for s in sims)
    demand = 2 * room
    per_router = (demand + len(routers) - 1) // len(routers)
    results, lock = [], threading.Lock()
    unsched_max = {s.name: 0 for s in sims}
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            for s in sims:
                try:
                    unsched_max[s.name] = max(unsched_max[s.name], s.state()["unschedulable"])
                except OSError:
                    pass
            sampling.wait(0.02)

    def one(r, i):
        try:
            st, body = call(r.port, "POST", "/v1/sandboxes",
                            {"image": IMAGE, "name": f"burst-{r.name}-{i}", "labels": {"run": RUN, "burst": "1"}},
                            token=TOKENS["b"], timeout=120)
            code = (body.get("error") or {}).get("code") if isinstance(body, dict) and st >= 300 else None
            where = body["sandboxes"][0]["cluster"] if st == 201 else None
        except OSError as e:
            st, code, where = 0, type(e).__name__, None
        with lock:
            results.append((st, code, where))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=one, args=(r, i)) for r in routers for i in range(per_router)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    took = time.monotonic() - t0
    time.sleep(1.0)
    sampling.set()
    sampler.join(5)
    final = {s.name: s.state()["unschedulable"] for s in sims}
    statuses = {}
    for st, code, _ in results:
        key = f"{st} {code}" if code else str(st)
        statuses[key] = statuses.get(key, 0) + 1
    created = sum(1 for st, _, _ in results if st == 201)
    by_cluster = {}
    for st, _, where in results:
        if where:
            by_cluster[where] = by_cluster.get(where, 0) + 1
    report["phase_c"] = {"room": room, "demand": len(results), "created": created, "answers": statuses,
                         "created_by_cluster": by_cluster, "seconds": round(took, 2),
                         "unschedulable_max": unsched_max, "unschedulable_after": final,
                         "quota": {s.name: s.name == "c1" for s in sims}}
    for t in ("a", "b"):
        call(routers[0].port, "DELETE", "/v1/sandboxes?label=" + urllib.parse.quote(f"run={RUN}"),
             token=TOKENS[t], timeout=120)


# --------------------------------------------------------------------------

def main():
    global ARGS, ARGS_PHASE, HAPROXY
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--smoke", action="store_true", help="the short version (ctest replicas_haproxy)")
    ap.add_argument("--json-out")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    ARGS = ap.parse_args()
    HAPROXY = shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy") and "/usr/sbin/haproxy")
    if not HAPROXY:
        print("replicas.py: SKIP: haproxy is not installed (apt-get install haproxy; "
              "scripts/lib/packages.sh lists it)", flush=True)
        return 77
    if ARGS.smoke:
        ARGS_PHASE = {"workers": 3, "warm": 2, "nodes": 2, "node_pods": 20, "steady_s": 2, "kill_hold_s": 1.5,
                      "after_s": 1.5, "burst_room": 4}
    else:
        ARGS_PHASE = {"workers": 8, "warm": 5, "nodes": 4, "node_pods": 50, "steady_s": 10, "kill_hold_s": 5,
                      "after_s": 5, "burst_room": 15}
    root = tempfile.mkdtemp(prefix="fr-replicas-")
    report = {"scenario": "replicas", "smoke": ARGS.smoke, "params": ARGS_PHASE, "problems": []}
    t_all = time.monotonic()
    stop_ev = threading.Event()
    workers = []
    rc = 1
    try:
        sims = [Sim(root, "c1", ARGS_PHASE["nodes"], ARGS_PHASE["node_pods"], True),
                Sim(root, "c2", ARGS_PHASE["nodes"], ARGS_PHASE["node_pods"], False)]
        routers = [Router(root, i, free_port(), sims) for i in range(3)]
        for r in routers:
            r.start()
        for r in routers:
            if not wait_until(r.ready, 30):
                die(f"{r.name} not ready in 30 s; see {r.log}")
        lb = HAProxy(root, free_port(), free_port(), routers)
        if not wait_up(lb, [r.name for r in routers]):
            die(f"HAProxy does not have every router UP: {lb.status()}")
        st, body = call(lb.port, "POST", "/v1/pools", {"name": "warm", "image": IMAGE, "cpus": 1, "memory_gb": 2,
                                                         "replicas": ARGS_PHASE["warm"], "shared": True},
                        token=TOKENS["ops"])
        if st != 201:
            die(f"pool create: {st} {body}")

        def pool_ready():
            st, b = call(lb.port, "GET", "/v1/pools/warm", token=TOKENS["a"])
            return st == 200 and all(c.get("ready", 0) >= ARGS_PHASE["warm"] for c in b.get("clusters", [])) \
                and len(b.get("clusters", [])) == 2
        if not wait_until(pool_ready, 30, 0.2):
            die("the warm pool is not ready in 30 s")
        report["setup_s"] = round(time.monotonic() - t_all, 1)

        rec = Recorder()
        for t in ("a", "b"):
            for i in range(ARGS_PHASE["workers"]):
                workers.append(Worker(rec, lb.port, t, i, stop_ev))
        for w in workers:
            w.start()
        time.sleep(ARGS_PHASE["steady_s"])
        t_a = time.monotonic()
        phase_rolling(routers, lb, report)
        time.sleep(ARGS_PHASE["after_s"])
        t_b = time.monotonic()
        victim = routers[1]
        t_kill = phase_kill(routers, lb, report, victim)
        time.sleep(ARGS_PHASE["after_s"])
        stop_ev.set()
        for w in workers:
            w.join(90)
        t_end = time.monotonic()
        reqs = rec.reqs
        report["steady"] = summarize(in_window(reqs, 0, t_a))
        # Phase a: what started after the first SIGTERM and ended before the
        # kill; phase b: everything after, and what the kill caught in flight.
        phase_a = [r for r in in_window(reqs, t_a, t_b) if r["t1"] < t_kill[0]]
        phase_b = [r for r in in_window(reqs, t_a, t_end) if r["t0"] >= t_b or r["t1"] >= t_kill[0]]
        report["phase_a"] = summarize(phase_a)
        report["phase_a"]["seconds"] = round(t_b - t_a, 1)
        report["phase_b"] = summarize(phase_b)
        report["phase_b"].update(classify_kill(phase_b, t_kill, victim.name))
        report["phase_b"]["killed"] = victim.name
        report["cycles"] = sum(w.cycles for w in workers)
        report["requests_per_s"] = round(len(reqs) / max(t_end - min((r["t0"] for r in reqs), default=t_end), 0.001), 1)
        sweep(routers, sims, rec, report)
        phase_burst(routers, sims, report)
        # Every router stops cleanly (in parallel: each waits its delay).
        for r in routers:
            r.proc.send_signal(signal.SIGTERM)
        report["router_exit_codes"] = {r.name: r.exits + [wait_exit(r.proc, 45)] for r in routers}
        for name, codes in report["router_exit_codes"].items():
            if any(c != 0 for c in codes[:1]) or codes[-1] != 0:
                report["problems"].append(f"{name} exit codes {codes}")
        a, b, sw = report["phase_a"], report["phase_b"], report["sweep"]
        ok = (a["failed"] == 0 and b["failed_elsewhere"] == 0 and
              b["failed_inflight_on_killed"] + b["failed_on_killed_after_kill"] <= b["inflight_on_killed"] and
              b["failed_on_killed_after_kill"] == 0 and sw["hidden"] == 0 and not report["problems"])
        report["passed"] = ok
        report["seconds"] = round(time.monotonic() - t_all, 1)
        rc = 0 if ok else 1
    finally:
        stop_ev.set()
        for p in reversed(PROCS):
            stop(p, 45)
        if ARGS.keep:
            print(f"replicas.py: logs in {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_summary(report)
    if ARGS.json_out:
        with open(ARGS.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return rc


def print_summary(rep):
    a, b, sw, c = rep.get("phase_a", {}), rep.get("phase_b", {}), rep.get("sweep", {}), rep.get("phase_c", {})
    print(f"replicas: 3 routers behind HAProxy, 2 clusters; {rep.get('cycles', 0)} create->exec->terminate cycles, "
          f"{rep.get('requests_per_s', 0)} requests/s")
    print(f"  steady        {rep.get('steady', {}).get('requests', 0)} requests, "
          f"{rep.get('steady', {}).get('failed', 0)} failed")
    print(f"  a rolling     {a.get('requests', 0)} requests in {a.get('seconds', 0)} s, {a.get('failed', 0)} failed "
          f"(target 0)")
    for s in rep.get("phase_a_steps", []):
        print(f"      {s['router']}: HAProxy DOWN after {s['haproxy_down_after_s']} s, exited {s['exit_code']} after "
              f"{s['exited_after_s']} s, UP again after {s['back_up_after_s']} s")
    print(f"  b kill -9 {b.get('killed')}  {b.get('requests', 0)} requests, {b.get('failed', 0)} failed: "
          f"{b.get('failed_inflight_on_killed', 0)} in flight on it ({b.get('inflight_at_kill_all_replicas', 0)} in flight "
          f"on all replicas), "
          f"{b.get('failed_on_killed_after_kill', 0)} sent to it after, {b.get('failed_elsewhere', 0)} elsewhere "
          f"(target 0); HAProxy DOWN after {rep.get('phase_b_haproxy_down_after_s')} s")
    print(f"    sweep       told {sw.get('told', 0)}, open {sw.get('told_and_open', 0)}, hidden {sw.get('hidden', 0)} "
          f"(target 0), visible but never told {sw.get('visible_never_told', 0)}, leaked pods "
          f"{sw.get('pods_leaked', 0)}, replicas agree {sw.get('replicas_agree')}")
    if c:
        print(f"  c bursts      room {c['room']}, demand {c['demand']}, created {c['created']}, answers {c['answers']}, "
              f"Pending-unschedulable max {c['unschedulable_max']} after {c['unschedulable_after']} "
              f"(c1 has a quota, c2 none)")
    for p in rep.get("problems", []):
        print(f"  PROBLEM {p}")
    print(f"  {'PASSED' if rep.get('passed') else 'FAILED'} in {rep.get('seconds')} s")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    finally:
        for p in PROCS:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
