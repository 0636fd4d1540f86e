#!/usr/bin/env python3
"""fedrouter workspaces and pause/resume, black-box (docs/api.md): the real
router in front of two kubesim clusters on loopback running the real
agent:

    ws     2 nodes, kubesim's default StorageClass "standard"
    nosc   1 node, no StorageClass at all (--default-storage-class "")

Covered: a create with `workspace` places only where the storage class is
(explain names no_storage_class), makes the sandbox's own claim (labels,
spec annotation) mounted at the path; GET shows the workspace; pause
deletes the pod and keeps the claim (state paused in GET, in the list and
with state=paused, on a second router too, never in state=running);
resume brings the same id back with the files and env it had (also after
the router was killed with SIGKILL and started again); resume of a
running sandbox and pause of a paused one are no-ops; pause without a
workspace is 409 no_workspace; terminating a running or a paused sandbox
deletes its claim; max_paused, max_workspace_bytes and max_paused_s
(the reaper deletes an expired paused sandbox) per tenant; a pool with a
workspace is refused; a bad workspace is 400 naming the field.

The Python SDK (sb.pause(), sandbox.resume(id), their .aio siblings,
ls(state=...)) and fedctl (create --workspace --on-timeout, pause,
resume) drive the same.

Usage: test_workspace.py --fedrouter PATH --kubesim PATH --agent PATH --fedctl PATH [--keep]
"""
import asyncio
import gzip
import io
import json
import os
import tarfile
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402  (AgentFed: the router's `agent` group)
from test_router import check, expect_error, short, wait_until  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import fedrouter  # noqa: E402

WATCHDOG_S = 170        # ctest's TIMEOUT is 180
WS = {"path": "/workspace", "size": "1Gi"}

CLUSTERS = [("ws", "us", ["--nodes", "2"]), ("nosc", "us", ["--nodes", "1", "--default-storage-class", ""])]


class WsFed(tap.AgentFed):
    """Tenant c gets small workspace limits; tenant b paused sandboxes that
    expire at once."""

    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        text = open(path).read()
        text = text.replace(f"max_concurrent_execs = {tr.C_MAX_EXECS};",
                            f"max_concurrent_execs = {tr.C_MAX_EXECS}; max_paused = 1; "
                            f"max_workspace_bytes = 3221225472L; max_file_bytes = 1048576;", 1)
        b = 'name = "b"; token_sha256 = "'
        i = text.index(b)
        j = text.index('";', i + len(b)) + 2
        text = text[:j] + " max_paused_s = 2; max_lifetime_s = 172800;" + text[j:]
        with open(path, "w") as f:
            f.write(text)


def claim_of(fed, sid):
    sim, pod = fed.sim_of(sid)
    st, c = sim.kube(f"/api/v1/namespaces/default/persistentvolumeclaims/{pod}-ws")
    check(st in (200, 404), f"GET claim of {sid}: {st} {short(c)}")
    return c if st == 200 else None


def gone(fed, sid):
    return claim_of(fed, sid) is None


def get(fed, sid, token=tr.TOKEN_A, router=None):
    return fed.api("GET", f"/v1/sandboxes/{sid}", token=token, router=router)


def test_explain_skips_cluster_without_storage_class(fed):
    body = {"image": tr.IMAGE, "workspace": WS}

    def settled():
        st, r = fed.api("POST", "/v1/placement/explain", body)
        rs = {c["cluster"]: (c["verdict"], c.get("reason", "")) for c in r["plan"]["clusters"]}
        return st == 200 and rs["nosc"][0] == "skip" and "no_storage_class" in rs["nosc"][1] and \
            rs["ws"][0] == "use"
    wait_until(settled, 10, 0.2)
    st, r = fed.api("POST", "/v1/placement/explain", body)
    rs = {c["cluster"]: (c["verdict"], c.get("reason", "")) for c in r["plan"]["clusters"]}
    check(rs["nosc"][0] == "skip" and "skipped: no_storage_class" in rs["nosc"][1], f"explain: {rs}")
    check(rs["ws"][0] == "use", f"explain: {rs}")
    st, r = fed.api("POST", "/v1/placement/explain", dict(body, workspace=dict(WS, storage_class="fast")))
    rs = {c["cluster"]: (c["verdict"], c.get("reason", "")) for c in r["plan"]["clusters"]}
    check(all(v[0] == "skip" and "no_storage_class" in v[1] for v in rs.values()), f"missing class: {rs}")
    st, r = fed.api("POST", "/v1/sandboxes", dict(body, workspace=dict(WS, storage_class="fast")))
    check(st == 503 and r["error"]["code"] == "no_capacity" and
          all("no_storage_class" in c["reason"] for c in r["error"]["clusters"]), f"create, no class: {st} {short(r)}")


def test_bad_workspace_bodies(fed):
    for ws in ({"path": "relative"}, {"path": "/fr-agent"}, {"size": "1Ki"}, {"size": "lots"},
               {"storage_class": "Bad_Name"}, {"colour": "red"}, "x", {"size": 5}):
        st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "workspace": ws})
        expect_error((st, r), 400, "invalid_field", f"workspace {ws}")
        check(r["error"].get("field") == "workspace", f"names the field: {short(r)}")
    st, r = fed.api("POST", "/v1/pools", {"name": "wsbad", "image": tr.IMAGE, "replicas": 1,
                                          "workspace": {"size": "nope"}})
    expect_error((st, r), 400, "invalid_field", "pool with a bad workspace")
    check(r["error"].get("field") == "workspace", f"pool: {short(r)}")


