#!/usr/bin/env python3
"""Live tenants and tokens, black-box: the real router reloads its config
(the tenants in an @included file, replaced by rename as the kubelet
updates a mounted Secret) while it runs, against two kubesim clusters.

Proves: a token is rotated without a restart (add the new one, move over,
remove the old: the old gets 401, the new one sees the same sandboxes, the
router's pid never changes); a token past its expiry gets 401
token_expired naming it, and /metrics shows the expiry; a tenant's limits
change for the next request; a tenant added works at once and one removed
gets 401 while its exec in flight finishes on the snapshot it started
with; a file that does not load (bad value, or a restart-only key such as
listen) is rejected whole with file:line in GET /v1/config and the log,
the running config keeps serving, and the error clears once the file is
put back; SIGHUP reloads; GET /v1/config is for admins and never shows a
token hash; the access log names the token a request used.

Usage: test_ops.py --fedrouter PATH --kubesim PATH [--only NAME ...] [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import datetime
import hashlib
import json
import os
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_router as tr  # noqa: E402
from test_router import check, expect_error, short, wait_until  # noqa: E402

TOK_OLD = "rl-old-" + os.urandom(8).hex()
TOK_NEW = "rl-new-" + os.urandom(8).hex()
TOK_OPS = "ops-" + os.urandom(8).hex()
TOK_GONE = "gone-" + os.urandom(8).hex()
TOK_LATE = "late-" + os.urandom(8).hex()
TOK_SHORT = "short-" + os.urandom(8).hex()


def sha(t):
    return hashlib.sha256(t.encode()).hexdigest()


def utc(ts):
    return datetime.datetime.fromtimestamp(int(ts), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class OpsFed(tr.Fed):
    """tr.Fed whose config @includes tenants.conf, rewritten by the tests."""

    def write_config(self, path, lifetime):
        self.tenants_path = os.path.join(self.root, "tenants.conf")
        self.main_text = None
        self.write_tenants([tenant("rl", [("old", TOK_OLD)], "max_sandboxes = 2;"),
                            tenant("ops", [("default", TOK_OPS)], "admin = true;"),
                            tenant("gone", [("default", TOK_GONE)])])
        cl = ",\n".join(f'  {{ name = "{n}"; region = "{s.region}"; kubeconfig = "{s.kubeconfig}"; }}'
                        for n, s in self.sims.items())
        self.main_text = f"""# written by tests/router/test_ops.py
listen = "127.0.0.1:0";
region = "us";
sandbox = {{ default_lifetime_s = {lifetime[0]}; max_lifetime_s = {lifetime[1]}; }};
tenants = (
  @include "tenants.conf"
);
clusters = (
{cl}
);
"""
        self.write_main(self.main_text)

    def write_main(self, text):
        atomic_write(self.config, text)

    def write_tenants(self, groups):
        atomic_write(self.tenants_path, ",\n".join(groups) + "\n")


def atomic_write(path, text):
    """As the kubelet and config management do: a new file renamed over."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def tenant(name, tokens, extra=""):
    toks = ", ".join(f'{{ name = "{n}"; sha256 = "{sha(t)}";{e} }}'
                     for n, t, *rest in tokens for e in [f' expires = "{rest[0]}";' if rest else ""])
    return f'{{ name = "{name}"; tokens = ( {toks} ); {extra} }}'


BASE = [tenant("ops", [("default", TOK_OPS)], "admin = true;"), tenant("gone", [("default", TOK_GONE)])]


def status(fed, token, path="/v1/sandboxes"):
    return fed.api("GET", path, token=token)[0]


def config_info(fed):
    st, c = fed.api("GET", "/v1/config", token=TOK_OPS)
    check(st == 200, f"GET /v1/config as admin: {st} {short(c)}")
    return c


def test_token_rotation_without_restart(fed):
    pid = fed.router.proc.pid
    check(status(fed, TOK_OLD) == 200, "the old token does not work at start")
    check(status(fed, TOK_NEW) == 401, "the new token works before it is configured")
    before = config_info(fed)["reloads"]
    # 1. Add the new token next to the old one.
    fed.write_tenants([tenant("rl", [("old", TOK_OLD), ("new", TOK_NEW)], "max_sandboxes = 2;")] + BASE)
    check(wait_until(lambda: status(fed, TOK_NEW) == 200, 15), "the new token did not start to work")
    check(status(fed, TOK_OLD) == 200, "the old token stopped working while both are configured")
    sb = fed.create_one(token=TOK_OLD, name="rot")
    fed.shared["rot"] = sb["id"]
    # 2. Remove the old one: 401 for it; the new one sees the same sandbox.
    fed.write_tenants([tenant("rl", [("new", TOK_NEW)], "max_sandboxes = 2;")] + BASE)
    check(wait_until(lambda: status(fed, TOK_OLD) == 401, 15), "the removed token still works")
    e = expect_error(fed.api("GET", "/v1/sandboxes", token=TOK_OLD), 401, "unauthorized", "the removed token")
    check("unknown token" in e.get("message", ""), f"401 message: {e}")
    check(sb["id"] in fed.list_ids(token=TOK_NEW), "the new token does not see the tenant's sandbox")
    check(fed.router.proc.pid == pid and fed.router.proc.poll() is None, "the router restarted")
    info = config_info(fed)
    check(info["reloads"] >= before + 2, f"reloads {before} -> {info['reloads']}")
    check(info["last_reload_error"] is None, f"a reload error: {info['last_reload_error']}")
    # The access log names the token each request used, never the token.
    with open(fed.router.log, errors="replace") as f:
        log = f.read()
    check('"tenant":"rl"' in log and '"token":"new"' in log and '"token":"old"' in log,
          "the access log does not name the tokens used")
    check(TOK_NEW not in log and TOK_OLD not in log and sha(TOK_NEW) not in log, "a token is in the log")
    st, m = fed.api("GET", "/metrics", token=None)
    check(st == 200 and 'fedrouter_auth_total{tenant="rl",token="new"}' in m, "no per-token auth counter")


