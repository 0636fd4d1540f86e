#!/usr/bin/env python3
"""Black-box tests of the Python SDK against a real fedrouter in front of two
kubesim clusters (TLS + token), started by tests/sdk/fedharness.py the way
tests/router/test_router.py does it.

One federation for the whole run: c1 and c2 (region us), 10 nodes of 512
cpu / 4 TiB / 110 pods each, short delays, kubesim --fast-exec (trivial
commands answered without forking; everything else runs as a real process),
a `default` warm pool of 3 per cluster. Tenants: `a` (most tests), `lim`
(max_sandboxes 2: the 429), `docs` (the snippets of docs/sdk-python.md),
`ex` (the examples) — so each one's listings and cleanup are its own.

Covers every SDK entry point blocking and .aio; a 200-sandbox batch; 500
concurrent exec.aio on one event loop; the context managers terminating on
exceptions; typed errors for 404/429/503 (and 400/401); the SPEC §8 calls
(exec_stream, files, processes) against a second, one-cluster federation
whose sandboxes run the real fedrouter-agent (--agent); the create and pool
pod options (runtime_class, node_selector, tolerations, gpus) against a third
with a GPU node and a RuntimeClass, the pods read back from kubesim; examples/rl_reward.py and
examples/quickstart.py run and their output checked; every
`<!-- snippet -->` block of docs/sdk-python.md run verbatim.

Usage: test_sdk_blackbox.py --fedrouter PATH --kubesim PATH [unittest args]
"""
import argparse
import asyncio
import http.client
import json
import os
import re
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SDK = os.path.join(ROOT, "sdk", "python")
sys.path.insert(0, SDK)
sys.path.insert(0, HERE)

import fedharness as H  # noqa: E402
import fedrouter  # noqa: E402
from fedrouter import Client, errors, sandbox  # noqa: E402

ARGS = None
FED = None
TOK = {t: f"{t}-" + os.urandom(8).hex() for t in ("a", "lim", "docs", "ex")}
IMAGE = "python:3.12"
NODES = ["--nodes", "10", "--node-cpu", "512", "--node-memory", "4Ti", "--node-pods", "110"]


def setUpModule():
    global FED
    H.start_watchdog(285)  # ctest's TIMEOUT is 300
    FED = H.Federation(ARGS.kubesim, ARGS.fedrouter,
                       [("c1", "us", NODES + H.FAST), ("c2", "us", NODES + H.FAST)],
                       {"a": (TOK["a"], "admin = true;"), "lim": (TOK["lim"], "max_sandboxes = 2;"),
                        "docs": (TOK["docs"], ""), "ex": (TOK["ex"], "")},
                       fast_exec=True, python_alias=True, tls=not ARGS.sanitized)
    c = Client(FED.url, TOK["a"])
    c.create_pool("default", IMAGE, cpus=1, memory_gb=2, replicas=3, shared=True)  # every tenant's
    c.close()
    if not FED.wait_pool(TOK["a"], "default", 60):
        raise RuntimeError("pool default not ready")
    print(f"# federation up at {FED.url} (python in sandboxes: {FED.python_alias})", flush=True)


def tearDownModule():
    if FED is not None:
        problems = FED.stop()
        if problems:
            raise RuntimeError("teardown: " + "; ".join(problems))


def client(tenant="a", **kw):
    return Client(FED.url, TOK[tenant], **kw)


def cleanup(c):
    """Terminates every sandbox of <c>'s tenant; returns how many there were."""
    sbs = c.ls()
    for sb in sbs:
        sb.terminate(missing_ok=True)
    return len(sbs)