def test_workspace_pause_resume(fed):
    sb = fed.create_one(name="keep", workspace=WS, env={"KEPT": "yes-kept"}, labels={"run": "ws1"})
    sid = sb["id"]
    check(sb["cluster"] == "ws", f"placed on {sb['cluster']}")
    sim, pod = fed.sim_of(sid)
    c = claim_of(fed, sid)
    check(c is not None and c["status"]["phase"] == "Bound", f"claim: {short(c)}")
    lab = c["metadata"]["labels"]
    check(lab.get("fedrouter.io/workspace") == pod and lab.get("fedrouter.io/tenant") == "a" and
          lab.get("fedrouter.io/state") == "running", f"claim labels: {lab}")
    check("fedrouter.io/sandbox-spec" in c["metadata"].get("annotations", {}), "spec annotation")
    check(c["spec"]["resources"]["requests"]["storage"] == "1Gi", f"size: {c['spec']}")
    p = sim.pod(pod)
    mounts = p["spec"]["containers"][0].get("volumeMounts", [])
    check({"name": "fr-workspace", "mountPath": "/workspace"} in mounts, f"mount: {mounts}")
    st, g = get(fed, sid)
    check(st == 200 and g["state"] == "running" and g["workspace"]["path"] == "/workspace" and
          g["workspace"]["size"] == "1Gi", f"GET: {st} {short(g)}")
    r = fed.exec_ok(sid, ["sh", "-c", "echo precious > /workspace/f && mkdir -p /workspace/d && "
                                      "echo deep > /workspace/d/g && cat /workspace/f"])
    check(r["stdout"] == "precious\n", f"write: {short(r)}")
    # Pause: the pod goes, the claim stays, marked paused.
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 200 and r["state"] == "paused" and r["id"] == sid, f"pause: {st} {short(r)}")
    wait_until(lambda: sim.pod(pod) is None, 20)
    c = claim_of(fed, sid)
    check(c is not None and c["metadata"]["labels"].get("fedrouter.io/state") == "paused" and
          "fedrouter.io/paused-at" in c["metadata"]["annotations"], f"paused claim: {short(c)}")
    st, g = get(fed, sid)
    check(st == 200 and g["state"] == "paused" and g["labels"] == {"run": "ws1"} and g["name"] == "keep" and
          g["expires_at"] and g["paused_at"], f"GET paused: {st} {short(g)}")
    check(sid in fed.list_ids(), "paused in the list")
    check(sid in fed.list_ids("?state=paused"), "state=paused")
    check(sid not in fed.list_ids("?state=running"), "not state=running")
    check(sid in fed.list_ids("?label=run=ws1"), "label filter on a paused sandbox")
    check(sid not in fed.list_ids(token=tr.TOKEN_B), "another tenant does not see it")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/resume", token=tr.TOKEN_B)
    expect_error((st, r), 404, "sandbox_not_found", "another tenant's resume")
    st, r = fed.exec(sid, ["true"])
    check(st == 404, f"exec into a paused sandbox: {st} {short(r)}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 200 and r["state"] == "paused", f"pause again is a no-op: {st} {short(r)}")
    # A second router sees it too: the claim is the record.
    r2 = fed.start_router()
    st, g = get(fed, sid, router=r2)
    check(st == 200 and g["state"] == "paused", f"second router: {st} {short(g)}")
    # Resume (through the second router): same id, the files, the env.
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/resume", router=r2)
    check(st == 200 and r["id"] == sid and r["state"] == "running", f"resume: {st} {short(r)}")
    r2.expected_dead = True
    tr.stop_proc(r2.proc)
    r = fed.exec_ok(sid, ["sh", "-c", "cat /workspace/f /workspace/d/g; echo $KEPT"])
    check(r["stdout"] == "precious\ndeep\nyes-kept\n", f"after resume: {short(r)}")
    wait_until(lambda: (claim_of(fed, sid) or {}).get("metadata", {}).get("labels", {}).get(
        "fedrouter.io/state") == "running", 10)
    st, g = get(fed, sid)
    check(st == 200 and g["state"] == "running", f"GET after resume: {short(g)}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/resume")
    check(st == 200 and r["id"] == sid and r["state"] == "running", f"resume of a running one: {st} {short(r)}")
    # Terminate: the claim goes with it.
    st, r = fed.api("DELETE", f"/v1/sandboxes/{sid}")
    check(st == 200, f"terminate: {st} {short(r)}")
    wait_until(lambda: gone(fed, sid), 20)


def claim_state(fed, sid):
    return ((claim_of(fed, sid) or {}).get("metadata", {}).get("labels", {}).get("fedrouter.io/state"))


def pause_and_wait(fed, sid):
    sim, pod = fed.sim_of(sid)
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 200 and r["state"] == "paused", f"pause: {st} {short(r)}")
    check(wait_until(lambda: sim.pod(pod) is None and claim_state(fed, sid) == "paused", 20),
          "the pod goes, the claim is marked paused")


