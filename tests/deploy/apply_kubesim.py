#!/usr/bin/env python3
"""apply_kubesim.py - the rendered deploy/ bundles apply to a Kubernetes API
server: `kubectl apply --dry-run=server` (and a real apply) of the member
sandbox bundle, and a server dry run of the router overlay with its Secret
templates, against a kubesim over TLS with a token, driven by the real
kubectl v1.32.

Steps:
  1. server dry run of the member bundle on a fresh cluster fails exactly
     as on a real API server: its namespace does not exist yet;
  2. with the namespace created: the server dry run succeeds for every
     object, and stores nothing;
  3. a bundle with an invalid Role (no verbs) is refused by the dry run;
  4. a real apply stores every object; applying again changes nothing, and
     a server dry run of the applied bundle succeeds;
  5. server dry run of the router overlay (rendered from a copy with an
     agent key of its own, as an operator's has: example_overlay.py) plus
     secrets.example.yaml.

Usage: apply_kubesim.py REPO_ROOT PATH/TO/kubesim
Loopback only; kubesim stopped and temp files removed on every path.
Exit 0 all good, 1 a step failed.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import example_overlay  # noqa: E402

FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)
    return cond


def main(argv):
    if len(argv) != 3:
        print("usage: apply_kubesim.py REPO_ROOT PATH/TO/kubesim", file=sys.stderr)
        return 2
    root, kubesim = os.path.abspath(argv[1]), argv[2]
    if shutil.which("kubectl") is None:
        print("FAIL: kubectl not on PATH")
        return 1
    tmp = tempfile.mkdtemp(prefix="fr-apply-")
    env = dict(os.environ, KUBECONFIG=os.path.join(tmp, "kubeconfig"), HOME=tmp)
    log = open(os.path.join(tmp, "kubesim.log"), "w")
    proc = subprocess.Popen([kubesim, "--tls", "--token", "apply-%d" % os.getpid(), "--name", "member",
                             "--write-kubeconfig", env["KUBECONFIG"], "--port-file",
                             os.path.join(tmp, "port"), "--workdir", os.path.join(tmp, "work")],
                            stdout=log, stderr=subprocess.STDOUT)

    def kubectl(*args, stdin=None):
        p = subprocess.run(["kubectl", "--cache-dir", os.path.join(tmp, "cache"), *args], input=stdin,
                           capture_output=True, text=True, env=env, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def rendered(path):
        p = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("kubectl kustomize %s: %s" % (path, p.stderr))
        return [d for d in yaml.safe_load_all(p.stdout) if d]

    def dump(objs):
        return yaml.safe_dump_all(objs, sort_keys=False)

    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(tmp, "port")):
            if time.monotonic() > deadline or proc.poll() is not None:
                print("FAIL: kubesim did not start")
                return 1
            time.sleep(0.05)
        member = rendered(os.path.join(root, "deploy/member/overlays/gvisor"))
        router = rendered(example_overlay.copy_example(root, tmp))
        # kustomize wraps a generated Secret's base64 at 76 columns; the API
        # server's decoder (Go's encoding/base64) skips the newlines, but
        # kubesim's (loadtest/kubesim/kinds.c) does not yet: unwrap them.
        for o in router:
            if o["kind"] == "Secret":
                o["data"] = {k: v.replace("\n", "") for k, v in (o.get("data") or {}).items()}
        with open(os.path.join(root, "deploy/router/overlays/example/secrets.example.yaml")) as f:
            secrets = [d for d in yaml.safe_load_all(f) if d]
        ns_objs = [o for o in member if o["kind"] == "Namespace"]
        ns = ns_objs[0]["metadata"]["name"]

        # 1. No namespace yet: NotFound, as a real API server answers.
        rc, out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=dump(member))
        check(rc != 0 and 'namespaces "%s" not found' % ns in out,
              "dry run before the namespace exists should fail with NotFound: rc %d\n%s" % (rc, out))
        print("ok   1 server dry run without the namespace: NotFound")

        # 2. With the namespace: every object passes, nothing is stored.
        rc, out = kubectl("create", "-f", "-", stdin=dump(ns_objs))
        check(rc == 0, "create namespace %s: %s" % (ns, out))
        rc, out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=dump(member))
        lines = [x for x in out.splitlines() if x.endswith("(server dry run)")]
        check(rc == 0 and len(lines) == len(member),
              "server dry run of the member bundle: rc %d, %d of %d objects\n%s" % (rc, len(lines), len(member), out))
        rc, out = kubectl("get", "serviceaccounts,roles,rolebindings,resourcequotas,limitranges,networkpolicies",
                          "-n", ns, "-o", "name")
        check(rc == 0 and out.strip() == "", "the dry run stored objects: %s" % out)
        rc, out = kubectl("get", "clusterroles,clusterrolebindings,runtimeclasses", "-o", "name")
        check(rc == 0 and out.strip() == "", "the dry run stored cluster objects: %s" % out)
        print("ok   2 server dry run of the member bundle (%d objects), nothing stored" % len(member))

        # 3. The dry run validates: a Role rule without verbs is refused.
        broken = [dict(o) for o in member]
        for o in broken:
            if o["kind"] == "Role":
                o["rules"] = [dict(o["rules"][0], verbs=[])]
        rc, out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=dump(broken))
        check(rc != 0 and "rules[0].verbs" in out, "a Role without verbs passed the dry run: rc %d\n%s" % (rc, out))
        print("ok   3 an invalid Role is refused by the server dry run")

        # 4. Real apply, then again (no change), then a dry run over it.
        rc, out = kubectl("apply", "-f", "-", stdin=dump(member))
        check(rc == 0, "apply of the member bundle: %s" % out)
        for o in member:
            args = ["get", o["kind"].lower() + "." + (o["apiVersion"].split("/")[0] if "/" in o["apiVersion"] else ""),
                    o["metadata"]["name"], "-o", "name"]
            args[1] = args[1].rstrip(".")
            if o["metadata"].get("namespace"):
                args += ["-n", o["metadata"]["namespace"]]
            rc, out = kubectl(*args)
            check(rc == 0, "after apply: kubectl %s: %s" % (" ".join(args), out))
        rc, out = kubectl("apply", "-f", "-", stdin=dump(member))
        # kubectl always sends a PodDisruptionBudget's spec.selector again
        # (its patch strategy is "replace", which strategicpatch diffs
        # unconditionally), so it says "configured" for an unchanged one on
        # any API server; its generation shows nothing changed.
        changed = [x for x in out.splitlines() if not x.endswith(" unchanged") and
                   not (x.startswith("poddisruptionbudget.policy/") and x.endswith(" configured"))]
        check(rc == 0 and not changed, "applying the same bundle again changed: %s" % changed)
        for o in member:
            if o["kind"] == "PodDisruptionBudget":
                rc2, gen = kubectl("get", "pdb", o["metadata"]["name"], "-n", o["metadata"]["namespace"], "-o",
                                   "jsonpath={.metadata.generation}")
                check(rc2 == 0 and gen.strip() == "1", "a second apply changed PDB %s (generation %s)"
                      % (o["metadata"]["name"], gen))
        rc, out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=dump(member))
        check(rc == 0, "server dry run over the applied bundle: %s" % out)
        print("ok   4 apply stores every object; a second apply is a no-op; dry run over it passes")

        # 5. The router overlay and its Secret templates.
        rns = [o for o in router if o["kind"] == "Namespace"]
        rc, out = kubectl("create", "-f", "-", stdin=dump(rns))
        check(rc == 0, "create the router namespace: %s" % out)
        rc, out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=dump(router + secrets))
        lines = [x for x in out.splitlines() if x.endswith("(server dry run)")]
        check(rc == 0 and len(lines) == len(router) + len(secrets),
              "server dry run of the router overlay: rc %d\n%s" % (rc, out))
        print("ok   5 server dry run of the router overlay and secrets.example.yaml (%d objects)"
              % (len(router) + len(secrets)))
    finally:
        proc.terminate()
        try:
            check(proc.wait(timeout=20) == 0, "kubesim exited with %s after SIGTERM (sanitizer report?)"
                  % proc.returncode)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            check(False, "kubesim did not stop within 20 s of SIGTERM")
        log.close()
        if FAILS:
            with open(os.path.join(tmp, "kubesim.log")) as f:
                print("kubesim log (tail):\n" + "".join(f.readlines()[-20:]))
        shutil.rmtree(tmp, ignore_errors=True)
    print("apply_kubesim: %s" % ("%d failure(s)" % len(FAILS) if FAILS else "OK"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