def run_async(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class SDKTest(unittest.TestCase):
    def setUp(self):
        self.c = client()
        self.t0 = time.monotonic()

    def tearDown(self):
        left = cleanup(self.c)
        self.c.close()
        self.assertEqual(left, 0, f"{self.id()} left {left} sandboxes behind")


class TestSync(SDKTest):
    def test_create_exec_terminate(self):
        sb = self.c.create(name="calc", pool="default", labels={"t": "sync"})
        self.assertRegex(sb.id, r"^(c1|c2)\.")
        self.assertEqual((sb.name, sb.state, sb.pool, sb.warm, sb["cluster"]), ("calc", "running", "default", True,
                                                                                sb.id.split(".")[0]))
        self.assertEqual(sb.placement.created, 1)
        r = sb.exec("python3", "-c", "print(2 ** 10)")
        self.assertEqual((r["stdout"], r.stdout, r.exit_code, r.timed_out, r.stderr), ("1024\n",) * 2 + (0, False, ""))
        self.assertIsInstance(r.duration_ms, int)
        r = sb.exec("sh", "-c", "echo out; echo err >&2; exit 7")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.ok), ("out\n", "err\n", 7, False))
        r = sb.exec("sh", "-c", 'read x; echo "$x-$FR_V"; pwd', stdin="hi\n", env={"FR_V": "v 1"}, workdir="/tmp")
        self.assertEqual(r.stdout, "hi-v 1\n/tmp\n")
        r = sb.exec("sh", "-c", "printf '\\377\\376ok'")
        self.assertEqual((r.stdout_bytes, r.get("stdout_encoding")), (b"\xff\xfeok", "base64"))
        r = sb.exec("sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x", max_output_bytes=100)
        self.assertEqual((len(r.stdout), r.stdout_truncated), (100, True))
        t = time.monotonic()
        r = sb.exec("sleep", "30", timeout=1)
        self.assertTrue(r.timed_out and time.monotonic() - t < 10, r)
        self.assertEqual(self.c.get(sb.id).id, sb.id)
        self.assertEqual(sb.refresh().state, "running")
        self.assertIn(sb.id, [s.id for s in self.c.ls(label={"t": "sync"})])
        self.assertIn(sb.id, [s.id for s in self.c.ls(name_prefix="cal", pool="default")])
        self.assertTrue(sb.terminate())
        with self.assertRaises(errors.SandboxNotFound) as cm:
            sb.exec("true")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "sandbox_not_found"))
        self.assertTrue(cm.exception.request_id)
        self.assertFalse(sb.terminate(missing_ok=True))

    def test_module_functions_and_cold_create(self):
        sandbox.configure(FED.url, TOK["a"])
        try:
            sb = sandbox.create(name="cold", image=IMAGE, cpus=0.5, memory_gb=1, timeout_s=300, region="us",
                                clusters=["c2"])
            self.assertEqual((sb.cluster, sb.warm), ("c2", False))
            self.assertEqual(sandbox.exec(sb.id, "echo", "hi").stdout, "hi\n")
            self.assertEqual(sandbox.get(sb.id).name, "cold")
            self.assertEqual([s.id for s in sandbox.ls(cluster="c2", name_prefix="cold")], [sb.id])
            self.assertTrue(sandbox.terminate(sb.id))
            self.assertTrue(sandbox.health())
            self.assertIn("version", sandbox.policy())
        finally:
            sandbox.close()

    def test_pools_clusters_explain(self):
        cl = self.c.clusters()
        self.assertEqual(sorted(x.name for x in cl), ["c1", "c2"])
        self.assertTrue(all(x.healthy for x in cl))
        p = self.c.create_pool("sdkpool", IMAGE, cpus=1, memory_gb=1, replicas=1, clusters=["c1"])
        self.assertEqual(p.name, "sdkpool")
        with self.assertRaises(errors.PoolExists):
            self.c.create_pool("sdkpool", IMAGE, replicas=1)
        self.assertIn("sdkpool", [x.name for x in self.c.list_pools()])
        self.c.set_pool_size("sdkpool", replicas=2)
        self.assertTrue(H.wait_until(lambda: self.c.get_pool("sdkpool").clusters[0].target == 2, 10),
                        self.c.get_pool("sdkpool"))
        self.assertTrue(FED.wait_pool(TOK["a"], "sdkpool", 30))
        plan = self.c.explain(num_sandboxes=3, pool="sdkpool")
        self.assertEqual(plan.plan.planned, 3)
        self.assertEqual({x.cluster for x in plan.plan.clusters}, {"c1", "c2"})
        self.c.delete_pool("sdkpool")
        with self.assertRaises(errors.PoolNotFound):
            self.c.get_pool("sdkpool")
        with self.assertRaises(errors.PoolNotFound):
            self.c.create(pool="nope")

    def test_batch_200_with_progress(self):
        seen = []
        t = time.monotonic()
        sbs = self.c.create(name="big", num_sandboxes=200, image=IMAGE, cpus=1, memory_gb=1,
                            labels={"run": "b200"}, progress=lambda d, n: seen.append((d, n)))
        el = time.monotonic() - t
        self.assertIsInstance(sbs, fedrouter.SandboxList)
        self.assertEqual(len(sbs), 200)
        self.assertEqual([s.name for s in sbs], sorted(f"big-{i:04d}" for i in range(1, 201)))
        self.assertEqual((sbs.placement.requested, sbs.placement.created), (200, 200))
        self.assertEqual((seen[0], seen[-1]), ((0, 200), (200, 200)))
        self.assertEqual(len({s.id for s in sbs}), 200)
        self.assertEqual(len(self.c.ls(label="run=b200")), 200)
        r = sbs[123].exec("echo", "hi")
        self.assertEqual(r.stdout, "hi\n")
        ids = self.c.terminate_many(label={"run": "b200"})
        self.assertEqual(len(ids), 200)
        self.assertEqual(self.c.ls(label="run=b200"), [])
        print(f"    (200-sandbox batch in {el:.2f} s; {len(seen)} progress reports)", flush=True)

    def test_context_managers_terminate_on_exception(self):
        ids = []
        with self.assertRaises(ZeroDivisionError):
            with self.c.create(name="cm") as sb:
                ids.append(sb.id)
                self.assertEqual(sb.exec("echo", "in").stdout, "in\n")
                1 / 0
        with self.assertRaises(KeyError):
            with self.c.create(name="cml", num_sandboxes=3) as sbs:
                ids.extend(s.id for s in sbs)
                raise KeyError("x")
        for i in ids:
            with self.assertRaises(errors.SandboxNotFound):
                self.c.get(i)

    def test_typed_errors(self):
        with self.assertRaises(errors.SandboxNotFound):
            self.c.get("c1.no-such-pod")
        with self.assertRaises(errors.InvalidId):
            self.c.get("nodot")
        with self.assertRaises(errors.InvalidField) as cm:
            self.c.create(image=IMAGE, cpus=1000)
        self.assertEqual(cm.exception.field, "cpus")
        with self.assertRaises(errors.InvalidArgv):
            self.c.exec("c1.x", "")
        with self.assertRaises(errors.Unauthorized):
            Client(FED.url, "wrong-token").ls()
        with self.assertRaises(errors.ClusterNotFound):
            self.c.create(clusters=["nowhere"])
        # 503 no_capacity: more than the federation holds, refused at once.
        t = time.monotonic()
        with self.assertRaises(errors.NoCapacity) as cm:
            self.c.create(name="huge", num_sandboxes=5000, image=IMAGE, cpus=1, memory_gb=1, retry_budget_s=0)
        e = cm.exception
        self.assertEqual((e.status, e.code), (503, "no_capacity"))
        self.assertIsNotNone(e.retry_after)
        self.assertIn("c1", json.dumps(e.clusters))
        self.assertTrue(e.request_id)
        self.assertLess(time.monotonic() - t, 30)
        # and retried within the budget: at least one more try, bounded
        t = time.monotonic()
        with self.assertRaises(errors.NoCapacity):
            self.c.create(name="huge", num_sandboxes=5000, image=IMAGE, cpus=1, memory_gb=1,
                          retry_budget_s=e.retry_after + 0.5)
        self.assertGreaterEqual(time.monotonic() - t, e.retry_after * 0.9)

    def test_tenant_limit_429_and_retry(self):
        c = client("lim")
        try:
            two = c.create(name="lim", num_sandboxes=2)
            with self.assertRaises(errors.TenantLimit) as cm:
                c.create(name="lim3", retry_budget_s=0)
            e = cm.exception
            self.assertEqual((e.status, e.code), (429, "tenant_limit"))
            self.assertIsNotNone(e.retry_after)
            self.assertIn(e.limit, (None, "max_sandboxes"))
            # Room comes back while the create waits out Retry-After: it succeeds.
            import threading
            threading.Timer(0.3, lambda: two[0].terminate()).start()
            sb = c.create(name="lim3", retry_budget_s=max(e.retry_after, 1) * 3 + 1)
            self.assertEqual(sb.name, "lim3")
        finally:
            cleanup(c)
            c.close()