def test_auto_resume(fed):
    """A sandbox created with auto_resume: any call into it while paused
    (exec, a streamed file upload, a file read) resumes it and then runs;
    calls that come together share one resume; another tenant's call and a
    call into a sandbox without auto_resume resume nothing."""
    sb = fed.create_one(name="auto", workspace=WS, on_timeout="pause", auto_resume=True)
    sid = sb["id"]
    sim, pod = fed.sim_of(sid)
    fed.exec_ok(sid, ["sh", "-c", "echo kept > /workspace/f"])
    pause_and_wait(fed, sid)

    # Another tenant: 404, and the sandbox stays paused.
    st, r = fed.exec(sid, ["true"], token=tr.TOKEN_B)
    check(st == 404, f"another tenant's exec into a paused sandbox: {st} {short(r)}")
    st, r = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{sid}/files?path=/workspace/f", token=tr.TOKEN_B)
    check(st == 404, f"another tenant's file read: {st} {short(r)}")
    check(sim.pod(pod) is None and claim_state(fed, sid) == "paused", "still paused after the other tenant's calls")

    # Three execs at once: one resume, every exec runs in the resumed pod.
    out = [None] * 3

    def one(i):
        out[i] = fed.exec(sid, ["sh", "-c", "cat /workspace/f; hostname"])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    ok = all(o is not None and o[0] == 200 and o[1]["stdout"].startswith("kept\n") for o in out)
    check(ok, f"execs into the paused sandbox resumed it and ran: {[(o[0], short(o[1])) if o else None for o in out]}")
    check(claim_state(fed, sid) == "running" or wait_until(lambda: claim_state(fed, sid) == "running", 10),
          "the claim is running again")
    st, g = get(fed, sid)
    check(st == 200 and g["state"] == "running" and g["id"] == sid, f"GET after auto-resume: {st} {short(g)}")

    # A streamed upload into the paused sandbox: its body waits for the pod.
    pause_and_wait(fed, sid)
    data = os.urandom(200 * 1024)
    st, r = tr.api_call(fed.router.port, "PUT", f"/v1/sandboxes/{sid}/files?path=/workspace/up.bin",
                        token=tr.TOKEN_A, raw=data, headers={"Content-Type": "application/octet-stream"})
    check(st in (200, 201, 204), f"upload into a paused sandbox: {st} {short(r)}")
    r = fed.exec_ok(sid, ["sh", "-c", "wc -c < /workspace/up.bin; cat /workspace/f"])
    check(r["stdout"] == f"{len(data)}\nkept\n", f"the uploaded file and the old one: {short(r)}")

    # A read: resumes too.
    pause_and_wait(fed, sid)
    st, r = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{sid}/files?path=/workspace/f", token=tr.TOKEN_A)
    check(st == 200 and r == "kept\n", f"file read from a paused sandbox: {st} {short(r)}")

    # Without auto_resume nothing resumes it (test_workspace_pause_resume
    # has the 404 for exec); terminate.
    st, r = fed.api("DELETE", f"/v1/sandboxes/{sid}")
    check(st == 200, f"terminate: {st} {short(r)}")
    wait_until(lambda: gone(fed, sid), 20)


def test_pool_with_workspace_warm(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": "wsp", "image": tr.IMAGE, "replicas": 2, "workspace": WS,
                                          "clusters": ["ws"]})
    check(st in (200, 201), f"pool with a workspace: {st} {short(r)}")
    sim = fed.sims["ws"]

    def pool_ready():
        st, b = fed.api("GET", "/v1/pools/wsp")
        return st == 200 and any(c.get("ready", 0) >= 2 for c in b.get("clusters", []))
    wait_until(pool_ready, 60, 0.2)
    st, claims = sim.kube("/api/v1/namespaces/default/persistentvolumeclaims")
    pool_claims = [c for c in claims["items"] if c["metadata"]["name"].endswith("-fr-workspace")]
    check(len(pool_claims) == 2 and all(c["metadata"].get("ownerReferences") for c in pool_claims),
          f"each pool pod owns a claim: {[c['metadata']['name'] for c in pool_claims]}")
    sb = fed.create_one(pool="wsp", name="warmws", env={"W": "warm"})
    sid = sb["id"]
    check(sb["warm"] is True, f"a warm claim: {short(sb)}")
    pod = fed.sim_of(sid)[1]
    c = claim_of(fed, sid)
    check(c is None, "a pooled sandbox's claim is not <pod>-ws")
    st, c = sim.kube(f"/api/v1/namespaces/default/persistentvolumeclaims/{pod}-fr-workspace")
    check(st == 200 and not c["metadata"].get("ownerReferences") and
          c["metadata"]["labels"].get("fedrouter.io/workspace") == pod and
          "fedrouter.io/sandbox-spec" in c["metadata"]["annotations"], f"adopted claim: {short(c)}")
    st, g = get(fed, sid)
    check(st == 200 and g["workspace"]["path"] == "/workspace", f"GET: {short(g)}")
    fed.exec_ok(sid, ["sh", "-c", "echo pooled > /workspace/p"])
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 200, f"pause a pooled sandbox: {st} {short(r)}")
    wait_until(lambda: sim.pod(pod) is None, 20)
    st, c = sim.kube(f"/api/v1/namespaces/default/persistentvolumeclaims/{pod}-fr-workspace")
    check(st == 200 and c["metadata"]["labels"]["fedrouter.io/state"] == "paused", "its claim outlives the pod")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/resume")
    check(st == 200 and r["id"] == sid, f"resume: {st} {short(r)}")
    r = fed.exec_ok(sid, ["sh", "-c", "cat /workspace/p; echo $W"])
    check(r["stdout"] == "pooled\nwarm\n", f"after resume: {short(r)}")
    fed.api("DELETE", f"/v1/sandboxes/{sid}")
    wait_until(lambda: sim.kube(f"/api/v1/namespaces/default/persistentvolumeclaims/{pod}-fr-workspace")[0] == 404, 20)
    fed.api("DELETE", "/v1/pools/wsp")