def test_expired_token_is_refused(fed):
    exp = time.time() + 4
    fed.write_tenants([tenant("rl", [("new", TOK_NEW), ("short", TOK_SHORT, utc(exp))], "max_sandboxes = 2;")]
                      + BASE)
    check(wait_until(lambda: status(fed, TOK_SHORT) == 200, 15), "a token before its expiry does not work")
    st, m = fed.api("GET", "/metrics", token=None)
    check(f'fedrouter_token_expiry_timestamp_seconds{{tenant="rl",token="short"}} {int(exp)}' in m,
          "the expiry is not in /metrics")
    check(wait_until(lambda: status(fed, TOK_SHORT) == 401, 15), "a token past its expiry still works")
    e = expect_error(fed.api("GET", "/v1/sandboxes", token=TOK_SHORT), 401, "token_expired", "an expired token")
    check('"short"' in e["message"] and utc(exp) in e["message"], f"the message names token and time: {e}")
    check(status(fed, TOK_NEW) == 200, "the tenant's other token stopped working")
    tok = [t for t in next(t for t in config_info(fed)["tenants"] if t["name"] == "rl")["tokens"]
           if t["name"] == "short"][0]
    check(tok["expired"] is True and tok["expires_at"] == utc(exp), f"/v1/config token: {tok}")


def test_limits_change_for_the_next_request(fed):
    rl = [("new", TOK_NEW)]
    fed.write_tenants([tenant("rl", rl, "max_sandboxes = 2;")] + BASE)
    check(wait_until(lambda: status(fed, TOK_SHORT) == 401, 15), "the reload did not apply")
    fed.create_one(token=TOK_NEW, name="lim")  # with the rotation's sandbox: 2
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE}, token=TOK_NEW), 429, "tenant_limit",
                     "a third sandbox under max_sandboxes 2")
    check(e.get("limit") == "max_sandboxes", f"limit: {e}")
    fed.write_tenants([tenant("rl", rl, "max_sandboxes = 3;")] + BASE)
    check(wait_until(lambda: fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "name": "third"},
                                     token=TOK_NEW)[0] == 201, 15),
          "max_sandboxes 3 did not apply to the next create")
    fed.api("DELETE", "/v1/sandboxes?name_prefix=lim", token=TOK_NEW)


def test_removed_tenant_finishes_in_flight_and_new_one_works(fed):
    sb = fed.create_one(token=TOK_GONE, name="leaving")
    out = {}

    def long_exec():
        out["r"] = fed.exec(sb["id"], ["sh", "-c", "sleep 3; echo done"], token=TOK_GONE, timeout_s=30)
    t = threading.Thread(target=long_exec)
    t.start()
    # The exec runs; now the tenant leaves the config and another arrives.
    check(wait_until(lambda: any("sleep 3" in " ".join(c) for _, c in tr.find_procs(home_prefix=fed.root + "/")),
                     15), "the exec did not start")
    fed.write_tenants([tenant("rl", [("new", TOK_NEW)], "max_sandboxes = 3;"),
                       tenant("ops", [("default", TOK_OPS)], "admin = true;"),
                       tenant("late", [("default", TOK_LATE)])])
    check(wait_until(lambda: status(fed, TOK_GONE) == 401, 15), "the removed tenant's token still works")
    check(status(fed, TOK_LATE) == 200, "the added tenant's token does not work")
    t.join(60)
    st, r = out.get("r", (0, None))
    check(st == 200 and r.get("stdout") == "done\n" and r.get("exit_code") == 0,
          f"the exec of the removed tenant, in flight at the reload: {st} {short(r)}")
    late = fed.create_one(token=TOK_LATE, name="newcomer")
    check(fed.exec_ok(late["id"], ["echo", "hi"], token=TOK_LATE).get("stdout") == "hi\n", "the new tenant's exec")
    check(late["id"] not in fed.list_ids(token=TOK_NEW), "another tenant sees the new tenant's sandbox")
    fed.api("DELETE", f"/v1/sandboxes/{late['id']}", token=TOK_LATE)
    # Its sandbox stays in the cluster (it expires): delete it through the cluster.
    sim, pod = fed.sim_of(sb["id"])
    tr.subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, "delete", "pod", pod, "-n", "default",
                       "--wait=false"], capture_output=True, timeout=60)


