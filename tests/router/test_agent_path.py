#!/usr/bin/env python3
"""fedrouter through the in-sandbox agent, black-box: kubesim runs the real
fedrouter-agent in every pod whose command starts it (--agent-binary), the
router has an `agent` group (image, port, HMAC key file), so new sandbox and
pool pods get the agent injected, /init hands them their token and env, and
exec goes through the agent on the pod proxy.

Proves: cold and warm sandboxes get the agent and run exec through it
(fedrouter_execs_total{via="agent"}); the create-time env reaches every
command but never the pod spec or its annotations; a command that exits
while a backgrounded grandchild holds its output answers at once with its
own exit code; a timeout kills the grandchild that escaped with setsid;
the exec contract (exit codes, stdin, workdir, caps, not found) is the one
of pods/exec; a second router replica (same key) serves the same sandbox;
only a router initialises an agent: a warm pod carries just the SHA-256 of
its pool's init token, code reaching its agent directly cannot /init it
(no token, a made-up one, the access token), before or after the claim, and
what it tried to set is not in the claimer's env; a pool made before a key
rotation is claimed through a replica with the previous key.

Usage: test_agent_path.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import sys
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
from test_router import check, short, wait_until  # noqa: E402

SECRET_ENV = "s3cr3t-" + os.urandom(4).hex()


class AgentFed(tr.Fed):
    """tr.Fed whose router has an `agent` group and whose kubesims run the
    real agent."""

    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        key = os.path.join(self.root, "agent.key")
        with open(key, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        with open(path, "a") as f:
            f.write('agent = { image = "registry.example/fedrouter-agent:test"; port = 49983; '
                    f'key_file = "{key}"; }};\n')


def metric(fed, name, router=None, **labels):
    port = (router or fed.router).port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        ls = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.rindex("}")]))
        if all(ls.get(k) == v for k, v in labels.items()):
            total += float(line.split()[-1])
    return total


def test_cold_sandbox_runs_exec_through_its_agent(fed):
    sb = fed.create_one(name="cold", env={"GREETING": SECRET_ENV})
    sid = sb["id"]
    sim, pod = fed.sim_of(sid)
    obj = sim.pod(pod)
    labels = obj["metadata"].get("labels", {})
    check(labels.get("fedrouter.io/agent") == "49983", f"the pod has no agent label: {labels}")
    spec = obj["spec"]
    check(any(c.get("name") == "fr-agent-install" for c in spec.get("initContainers", [])),
          f"no agent init container: {short(spec, 800)}")
    check(spec["containers"][0]["command"][0] == "/fr-agent/fedrouter-agent",
          f"the command is not wrapped: {spec['containers'][0].get('command')}")
    # The env is the agent's (via /init), never in the pod object.
    check(SECRET_ENV not in json.dumps(obj), "the create-time env landed in the pod object")
    before = metric(fed, "fedrouter_execs_total", via="agent")
    r = fed.exec_ok(sid, ["sh", "-c", "echo $GREETING; echo err >&2; exit 3"])
    check(r.get("stdout") == SECRET_ENV + "\n" and r.get("stderr") == "err\n" and r.get("exit_code") == 3,
          f"exec through the agent: {short(r)}")
    check(metric(fed, "fedrouter_execs_total", via="agent") == before + 1, "the exec did not go via the agent")
    if os.geteuid() == 0:
        # As root kubesim's python:3.12 pods have the image's `python`.
        r = fed.exec_ok(sid, ["python", "-c", "print(2 ** 10)"])
        check(r.get("stdout") == "1024\n" and r.get("exit_code") == 0, f"python through the agent: {short(r)}")
    # What an exec through the agent costs the cluster's API server: no
    # pods/exec, a pods/proxy request (kubesim's /_sim/stats; the router may
    # proxy to other agents meanwhile, so at least one).
    st, _ = sim.admin("DELETE", "/_sim/stats")
    check(st == 200, f"reset kubesim's stats: {st}")
    fed.exec_ok(sid, ["true"])
    st, stats = sim.admin("GET", "/_sim/stats")

    def count(verb, sub):
        return sum(r["count"] for r in stats["requests"]
                   if r["verb"] == verb and r["resource"] == "pods" and r["subresource"] == sub)
    check(st == 200 and count("CONNECT", "exec") == 0 and count("CONNECT", "proxy") >= 1,
          f"API requests of one exec through the agent: {short(stats.get('requests'), 600)}")
    # The call's env over the sandbox's, stdin, workdir.
    r = fed.exec_ok(sid, ["sh", "-c", "cat; echo $GREETING $X; pwd"], stdin="in\n", env={"X": "y"},
                    workdir="/tmp")
    check(r.get("stdout") == f"in\n{SECRET_ENV} y\n/tmp\n", f"stdin, env, workdir: {short(r)}")
    # Not found, as a shell says it.
    r = fed.exec_ok(sid, ["no-such-command-here"])
    check(r.get("exit_code") == 127 and r.get("timed_out") is False, f"missing command: {short(r)}")
    # Caps and binary output, as on the pods/exec path.
    r = fed.exec_ok(sid, ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a"], max_output_bytes=1000)
    check(r.get("stdout") == "a" * 1000 and r.get("stdout_truncated") is True, f"cap: {short(r)}")
    r = fed.exec_ok(sid, ["printf", "\\377\\376"])
    check(r.get("stdout_encoding") == "base64", f"binary output: {short(r)}")
    fed.shared["cold"] = sid


def test_backgrounded_grandchild_neither_holds_nor_survives(fed):
    sid = fed.shared.get("cold") or fed.create_one()["id"]
    t0 = time.monotonic()
    r = fed.exec_ok(sid, ["sh", "-c", "(sleep 3041 &); echo started"], timeout_s=3)
    took = time.monotonic() - t0
    check(r.get("stdout") == "started\n" and r.get("exit_code") == 0 and r.get("timed_out") is False,
          f"the command's own answer: {short(r)}")
    check(took < 3, f"held {took:.1f} s by the grandchild holding stdout")
    # The timeout kills what the command started, setsid escapees included.
    r = fed.exec_ok(sid, ["sh", "-c", "setsid sleep 3042 & sleep 60"], timeout_s=2)
    check(r.get("timed_out") is True and r.get("exit_code") is None, f"timeout: {short(r)}")

    def left():
        return fed.exec_ok(sid, ["sh", "-c", "ps -eo pid,args | grep 'sleep 304[12]' || true"]).get("stdout")
    check(wait_until(lambda: left() == "", 10, 0.5),
          f"a backgrounded or setsid'd grandchild outlived its command's timeout: {left()!r}")


def test_warm_claim_gets_token_and_env(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": "agentpool", "image": tr.IMAGE, "replicas": 2,
                                          "cpus": 1, "memory_gb": 1})
    check(st == 201, f"pool: {st} {short(r)}")
    check(wait_until(lambda: all(c["ready"] >= 2 for c in fed.api("GET", "/v1/pools/agentpool")[1]
                                 .get("clusters", [])), 60, 0.3), "pool not warm")
    r = fed.create({"pool": "agentpool", "env": {"WHO": "warm-" + SECRET_ENV}})
    sb = r["sandboxes"][0]
    check(sb.get("warm") is True, f"not a warm claim: {short(sb)}")
    r = fed.exec_ok(sb["id"], ["sh", "-c", "echo $WHO"])
    check(r.get("stdout") == f"warm-{SECRET_ENV}\n", f"env on a warm claim: {short(r)}")
    sim, pod = fed.sim_of(sb["id"])
    check(SECRET_ENV not in json.dumps(sim.pod(pod)), "the env landed in the claimed pod")
    fed.shared["warm"] = sb["id"]
    fed.api("DELETE", "/v1/pools/agentpool")


def agent_post(sim, pod, path, body, token=None):
    """POST to a pod's agent through kubesim's pod proxy, as code in another
    sandbox reaching the pod's IP would: (status, body)."""
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, timeout=15, context=sim.ssl)
    h = {"Authorization": "Bearer " + tr.SIM_TOKEN, "Content-Type": "application/json"}
    if token is not None:
        h["X-Access-Token"] = token
    try:
        c.request("POST", f"/api/v1/namespaces/default/pods/{pod}:49983/proxy{path}", body=json.dumps(body),
                  headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def hmac_hex(key_file, msg):
    key = open(key_file, "rb").read().rstrip(b"\r\n \t")  # the file's bytes, as the router reads them
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def test_only_a_router_initialises_an_agent(fed):
    """Code in another sandbox that reaches a warm pod's agent cannot /init
    it (no token, a made-up one, the pod's access token): what it tried to
    set is not in the env of the sandbox that claims the pod later. The
    pod carries only the SHA-256 of the pool's init token."""
    st, r = fed.api("POST", "/v1/pools", {"name": "initpool", "image": tr.IMAGE, "replicas": 2,
                                          "cpus": 1, "memory_gb": 1})
    check(st == 201, f"pool: {st} {short(r)}")
    check(wait_until(lambda: all(c["ready"] >= 2 for c in fed.api("GET", "/v1/pools/initpool")[1]
                                 .get("clusters", [])), 60, 0.3), "pool not warm")
    sim = fed.sims["a1"]
    key = os.path.join(fed.root, "agent.key")
    pool_token = hmac_hex(key, "init:a1/default/pool/initpool")
    warm = sim.pods("fedrouter.io/pool=initpool,fedrouter.io/state=warm")
    check(len(warm) >= 2, f"warm pods: {len(warm)}")
    for p in warm:
        name = p["metadata"]["name"]
        check(p["metadata"]["labels"].get("fedrouter.io/agent-init") == "pool", f"{name}: labels {p['metadata']}")
        env = p["spec"]["containers"][0].get("env", [])
        check(env == [{"name": "FR_AGENT_INIT_SHA256", "value": hashlib.sha256(pool_token.encode()).hexdigest()}],
              f"{name}: the pod's env {env}")
        for token in (None, "made-up", hmac_hex(key, "a1." + name)):
            st, body = agent_post(sim, name, "/init", {"envVars": {"https_proxy": "http://127.0.0.1:9"},
                                                       "accessToken": "attacker"}, token)
            check(st == 401 and b"init token" in body, f"{name}: /init with token {token!r}: {st} {body[:200]!r}")
    r = fed.create({"pool": "initpool", "env": {"WHO": "claimer"}})
    sb = r["sandboxes"][0]
    check(sb.get("warm") is True, f"not a warm claim: {short(sb)}")
    r = fed.exec_ok(sb["id"], ["sh", "-c", 'echo "${https_proxy-unset} $WHO"; env | grep -c FR_AGENT_INIT || true'])
    check(r.get("stdout") == "unset claimer\n0\n", f"the claimed sandbox's env: {short(r)}")
    # Claimed, it refuses anyone else's /init just the same.
    pod = sb["id"].split(".", 1)[1]
    st, body = agent_post(sim, pod, "/init", {"envVars": {"https_proxy": "x"}}, hmac_hex(key, "a1." + pod))
    check(st == 401, f"/init of a claimed sandbox with its access token: {st} {body[:200]!r}")
    # A cold create's token is its pod's own.
    sid = fed.shared.get("cold") or fed.create_one()["id"]
    cold = sim.pod(sid.split(".", 1)[1])
    check(cold["metadata"]["labels"].get("fedrouter.io/agent-init") == "pod" and
          cold["spec"]["containers"][0]["env"][0]["value"] ==
          hashlib.sha256(hmac_hex(key, "init:a1/default/pod/" + cold["metadata"]["name"]).encode()).hexdigest(),
          f"cold pod: {short(cold['metadata'])} {cold['spec']['containers'][0].get('env')}")
    fed.shared["pool_before_rotation"] = "initpool"


def test_second_replica_same_key_serves_the_sandbox(fed):
    sid = fed.shared.get("warm") or fed.shared.get("cold")
    cfg2 = os.path.join(fed.root, "fedrouter-2.conf")
    shutil.copy(fed.config, cfg2)
    r2 = fed.start_router(cfg2)
    try:
        st, r = fed.exec(sid, ["echo", "from-2"], router=r2)
        check(st == 200 and r.get("stdout") == "from-2\n", f"exec from the second replica: {st} {short(r)}")
    finally:
        r2.expected_dead = True
        tr.stop_proc(r2.proc)


def test_key_rotation_previous_key_reaches_old_sandboxes(fed):
    """A replica with a new key and the old one as previous_key_file still
    reaches a sandbox initialised with the old key through its agent; one
    without the old key runs the command of a sandbox without create-time
    env through pods/exec, and refuses (503 agent_unavailable) the one of a
    sandbox whose env only its agent has: pods/exec would run it without."""
    sid = fed.shared.get("cold") or fed.create_one(env={"GREETING": SECRET_ENV})["id"]
    plain = fed.create_one()["id"]
    old_key = os.path.join(fed.root, "agent.key")
    new_key = os.path.join(fed.root, "agent-new.key")
    with open(new_key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    with open(fed.config) as f:
        base = re.sub(r"agent = \{[^}]*\};\n", "", f.read())
    for name, extra, via in (("rotating", f'previous_key_file = "{old_key}"; ', "agent"), ("new-only", "", "pods_exec")):
        cfg = os.path.join(fed.root, f"fedrouter-{name}.conf")
        with open(cfg, "w") as f:
            f.write(base + 'agent = { image = "registry.example/fedrouter-agent:test"; port = 49983; '
                    f'key_file = "{new_key}"; {extra}}};\n')
        r2 = fed.start_router(cfg)
        try:
            if via == "agent":
                st, r = fed.exec(sid, ["sh", "-c", "echo $GREETING"], router=r2)
                check(st == 200 and r.get("stdout") == SECRET_ENV + "\n", f"{name}: exec {st} {short(r)}")
                pool = fed.shared.get("pool_before_rotation")
                if pool:
                    # A pod of a pool made before the rotation: its init
                    # token is the old key's, tried after the new key's 401.
                    st, r = fed.api("POST", "/v1/sandboxes", {"pool": pool, "env": {"R": "rotated"}}, router=r2)
                    sb = (r.get("sandboxes") or [{}])[0]
                    check(st == 201 and sb.get("warm") is True, f"{name}: claim from {pool}: {st} {short(r)}")
                    st, r = fed.exec(sb["id"], ["sh", "-c", "echo $R"], router=r2)
                    check(st == 200 and r.get("stdout") == "rotated\n", f"{name}: exec in the claim: {st} {short(r)}")
            else:
                st, r = fed.exec(sid, ["sh", "-c", "echo $GREETING"], router=r2)
                check(st == 503 and r["error"]["code"] == "agent_unavailable" and "env" in r["error"]["message"],
                      f"{name}: exec in a sandbox with create-time env: {st} {short(r)}")
                st, r = fed.exec(plain, ["echo", name], router=r2)
                check(st == 200 and r.get("stdout") == name + "\n", f"{name}: exec {st} {short(r)}")
            check(metric(fed, "fedrouter_execs_total", router=r2, via=via, outcome="ok") ==
                  (2 if via == "agent" and fed.shared.get("pool_before_rotation") else 1),
                  f"{name}: the exec did not go via {via}")
        finally:
            r2.expected_dead = True
            tr.stop_proc(r2.proc)


TESTS = [test_cold_sandbox_runs_exec_through_its_agent, test_backgrounded_grandchild_neither_holds_nor_survives,
         test_warm_claim_gets_token_and_env, test_only_a_router_initialises_an_agent,
         test_second_replica_same_key_serves_the_sandbox,
         test_key_rotation_previous_key_reaches_old_sandboxes]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: AgentFed("agent", [("a1", "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi",
                                                          "--agent-binary", os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--agent"]))