def test_router_kill9_keeps_paused(fed):
    """A paused sandbox is only its claim: a router killed with SIGKILL
    and started again lists and resumes it."""
    sid = fed.create_one(name="k9", workspace=WS)["id"]
    fed.exec_ok(sid, ["sh", "-c", "echo survived > /workspace/k"])
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 200, f"pause: {st} {short(r)}")
    old = fed.router
    old.expected_dead = True
    old.proc.kill()
    check(old.proc.wait(10) == -9, "the router did not die of SIGKILL")
    fed.router = fed.start_router()

    def listed():
        st, b = fed.api("GET", "/v1/sandboxes?state=paused")
        return st == 200 and sid in [x["id"] for x in b["sandboxes"]]
    check(wait_until(listed, 20), "the paused sandbox is listed after the restart")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/resume")
    check(st == 200 and r["id"] == sid, f"resume after the restart: {st} {short(r)}")
    check(fed.exec_ok(sid, ["cat", "/workspace/k"])["stdout"] == "survived\n", "files after the restart")
    fed.api("DELETE", f"/v1/sandboxes/{sid}")
    wait_until(lambda: gone(fed, sid), 20)


def test_terminate_paused_deletes_claim(fed):
    sid = fed.create_one(name="tp", workspace=WS)["id"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    check(st == 200, f"pause: {st} {short(r)}")
    st, r = fed.api("DELETE", f"/v1/sandboxes/{sid}")
    check(st == 200 and r.get("terminated") is True, f"terminate paused: {st} {short(r)}")
    wait_until(lambda: gone(fed, sid), 20)
    st, r = get(fed, sid)
    expect_error((st, r), 404, "sandbox_not_found", "GET after terminate")


def test_pause_without_workspace_409(fed):
    sid = fed.create_one(name="plain")["id"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause")
    expect_error((st, r), 409, "no_workspace", "pause without a workspace")
    fed.api("DELETE", f"/v1/sandboxes/{sid}")
    st, r = fed.api("POST", "/v1/sandboxes/ws.sb-nothere/pause")
    expect_error((st, r), 404, "sandbox_not_found", "pause of an unknown id")
    st, r = fed.api("POST", "/v1/sandboxes/ws.sb-nothere/resume")
    expect_error((st, r), 404, "sandbox_not_found", "resume of an unknown id")


def test_tenant_limits(fed):
    # c: max_workspace_bytes 3 GiB, max_paused 1.
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "workspace": dict(WS, size="4Gi")},
                    token=tr.TOKEN_C)
    expect_error((st, r), 429, "tenant_limit", "over max_workspace_bytes")
    check("max_workspace_bytes" in short(r), f"names the limit: {short(r)}")
    a = fed.create_one(token=tr.TOKEN_C, name="l1", workspace=WS)["id"]
    b = fed.create_one(token=tr.TOKEN_C, name="l2", workspace=dict(WS, size="2Gi"))["id"]
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "workspace": WS}, token=tr.TOKEN_C)
    expect_error((st, r), 429, "tenant_limit", "3 GiB held: one more is over")
    st, r = fed.api("POST", f"/v1/sandboxes/{a}/pause", token=tr.TOKEN_C)
    check(st == 200, f"first pause: {st} {short(r)}")
    st, r = fed.api("POST", f"/v1/sandboxes/{b}/pause", token=tr.TOKEN_C)
    expect_error((st, r), 429, "tenant_limit", "second pause over max_paused")
    check("max_paused" in short(r), f"names max_paused: {short(r)}")
    for sid in (a, b):
        fed.api("DELETE", f"/v1/sandboxes/{sid}", token=tr.TOKEN_C)
    wait_until(lambda: gone(fed, a) and gone(fed, b), 20)