def test_bad_reload_is_rejected_whole_with_file_line(fed):
    good = [tenant("rl", [("new", TOK_NEW)], "max_sandboxes = 3;"),
            tenant("ops", [("default", TOK_OPS)], "admin = true;"), tenant("late", [("default", TOK_LATE)])]
    fails = config_info(fed)["reload_failures"]
    # A bad value in the included file, and a new token with it: neither applies.
    bad = [tenant("rl", [("new", TOK_NEW), ("old", TOK_OLD)], "max_sandboxes = 3;"),
           tenant("ops", [("default", TOK_OPS)], "admin = true; weight = 0;")]
    atomic_write(fed.tenants_path, ",\n".join(bad) + "\n")

    def rejected():
        c = config_info(fed)
        return c["reload_failures"] > fails and c["last_reload_error"]
    err = wait_until(rejected, 15)
    check(err, "the bad file was not rejected")
    msg = err["message"]
    check(f"{fed.tenants_path}:2:" in msg and "weight" in msg and "out of range" in msg,
          f"the error must name tenants.conf:2 and the key: {msg}")
    check(status(fed, TOK_OLD) == 401, "a token of the rejected file works")
    check(status(fed, TOK_NEW) == 200 and status(fed, TOK_LATE) == 200, "the running config stopped serving")
    with open(fed.router.log, errors="replace") as f:
        check("reload rejected" in f.read(), "the log does not say the reload was rejected")
    st, m = fed.api("GET", "/metrics", token=None)
    check('fedrouter_config_reloads_total{result="error"}' in m, "no error counter")
    # Back to what runs: the error clears.
    fed.write_tenants(good)
    check(wait_until(lambda: config_info(fed)["last_reload_error"] is None, 15), "the error did not clear")
    # A restart-only key: listen.
    fed.write_main(fed.main_text.replace('listen = "127.0.0.1:0";', 'listen = "127.0.0.1:1";'))
    err = wait_until(rejected, 15)
    check(err and f"{fed.config}:2: listen: the listen address changed" in err["message"] and
          "only on a restart" in err["message"], f"a listen change: {err}")
    fed.write_main(fed.main_text)
    check(wait_until(lambda: config_info(fed)["last_reload_error"] is None, 15), "the listen error did not clear")
    check(status(fed, TOK_NEW) == 200, "the router stopped serving")


def test_sighup_reloads(fed):
    fed.write_tenants([tenant("rl", [("new", TOK_NEW), ("old", TOK_OLD)], "max_sandboxes = 3;"),
                       tenant("ops", [("default", TOK_OPS)], "admin = true;")])
    fed.router.proc.send_signal(signal.SIGHUP)
    check(wait_until(lambda: status(fed, TOK_OLD) == 200, 15), "SIGHUP did not load the new token")
    check(wait_until(lambda: "reloading the config" in open(fed.router.log, errors="replace").read(), 5),
          "the log does not show the SIGHUP")
    check(status(fed, TOK_LATE) == 401, "a removed tenant still works")


def test_config_endpoint_is_for_admins_without_hashes(fed):
    e = expect_error(fed.api("GET", "/v1/config", token=TOK_NEW), 403, "forbidden", "a tenant reading /v1/config")
    check("admin" in e["message"], f"403 message: {e}")
    st, c = fed.api("GET", "/v1/config", token=TOK_OPS)
    check(st == 200 and c["source"] == fed.config and fed.tenants_path in c["files"] and len(c["version"]) == 64,
          f"/v1/config: {short(c)}")
    text = json.dumps(c)
    for t in (TOK_NEW, TOK_OLD, TOK_OPS):
        check(t not in text and sha(t) not in text, "a token or its hash is in /v1/config")
    names = {t["name"]: [k["name"] for k in t["tokens"]] for t in c["tenants"]}
    check(names.get("rl") == ["new", "old"] and names.get("ops") == ["default"], f"tenants: {names}")


TESTS = [test_token_rotation_without_restart, test_expired_token_is_refused, test_limits_change_for_the_next_request,
         test_removed_tenant_finishes_in_flight_and_new_one_works, test_bad_reload_is_rejected_whole_with_file_line,
         test_sighup_reloads, test_config_endpoint_is_for_admins_without_hashes]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: OpsFed("ops", [(n, "us", ["--nodes", "2", "--node-cpu", "16", "--node-memory", "64Gi"])
                                        for n in ("o1", "o2")]),
        TESTS))
