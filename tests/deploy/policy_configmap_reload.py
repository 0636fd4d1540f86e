#!/usr/bin/env python3
"""policy_configmap_reload.py - a running fedrouter sees a policy update
delivered the way the kubelet updates a mounted ConfigMap, which is how
deploy/router reloads the policy without a restart.

The kubelet never rewrites a ConfigMap volume's files in place: it writes
the new keys into a fresh timestamped folder, points a temporary symlink at
it, renames that over `..data` (atomic), and removes the old folder; the
visible `policy.conf` is a symlink to `..data/policy.conf` throughout. The
router config names the visible path, and the router polls it with stat,
which follows the symlinks.

Steps, against one kubesim:
  1. the router starts with policy A from such a volume;
  2. an atomic-writer swap to policy B: GET /v1/policy shows B's version
     (the SHA-256 of its bytes) within 10 s, reloads + 1, no error;
  3. a swap to a broken policy: rejected with file:line in
     last_reload_error, B keeps serving;
  4. a swap back to a good policy C: loaded, the error cleared.

Usage: policy_configmap_reload.py PATH/TO/fedrouter PATH/TO/kubesim
Loopback only; every process stopped and temp files removed on every path.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

TOKEN = "cm-reload-token"
FAILS = []

POLICY_A = 'split = "fill_first";\n'
POLICY_B = 'split = "spread";\nweights = { latency = 1.0; capacity = 0.5; };\n'
POLICY_BAD = 'split = "spread";\nweights = { latency = "fast"; };\n'
POLICY_C = 'split = "fill_first";\nweights = { latency = 2.0; };\n'


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)
    return cond


class AtomicVolume:
    """A folder laid out and updated like the kubelet's ConfigMap volumes."""

    def __init__(self, path, key):
        self.path, self.key, self.n = path, key, 0
        os.makedirs(path)

    def publish(self, text):
        self.n += 1
        ts = "..2026_11_25_10_00_%02d.%09d" % (self.n, self.n)
        os.mkdir(os.path.join(self.path, ts))
        with open(os.path.join(self.path, ts, self.key), "w") as f:
            f.write(text)
        data = os.path.join(self.path, "..data")
        old = os.readlink(data) if os.path.islink(data) else None
        os.symlink(ts, os.path.join(self.path, "..data_tmp"))
        os.replace(os.path.join(self.path, "..data_tmp"), data)
        if not os.path.lexists(os.path.join(self.path, self.key)):
            os.symlink(os.path.join("..data", self.key), os.path.join(self.path, self.key))
        if old:
            shutil.rmtree(os.path.join(self.path, old))


def policy(port):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/policy" % port,
                                 headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def wait_for(port, pred, timeout=10):
    deadline = time.monotonic() + timeout
    p = None
    while time.monotonic() < deadline:
        p = policy(port)
        if pred(p):
            return True, p
        time.sleep(0.2)
    return False, p


def stop(proc, name):
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    check(proc.returncode == 0, "%s exited with %s after SIGTERM (sanitizer report?)" % (name, proc.returncode))


def main(argv):
    if len(argv) != 3:
        print("usage: policy_configmap_reload.py PATH/TO/fedrouter PATH/TO/kubesim", file=sys.stderr)
        return 2
    fedrouter, kubesim = argv[1], argv[2]
    tmp = tempfile.mkdtemp(prefix="fr-cm-reload-")
    sim = router = None
    logs = []
    try:
        kc = os.path.join(tmp, "member.kubeconfig")
        logs.append(open(os.path.join(tmp, "kubesim.log"), "w"))
        sim = subprocess.Popen([kubesim, "--name", "member", "--write-kubeconfig", kc, "--port-file",
                                os.path.join(tmp, "port"), "--workdir", os.path.join(tmp, "work")],
                               stdout=logs[-1], stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not os.path.exists(os.path.join(tmp, "port")):
            if time.monotonic() > deadline or sim.poll() is not None:
                print("FAIL: kubesim did not start")
                return 1
            time.sleep(0.05)

        pol = AtomicVolume(os.path.join(tmp, "policy"), "policy.conf")
        pol.publish(POLICY_A)
        os.makedirs(os.path.join(tmp, "config"))
        conf = os.path.join(tmp, "config", "fedrouter.conf")
        with open(conf, "w") as f:
            f.write('listen = "127.0.0.1:0";\nregion = "us";\npolicy = "../policy/policy.conf";\n'
                    'tenants = ( { name = "t"; token_sha256 = "%s"; } );\n'
                    'clusters = ( { name = "member"; region = "us"; kubeconfig = "%s"; } );\n'
                    % (hashlib.sha256(TOKEN.encode()).hexdigest(), kc))
        logs.append(open(os.path.join(tmp, "router.log"), "w"))
        router = subprocess.Popen([fedrouter, "--config", conf], stdout=subprocess.PIPE,
                                  stderr=logs[-1], text=True)
        line = router.stdout.readline()
        if not check(line.startswith("fedrouter listening on http://127.0.0.1:"), "router start: %r" % line):
            return 1
        port = int(line.rsplit(":", 1)[1])

        p0 = policy(port)
        # "source" is the path after symlinks (the current ..<timestamp>
        # folder), not the configured one.
        check(p0["version"] == hashlib.sha256(POLICY_A.encode()).hexdigest() and
              p0["source"].startswith(pol.path + "/") and p0["source"].endswith("/policy.conf"),
              "1. policy A loaded from the volume: %s" % p0)
        print("ok   1 started with policy A (%s)" % p0["version"][:12])

        t0 = time.monotonic()
        pol.publish(POLICY_B)
        want_b = hashlib.sha256(POLICY_B.encode()).hexdigest()
        ok, p1 = wait_for(port, lambda p: p["version"] == want_b)
        check(ok and p1["reloads"] == p0["reloads"] + 1 and p1["last_reload_error"] is None,
              "2. after the ..data swap to B, /v1/policy shows %s, want version %s, one more reload"
              % (p1, want_b[:12]))
        print("ok   2 ..data swap to B seen in %.1f s" % (time.monotonic() - t0))

        pol.publish(POLICY_BAD)
        ok, p2 = wait_for(port, lambda p: p["last_reload_error"] is not None)
        check(ok and p2["version"] == want_b and "policy.conf:2" in p2["last_reload_error"]["message"],
              "3. a broken policy: want B kept and a policy.conf:2 error, got %s" % p2)
        print("ok   3 broken policy rejected, B serving: %s" % (p2["last_reload_error"] or {}).get("message"))

        pol.publish(POLICY_C)
        want_c = hashlib.sha256(POLICY_C.encode()).hexdigest()
        ok, p3 = wait_for(port, lambda p: p["version"] == want_c)
        check(ok and p3["last_reload_error"] is None, "4. swap to C: %s" % p3)
        print("ok   4 swap to C loaded, error cleared")
    finally:
        stop(router, "fedrouter")
        stop(sim, "kubesim")
        for f in logs:
            f.close()
        if FAILS:
            for name in ("router.log", "kubesim.log"):
                path = os.path.join(tmp, name)
                if os.path.exists(path):
                    print("--- %s (tail)\n%s" % (name, "".join(open(path).readlines()[-15:])))
        shutil.rmtree(tmp, ignore_errors=True)
    print("policy_configmap_reload: %s" % ("%d failure(s)" % len(FAILS) if FAILS else "OK"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