def test_paused_expires(fed):
    # b: max_paused_s 2: the reaper deletes the paused sandbox's claim.
    sid = fed.create_one(token=tr.TOKEN_B, name="exp", workspace=WS)["id"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/pause", token=tr.TOKEN_B)
    check(st == 200, f"pause: {st} {short(r)}")
    wait_until(lambda: gone(fed, sid), 30)
    check(sid not in fed.list_ids(token=tr.TOKEN_B), "an expired paused sandbox is gone from the list")


def test_python_sdk(fed):
    c = fedrouter.Client(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_A)
    try:
        sb = c.create(image=tr.IMAGE, name="sdkws", workspace={"path": "/data", "size": "1Gi"}, env={"E": "e1"})
        check(sb.workspace == {"path": "/data", "size": "1Gi", "storage_class": "standard"},
              f"sb.workspace: {sb.workspace}")
        sb.exec("sh", "-c", "echo sdk > /data/s")
        sb.pause()
        check(sb.state == "paused", f"after pause: {sb.state}")
        check([s.id for s in c.ls(state="paused")] == [sb.id], "ls(state='paused')")
        check(sb.id not in [s.id for s in c.ls(state="running")], "ls(state='running')")
        back = fedrouter.sandbox.configure(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_A).resume(sb.id)
        check(back.id == sb.id and back.state == "running", f"resume: {back}")
        r = back.exec("sh", "-c", "cat /data/s; echo $E")
        check(r.stdout == "sdk\ne1\n", f"after resume: {r.stdout!r}")

        async def aio():
            await sb.pause.aio()
            check(sb.state == "paused", "pause.aio")
            await sb.resume.aio()
            check(sb.state == "running", "resume.aio")
            return (await sb.exec.aio("cat", "/data/s")).stdout
        check(asyncio.run(aio()) == "sdk\n", "aio round trip")
        plain = c.create(image=tr.IMAGE, name="sdkplain")
        try:
            plain.pause()
            check(False, "pause without a workspace did not raise")
        except fedrouter.NoWorkspace as e:
            check(e.status == 409, f"NoWorkspace: {e}")
        plain.terminate()
        sb.terminate()
        wait_until(lambda: gone(fed, sb.id), 20)
    finally:
        c.close()
        fedrouter.sandbox.close()


def fedctl(fed, *args):
    env = dict(os.environ, FEDROUTER_URL=f"http://127.0.0.1:{fed.router.port}", FEDROUTER_TOKEN=tr.TOKEN_A)
    p = subprocess.run([tr.ARGS.fedctl] + list(args), env=env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def test_fedctl(fed):
    rc, out, err = fedctl(fed, "--json", "create", "--image", tr.IMAGE, "--name", "ctl",
                          "--workspace", "/w:1Gi", "--on-timeout", "pause")
    check(rc == 0, f"fedctl create: {rc} {out} {err}")
    sid = json.loads(out)["sandboxes"][0]["id"]
    p = fed.sim_of(sid)[0].pod(fed.sim_of(sid)[1])
    check(p["metadata"]["labels"].get("fedrouter.io/on-timeout") == "pause", f"on-timeout label: {p['metadata']}")
    rc, out, err = fedctl(fed, "pause", sid)
    check(rc == 0 and out.strip() == f"paused {sid} (paused)", f"fedctl pause: {rc} {out!r} {err}")
    rc, out, err = fedctl(fed, "--json", "ls")
    check(rc == 0 and any(s["id"] == sid and s["state"] == "paused" for s in json.loads(out)["sandboxes"]),
          f"fedctl ls: {out}")
    rc, out, err = fedctl(fed, "resume", sid)
    check(rc == 0 and out.strip() == f"resumed {sid} (running)", f"fedctl resume: {rc} {out!r} {err}")
    rc, out, err = fedctl(fed, "pause", "nosuch.sb-x")
    check(rc == 1 and "sandbox_not_found" in err, f"fedctl pause unknown: {rc} {err}")
    rc, out, err = fedctl(fed, "create", "--image", tr.IMAGE, "--on-timeout", "pause")
    check(rc == 1 and "on_timeout" in err, f"on-timeout without workspace: {rc} {err}")
    rc, out, err = fedctl(fed, "create", "--image", tr.IMAGE, "--workspace", "nope")
    check(rc == 2, f"bad --workspace is a usage error: {rc} {err}")
    fedctl(fed, "terminate", sid)
    wait_until(lambda: gone(fed, sid), 20)


def tar_of(entries, gz=False):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w") as t:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return gzip.compress(bio.getvalue()) if gz else bio.getvalue()


def test_snapshot_and_restore(fed):
    src = fed.create_one(name="snapsrc", workspace=WS)["id"]
    dst = fed.create_one(name="snapdst")["id"]
    fed.exec_ok(src, ["sh", "-c", "mkdir -p /workspace/a/b && echo one > /workspace/a/b/one && "
                                  "head -c 300000 /dev/urandom > /workspace/blob && ln -s a/b/one /workspace/l"])
    blob = fed.exec_ok(src, ["sha256sum", "/workspace/blob"])["stdout"].split()[0]
    st, body, h = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{src}/snapshot?path=/workspace", None,
                              tr.TOKEN_A, full=True, raw=None)
    check(st == 200 and h.get("content-type") == "application/x-tar", f"snapshot: {st} {h}")
    raw = fed_raw(fed, "GET", f"/v1/sandboxes/{src}/snapshot?path=/workspace")
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as t:
        names = sorted(m.name.rstrip("/") for m in t.getmembers())
        check(names == ["a", "a/b", "a/b/one", "blob", "l"], f"archive members: {names}")
        check(t.getmember("l").issym() and t.getmember("l").linkname == "a/b/one", "symlink kept")
    gz = fed_raw(fed, "GET", f"/v1/sandboxes/{src}/snapshot?path=/workspace&gzip=1")
    check(gz[:2] == b"\x1f\x8b", "gzip")
    # Into another sandbox: the directory's content is replaced.
    fed.exec_ok(dst, ["sh", "-c", "mkdir -p /restored && echo stale > /restored/stale"])
    st, r = tr.api_call(fed.router.port, "POST", f"/v1/sandboxes/{dst}/restore?path=/restored", None, tr.TOKEN_A,
                        headers={"Content-Type": "application/gzip"}, raw=gz)
    check(st == 200 and r["restored"] is True and r["archive_bytes"] == len(gz), f"restore: {st} {short(r)}")
    r = fed.exec_ok(dst, ["sh", "-c", "cat /restored/a/b/one /restored/l; sha256sum /restored/blob; ls /restored"])
    check(r["stdout"] == f"one\none\n{blob}  /restored/blob\na\nblob\nl\n", f"restored tree: {short(r)}")
    # Unsafe entries: refused, naming the entry; nothing changed.
    st, r = tr.api_call(fed.router.port, "POST", f"/v1/sandboxes/{dst}/restore?path=/restored", None, tr.TOKEN_A,
                        raw=tar_of([("ok", b"x"), ("../escape", b"x")]))
    check(st == 400 and r["error"]["code"] == "invalid_archive" and "../escape" in r["error"]["message"],
          f"unsafe archive: {st} {short(r)}")
    r = fed.exec_ok(dst, ["sh", "-c", "ls /restored; ls / | grep -c escape"])
    check(r["stdout"] == "a\nblob\nl\n0\n", f"after the refusal: {short(r)}")
    st, r = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{src}/snapshot?path=/nope", None, tr.TOKEN_A)
    check(st == 404 and r["error"]["code"] == "path_not_found", f"snapshot of nothing: {st} {short(r)}")
    st, r = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{src}/snapshot?path=relative", None, tr.TOKEN_A)
    check(st == 400 and r["error"]["code"] == "invalid_path", f"relative: {st} {short(r)}")
    st, r = tr.api_call(fed.router.port, "GET", f"/v1/sandboxes/{src}/snapshot?path=/workspace", None, tr.TOKEN_B)
    check(st == 404, f"another tenant's snapshot: {st}")
    # The E2B relay never reaches the agent's /tar.
    st, r = tr.api_call(fed.router.port, "GET", "/e2b/tar?path=/workspace", None, None,
                        headers={"E2b-Sandbox-Id": src, "X-Access-Token": "x" * 64})
    check(st in (400, 401, 404, 501), f"/e2b/tar: {st} {short(r)}")
    # The SDK.
    c = fedrouter.Client(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_A)
    try:
        sb = c.get(src)
        snap = sb.snapshot("/workspace/a")
        with tarfile.open(fileobj=io.BytesIO(snap)) as t:
            check(sorted(m.name for m in t.getmembers()) == ["b", "b/one"], "sdk snapshot")
        c.get(dst).restore(snap, "/sdk")
        check(fed.exec_ok(dst, ["cat", "/sdk/b/one"])["stdout"] == "one\n", "sdk restore")
        try:
            c.get(dst).restore(tar_of([("/abs", b"x")]), "/sdk")
            check(False, "an absolute entry was accepted")
        except fedrouter.errors.InvalidArchive as e:
            check(e.status == 400 and "/abs" in e.message, f"InvalidArchive: {e}")
    finally:
        c.close()
    for sid in (src, dst):
        fed.api("DELETE", f"/v1/sandboxes/{sid}")


def test_restore_bounded_by_max_file_bytes(fed):
    # c: max_file_bytes 1 MiB, as sent and as unpacked.
    sid = fed.create_one(token=tr.TOKEN_C, name="bound")["id"]
    fed.exec_ok(sid, ["sh", "-c", "mkdir -p /r && echo keep > /r/keep"], token=tr.TOKEN_C)
    big = tar_of([("zeros", b"\0" * (3 << 20))])
    st, r = tr.api_call(fed.router.port, "POST", f"/v1/sandboxes/{sid}/restore?path=/r", None, tr.TOKEN_C, raw=big)
    check(st == 413 and r["error"]["code"] == "file_too_large", f"past the bound as sent: {st} {short(r)}")
    small = gzip.compress(big)
    check(len(small) < (1 << 20), "the gzip'd archive is small")
    st, r = tr.api_call(fed.router.port, "POST", f"/v1/sandboxes/{sid}/restore?path=/r", None, tr.TOKEN_C,
                        raw=small)
    check(st == 413 and r["error"]["code"] == "file_too_large", f"past the bound unpacked: {st} {short(r)}")
    r = fed.exec_ok(sid, ["sh", "-c", "ls -a /r"], token=tr.TOKEN_C)
    check(r["stdout"] == ".\n..\nkeep\n", f"nothing half-written: {short(r)}")
    fed.api("DELETE", f"/v1/sandboxes/{sid}", token=tr.TOKEN_C)


def tree_digest(fed, sid, d, token=tr.TOKEN_A):
    r = fed.exec_ok(sid, ["sh", "-c", f"cd {d} && find . | sort && find . -type f | sort | xargs sha256sum"],
                    token=token)
    return r["stdout"]


def test_fork(fed):
    src = fed.create_one(name="fsrc", workspace=WS, labels={"run": "fork"})["id"]
    fed.exec_ok(src, ["sh", "-c", "mkdir -p /workspace/p/q /data && head -c 2000000 /dev/urandom > /workspace/big && "
                                  "echo hi > /workspace/p/q/hi && echo d > /data/d && ln -s p/q/hi /workspace/ln"])
    want_ws, want_data = tree_digest(fed, src, "/workspace"), tree_digest(fed, src, "/data")
    before = fed.list_ids()
    st, r = fed.api("POST", f"/v1/sandboxes/{src}/fork", {"count": 3, "paths": ["/workspace", "/data"],
                                                          "labels": {"run": "forked"}})
    check(st == 201 and len(r["sandboxes"]) == 3, f"fork: {st} {short(r)}")
    check(r["copied"]["source"] == src and r["copied"]["paths"] == ["/workspace", "/data"] and
          r["copied"]["archive_bytes"] > 2000000, f"copied: {r.get('copied')}")
    ids = [x["id"] for x in r["sandboxes"]]
    for sid in ids:
        check(tree_digest(fed, sid, "/workspace") == want_ws, f"{sid}: /workspace differs")
        check(tree_digest(fed, sid, "/data") == want_data, f"{sid}: /data differs")
    check(all(x["name"].startswith("fsrc-fork") for x in r["sandboxes"]), f"names: {[x['name'] for x in r['sandboxes']]}")
    check(fed.exec_ok(src, ["cat", "/workspace/p/q/hi"])["stdout"] == "hi\n", "the source keeps running")
    check(set(fed.list_ids("?label=run=forked")) == set(ids), "labels of the forks")
    # A path that is not there: nothing is kept.
    st, r = fed.api("POST", f"/v1/sandboxes/{src}/fork", {"count": 2, "paths": ["/nope"]})
    check(st == 502 and r["error"]["code"] == "copy_failed" and "/nope" in r["error"]["message"] and
          len(r["error"]["deleted"]) == 2, f"fork of a missing path: {st} {short(r)}")
    wait_until(lambda: fed.list_ids() == before | set(ids), 20)
    # Bad bodies; past the tenant's limit: 429 before anything is made.
    for body, field in (({"count": 0, "paths": ["/workspace"]}, "count"), ({"count": 1, "paths": []}, "paths"),
                        ({"count": 1, "paths": ["rel"]}, "paths"), ({"count": 1, "paths": ["/a/../b"]}, "paths"),
                        ({"count": 1, "paths": ["/w"], "colour": "red"}, "colour")):
        st, r = fed.api("POST", f"/v1/sandboxes/{src}/fork", body)
        check(st == 400 and r["error"].get("field") == field, f"fork {body}: {st} {short(r)}")
    csrc = fed.create_one(token=tr.TOKEN_C, name="climit")["id"]
    n_before = len(fed.list_ids(token=tr.TOKEN_C))
    st, r = fed.api("POST", f"/v1/sandboxes/{csrc}/fork", {"count": tr.C_MAX_SANDBOXES, "paths": ["/tmp"],
                                                           "image": tr.IMAGE}, token=tr.TOKEN_C)
    expect_error((st, r), 429, "tenant_limit", "fork past max_sandboxes")
    check(len(fed.list_ids(token=tr.TOKEN_C)) == n_before, "nothing made")
    fed.api("DELETE", f"/v1/sandboxes/{csrc}", token=tr.TOKEN_C)
    # A create's restore_from.
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "name": "rfrom",
                                              "restore_from": {"sandbox": src, "path": "/workspace"}})
    check(st == 201 and r["copied"]["paths"] == ["/workspace"], f"restore_from: {st} {short(r)}")
    rid = r["sandboxes"][0]["id"]
    check(tree_digest(fed, rid, "/workspace") == want_ws, "restore_from copy differs")
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "restore_from": {"sandbox": "ws.sb-none",
                                                                                   "path": "/w"}})
    expect_error((st, r), 404, "sandbox_not_found", "restore_from an unknown sandbox")
    # SDK and fedctl.
    c = fedrouter.Client(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_A)
    try:
        sbs = c.get(src).fork(2, ["/data"])
        check(len(sbs) == 2 and all(tree_digest(fed, x.id, "/data") == want_data for x in sbs), "sdk fork")

        async def aio():
            return await c.get(src).fork.aio(1, "/data")
        more = asyncio.run(aio())
        check(len(more) == 1, "sdk fork.aio")
        forked = [x.id for x in sbs] + [x.id for x in more]
    finally:
        c.close()
    rc, out, err = fedctl(fed, "fork", src, "-n", "2", "--path", "/data")
    check(rc == 0 and len(out.split()) == 2, f"fedctl fork: {rc} {out} {err}")
    for sid in [src, rid] + ids + forked + out.split():
        fed.api("DELETE", f"/v1/sandboxes/{sid}")