class TestAsync(SDKTest):
    def test_every_call_aio(self):
        c = self.c

        async def main():
            cl = await c.clusters.aio()
            self.assertEqual(len(cl), 2)
            self.assertIn("default", [p.name for p in await c.list_pools.aio()])
            self.assertEqual((await c.get_pool.aio("default")).name, "default")
            await c.create_pool.aio("apool", IMAGE, replicas=1, clusters=["c2"])
            await c.set_pool_size.aio("apool", 2)
            for _ in range(100):
                if (await c.get_pool.aio("apool")).clusters[0].target == 2:
                    break
                await asyncio.sleep(0.1)
            self.assertEqual((await c.get_pool.aio("apool")).clusters[0].target, 2)
            await c.delete_pool.aio("apool")
            plan = await c.explain.aio(num_sandboxes=2)
            self.assertEqual(plan.plan.planned, 2)
            sb = await c.create.aio(name="asb", labels={"t": "aio"})
            r = await sb.exec.aio("python3", "-c", "import sys; print(sys.stdin.read()[::-1])", stdin="abc",
                                  timeout=30)
            self.assertEqual((r["stdout"], r.exit_code), ("cba\n", 0))
            self.assertEqual((await c.get.aio(sb.id)).id, sb.id)
            self.assertEqual((await sb.refresh.aio()).state, "running")
            self.assertEqual([s.id for s in await c.ls.aio(label="t=aio")], [sb.id])
            self.assertTrue(await sb.terminate.aio())
            with self.assertRaises(errors.SandboxNotFound):
                await sb.exec.aio("true")
            sbs = await c.create.aio(name="ab", num_sandboxes=3, labels={"t": "aio2"})
            self.assertEqual(len(sbs), 3)
            self.assertEqual(sorted(await c.terminate_many.aio(label={"t": "aio2"})), sorted(s.id for s in sbs))
            # module functions
            sandbox.configure(FED.url, TOK["a"])
            try:
                sb2 = await sandbox.create.aio(name="mod")
                self.assertEqual((await sandbox.exec.aio(sb2.id, "echo", "m")).stdout, "m\n")
                self.assertEqual((await sandbox.get.aio(sb2.id)).id, sb2.id)
                self.assertIn(sb2.id, [s.id for s in await sandbox.ls.aio()])
                self.assertTrue(await sandbox.terminate.aio(sb2.id))
                self.assertEqual(len(await sandbox.clusters.aio()), 2)
                self.assertTrue(await sandbox.health.aio())
            finally:
                await sandbox.aclose()
                sandbox.close()
            with self.assertRaises(errors.NoCapacity):
                await c.create.aio(num_sandboxes=5000, image=IMAGE, retry_budget_s=0)
            with self.assertRaises(errors.SandboxNotFound):
                await c.get.aio("c2.nope")
            await c.aclose()
        run_async(main())

    def test_500_concurrent_exec_aio(self):
        c = self.c

        async def main():
            sbs = await c.create.aio(name="fan", num_sandboxes=100, image=IMAGE, cpus=0.5, memory_gb=0.5)
            try:
                jobs = [(sbs[i % len(sbs)], f"n{i}") for i in range(500)]
                t = time.monotonic()
                rs = await asyncio.gather(*(sb.exec.aio("echo", word) for sb, word in jobs),
                                          return_exceptions=True)
                el = time.monotonic() - t
                # Every call must come back with its own answer. On a loaded
                # machine (ASan build) the router may fail a few with 503
                # cluster_unavailable (its TLS connect to kubesim times out):
                # typed, counted, tolerated up to 10%; anything else fails.
                unavailable = 0
                for (sb, word), r in zip(jobs, rs):
                    if isinstance(r, errors.ClusterUnavailable):
                        unavailable += 1
                        continue
                    if isinstance(r, BaseException):
                        raise r
                    self.assertEqual((r.stdout, r.exit_code), (word + "\n", 0))
                self.assertLessEqual(unavailable, 50, f"{unavailable} of 500 execs got 503 cluster_unavailable")
                if unavailable:
                    print(f"    (note: {unavailable} of 500 execs answered 503 cluster_unavailable by the router)",
                          flush=True)
                opened = c._aio.opened()
                # a second wave reuses the pooled connections
                t2 = time.monotonic()
                rs2 = await asyncio.gather(*(sb.exec.aio("true") for sb, _ in jobs), return_exceptions=True)
                el2 = time.monotonic() - t2
                bad = [r for r in rs2 if isinstance(r, BaseException) and not isinstance(r, errors.ClusterUnavailable)]
                self.assertEqual(bad, [])
                self.assertEqual(c._aio.opened(), opened, "second wave opened new connections")
                self.assertLessEqual(opened, 502)
                print(f"    (500 concurrent exec.aio: {el:.2f} s, then {el2:.2f} s on {opened} kept-alive "
                      f"connections)", flush=True)
            finally:
                await sbs.terminate.aio()
                await c.aclose()
        run_async(main(), 200)

    def test_async_context_managers(self):
        c = self.c
        ids = []

        async def main():
            with self.assertRaises(ValueError):
                async with c.create.aio(name="acm") as sb:
                    ids.append(sb.id)
                    self.assertEqual((await sb.exec.aio("echo", "x")).stdout, "x\n")
                    raise ValueError("boom")
            with self.assertRaises(ValueError):
                async with await c.create.aio(name="acml", num_sandboxes=2) as sbs:
                    ids.extend(s.id for s in sbs)
                    raise ValueError("boom")
            for i in ids:
                with self.assertRaises(errors.SandboxNotFound):
                    await c.get.aio(i)
            await c.aclose()
        run_async(main())
        self.assertEqual(len(ids), 3)


