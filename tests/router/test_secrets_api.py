#!/usr/bin/env python3
"""Secrets across clusters, black-box: PUT/GET/DELETE /v1/secrets against
two kubesim clusters running the real fedrouter-agent, through the API,
fedctl and the Python SDK; the Secrets are checked with the real kubectl.

Proves: PUT writes the tenant's Secret (its configured name) in every
member cluster, making it (type Opaque, labelled with the tenant) where it
is missing, or only in `?clusters=`; GET lists key names and where each is
set, never a value; DELETE removes a key; a create naming a key that only
some clusters have is placed there (explain says no_secret for the
others) and its processes see the value, one naming a key no cluster has
is 400 secret_not_found; a cluster that fails is named in a 503
secret_not_written while the others are written; bad keys, values with
NUL or not UTF-8, and values over 128 KiB are refused; a tenant reaches
only its own Secret; values appear in no log line (the router runs at
debug level), answer, fedctl output or error.

Usage: test_secrets_api.py --fedrouter PATH --kubesim PATH --agent PATH --fedctl PATH
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import base64
import json
import os
import subprocess
import sys
import urllib.parse

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))
import test_router as tr  # noqa: E402
import test_secrets as ts  # noqa: E402
from test_router import check, expect_error, short, wait_until  # noqa: E402

V1 = "v1-" + os.urandom(6).hex()
V2 = "v2-" + os.urandom(6).hex()
V_S1 = "only-s1-" + os.urandom(6).hex()
V_B = "b-" + os.urandom(6).hex()
V_CLI = "cli-" + os.urandom(6).hex()
V_SDK = "sdk-" + os.urandom(6).hex()
VALUES = (V1, V2, V_S1, V_B, V_CLI, V_SDK)
SECRET_A = "a-sandbox-secrets"
SECRET_B = ts.SECRET_B


class ApiFed(ts.SecretFed):
    """test_secrets' federation (agent, debug log, tenant b's own Secret
    name), without Secrets made up front."""

    def __init__(self, name, clusters):
        tr.Fed.__init__(self, name, clusters)

    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        # Room in a body for the largest value (128 KiB) and more.
        for p in (path, self.no_agent_config):
            with open(p) as f:
                text = f.read()
            with open(p, "w") as f:
                f.write(text.replace(f"max_body_bytes = {tr.MAX_BODY};", "max_body_bytes = 262144;"))


def leaks(text, where):
    for v in VALUES:
        check(v not in text, f"a secret value leaked into {where}")


def secret_obj(sim, name):
    rc, out = ts.kubectl(sim, "get", "secret", name, "-n", "default", "-o", "json")
    return json.loads(out) if rc == 0 else None


def data_of(sim, name):
    o = secret_obj(sim, name)
    return {k: base64.b64decode(v).decode() for k, v in ((o or {}).get("data") or {}).items()}


def put(fed, key, value, token=tr.TOKEN_A, query=""):
    raw = value if isinstance(value, bytes) else value.encode()
    return fed.api("PUT", f"/v1/secrets/{key}{query}", token=token, raw=raw,
                   headers={"Content-Type": "application/octet-stream"})


def by_cluster(r):
    return {c["cluster"]: c for c in r.get("clusters", [])}


def test_put_writes_every_cluster(fed):
    st, r = put(fed, "API_KEY", V1)
    check(st == 200, f"PUT: {st} {short(r)}")
    leaks(json.dumps(r), "the PUT answer")
    check(r.get("key") == "API_KEY" and r.get("secret") == SECRET_A, f"answer: {r}")
    check({c: v["status"] for c, v in by_cluster(r).items()} == {"s1": "created", "s2": "created"},
          f"per cluster: {r}")
    for sim in fed.sims.values():
        o = secret_obj(sim, SECRET_A)
        check(o is not None and o.get("type") == "Opaque", f"{sim.name}: no Opaque Secret {SECRET_A}: {short(o)}")
        labels = o["metadata"].get("labels") or {}
        check(labels.get("fedrouter.io/tenant") == "a" and labels.get("app.kubernetes.io/managed-by") == "fedrouter",
              f"{sim.name}: labels {labels}")
        check(data_of(sim, SECRET_A) == {"API_KEY": V1}, f"{sim.name}: data is not the value")
    # Again, another value: updated in place.
    st, r = put(fed, "API_KEY", V2)
    check(st == 200 and {c: v["status"] for c, v in by_cluster(r).items()} == {"s1": "updated", "s2": "updated"},
          f"second PUT: {st} {short(r)}")
    check(all(data_of(s, SECRET_A) == {"API_KEY": V2} for s in fed.sims.values()), "the value was not updated")


def test_list_shows_names_and_where(fed):
    # The key goes only to the cluster a plain create would NOT fill first,
    # so a create that lands there shows the Secret decided it.
    st, r = fed.api("POST", "/v1/placement/explain", {"image": tr.IMAGE, "num_sandboxes": 3})
    first = next(c["cluster"] for c in r["plan"]["clusters"] if c["verdict"] == "use" and c["count"] > 0)
    one = "s2" if first == "s1" else "s1"
    other = first
    fed.shared["one"], fed.shared["other"] = one, other
    st, r = put(fed, "ONLY_S1", V_S1, query=f"?clusters={one}")
    check(st == 200 and list(by_cluster(r)) == [one], f"PUT ?clusters={one}: {st} {short(r)}")
    check("ONLY_S1" in data_of(fed.sims[one], SECRET_A) and "ONLY_S1" not in data_of(fed.sims[other], SECRET_A),
          f"?clusters={one} wrote elsewhere too")
    st, r = fed.api("GET", "/v1/secrets")
    check(st == 200 and r.get("secret") == SECRET_A, f"GET: {st} {short(r)}")
    leaks(json.dumps(r), "GET /v1/secrets")
    keys = {k["name"]: k for k in r["keys"]}
    check(set(keys) == {"API_KEY", "ONLY_S1"}, f"keys: {list(keys)}")
    check(sorted(keys["API_KEY"]["clusters"]) == ["s1", "s2"] and keys["API_KEY"]["missing"] == [],
          f"API_KEY: {keys['API_KEY']}")
    check(keys["ONLY_S1"]["clusters"] == [one] and keys["ONLY_S1"]["missing"] == [other],
          f"ONLY_S1: {keys['ONLY_S1']}")
    st, r = fed.api("GET", f"/v1/secrets?clusters={other}")
    check(st == 200 and [k["name"] for k in r["keys"]] == ["API_KEY"], f"GET ?clusters={other}: {st} {short(r)}")
    expect_error(fed.api("GET", "/v1/secrets?clusters=nope"), 404, "cluster_not_found", "an unknown cluster")
    expect_error(fed.api("GET", "/v1/secrets?clusters="), 400, "invalid_query", "an empty clusters")


def test_create_goes_where_the_key_is(fed):
    one, other = fed.shared["one"], fed.shared["other"]
    st, r = fed.api("POST", "/v1/placement/explain", {"image": tr.IMAGE, "secrets": ["ONLY_S1"]})
    check(st == 200, f"explain: {st} {short(r)}")
    plan = {c["cluster"]: c for c in r["plan"]["clusters"]}
    check(plan[other]["verdict"] == "skip" and "no_secret" in plan[other]["reason"],
          f"explain for {other}: {plan[other]}")
    check(plan[one]["verdict"] == "use", f"explain for {one}: {plan[one]}")
    leaks(json.dumps(r), "the explain answer")
    # Without the key the plan fills <other> first: every sandbox still
    # lands where the key is.
    r = fed.create({"num_sandboxes": 3, "name": "keyed", "secrets": ["ONLY_S1", "API_KEY"]})
    check([s["cluster"] for s in r["sandboxes"]] == [one] * 3, f"placed: {[s['id'] for s in r['sandboxes']]}")
    out = fed.exec_ok(r["sandboxes"][0]["id"], ["sh", "-c", 'printf %s/%s "$ONLY_S1" "$API_KEY"'])
    check(out.get("stdout") == f"{V_S1}/{V2}", f"the sandbox's env: {short(out)}")
    leaks(json.dumps(r), "the create answer")
    fed.api("DELETE", "/v1/sandboxes?name_prefix=keyed")
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["NOWHERE"]}), 400,
                     "secret_not_found", "a key no cluster has")
    check(e.get("key") == "NOWHERE" and {c["cluster"] for c in e.get("clusters", [])} == {"s1", "s2"},
          f"the error names the key and every cluster: {e}")
    # Restricted to the cluster that lacks it: the same 400.
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["ONLY_S1"],
                                                       "clusters": [other]}), 400, "secret_not_found",
                     "a key the only allowed cluster lacks")
    check(e.get("cluster") == other, f"{e}")


def test_delete_removes_a_key(fed):
    one = fed.shared["one"]
    st, r = fed.api("DELETE", f"/v1/secrets/ONLY_S1?clusters={one}")
    check(st == 200 and by_cluster(r)[one]["status"] == "removed", f"DELETE ?clusters={one}: {st} {short(r)}")
    check("ONLY_S1" not in data_of(fed.sims[one], SECRET_A), "the key is still there")
    check(data_of(fed.sims[one], SECRET_A).get("API_KEY") == V2, "another key went too")
    st, r = fed.api("DELETE", "/v1/secrets/ONLY_S1")
    check(st == 200 and all(c["status"] == "removed" for c in r["clusters"]), f"DELETE of a gone key: {st} {short(r)}")
    # A tenant without a Secret: nothing to remove is no error.
    st, r = fed.api("DELETE", "/v1/secrets/ANY", token=tr.TOKEN_C)
    check(st == 200 and all(c["status"] == "no_secret" for c in r["clusters"]), f"no Secret at all: {st} {short(r)}")
    st, r = fed.api("GET", "/v1/secrets", token=tr.TOKEN_C)
    check(st == 200 and r["keys"] == [] and all(c["status"] == "no_secret" for c in r["clusters"]),
          f"GET without a Secret: {st} {short(r)}")


def test_bad_keys_and_values_are_refused(fed):
    for key in ("1BAD", "A-B", "A.B", "X" * 129):
        expect_error(put(fed, urllib.parse.quote(key), "x"), 400, "invalid_key", f"key {key[:20]!r}")
    expect_error(put(fed, "NUL", b"a\0b"), 400, "invalid_value", "a value with NUL")
    expect_error(put(fed, "BIN", b"\xff\xfe"), 400, "invalid_value", "a value that is not UTF-8")
    e = expect_error(put(fed, "BIG", b"x" * (128 * 1024 + 1)), 413, "value_too_large", "a value over 128 KiB")
    check("128" in e["message"] or "131072" in e["message"], f"{e}")
    st, r = put(fed, "EMPTY_OK", b"")
    check(st == 200, f"an empty value: {st} {short(r)}")
    fed.api("DELETE", "/v1/secrets/EMPTY_OK")
    expect_error(fed.api("POST", "/v1/secrets/X", token=tr.TOKEN_A), 405, "method_not_allowed", "POST")
    expect_error(fed.api("GET", "/v1/secrets", token=None), 401, "unauthorized", "no token")


def test_each_tenant_its_own_secret(fed):
    st, r = put(fed, "API_KEY", V_B, token=tr.TOKEN_B)
    check(st == 200 and r.get("secret") == SECRET_B, f"b's PUT: {st} {short(r)}")
    check(all(data_of(s, SECRET_B) == {"API_KEY": V_B} for s in fed.sims.values()), "b's Secret")
    check(all(data_of(s, SECRET_A).get("API_KEY") == V2 for s in fed.sims.values()), "a's value changed")
    sb = fed.create_one(token=tr.TOKEN_B, secrets=["API_KEY"])
    check(ts.printenv(fed, sb["id"], "API_KEY", token=tr.TOKEN_B) == V_B, "b's sandbox lacks b's value")
    st, r = fed.api("GET", "/v1/secrets", token=tr.TOKEN_B)
    check(st == 200 and [k["name"] for k in r["keys"]] == ["API_KEY"], f"b's list: {short(r)}")


def test_a_failing_cluster_is_named(fed):
    sim = fed.sims["s2"]
    st, _ = sim.admin("POST", "/_sim/faults", {"error_rate": 1.0, "error_code": 503})
    check(st == 200, "cannot switch s2's fault on")
    try:
        st, r = put(fed, "API_KEY", V1)
    finally:
        sim.admin("POST", "/_sim/faults", {"error_rate": 0.0})
    e = expect_error((st, r), 503, "secret_not_written", "a PUT with s2 failing")
    cl = by_cluster(e)
    check(cl["s1"]["status"] == "updated" and cl["s2"]["status"] == "failed" and "503" in cl["s2"]["message"],
          f"per cluster: {e}")
    check("s2" in e["message"] and "1 of 2" in e["message"], f"message: {e['message']}")
    leaks(json.dumps(r), "the 503")
    check(data_of(fed.sims["s1"], SECRET_A)["API_KEY"] == V1, "s1 was not written")

    def healthy():
        return all(c.get("healthy") for c in fed.api("GET", "/v1/clusters")[1].get("clusters", []))
    check(wait_until(healthy, 30, 0.2), "s2 did not come back")
    st, r = put(fed, "API_KEY", V1)
    check(st == 200 and data_of(sim, SECRET_A)["API_KEY"] == V1, f"the same PUT again: {st} {short(r)}")


def fedctl(fed, *args, stdin=None):
    env = dict(os.environ, FEDROUTER_URL=f"http://127.0.0.1:{fed.router.port}", FEDROUTER_TOKEN=tr.TOKEN_A)
    p = subprocess.run([tr.ARGS.fedctl, *args], input=stdin, capture_output=True, env=env, timeout=60)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def test_fedctl_secret(fed):
    rc, out, err = fedctl(fed, "secret", "set", "CLI_KEY", "--stdin", stdin=V_CLI.encode())
    check(rc == 0 and "CLI_KEY" in out and "s1" in out and "s2" in out, f"secret set: {rc} {out} {err}")
    leaks(out + err, "fedctl secret set's output")
    check(all(data_of(s, SECRET_A).get("CLI_KEY") == V_CLI for s in fed.sims.values()), "fedctl set the value")
    path = os.path.join(fed.root, "value.txt")
    with open(path, "w") as f:
        f.write(V_CLI + "-file")
    rc, out, err = fedctl(fed, "secret", "set", "CLI_FILE", "--from-file", path, "--cluster", "s2")
    check(rc == 0 and data_of(fed.sims["s2"], SECRET_A).get("CLI_FILE") == V_CLI + "-file" and
          "CLI_FILE" not in data_of(fed.sims["s1"], SECRET_A), f"--from-file --cluster s2: {rc} {out} {err}")
    rc, out, err = fedctl(fed, "secret", "ls")
    check(rc == 0 and "CLI_KEY" in out and "CLI_FILE" in out and "s1" in out, f"secret ls: {rc} {out} {err}")
    leaks(out + err, "fedctl secret ls")
    rc, out, err = fedctl(fed, "--json", "secret", "ls")
    check(rc == 0 and any(k["name"] == "CLI_FILE" and k["missing"] == ["s1"] for k in json.loads(out)["keys"]),
          f"secret ls --json: {out}")
    rc, out, err = fedctl(fed, "secret", "rm", "CLI_FILE")
    check(rc == 0 and "CLI_FILE" not in data_of(fed.sims["s2"], SECRET_A), f"secret rm: {rc} {out} {err}")
    rc, out, err = fedctl(fed, "secret", "set", "1BAD", "x")
    check(rc == 1 and "invalid_key" in err, f"a bad key: {rc} {out} {err}")
    rc, out, err = fedctl(fed, "secret", "set", "K")
    check(rc == 2 and "VALUE, --from-file PATH or --stdin" in err, f"no value: {rc} {err}")
    rc, out, err = fedctl(fed, "secret", "set", "K", "v", "--stdin")
    check(rc == 2, f"two values: {rc} {err}")


def test_sdk_secrets(fed):
    from fedrouter import Client  # noqa: E402
    from fedrouter.errors import SecretNotWritten, InvalidKey  # noqa: E402
    c = Client(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_A)
    try:
        r = c.secrets.set("SDK_KEY", V_SDK)
        check({x["cluster"]: x["status"] for x in r.clusters} == {"s1": "created", "s2": "created"} or
              all(x["status"] in ("created", "updated") for x in r.clusters), f"set: {r}")
        names = {k.name: k for k in c.secrets.list()}
        check("SDK_KEY" in names and sorted(names["SDK_KEY"].clusters) == ["s1", "s2"], f"list: {names}")
        sb = c.create(image=tr.IMAGE, secrets=["SDK_KEY"])
        check(sb.exec("sh", "-c", 'printf %s "$SDK_KEY"').stdout == V_SDK, "the SDK's secret in a sandbox")
        sb.terminate()
        c.secrets.delete("SDK_KEY", clusters=["s1"])
        names = {k.name: k for k in c.secrets.list()}
        check(names["SDK_KEY"].clusters == ["s2"] and names["SDK_KEY"].missing == ["s1"], f"after delete: {names}")
        c.secrets.delete("SDK_KEY")
        check("SDK_KEY" not in {k.name for k in c.secrets.list()}, "the key is still listed")
        try:
            c.secrets.set("1BAD", "x")
            check(False, "a bad key did not raise")
        except InvalidKey:
            pass
        check(SecretNotWritten.code_default == "secret_not_written", "SecretNotWritten")
        import asyncio

        async def aio():
            await c.secrets.set.aio("SDK_AIO", "x")
            ks = await c.secrets.list.aio()
            await c.secrets.delete.aio("SDK_AIO")
            return [k.name for k in ks]
        check("SDK_AIO" in asyncio.run(aio()), "the .aio siblings")
    finally:
        c.close()


def test_logs_hold_no_value(fed):
    for i, r in enumerate(fed.routers):
        with open(r.log, errors="replace") as f:
            text = f.read()
        leaks(text, f"router #{i}'s stderr log (debug level)")
        leaks("\n".join(r.lines), f"router #{i}'s stdout")
    text = open(fed.routers[0].log, errors="replace").read()
    check("/secrets/a-sandbox-secrets" in text and "PATCH" in text,
          "the debug log does not show the Secret writes (the check above proves little)")


TESTS = [test_put_writes_every_cluster, test_list_shows_names_and_where, test_create_goes_where_the_key_is,
         test_delete_removes_a_key, test_bad_keys_and_values_are_refused, test_each_tenant_its_own_secret,
         test_a_failing_cluster_is_named, test_fedctl_secret, test_sdk_secrets, test_logs_hold_no_value]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: ApiFed("secrets-api", [(n, "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory",
                                                           "256Gi", "--agent-binary", os.path.abspath(tr.ARGS.agent)])
                                                for n in ("s1", "s2")]),
        TESTS, ["--agent", "--fedctl"]))