def test_long_lifetimes_and_keepalive(fed):
    # b: max_lifetime_s two days, past the config's 3600.
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "timeout_s": 100000})
    check(st == 400 and r["error"]["field"] == "timeout_s", f"a past its max: {st} {short(r)}")
    t0 = time.time()
    sb = fed.create_one(token=tr.TOKEN_B, name="long", timeout_s=100000)
    exp = tr_time(sb["expires_at"])
    check(abs(exp - (t0 + 100000)) < 30, f"expires_at {sb['expires_at']}")
    p = fed.sim_of(sb["id"])[0].pod(fed.sim_of(sb["id"])[1])
    check(p["spec"]["activeDeadlineSeconds"] == 172800, f"the pod's deadline: {p['spec'].get('activeDeadlineSeconds')}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sb['id']}/keepalive", {"timeout_s": 150000}, token=tr.TOKEN_B)
    check(st == 200 and r["capped"] is False and abs(tr_time(r["expires_at"]) - (time.time() + 150000)) < 30,
          f"keepalive: {st} {short(r)}")
    wait_until(lambda: abs(tr_time(fed.api("GET", f"/v1/sandboxes/{sb['id']}", token=tr.TOKEN_B)[1]["expires_at"])
                           - (time.time() + 150000)) < 30, 10)
    st, r = fed.api("POST", f"/v1/sandboxes/{sb['id']}/keepalive", {"timeout_s": 172800}, token=tr.TOKEN_B)
    check(st == 200 and tr_time(r["expires_at"]) <= tr_time(sb["created_at"]) + 172800,
          f"keepalive never past the start + max: {st} {short(r)} (created {sb['created_at']})")
    st, r = fed.api("POST", f"/v1/sandboxes/{sb['id']}/keepalive", {"timeout_s": 172801}, token=tr.TOKEN_B)
    check(st == 400 and r["error"]["field"] == "timeout_s", f"past the max: {st} {short(r)}")
    st, r = tr.api_call(fed.router.port, "POST", f"/e2b/sandboxes/{sb['id']}/timeout", {"timeout": 120000}, None,
                        {"X-API-Key": tr.TOKEN_B})
    check(st == 204, f"E2B setTimeout within the tenant's max: {st} {short(r)}")
    # The reaper takes a sandbox whose keepalive was short.
    s2 = fed.create_one(name="short")["id"]
    st, r = fed.api("POST", f"/v1/sandboxes/{s2}/keepalive", {"timeout_s": 1})
    check(st == 200, f"keepalive 1 s: {st} {short(r)}")
    wait_until(lambda: s2 not in fed.list_ids(), 20)
    st, r = fed.api("POST", f"/v1/sandboxes/{s2}/keepalive", {})
    check(st == 404, f"keepalive of a gone sandbox: {st}")
    c = fedrouter.Client(f"http://127.0.0.1:{fed.router.port}", tr.TOKEN_B)
    try:
        r = c.get(sb["id"]).keepalive(90000)
        check(abs(tr_time(r.expires_at) - (time.time() + 90000)) < 30 and r.capped is False, f"sdk keepalive: {r}")
    finally:
        c.close()
    fed.api("DELETE", f"/v1/sandboxes/{sb['id']}", token=tr.TOKEN_B)


