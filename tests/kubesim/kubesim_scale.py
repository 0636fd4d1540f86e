#!/usr/bin/env python3
"""kubesim at cluster scale: 50,000 pods in one instance.

Creates a ReplicaSet of N pods (default 50000) on a cluster sized for them,
with three watchers attached from the start, then checks that
  - every pod reaches Running and the ReplicaSet reports them ready;
  - a paginated list (limit=500) returns each pod exactly once, with one
    resourceVersion across all pages;
  - every watcher saw every pod ADDED and Running, in resourceVersion order;
  - a watch from a resourceVersion older than the history window gets 410;
  - scaling to 0 removes every pod and the watchers see them DELETED;
and prints the resident memory per pod (recorded in docs/kubesim.md).
Runs kubesim with --event-limit 0: this measures the API's scale (lists,
watches, memory per pod); Events are checked by kubectl_workloads, and
their cost at this size is in docs/kubesim.md. Talks only to 127.0.0.1.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

KUBESIM = sys.argv[1]
EVENT = re.compile(rb'\{"type":"(ADDED|MODIFIED|DELETED)","object":')
RV = re.compile(rb'"resourceVersion":"(\d+)"')
# Generated pod names are "scale-" plus five characters; the owner
# reference's name is plain "scale".
NAME = re.compile(rb'"name":"(scale-[a-z0-9]{5})"')
N = int(os.environ.get("KUBESIM_SCALE_PODS", "50000"))
NODES = (N + 109) // 110 + 1


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def get(port, path, timeout=60):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return json.load(r)


def send(port, method, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": body_type(method)})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def body_type(method):
    return "application/merge-patch+json" if method == "PATCH" else "application/json"


def wait_for(cond, secs, what):
    """Polls <cond> until true; fails with <what> after <secs> seconds."""
    deadline = time.time() + secs
    while not cond():
        if time.time() > deadline:
            fail(f"{what} (waited {secs} s)")
        time.sleep(0.1)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Watcher(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.added = set()
        self.running = set()
        self.deleted = set()
        self.last_rv = 0
        self.order_ok = True
        self.resp = None

    def run(self):
        self.resp = urllib.request.urlopen(
            f"http://127.0.0.1:{self.port}/api/v1/namespaces/default/pods"
            "?watch=true&resourceVersion=1&labelSelector=pool%3Dscale", timeout=300)
        # 450,000 events over three watchers: pick fields with regular
        # expressions rather than parsing every line as JSON.
        for line in self.resp:
            m = EVENT.match(line)
            if m is None:
                self.order_ok = False
                continue
            rv = int(RV.search(line).group(1))
            if rv <= self.last_rv:
                self.order_ok = False
            self.last_rv = rv
            name = NAME.search(line).group(1)
            if m.group(1) == b"ADDED":
                self.added.add(name)
            elif m.group(1) == b"DELETED":
                self.deleted.add(name)
            if b'"phase":"Running"' in line:
                self.running.add(name)


def main():
    tmp = tempfile.mkdtemp(prefix="kubesim-scale-")
    port_file = os.path.join(tmp, "port")
    proc = subprocess.Popen([KUBESIM, "--port-file", port_file, "--name", "scale",
                             "--nodes", str(NODES), "--node-pods", "110", "--node-cpu", "64",
                             "--node-memory", "256Gi", "--workdir", os.path.join(tmp, "wd"),
                             "--history", "20000", "--event-limit", "0", "--log-level", "warn"])
    try:
        for _ in range(200):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        else:
            fail("kubesim did not start")
        port = int(open(port_file).read())
        base_rss = rss_kib(proc.pid)
        watchers = [Watcher(port) for _ in range(3)]
        for w in watchers:
            w.start()
        # The watches start at resourceVersion 1: open before the first
        # event, so that none falls out of the 20000-event history.
        wait_for(lambda: get(port, "/_sim/state")["watchers"] >= 3, 60, "the 3 watches did not open")
        t0 = time.time()
        send(port, "POST", "/apis/apps/v1/namespaces/default/replicasets", {
            "metadata": {"name": "scale"},
            "spec": {"replicas": N, "selector": {"matchLabels": {"pool": "scale"}},
                     "template": {"metadata": {"labels": {"pool": "scale", "fedrouter.io/sandbox": "true"}},
                                  "spec": {"containers": [{"name": "sandbox", "image": "python:3.12",
                                                           "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                                                         "limits": {"cpu": "250m", "memory": "512Mi"}}}]}}}})
        # As below for the scale to 0: a poll may wait for what is left of
        # the deadline (kubesim answered nothing for over 60 s while making
        # 50,000 pods at load 9-16 on 2 cores).
        deadline = time.time() + 240
        st = {}
        while time.time() < deadline:
            try:
                st = get(port, "/apis/apps/v1/namespaces/default/replicasets/scale",
                         timeout=max(1.0, deadline - time.time()))["status"]
            except OSError:   # the timeout at the deadline: fails below
                if proc.poll() is not None:
                    fail(f"kubesim exited ({proc.returncode}) while making the pods")
                time.sleep(0.5)
                continue
            if st.get("readyReplicas") == N:
                break
            time.sleep(0.5)
        else:
            fail(f"ReplicaSet did not become ready in 240 s: {st}")
        ready_s = time.time() - t0
        rss = rss_kib(proc.pid)

        # Paginated list: every pod exactly once, one RV for all pages.
        names, rvs, cont, pages = [], set(), "", 0
        while True:
            page = get(port, "/api/v1/namespaces/default/pods?limit=500&labelSelector=pool%3Dscale"
                       + ("&continue=" + cont if cont else ""))
            pages += 1
            rvs.add(page["metadata"]["resourceVersion"])
            names += [p["metadata"]["name"] for p in page["items"]]
            if any(p["status"]["phase"] != "Running" for p in page["items"]):
                fail("a listed pod is not Running")
            cont = page["metadata"].get("continue", "")
            if not cont:
                break
        if len(names) != N or len(set(names)) != N:
            fail(f"paginated list returned {len(names)} items, {len(set(names))} unique, want {N}")
        if len(rvs) != 1:
            fail(f"list resourceVersion changed across pages: {rvs}")
        if pages != (N + 499) // 500:
            fail(f"{pages} pages for {N} pods with limit=500")

        # Watchers saw everything, in order (they may still be reading).
        wait_for(lambda: all(len(w.added) == N and len(w.running) == N for w in watchers) or
                 not all(w.order_ok for w in watchers), 120,
                 "the watchers did not see every pod ADDED and Running: " +
                 ", ".join(f"{len(w.added)}/{len(w.running)}" for w in watchers))
        for i, w in enumerate(watchers):
            if len(w.added) != N or len(w.running) != N or not w.order_ok:
                fail(f"watcher {i}: added={len(w.added)} running={len(w.running)} ordered={w.order_ok}")

        # An old resourceVersion is outside the 20000-event window: 410.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/namespaces/default/pods"
                                    "?watch=true&resourceVersion=2&timeoutSeconds=5", timeout=30) as r:
            ev = json.loads(r.readline())
            if ev["type"] != "ERROR" or ev["object"]["code"] != 410 or ev["object"]["reason"] != "Expired":
                fail(f"old resourceVersion gave {ev}")

        # Scale to zero: every pod goes, watchers see DELETED.
        # kubesim may answer nothing for a while as it deletes them all (over
        # 60 s on a 2-core machine at load 9): each poll may take what is
        # left of the deadline, not a fixed 60 s.
        send(port, "PATCH", "/apis/apps/v1/namespaces/default/replicasets/scale", {"spec": {"replicas": 0}})
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                if get(port, "/_sim/state", timeout=max(1.0, deadline - time.time()))["pods"] == 0:
                    break
            except OSError:   # the timeout at the deadline: fails below
                if proc.poll() is not None:
                    fail(f"kubesim exited ({proc.returncode}) while deleting the pods")
            time.sleep(0.5)
        else:
            fail("pods remain 240 s after scaling to 0")
        wait_for(lambda: all(len(w.deleted) == N for w in watchers), 120,
                 "the watchers did not see every pod DELETED")
        for i, w in enumerate(watchers):
            if len(w.deleted) != N:
                fail(f"watcher {i} saw {len(w.deleted)} deletions, want {N}")
        per_pod = (rss - base_rss) * 1024 / N
        print(f"{N} pods Running in {ready_s:.1f}s; RSS {rss // 1024} MiB "
              f"({per_pod:.0f} bytes per pod incl. a 20000-event watch history and 3 watchers)")
        print("1 passed, 0 failed")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("kubesim did not exit on SIGTERM")
        shutil.rmtree(tmp, ignore_errors=True)
        if rc != 0:
            fail(f"kubesim exited with {rc}")


main()
