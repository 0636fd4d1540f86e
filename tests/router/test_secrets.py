#!/usr/bin/env python3
"""Create-time secrets through the in-sandbox agent, black-box: two kubesim
clusters run the real fedrouter-agent (--agent-binary); the tenants' Secrets
are made with the real kubectl (`kubectl create secret generic`, which
posts protobuf); the router reads the tenant's Secret from every cluster it
plans to create in and hands the values to the agent's /init only.

Proves: a cold create with `secrets` gives every process the values (exec,
a background process, a later exec; the env given with it too); a warm
claim with secrets stays warm and has them; a changed value is what the
next create gets; the values are nowhere in the pod object, the router's
logs (run at debug level), or any API answer (create, GET, list, events);
GET, the listing and the create answer name a sandbox's secrets (sorted,
cold, warm, through another replica; no "secrets" key without any); a
missing key or Secret is 400 secret_not_found naming it and its cluster,
with no pod made; tenant b reads its own Secret (its config `secret` key)
and never tenant a's; bad names are 400 invalid_field; a router without an
agent answers 400 agent_required; the Python SDK sends `secrets=`.

Usage: test_secrets.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))
import test_router as tr  # noqa: E402
from test_router import check, expect_error, short, wait_until  # noqa: E402

# Values that must show up in the sandbox and nowhere else.
VAL_A = "hfA-" + os.urandom(6).hex()
VAL_A2 = "hfA2-" + os.urandom(6).hex()
VAL_B = "hfB-" + os.urandom(6).hex()
VAL_ONLY_A = "onlyA-" + os.urandom(6).hex()
ALL_VALUES = (VAL_A, VAL_A2, VAL_B, VAL_ONLY_A)
SECRET_B = "team-b-keys"


class SecretFed(tr.Fed):
    """tr.Fed whose router runs the agent (at debug level, so every log line
    it can write is checked) and whose tenant b names its own Secret."""

    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        text = text.replace('{ name = "b"; token_sha256', f'{{ name = "b"; secret = "{SECRET_B}"; token_sha256')
        self.no_agent_config = os.path.join(self.root, "fedrouter-no-agent.conf")
        with open(self.no_agent_config, "w") as f:
            f.write(text)
        key = os.path.join(self.root, "agent.key")
        with open(key, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        with open(path, "w") as f:
            f.write(text + 'agent = { image = "registry.example/fedrouter-agent:test"; port = 49983; '
                    f'key_file = "{key}"; }};\n')

    def __init__(self, name, clusters):
        super().__init__(name, clusters)
        # The tenants' Secrets, made with the real kubectl (protobuf bodies).
        for s in self.sims.values():
            put_secret(s, "a-sandbox-secrets", HF_TOKEN=VAL_A, ONLY_A=VAL_ONLY_A)
            put_secret(s, SECRET_B, HF_TOKEN=VAL_B)

    def start_router(self, config=None):
        n = len(self.routers)
        r = DebugRouter(config or self.config, os.path.join(self.root, f"fedrouter-{n}.log"))
        self.routers.append(r)
        r.wait_ready()
        return r


class DebugRouter(tr.Router):
    def __init__(self, config_path, log_path):
        real = tr.ARGS.fedrouter
        wrapper = os.path.join(os.path.dirname(log_path), "fedrouter-debug.sh")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\nexec "{real}" "$@" --log-level debug\n')
        os.chmod(wrapper, 0o755)
        tr.ARGS.fedrouter = wrapper
        try:
            super().__init__(config_path, log_path)
        finally:
            tr.ARGS.fedrouter = real


def kubectl(sim, *args):
    p = subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout + p.stderr


def put_secret(sim, name, **kv):
    kubectl(sim, "delete", "secret", name, "--ignore-not-found", "--wait=false")
    rc, out = kubectl(sim, "create", "secret", "generic", name, "-n", "default",
                      *[f"--from-literal={k}={v}" for k, v in kv.items()])
    check(rc == 0, f"kubectl create secret generic {name} on {sim.name}: {out}")
    rc, out = kubectl(sim, "get", "secret", name, "-n", "default", "-o", "yaml")
    check(rc == 0 and "type: Opaque" in out and all(f"  {k}: " in out for k in kv),
          f"kubectl get secret {name} -o yaml on {sim.name}: {out}")


def pod_count(fed):
    return sum(len(s.pods("fedrouter.io/sandbox=true,fedrouter.io/state=claimed")) for s in fed.sims.values())


def leaks(fed, text, where):
    for v in ALL_VALUES:
        check(v not in text, f"a secret value leaked into {where}")


def listed(fed, sid, token=tr.TOKEN_A, router=None):
    """The sandbox <sid> as GET /v1/sandboxes lists it (None if absent)."""
    st, lst = fed.api("GET", "/v1/sandboxes", token=token, router=router)
    check(st == 200, f"GET /v1/sandboxes: {st} {short(lst)}")
    leaks(fed, json.dumps(lst), "GET /v1/sandboxes")
    return next((s for s in lst.get("sandboxes", []) if s.get("id") == sid), None)


def check_secret_names(fed, sid, names, what, token=tr.TOKEN_A, router=None):
    """GET and the listing both name exactly <names> (sorted), or have no
    "secrets" key when <names> is empty; the pod carries the names only."""
    st, one = fed.api("GET", f"/v1/sandboxes/{sid}", token=token, router=router)
    check(st == 200, f"GET {what}: {st} {short(one)}")
    leaks(fed, json.dumps(one), f"GET of {what}")
    lst = listed(fed, sid, token, router)
    check(lst is not None, f"{what} is not in the listing")
    for where, sb in (("GET", one), ("the listing", lst)):
        if names:
            check(sb.get("secrets") == sorted(names), f"{where} of {what}: secrets {sb.get('secrets')!r}, "
                  f"expected {sorted(names)!r}")
        else:
            check("secrets" not in sb, f"{where} of {what} (no secrets) has a secrets key: {short(sb)}")
    sim, pod = fed.sim_of(sid)
    ann = (sim.pod(pod).get("metadata") or {}).get("annotations") or {}
    if names:
        check(ann.get("fedrouter.io/secrets") == ",".join(sorted(names)),
              f"the pod of {what} has annotation fedrouter.io/secrets {ann.get('fedrouter.io/secrets')!r}")
    else:
        check("fedrouter.io/secrets" not in ann, f"the pod of {what} (no secrets) has a secrets annotation")


def printenv(fed, sid, name="HF_TOKEN", token=tr.TOKEN_A):
    return fed.exec_ok(sid, ["sh", "-c", f'printf %s "${name}"'], token=token).get("stdout")


def test_cold_create_every_process_sees_the_secret(fed):
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"],
                                              "env": {"PROJECT": "demo"}, "clusters": ["s1"]})
    check(st == 201, f"create with secrets: {st} {short(r)}")
    leaks(fed, json.dumps(r), "the create answer")
    sb = r["sandboxes"][0]
    check(sb.get("warm") is False, f"expected a cold start: {short(sb)}")
    check(sb.get("secrets") == ["HF_TOKEN"], f"the create answer does not name the secret: {short(sb)}")
    sid = sb["id"]
    fed.shared["cold"] = sid
    r = fed.exec_ok(sid, ["sh", "-c", 'printf "%s/%s" "$HF_TOKEN" "$PROJECT"'])
    check(r.get("stdout") == f"{VAL_A}/demo", f"exec sees the secret and the env: {short(r)}")
    # A background process started later inherits it too.
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes",
                    {"cmd": 'printf %s "$HF_TOKEN" > /tmp/bg.out; exec sleep 3071'})
    check(st == 201 and isinstance(r.get("pid"), int), f"background process: {st} {short(r)}")
    check(wait_until(lambda: fed.exec_ok(sid, ["cat", "/tmp/bg.out"]).get("stdout") == VAL_A, 10, 0.2),
          "the background process did not see HF_TOKEN")
    fed.api("POST", f"/v1/sandboxes/{sid}/processes/{r['pid']}/signal", {"signal": "SIGKILL"})
    check(printenv(fed, sid) == VAL_A, "a later exec lost the secret")
    # Nowhere else: the pod object (kubectl, the real client), API answers.
    sim, pod = fed.sim_of(sid)
    rc, out = kubectl(sim, "get", "pod", pod, "-n", "default", "-o", "json")
    check(rc == 0 and pod in out, f"kubectl get pod: {out[:300]}")
    leaks(fed, out, "the pod object")
    st, one = fed.api("GET", f"/v1/sandboxes/{sid}")
    check(st == 200, f"GET sandbox: {st}")
    leaks(fed, json.dumps(one), "GET /v1/sandboxes/{id}")
    st, lst = fed.api("GET", "/v1/sandboxes")
    leaks(fed, json.dumps(lst), "GET /v1/sandboxes")
    st, ev = fed.api("GET", "/v1/events")
    leaks(fed, json.dumps(ev), "GET /v1/events")
    # Its secrets' names (never values) in GET, the listing and the pod.
    check_secret_names(fed, sid, ["HF_TOKEN"], "the cold sandbox")
    # A sandbox without secrets: no "secrets" key at all.
    plain = fed.create_one(clusters=["s1"])
    check("secrets" not in plain, f"the create answer of a sandbox without secrets: {short(plain)}")
    check_secret_names(fed, plain["id"], [], "a sandbox without secrets")
    fed.api("DELETE", f"/v1/sandboxes/{plain['id']}")
    # The annotation is editable in the cluster: only env var names of it
    # are shown (what the router wrote is sorted, valid names).
    sim, pod = fed.sim_of(sid)
    rc, out = kubectl(sim, "annotate", "--overwrite", "pod", pod, "-n", "default",
                      "fedrouter.io/secrets=HF_TOKEN,,bad name,1X,Z_2")
    check(rc == 0, f"kubectl annotate: {out}")
    check(wait_until(lambda: fed.api("GET", f"/v1/sandboxes/{sid}")[1].get("secrets") == ["HF_TOKEN", "Z_2"],
                     10, 0.2),
          f"an edited annotation: {short(fed.api('GET', f'/v1/sandboxes/{sid}')[1])}")
    kubectl(sim, "annotate", "--overwrite", "pod", pod, "-n", "default", "fedrouter.io/secrets=HF_TOKEN")
    check(wait_until(lambda: fed.api("GET", f"/v1/sandboxes/{sid}")[1].get("secrets") == ["HF_TOKEN"], 10, 0.2),
          "the annotation did not come back")


def test_warm_claim_with_secret_stays_warm(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": "secpool", "image": tr.IMAGE, "replicas": 1,
                                          "cpus": 1, "memory_gb": 1})
    check(st == 201, f"pool: {st} {short(r)}")
    check(wait_until(lambda: all(c["ready"] >= 1 for c in fed.api("GET", "/v1/pools/secpool")[1]
                                 .get("clusters", [])), 60, 0.3), "pool not warm")
    # Unclaimed pool pods carry no secrets annotation.
    for sim in fed.sims.values():
        for p in sim.pods("fedrouter.io/pool=secpool,fedrouter.io/state=warm"):
            ann = (p.get("metadata") or {}).get("annotations") or {}
            check("fedrouter.io/secrets" not in ann, f"a warm pool pod has a secrets annotation: {ann}")
    # Names given out of order and the answer sorted.
    r = fed.create({"pool": "secpool", "secrets": ["ONLY_A", "HF_TOKEN"], "clusters": ["s2"]})
    sb = r["sandboxes"][0]
    check(sb.get("warm") is True and r["placement"].get("warm") == 1, f"not a warm claim: {short(r)}")
    check(sb.get("secrets") == ["HF_TOKEN", "ONLY_A"], f"the claim's answer does not name its secrets: {short(sb)}")
    leaks(fed, json.dumps(r), "the claim's create answer")
    check(printenv(fed, sb["id"]) == VAL_A and printenv(fed, sb["id"], "ONLY_A") == VAL_ONLY_A,
          "the warm claim lacks its secrets")
    sim, pod = fed.sim_of(sb["id"])
    leaks(fed, json.dumps(sim.pod(pod)), "the claimed pod")
    check_secret_names(fed, sb["id"], ["HF_TOKEN", "ONLY_A"], "the warm claim")
    fed.shared["warm"] = sb["id"]
    # A warm claim without secrets: none shown.
    r = fed.create({"pool": "secpool", "clusters": ["s1"]})
    plain = r["sandboxes"][0]
    check(plain.get("warm") is True and "secrets" not in plain, f"a warm claim without secrets: {short(plain)}")
    check_secret_names(fed, plain["id"], [], "a warm claim without secrets")
    fed.api("DELETE", f"/v1/sandboxes/{plain['id']}")
    fed.api("DELETE", "/v1/pools/secpool")


def test_changed_value_seen_by_next_create(fed):
    put_secret(fed.sims["s1"], "a-sandbox-secrets", HF_TOKEN=VAL_A2, ONLY_A=VAL_ONLY_A)
    sb = fed.create_one(secrets=["HF_TOKEN"], clusters=["s1"])
    check(printenv(fed, sb["id"]) == VAL_A2, "the next create did not get the changed value")
    # The sandbox made before keeps the value it was created with.
    check(printenv(fed, fed.shared["cold"]) == VAL_A, "an existing sandbox changed its env")


def test_missing_key_or_secret_is_400_and_creates_nothing(fed):
    before = pod_count(fed)
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN", "NOPE_KEY"]}),
                     400, "secret_not_found", "a key the Secret lacks")
    check(e.get("key") == "NOPE_KEY" and "NOPE_KEY" in e.get("message", "") and e.get("cluster") in fed.sims,
          f"the error must name the key and the cluster: {e}")
    # A Secret missing in one cluster of the plan: nothing anywhere.
    kubectl(fed.sims["s2"], "delete", "secret", SECRET_B, "-n", "default")
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"],
                                                       "num_sandboxes": 4, "clusters": ["s2"]}, token=tr.TOKEN_B),
                     400, "secret_not_found", "a Secret one cluster lacks")
    check(e.get("cluster") == "s2" and SECRET_B in e.get("message", ""), f"names the Secret and cluster: {e}")
    put_secret(fed.sims["s2"], SECRET_B, HF_TOKEN=VAL_B)
    check(pod_count(fed) == before, f"pods were made for refused creates: {before} -> {pod_count(fed)}")


def test_tenant_reads_only_its_own_secret(fed):
    sb = fed.create_one(token=tr.TOKEN_B, secrets=["HF_TOKEN"])
    check(printenv(fed, sb["id"], token=tr.TOKEN_B) == VAL_B, "tenant b did not get its own value")
    # Tenant a's key is not in b's Secret, and b has no way to name a's.
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["ONLY_A"]},
                             token=tr.TOKEN_B), 400, "secret_not_found", "b asking for a's key")
    check(SECRET_B in e.get("message", "") and "a-sandbox-secrets" not in e.get("message", ""),
          f"b's error must be about b's Secret: {e}")
    expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"],
                                                   "secret": "a-sandbox-secrets"}, token=tr.TOKEN_B),
                 400, "invalid_field", "a body naming a Secret")


def test_bad_secret_names_are_400(fed):
    cases = [("HF_TOKEN", "a string"), (["1ABC"], "a leading digit"), (["A-B"], "a dash"),
             (["X", "X"], "a duplicate"), ([7], "a number"), ([f"K{i}" for i in range(65)], "65 names"),
             (["A" * 129], "129 characters")]
    for v, what in cases:
        e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": v}), 400,
                         "invalid_field", f"secrets with {what}")
        check(e.get("field") == "secrets", f"{what}: field not named: {e}")
    e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"],
                                                       "env": {"HF_TOKEN": "x"}}), 400, "invalid_field",
                     "a name in both env and secrets")
    check("HF_TOKEN" in e.get("message", ""), f"the clash is not named: {e}")


def test_agent_disabled_is_agent_required(fed):
    r2 = fed.start_router(fed.no_agent_config)
    try:
        # Another replica (this one without an agent) shows the same names:
        # they live on the pods, not in a router.
        check("cold" in fed.shared and "warm" in fed.shared, "the cold and warm sandboxes were not made")
        check_secret_names(fed, fed.shared["cold"], ["HF_TOKEN"], "the cold sandbox via another replica",
                           router=r2)
        check_secret_names(fed, fed.shared["warm"], ["HF_TOKEN", "ONLY_A"],
                           "the warm claim via another replica", router=r2)
        e = expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"]},
                                 router=r2), 400, "agent_required", "secrets without an agent")
        check("agent" in e.get("message", ""), f"the message must say why: {e}")
        st, r = fed.api("POST", "/v1/placement/explain", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"]}, router=r2)
        check(st == 400 and r["error"]["code"] == "agent_required", f"explain: {st} {short(r)}")
    finally:
        r2.expected_dead = True
        tr.stop_proc(r2.proc)


def test_python_sdk_sends_secrets(fed):
    from fedrouter import Client, SecretNotFound  # noqa: E402
    c = Client(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_A)
    try:
        sb = c.create(image=tr.IMAGE, secrets=["ONLY_A"], env={"X": "1"})
        r = sb.exec("sh", "-c", 'printf %s/%s "$ONLY_A" "$X"')
        check(r.stdout == f"{VAL_ONLY_A}/1", f"SDK create with secrets=: {r.stdout!r}")
        check(sb.secrets == ["ONLY_A"] and c.get(sb.id).secrets == ["ONLY_A"],
              f"SDK Sandbox.secrets: {sb.secrets!r}")
        check(any(s.id == sb.id and s.secrets == ["ONLY_A"] for s in c.ls()), "SDK ls(): secrets not named")
        sb.terminate()
        plain = c.create(image=tr.IMAGE)
        check(plain.secrets == [], f"SDK Sandbox.secrets without secrets: {plain.secrets!r}")
        plain.terminate()
        try:
            c.create(image=tr.IMAGE, secrets=["NOPE_KEY"])
            check(False, "SDK create with a missing key did not raise")
        except SecretNotFound as e:
            check(e.key == "NOPE_KEY" and e.cluster in fed.sims, f"SecretNotFound fields: {e.key} {e.cluster}")
    finally:
        c.close()


def test_cluster_that_cannot_answer_gets_none_of_the_create(fed):
    sim = fed.sims["s2"]
    before = pod_count(fed)
    st, _ = sim.admin("POST", "/_sim/faults", {"error_rate": 1.0, "error_code": 503})
    check(st == 200, "cannot switch kubesim s2's fault on")
    try:
        st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "secrets": ["HF_TOKEN"], "clusters": ["s2"]})
    finally:
        sim.admin("POST", "/_sim/faults", {"error_rate": 0.0})
    check(st == 503 and r["error"]["code"] == "no_capacity", f"a failed Secret read: {st} {short(r)}")
    why = " ".join(c.get("reason", "") for c in r["error"].get("clusters", []) if c.get("cluster") == "s2")
    check("Secret" in why and "503" in why, f"the reason must say the Secret read failed: {short(r)}")
    leaks(fed, json.dumps(r), "the no_capacity answer")
    check(pod_count(fed) == before, "a pod was made in a cluster whose Secret read failed")

    def healthy():
        cl = {c["name"]: c for c in fed.api("GET", "/v1/clusters")[1].get("clusters", [])}
        return cl.get("s2", {}).get("healthy") is True
    check(wait_until(healthy, 30, 0.2), "s2 did not come back healthy")
    sb = fed.create_one(secrets=["HF_TOKEN"], clusters=["s2"])
    check(printenv(fed, sb["id"]) == VAL_A, "s2 serves secrets again once it answers")


def test_logs_hold_no_value(fed):
    for i, r in enumerate(fed.routers):
        with open(r.log, errors="replace") as f:
            text = f.read()
        check(len(text) > 0 or r.lines, f"router #{i} logged nothing at debug level")
        leaks(fed, text, f"router #{i}'s stderr log")
        leaks(fed, "\n".join(r.lines), f"router #{i}'s stdout")
    check(any("/secrets/" in open(r.log, errors="replace").read() for r in fed.routers[:1]),
          "the debug log does not show the Secret reads (the check above proves little)")


TESTS = [test_cold_create_every_process_sees_the_secret,
         test_warm_claim_with_secret_stays_warm, test_changed_value_seen_by_next_create,
         test_missing_key_or_secret_is_400_and_creates_nothing, test_tenant_reads_only_its_own_secret,
         test_bad_secret_names_are_400, test_agent_disabled_is_agent_required, test_python_sdk_sends_secrets,
         test_cluster_that_cannot_answer_gets_none_of_the_create, test_logs_hold_no_value]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: SecretFed("secrets", [(n, "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi",
                                                          "--agent-binary", os.path.abspath(tr.ARGS.agent)])
                                               for n in ("s1", "s2")]),
        TESTS, ["--agent"]))