def tr_time(s):
    import calendar
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))


def fed_raw(fed, method, path, token=tr.TOKEN_A):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=60)
    try:
        c.request(method, path, headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        data = r.read()
        check(r.status == 200, f"{method} {path}: {r.status} {data[:300]!r}")
        return data
    finally:
        c.close()


TESTS = [test_explain_skips_cluster_without_storage_class, test_bad_workspace_bodies, test_workspace_pause_resume,
         test_auto_resume,
         test_pool_with_workspace_warm, test_router_kill9_keeps_paused,
         test_terminate_paused_deletes_claim, test_pause_without_workspace_409, test_tenant_limits,
         test_paused_expires, test_python_sdk, test_fedctl, test_snapshot_and_restore,
         test_restore_bounded_by_max_file_bytes, test_fork, test_long_lifetimes_and_keepalive]


def main():
    tr.WATCHDOG_S = WATCHDOG_S
    threading.Thread(target=tr.watchdog, daemon=True).start()

    def make():
        agent = ["--agent-binary", os.path.abspath(tr.ARGS.agent)]
        return WsFed("workspace", [(n, r, extra + agent) for n, r, extra in CLUSTERS])
    return tr.run_one_federation(__doc__, make, TESTS, extra_paths=("--agent", "--fedctl"))


if __name__ == "__main__":
    sys.exit(main())