def _skip_unsupported(test, e):
    test.skipTest(f"router does not serve this yet (SPEC §8 agent endpoints): {e}")


class TestAgentEndpoints(SDKTest):
    """SPEC §8 calls (exec_stream, files, processes) against a federation of
    its own whose sandboxes run the real fedrouter-agent (--agent)."""
    fed = None

    @classmethod
    def setUpClass(cls):
        if not ARGS.agent:
            raise unittest.SkipTest("no --agent binary: the data-plane calls need the sandbox agent")
        cls.fed = H.Federation(ARGS.kubesim, ARGS.fedrouter, [("g1", "us", NODES)],
                               {"a": (TOK["a"], "")}, prefix="fr-sdk-agent-", tls=not ARGS.sanitized,
                               agent=ARGS.agent)

    @classmethod
    def tearDownClass(cls):
        if cls.fed is not None:
            problems = cls.fed.stop()
            if problems:
                raise RuntimeError("teardown: " + "; ".join(problems))

    def setUp(self):
        self.c = Client(self.fed.url, TOK["a"])
        self.t0 = time.monotonic()

    def sandbox_(self):
        return self.c.create(name="agent", image=IMAGE)

    def test_exec_stream(self):
        with self.sandbox_() as sb:
            self.exec_stream(sb)

    def exec_stream(self, sb):
        try:
            t = time.monotonic()
            chunks, first_at = [], None
            for ch in sb.exec_stream("sh", "-c", "echo a; sleep 1; echo b >&2; exit 3", timeout=30):
                if first_at is None:
                    first_at = time.monotonic() - t
                chunks.append(ch)
        except fedrouter.NotSupported as e:
            # the fallback still works on today's router
            r = fedrouter.collect(sb.exec_stream("sh", "-c", "echo a; echo b >&2; exit 3", fallback=True))
            self.assertEqual((r.stdout, r.stderr, r.exit_code), ("a\n", "b\n", 3))
            _skip_unsupported(self, e)
        r = fedrouter.collect(chunks)
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("a\n", "b\n", 3))
        self.assertLess(first_at, 0.9, "the first chunk came only at the end")

        async def main():
            got = [c async for c in sb.exec_stream.aio("echo", "x")]
            await self.c.aclose()
            return fedrouter.collect(got)
        self.assertEqual(run_async(main()).stdout, "x\n")

    def test_files(self):
        with self.sandbox_() as sb:
            self.files(sb)

    def files(self, sb):
        try:
            sb.files.write("/tmp/fr-sdk.bin", b"\x00\x01hello")
        except fedrouter.NotSupported as e:
            _skip_unsupported(self, e)
        self.assertEqual(sb.files.read("/tmp/fr-sdk.bin"), b"\x00\x01hello")
        self.assertIn("fr-sdk.bin", json.dumps(sb.files.list("/tmp")))
        sb.files.remove("/tmp/fr-sdk.bin")

        async def main():
            await sb.files.write.aio("/tmp/a.txt", "text")
            self.assertEqual(await sb.files.read_text.aio("/tmp/a.txt"), "text")
            await sb.files.remove.aio("/tmp/a.txt")
            await self.c.aclose()
        run_async(main())

    def test_processes(self):
        with self.sandbox_() as sb:
            self.processes(sb)

    def processes(self, sb):
        try:
            p = sb.processes.start("sh", "-c", "echo started; sleep 30")
        except fedrouter.NotSupported as e:
            _skip_unsupported(self, e)
        self.assertIn(p.pid, [x.pid for x in sb.processes.list()])
        # Killed once it has printed (a kill right after the start can beat
        # the shell's echo on a busy machine).
        printed = H.wait_until(lambda: b"started" in b"".join(
            c.data for c in p.output(follow=False) if c.kind == "stdout"), 30, 0.1)
        self.assertTrue(printed, "the process printed nothing in 30 s")
        p.signal("SIGKILL")
        r = p.wait()
        self.assertIn("started", r.stdout)


GPU_TOL = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


class TestPodOptions(SDKTest):
    """create()/create_pool() pod options (runtime_class, node_selector,
    tolerations, gpus) against a federation of their own: `gpu` (node 1 has 8
    nvidia.com/gpu, label accel=a100, taint nvidia.com/gpu=present:NoSchedule;
    RuntimeClass gvisor) and `plain` (neither). The pods are read back from
    kubesim's API."""
    fed = None

    @classmethod
    def setUpClass(cls):
        cls.fed = H.Federation(ARGS.kubesim, ARGS.fedrouter, [
            ("gpu", "us", ["--nodes", "2", "--gpu-nodes", "1", "--node-gpus", "8", "--node-label", "1@accel=a100",
                           "--node-taint", "1@nvidia.com/gpu=present:NoSchedule"] + H.FAST),
            ("plain", "us", ["--nodes", "2"] + H.FAST)],
            {"a": (TOK["a"], "")}, prefix="fr-sdk-podopts-", tls=False)
        st, body = cls.kube("gpu", "POST", "/apis/node.k8s.io/v1/runtimeclasses",
                            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"},
                             "handler": "runsc"})
        if st != 201:
            raise RuntimeError(f"kubesim gpu: POST runtimeclass: {st} {body}")

    @classmethod
    def tearDownClass(cls):
        if cls.fed is not None:
            problems = cls.fed.stop()
            if problems:
                raise RuntimeError("teardown: " + "; ".join(problems))

    @classmethod
    def kube(cls, sim, method, path, body=None):
        """One call to kubesim <sim>'s Kubernetes API (plain HTTP here)."""
        with open(os.path.join(cls.fed.root, sim, "port")) as f:
            port = int(f.read())
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Authorization": "Bearer " + cls.fed.sim_token, "Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else None
        finally:
            c.close()

    def setUp(self):
        self.c = Client(self.fed.url, TOK["a"])
        self.t0 = time.monotonic()

    def pod_of(self, sb):
        cluster, pod = sb.id.split(".", 1)
        st, p = self.kube(cluster, "GET", f"/api/v1/namespaces/default/pods/{pod}")
        self.assertEqual(st, 200, f"GET pod {pod}: {p}")
        return p

    def assert_gpu_pod(self, sb, gpus, runtime_class="gvisor"):
        self.assertEqual(sb.cluster, "gpu", f"{sb} placed off the GPU cluster")
        p = self.pod_of(sb)
        spec = p["spec"]
        self.assertEqual(spec.get("runtimeClassName"), runtime_class)
        self.assertEqual(spec.get("nodeSelector"), {"accel": "a100"})
        # The create's tolerations, then the two the API server's
        # DefaultTolerationSeconds admission adds to every pod.
        self.assertEqual(spec.get("tolerations"), GPU_TOL + [
            {"key": "node.kubernetes.io/" + k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            for k in ("not-ready", "unreachable")])
        self.assertEqual(spec.get("nodeName"), "gpu-node-1")
        res = [c for c in spec["containers"] if c["name"] != "fr-agent"][0]["resources"]
        self.assertEqual((res["requests"].get("nvidia.com/gpu"), res["limits"].get("nvidia.com/gpu")),
                         (str(gpus), str(gpus)))
        self.assertEqual(p["status"]["phase"], "Running")

    def test_create_with_pod_options_sync_and_aio(self):
        opts = dict(runtime_class="gvisor", node_selector={"accel": "a100"}, tolerations=GPU_TOL)
        plan = self.c.explain(image=IMAGE, gpus=1, **opts)
        self.assertEqual(plan.request.pod_options, dict(opts, gpus=1))
        why = {c["cluster"]: c.get("reason", "") for c in plan.plan.get("clusters", [])}
        self.assertIn("no_runtime_class", why.get("plain", ""), f"explain: {plan}")
        sb = self.c.create(name="g1", image=IMAGE, gpus=1, **opts)
        self.assertEqual(sb.state, "running")
        self.assert_gpu_pod(sb, 1)
        self.assertEqual(self.c.get(sb.id).cluster, "gpu")

        async def main():
            try:
                return await self.c.create.aio(name="g2", image=IMAGE, gpus=2, **opts)
            finally:
                await self.c.aclose()
        sb2 = run_async(main())
        self.assert_gpu_pod(sb2, 2)
        # A batch through the module function; then 4 of the 8 GPUs are
        # taken and a sandbox of 5 finds no room (503 NoCapacity).
        sandbox.configure(self.fed.url, TOK["a"])
        try:
            sbs = sandbox.create(name="gb", num_sandboxes=1, image=IMAGE, gpus=1, **opts)
            self.assert_gpu_pod(sbs[0], 1)
            with self.assertRaises(errors.NoCapacity):
                sandbox.create(image=IMAGE, gpus=5, retry_budget_s=0, **opts)
        finally:
            sandbox.close()
        for x in (sb, sb2, sbs[0]):
            x.terminate()

    def test_router_rules_raise_invalid_field(self):
        before = self.fed.pod_counts()
        for kw, field in ((dict(gpus=65), "gpus"), (dict(runtime_class="Not_A_Name"), "runtime_class"),
                          (dict(node_selector={"bad key!": "x"}), "node_selector"),
                          (dict(tolerations=[{"key": "k", "operator": "Maybe"}]), "tolerations")):
            with self.subTest(field=field):
                with self.assertRaises(errors.InvalidField) as cm:
                    self.c.create(image=IMAGE, **kw)
                self.assertEqual(cm.exception.field, field)
                with self.assertRaises(errors.InvalidField) as cm:
                    self.c.create_pool("bad", IMAGE, replicas=0, **kw)
                self.assertEqual(cm.exception.field, field)
        # No GPU node in `plain`, and a cluster list of only it: nothing fits.
        with self.assertRaises(errors.FedrouterError) as cm:
            self.c.create(image=IMAGE, gpus=1, clusters=["plain"], retry_budget_s=0)
        self.assertIn(cm.exception.status, (409, 503), f"{cm.exception.code}: {cm.exception}")
        self.assertEqual(self.fed.pod_counts(), before, "a refused create made pods")

    def test_pool_with_pod_options_serves_warm_claims(self):
        opts = dict(runtime_class="gvisor", node_selector={"accel": "a100"}, tolerations=GPU_TOL, gpus=1)
        r = self.c.create_pool("gp", IMAGE, cpus=1, memory_gb=1, replicas=1, **opts)
        try:
            self.assertEqual([s["cluster"] for s in r.get("skipped", [])], ["plain"], f"create_pool: {r}")
            self.assertTrue(self.fed.wait_pool(TOK["a"], "gp", 60), "pool gp not ready")
            sb = self.c.create(pool="gp", **opts)
            self.assertTrue(sb.warm, f"not a warm claim: {sb.info} {sb.placement}")
            self.assert_gpu_pod(sb, 1)
            # Other options than the pool's: a cold start, said why.
            sb2 = self.c.create(pool="gp", **dict(opts, gpus=2))
            self.assertFalse(sb2.warm)
            self.assertTrue(sb2.placement.get("cold_reason"), f"no cold_reason: {sb2.placement}")
            self.assert_gpu_pod(sb2, 2)
            sb.terminate()
            sb2.terminate()
        finally:
            self.c.delete_pool("gp")


class TestExamplesAndDocs(unittest.TestCase):
    def run_py(self, tenant, args, code=None, timeout=200):
        env = dict(os.environ, FEDROUTER_URL=FED.url, FEDROUTER_TOKEN=TOK[tenant],
                   PYTHONPATH=SDK + os.pathsep + os.environ.get("PYTHONPATH", ""))
        argv = [sys.executable] + (["-c", code] if code is not None else args)
        p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        return p

    def assert_clean(self, tenant):
        c = client(tenant)
        left = c.ls()
        cleanup(c)
        c.close()
        return left

    def test_rl_reward_example(self):
        t = time.monotonic()
        p = self.run_py("ex", [os.path.join(ROOT, "examples", "rl_reward.py"), "--rollouts", "16", "--timeout", "10"])
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        summary = json.loads(p.stdout.strip().splitlines()[-1])
        # 8 candidates twice: correct, wrong, crash, loop, flood, syntax, correct+stderr, sandbox gone
        self.assertEqual(summary["rewards"], [1.0, 0.1, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0] * 2, p.stdout)
        self.assertEqual(summary["errors"], {"sandbox_not_found": 2}, p.stdout)
        self.assertIn("timed out", p.stdout)
        self.assertIn("output truncated", p.stdout)
        self.assertEqual(self.assert_clean("ex"), [], "rl_reward left sandboxes")
        print(f"    (rl_reward: 16 rollouts in {time.monotonic() - t:.1f} s)", flush=True)

    def test_quickstart_example(self):
        p = self.run_py("ex", [os.path.join(ROOT, "examples", "quickstart.py")])
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("quickstart done", p.stdout)
        self.assertEqual(self.assert_clean("ex"), [], "quickstart left sandboxes")
        if FED.python_alias:
            self.assertEqual(p.stdout.splitlines()[0], "1024", p.stdout)
            self.assertIn("rollout-0004 42", p.stdout)
            self.assertIn("async results: " + str(["4"] * 10), p.stdout)

    def snippets(self):
        with open(os.path.join(ROOT, "docs", "sdk-python.md")) as f:
            text = f.read()
        return re.findall(r"<!-- snippet: (\w+) -->\n```python\n(.*?)```", text, re.S)

    def test_doc_snippets_verbatim(self):
        snips = dict(self.snippets())
        self.assertEqual(list(snips), ["quickstart", "context", "templates", "batch", "async", "secrets"])
        c = client("docs")
        skipped = []
        try:
            for name, code in snips.items():
                if name == "batch" and ARGS.sanitized:
                    skipped.append("batch: 1,000 sequential execs through the ASan router and kubesim do not fit "
                                   "the 300 s budget (the release build runs it)")
                    continue
                t = time.monotonic()
                p = self.run_py("docs", None, code=code)
                if p.returncode != 0 and "ClusterUnavailable" in p.stderr and name == "async":
                    # The router could not reach kubesim for one of the 100
                    # concurrent execs (TLS connect timeout on a loaded
                    # machine): a 503 the snippet surfaces as it should. Say
                    # so and run the snippet once more.
                    print("    (note: snippet async got 503 cluster_unavailable: "
                          + p.stderr.strip().splitlines()[-1][:300] + "; running it again)", flush=True)
                    cleanup(c)
                    p = self.run_py("docs", None, code=code)
                el = time.monotonic() - t
                # The router refuses volumes (400 invalid_field) for now, and
                # this federation runs no sandbox agent, which secrets need
                # (tests/router/test_secrets.py covers secrets=, with one).
                if name == "secrets" and p.returncode != 0 and \
                        re.search(r"invalid_field: volumes|agent_required: ", p.stderr):
                    skipped.append(f"{name}: " + ("router refuses volumes (400 invalid_field) for now"
                                                  if "invalid_field: volumes" in p.stderr else
                                                  "secrets need the sandbox agent, which this federation lacks"))
                    continue
                self.assertEqual(p.returncode, 0, f"snippet {name}:\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}")
                if name == "quickstart" and FED.python_alias:
                    self.assertEqual(p.stdout, "1024\n\n")
                if name == "templates":
                    pool = c.get_pool("ml-gpu")
                    self.assertEqual((pool.cpus, pool.memory_gb), (8, 64))
                    self.assertTrue(all(x.target == 50 for x in pool.clusters), pool)
                    if ARGS.sanitized:  # no batch follows: a smaller pool spares the ASan kubesims
                        c.set_pool_size("ml-gpu", 2)
                if name == "batch":
                    sbs = c.ls(name_prefix="rollout-")
                    self.assertEqual(len(sbs), 1000)
                    self.assertTrue(all(s.pool == "ml-gpu" for s in sbs))
                    if FED.python_alias:
                        r = sbs[0].exec("python", "rollout.py")
                        self.assertEqual((r.exit_code, r.stdout), (0, "rollout.py: stand-in for the user's program\n"))
                left = {s.name for s in c.ls()}
                if name in ("quickstart", "context", "async"):
                    self.assertEqual(left, set(), f"snippet {name} left sandboxes")
                print(f"    (snippet {name}: {el:.1f} s)", flush=True)
                cleanup(c)
        finally:
            cleanup(c)
            try:
                c.delete_pool("ml-gpu")
            except errors.PoolNotFound:
                pass
            c.close()
        if skipped:
            self.skipTest("; ".join(skipped))


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--agent", help="fedrouter-agent: the data-plane calls run against sandboxes with it")
    ap.add_argument("--suite", choices=["api", "docs", "all"], default="all",
                    help="api: the SDK's calls; docs: the examples and the doc snippets (ctest runs them "
                         "as two tests, each with its own federation)")
    ap.add_argument("--sanitized", action="store_true",
                    help="ASan/UBSan binaries: kubesim without TLS (500 concurrent TLS exec handshakes through "
                         "the ASan router and kubesim time out on a 2-core machine), and skip the 1,000-sandbox "
                         "batch snippet (1,000 sequential execs do not fit the time budget)")
    ARGS, rest = ap.parse_known_args()
    if not rest:
        names = {"api": ["TestSync", "TestAsync", "TestAgentEndpoints", "TestPodOptions"],
                 "docs": ["TestExamplesAndDocs"],
                 "all": []}[ARGS.suite]
        rest = names
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    r = prog.result
    return 0 if r.wasSuccessful() else 1


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        H._kill_all()
    sys.exit(rc)
