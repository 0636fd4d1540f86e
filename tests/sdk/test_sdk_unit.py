#!/usr/bin/env python3
"""Unit tests of the Python SDK (sdk/python/fedrouter) against a fake router:
a stdlib http.server in a thread whose answers each test scripts.

Covers request encoding, answer decoding, the error-code -> exception
mapping, create retries on 429/503 with Retry-After (within the budget,
never for exec), dropped connections and timeouts (raise, never hang, never
retried for exec), keep-alive reuse in both transports, NDJSON streaming
(chunked) in both, the NotSupported detection, progress reporting and the
environment configuration.

Usage: test_sdk_unit.py [unittest args]. Standard library only.
"""
import asyncio
import base64
import io
import json
import os
import socket
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))

import fedrouter  # noqa: E402
from fedrouter import Client, errors, sandbox  # noqa: E402
from fedrouter._progress import Bar  # noqa: E402


class Fake:
    """A scriptable fake router. ``routes[(METHOD, path)]`` is a function
    (request dict) -> (status, headers, body) | "drop" | ("hang", s);
    requests are recorded with the connection they came on."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        self.conns = set()
        self.lock = threading.Lock()
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_one(self):
                path, _, query = self.path.partition("?")
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                req = {"method": self.command, "path": path, "query": query, "headers": dict(self.headers),
                       "body": body, "conn": self.client_address[1]}
                with fake.lock:
                    fake.requests.append(req)
                    fake.conns.add(self.client_address[1])
                fn = fake.routes.get((self.command, path)) or fake.routes.get((self.command, "*"))
                ans = fn(req) if fn else (404, {}, {"error": {"code": "not_found", "message": "no such endpoint"}})
                if ans == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(ans, tuple) and ans[0] == "hang":
                    time.sleep(ans[1])
                    self.close_connection = True
                    return
                if isinstance(ans, tuple) and ans[0] == "close_after":
                    data = json.dumps(ans[1]).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if isinstance(ans, tuple) and ans[0] == "chunks":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-ndjson")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for piece in ans[1]:
                        if piece == "drop":
                            self.close_connection = True
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        data = piece if isinstance(piece, bytes) else (json.dumps(piece) + "\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        time.sleep(0.01)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                status, headers, out = ans
                data = out if isinstance(out, bytes) else json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Request-Id", req["headers"].get("X-Request-Id", "srv-1"))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = handle_one

        class S(ThreadingHTTPServer):
            request_queue_size = 1024
        self.server = S(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def count(self, method, path):
        return sum(1 for r in self.requests if r["method"] == method and r["path"] == path)


SB = {"id": "c1.pod-1", "name": "dev", "cluster": "c1", "region": "us", "pool": "default", "warm": True,
      "state": "running", "labels": {}, "created_at": "x", "expires_at": "y"}


def created(n=None, name="sb"):
    if n is None:
        return lambda req: (201, {}, {"sandboxes": [dict(SB)], "placement": {"requested": 1, "created": 1}})
    return lambda req: (201, {}, {"sandboxes": [dict(SB, id=f"c1.p{i}", name=f"{name}-{i:04d}")
                                                for i in range(1, n + 1)],
                                  "placement": {"requested": n, "created": n}})


def err(status, code, msg="m", headers=None, **extra):
    e = {"code": code, "message": msg}
    e.update(extra)
    return lambda req: (status, headers or {}, {"error": e})


EXEC_OK = {"stdout": "4\n", "stderr": "", "exit_code": 0, "timed_out": False, "stdout_truncated": False,
           "stderr_truncated": False, "duration_ms": 12}


class Base(unittest.TestCase):
    def setUp(self):
        self.fake = Fake()
        self.c = Client(self.fake.url, "tok", timeout=10, retry_budget_s=10)

    def tearDown(self):
        self.c.close()
        self.fake.close()

    def body(self, i=-1):
        return json.loads(self.fake.requests[i]["body"])

    def arun(self, coro):
        async def main():
            try:
                return await coro
            finally:
                await self.c.aclose()
        return asyncio.run(asyncio.wait_for(main(), 60))


class TestEncoding(Base):
    def test_create_body(self):
        self.fake.routes[("POST", "/v1/sandboxes")] = created()
        sb = self.c.create(name="dev", template="ml", cpus=2, memory_gb=4.5, env={"A": 1}, labels={"run": "x"},
                           region="apac", clusters="c1", timeout=90.5, partial_ok=False)
        self.assertEqual(self.body(), {"name": "dev", "pool": "ml", "cpus": 2, "memory_gb": 4.5, "region": "apac",
                                       "partial_ok": False, "env": {"A": "1"}, "labels": {"run": "x"},
                                       "clusters": ["c1"], "timeout_s": 91})
        self.assertIsInstance(sb, fedrouter.Sandbox)
        self.assertEqual((sb.id, sb.name, sb["state"], sb.placement.created), ("c1.pod-1", "dev", "running", 1))
        h = self.fake.requests[-1]["headers"]
        self.assertEqual(h["Authorization"], "Bearer tok")
        self.assertEqual(h["Content-Type"], "application/json")
        self.assertTrue(h["X-Request-Id"].startswith("py-"))

    def test_create_default_pool_and_batch(self):
        self.fake.routes[("POST", "/v1/sandboxes")] = created(3, "rollout")
        sbs = self.c.create(name="rollout", num_sandboxes=3, secrets=["HF"], volumes={"/d": "v"})
        self.assertEqual(self.body(), {"name": "rollout", "num_sandboxes": 3, "pool": "default",
                                       "secrets": ["HF"], "volumes": {"/d": "v"}})
        self.assertIsInstance(sbs, fedrouter.SandboxList)
        self.assertEqual([s.name for s in sbs], ["rollout-0001", "rollout-0002", "rollout-0003"])
        self.c.create(image="python:3.12")
        self.assertEqual(self.body(), {"image": "python:3.12"})
        one = self.c.create(num_sandboxes=1) if False else None
        self.assertIsNone(one)
        with self.assertRaises(ValueError):
            self.c.create(num_sandboxes=0)

    def test_create_pod_options(self):
        """runtime_class, node_selector, tolerations, gpus reach the body of
        every create entry point (blocking, .aio, module, explain), as given."""
        self.fake.routes[("POST", "/v1/sandboxes")] = created()
        self.fake.routes[("POST", "/v1/placement/explain")] = lambda r: (200, {}, {"plan": {"planned": 1}})
        tols = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "zone", "value": "b", "effect": "NoExecute", "tolerationSeconds": 30}]
        opts = dict(runtime_class="gvisor", node_selector={"accel": "a100"}, tolerations=tols, gpus=2)
        want = {"image": "img", "volumes": {"/d": "v"}, "runtime_class": "gvisor",
                "node_selector": {"accel": "a100"}, "tolerations": tols, "gpus": 2}
        self.c.create(image="img", volumes={"/d": "v"}, **opts)
        self.assertEqual(self.body(), want)
        self.arun(self.c.create.aio(image="img", volumes={"/d": "v"}, **opts))
        self.assertEqual(self.body(), want)
        self.c.explain(image="img", volumes={"/d": "v"}, **opts)
        self.assertEqual(self.body(), want)
        self.arun(self.c.explain.aio(image="img", volumes={"/d": "v"}, **opts))
        self.assertEqual(self.body(), want)
        sandbox.configure(self.fake.url, "tok")
        try:
            sbs = sandbox.create(name="b", num_sandboxes=2, pool="p", tolerations=tuple(tols), gpus=0)
            self.assertEqual(self.body(), {"name": "b", "num_sandboxes": 2, "pool": "p", "tolerations": tols,
                                           "gpus": 0})
            self.assertIsInstance(sbs, fedrouter.SandboxList)

            async def module_aio():
                try:
                    return await sandbox.create.aio(image="img", runtime_class="kata", node_selector={})
                finally:
                    await sandbox.aclose()
            asyncio.run(asyncio.wait_for(module_aio(), 60))
            self.assertEqual(self.body(), {"image": "img", "runtime_class": "kata", "node_selector": {}})
        finally:
            sandbox.close()
        # None (the default) sends nothing.
        self.c.create(image="img", runtime_class=None, node_selector=None, tolerations=None, gpus=None)
        self.assertEqual(self.body(), {"image": "img"})

    def test_pod_options_type_checked_before_sending(self):
        self.fake.routes[("POST", "/v1/sandboxes")] = created()
        bad = [dict(runtime_class=1), dict(runtime_class=b"gvisor"), dict(node_selector=["a=b"]),
               dict(node_selector={"a": 1}), dict(node_selector={1: "a"}), dict(tolerations={"key": "a"}),
               dict(tolerations="key=a"), dict(tolerations=["a"]), dict(tolerations=[{"key": "a"}, 3]),
               dict(gpus=True), dict(gpus="1"), dict(gpus=1.0)]
        for kw in bad:
            with self.subTest(**{k: repr(v) for k, v in kw.items()}):
                with self.assertRaises(TypeError):
                    self.c.create(image="img", **kw)
                with self.assertRaises(TypeError):
                    self.arun(self.c.create.aio(image="img", **kw))
                with self.assertRaises(TypeError):
                    self.c.create_pool("p", "img", **kw)
                with self.assertRaises(TypeError):
                    self.c.explain(image="img", **kw)
        with self.assertRaises(TypeError):
            self.c.create_pool("p", "img", volumes=["/d"])
        self.assertEqual(len(self.fake.requests), 0, "a request was sent for a bad option")
        # Rules (ranges, syntax) are the router's: its 400 is InvalidField.
        self.fake.routes[("POST", "/v1/sandboxes")] = err(400, "invalid_field", "gpus must be an integer "
                                                          "from 0 to 64", field="gpus")
        with self.assertRaises(errors.InvalidField) as cm:
            self.c.create(image="img", gpus=65)
        self.assertEqual((cm.exception.field, self.body()), ("gpus", {"image": "img", "gpus": 65}))
        self.assertEqual(self.fake.count("POST", "/v1/sandboxes"), 1, "a 400 was retried")

    def test_pool_pod_options(self):
        self.fake.routes[("POST", "/v1/pools")] = lambda r: (201, {}, {"name": "gpu", "skipped": []})
        tols = [{"key": "gpu", "operator": "Exists"}]
        want = {"name": "gpu", "image": "img", "replicas": 2, "runtime_class": "gvisor",
                "node_selector": {"accel": "a100"}, "tolerations": tols, "gpus": 1, "volumes": {"/d": "v"}}
        kw = dict(replicas=2, runtime_class="gvisor", node_selector={"accel": "a100"}, tolerations=tols, gpus=1,
                  volumes={"/d": "v"})
        self.assertEqual(self.c.create_pool("gpu", "img", **kw).name, "gpu")
        self.assertEqual(self.body(), want)
        self.arun(self.c.create_pool.aio("gpu", "img", **kw))
        self.assertEqual(self.body(), want)
        self.c.create_template(name="gpu", image="img", pool_replicas=2, **{k: v for k, v in kw.items()
                                                                           if k != "replicas"})
        self.assertEqual(self.body(), want)

    def test_sandbox_secrets_names(self):
        self.assertEqual(fedrouter.Sandbox(self.c, dict(SB, secrets=["A", "HF_TOKEN"])).secrets, ["A", "HF_TOKEN"])
        self.assertEqual(fedrouter.Sandbox(self.c, SB).secrets, [])
        self.fake.routes[("GET", "/v1/sandboxes/c1.pod-1")] = lambda r: (200, {}, dict(SB, secrets=["K"]))
        sb = fedrouter.Sandbox(self.c, SB)
        self.assertEqual(sb.refresh().secrets, ["K"])
        self.assertEqual(sb["secrets"], ["K"])

    def test_create_wait_s_and_its_timeout(self):
        """wait_s goes in the body, and the call waits for its answer at least
        wait_s plus a minute, whatever the client's create_timeout."""
        self.fake.routes[("POST", "/v1/sandboxes")] = lambda r: (201, {}, {
            "sandboxes": [SB], "placement": {"created": 1, "waited_s": 2.5}})
        c = Client(self.fake.url, "tok", create_timeout=5)
        try:
            sb = c.create(image="python:3.12", wait_s=120, partial_ok=True)
            self.assertEqual(self.body(), {"image": "python:3.12", "partial_ok": True, "wait_s": 120})
            self.assertEqual(sb.placement.waited_s, 2.5)
            self.assertEqual(c._create_req({"wait_s": 120}, None).timeout, 180.0)
            self.assertEqual(c._create_req({}, None).timeout, 60.0)
            self.assertEqual(c._create_req({}, 900).timeout, 900)
            for bad in (-1, "10", True):
                with self.assertRaises(ValueError):
                    c.create(image="python:3.12", wait_s=bad)
        finally:
            c.close()

    def test_secrets_set_list_delete(self):
        seen = []

        def put(r):
            seen.append(r)
            return (200, {}, {"key": "HF", "secret": "t-sandbox-secrets",
                              "clusters": [{"cluster": "c1", "status": "created"}]})
        self.fake.routes[("PUT", "/v1/secrets/HF")] = put
        self.fake.routes[("GET", "/v1/secrets")] = lambda r: (200, {}, {
            "secret": "t-sandbox-secrets", "keys": [{"name": "HF", "clusters": ["c1"], "missing": ["c2"]}],
            "clusters": []})
        self.fake.routes[("DELETE", "/v1/secrets/HF")] = lambda r: (200, {}, {
            "key": "HF", "clusters": [{"cluster": "c1", "status": "removed"}]})
        # sandbox.secrets.* call the default client's secret_* methods.
        self.assertTrue(callable(sandbox.secrets.set) and callable(sandbox.secrets.list.aio))
        r = self.c.secrets.set("HF", "v\u00e9", clusters=["c1", "c2"])
        self.assertEqual(r.clusters[0].status, "created")
        self.assertEqual(seen[-1]["body"], "v\u00e9".encode())
        self.assertEqual(seen[-1]["query"], "clusters=c1%2Cc2")
        self.assertEqual(seen[-1]["headers"]["Content-Type"], "application/octet-stream")
        self.c.secrets.set("HF", b"raw")
        self.assertEqual((seen[-1]["body"], seen[-1]["query"]), (b"raw", ""))
        ks = self.c.secrets.list()
        self.assertEqual((ks[0].name, ks[0].missing), ("HF", ["c2"]))
        self.assertEqual(self.c.secrets.delete("HF").clusters[0].status, "removed")
        self.assertEqual(self.arun(self.c.secrets.list.aio())[0].name, "HF")
        with self.assertRaises(TypeError):
            self.c.secrets.set("HF", 5)
        with self.assertRaises(ValueError):
            self.c.secrets.set("HF", "x", clusters=["a,b"])
        self.fake.routes[("PUT", "/v1/secrets/K")] = err(503, "secret_not_written", "1 of 2",
                                                         {"Retry-After": "5"})
        with self.assertRaises(errors.SecretNotWritten) as cm:
            self.c.secrets.set("K", "v")
        self.assertEqual(cm.exception.retry_after, 5.0)
        self.assertEqual(len([x for x in self.fake.requests if x["path"] == "/v1/secrets/K"]), 1,
                         "a secret write was retried")

    def test_exec_body_and_result(self):
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: (200, {}, EXEC_OK)
        sb = fedrouter.Sandbox(self.c, SB)
        r = sb.exec("python", "-c", "print(2+2)", timeout=1.2, stdin=b"in", env={"K": "v"}, workdir="/tmp",
                    max_output_bytes=100)
        self.assertEqual(self.body(), {"argv": ["python", "-c", "print(2+2)"], "stdin": "in", "env": {"K": "v"},
                                       "workdir": "/tmp", "timeout_s": 2, "max_output_bytes": 100})
        self.assertEqual((r["stdout"], r.stdout, r.exit_code, r.timed_out, r.duration_ms, r.ok),
                         ("4\n", "4\n", 0, False, 12, True))
        self.assertFalse(r.stdout_truncated or r.stderr_truncated)
        self.assertEqual(json.loads(json.dumps(r))["stdout"], "4\n")
        sb.exec(["echo", "a b"])
        self.assertEqual(self.body(), {"argv": ["echo", "a b"]})
        with self.assertRaises(TypeError):
            sb.exec()

    def test_exec_base64_output(self):
        raw = b"\xff\xfeabc"
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: (200, {}, dict(
            EXEC_OK, stdout=base64.b64encode(raw).decode(), stdout_encoding="base64"))
        r = self.c.exec("c1.pod-1", "cat")
        self.assertEqual(r.stdout_bytes, raw)
        self.assertEqual(r.stdout, raw.decode("utf-8", "replace"))
        self.assertEqual(r["stdout_encoding"], "base64")

    def test_list_filters_and_terminate_many(self):
        self.fake.routes[("GET", "/v1/sandboxes")] = lambda r: (200, {}, {"sandboxes": [SB]})
        self.fake.routes[("DELETE", "/v1/sandboxes")] = lambda r: (200, {}, {"terminated": 1, "ids": ["c1.pod-1"]})
        got = self.c.ls(label={"run": "x", "k": "v"}, pool="p", name_prefix="ro")
        self.assertEqual(self.fake.requests[-1]["query"], "label=run=x&label=k=v&pool=p&name_prefix=ro")
        self.assertEqual([s.id for s in got], ["c1.pod-1"])
        self.assertEqual(self.c.terminate_many(label="run=x"), ["c1.pod-1"])
        self.assertEqual(self.fake.requests[-1]["query"], "label=run=x")
        with self.assertRaises(ValueError):
            self.c.terminate_many()

    def test_pools_clusters_explain(self):
        self.fake.routes[("POST", "/v1/pools")] = lambda r: (201, {}, {"name": "ml"})
        self.fake.routes[("PATCH", "/v1/pools/ml")] = lambda r: (200, {}, {"name": "ml"})
        self.fake.routes[("DELETE", "/v1/pools/ml")] = lambda r: (200, {}, {"deleted": True})
        self.fake.routes[("GET", "/v1/pools")] = lambda r: (200, {}, {"pools": [{"name": "ml", "clusters": []}]})
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: (200, {}, {"clusters": [{"name": "c1", "capacity": {
            "pods": {"allocatable": 5}}}]})
        self.fake.routes[("POST", "/v1/placement/explain")] = lambda r: (200, {}, {"plan": {"planned": 3}})
        sandbox.configure(self.fake.url, "tok")
        sandbox.create_template(name="ml", image="img", cpus=8, memory_gb=64, pool_replicas=10)
        self.assertEqual(self.body(), {"name": "ml", "image": "img", "cpus": 8, "memory_gb": 64, "replicas": 10})
        sandbox.set_pool_size("ml", replicas=50)
        self.assertEqual(self.body(), {"replicas": 50})
        self.assertEqual(sandbox.list_pools()[0].name, "ml")
        sandbox.delete_pool("ml")
        self.assertEqual(self.fake.count("DELETE", "/v1/pools/ml"), 1)
        self.assertEqual(sandbox.clusters()[0].capacity.pods.allocatable, 5)
        self.assertEqual(sandbox.explain(num_sandboxes=3, pool="ml").plan.planned, 3)
        self.assertEqual(self.body(), {"num_sandboxes": 3, "pool": "ml"})


class TestErrors(Base):
    def test_every_code_maps_to_its_class(self):
        for code, cls in errors.ERROR_CLASSES.items():
            self.fake.routes[("GET", "/v1/sandboxes/c1.x")] = err(400, code, "boom", {"Retry-After": "3"},
                                                                   field="f")
            with self.assertRaises(cls) as cm:
                self.c.get("c1.x")
            e = cm.exception
            self.assertIs(type(e), cls)
            self.assertIsInstance(e, fedrouter.FedrouterError)
            self.assertEqual((e.status, e.code, e.message, e.retry_after), (400, code, "boom", 3.0))
            self.assertTrue(e.request_id and e.request_id.startswith("py-"))
        self.assertEqual(errors.InvalidField("x", body={"field": "cpus"}).field, "cpus")

    def test_typed_404_429_503(self):
        self.fake.routes[("DELETE", "/v1/sandboxes/c1.gone")] = err(404, "sandbox_not_found")
        with self.assertRaises(fedrouter.SandboxNotFound):
            self.c.terminate("c1.gone")
        self.assertFalse(self.c.terminate("c1.gone", missing_ok=True))
        self.fake.routes[("POST", "/v1/sandboxes")] = err(503, "no_capacity", "full", {"Retry-After": "2"},
                                                          clusters=[{"cluster": "c1", "reason": "r"}], shortfall=7)
        with self.assertRaises(fedrouter.NoCapacity) as cm:
            self.c.create(retry_budget_s=0)
        e = cm.exception
        self.assertEqual((e.status, e.retry_after, e.shortfall, e.clusters[0]["cluster"]), (503, 2.0, 7, "c1"))
        self.fake.routes[("POST", "/v1/sandboxes")] = err(429, "tenant_limit", "over", {"Retry-After": "1"})
        with self.assertRaises(fedrouter.TenantLimit) as cm:
            self.c.create(retry_budget_s=0)
        self.assertEqual(cm.exception.retry_after, 1.0)

    def test_unknown_code_and_non_json(self):
        self.fake.routes[("GET", "/v1/clusters")] = err(418, "teapot")
        with self.assertRaises(errors.APIError) as cm:
            self.c.clusters()
        self.assertEqual((type(cm.exception), cm.exception.code), (errors.APIError, "teapot"))
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: (502, {}, b"<html>bad gateway</html>")
        with self.assertRaises(errors.APIError) as cm:
            self.c.clusters()
        self.assertEqual((cm.exception.status, cm.exception.code), (502, "http_502"))
        self.assertIn("bad gateway", cm.exception.message)

    def test_every_router_code_has_its_class(self):
        for code, cls, base in (("out_of_memory", errors.OutOfMemory, errors.InternalError),
                                ("path_not_found", errors.PathNotFound, errors.NotFound),
                                ("not_synced", errors.NotSynced, errors.APIError),
                                ("commit_failed", errors.CommitFailed, errors.APIError),
                                ("too_many_connections", errors.TooManyConnections, errors.APIError),
                                ("agent_busy", errors.AgentBusy, errors.APIError),
                                ("agent_error", errors.AgentError, errors.APIError),
                                ("file_too_large", errors.FileTooLarge, errors.APIError),
                                ("disk_full", errors.DiskFull, errors.APIError),
                                ("listing_too_large", errors.ListingTooLarge, errors.APIError),
                                ("token_expired", errors.TokenExpired, errors.Unauthorized),
                                ("secret_not_written", errors.SecretNotWritten, errors.APIError),
                                ("secret_unreadable", errors.SecretUnreadable, errors.APIError),
                                ("invalid_key", errors.InvalidKey, errors.APIError),
                                ("invalid_value", errors.InvalidValue, errors.APIError),
                                ("value_too_large", errors.ValueTooLarge, errors.APIError),
                                ("queue_full", errors.QueueFull, errors.APIError)):
            self.assertIs(errors.error_class_for(code), cls, code)
            self.assertTrue(issubclass(cls, base), code)
        self.fake.routes[("GET", "/v1/clusters")] = err(503, "not_synced", "first list", {"Retry-After": "1"})
        with self.assertRaises(errors.NotSynced) as cm:
            self.c.clusters()
        self.assertEqual(cm.exception.retry_after, 1.0)

    def test_error_pickles(self):
        import pickle
        e = errors.NoCapacity("full", status=503, retry_after=2.0, request_id="r1", body={"shortfall": 3})
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.retry_after, e2.request_id, e2.shortfall), (errors.NoCapacity, 2.0, "r1", 3))

    def test_connect_error(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        c = Client(f"http://127.0.0.1:{port}", "t")
        with self.assertRaises(errors.ConnectError):
            c.clusters()
        with self.assertRaises(errors.ConnectError):
            asyncio.run(c.clusters.aio())


class TestRetries(Base):
    def flaky_create(self, failures, status=503, code="no_capacity", retry_after="1"):
        state = {"n": 0}

        def route(req):
            state["n"] += 1
            if state["n"] <= failures:
                h = {"Retry-After": retry_after} if retry_after is not None else {}
                return err(status, code, "busy", h)(req)
            return created()(req)
        self.fake.routes[("POST", "/v1/sandboxes")] = route
        return state

    def test_create_honours_retry_after(self):
        for status, code in ((503, "no_capacity"), (429, "tenant_limit")):
            st = self.flaky_create(2, status, code)
            t0 = time.monotonic()
            sb = self.c.create(retry_budget_s=10)
            el = time.monotonic() - t0
            self.assertEqual((sb.id, st["n"]), ("c1.pod-1", 3))
            self.assertTrue(1.9 <= el < 6, f"{code}: two Retry-After: 1 waits took {el:.2f} s")

    def test_create_retry_aio(self):
        st = self.flaky_create(1)
        t0 = time.monotonic()
        sb = self.arun(self.c.create.aio(retry_budget_s=5))
        self.assertEqual((sb.id, st["n"]), ("c1.pod-1", 2))
        self.assertGreaterEqual(time.monotonic() - t0, 0.95)

    def test_budget_bounds_retries(self):
        st = self.flaky_create(100, retry_after="1")
        t0 = time.monotonic()
        with self.assertRaises(fedrouter.NoCapacity):
            self.c.create(retry_budget_s=2.5)
        el = time.monotonic() - t0
        self.assertTrue(st["n"] in (2, 3) and el < 3.5, f"{st['n']} attempts in {el:.2f} s")
        st = self.flaky_create(100, retry_after="30")
        t0 = time.monotonic()
        with self.assertRaises(fedrouter.NoCapacity):
            self.c.create(retry_budget_s=5)   # 30 s is over the budget: no wait at all
        self.assertEqual(st["n"], 1)
        self.assertLess(time.monotonic() - t0, 1)

    def test_no_retry_without_retry_after_or_other_codes(self):
        st = self.flaky_create(5, retry_after=None)
        with self.assertRaises(fedrouter.NoCapacity):
            self.c.create()
        self.assertEqual(st["n"], 1)
        st = self.flaky_create(5, 500, "internal", "1")
        with self.assertRaises(errors.InternalError):
            self.c.create()
        self.assertEqual(st["n"], 1)

    def test_exec_never_retried(self):
        path = "/v1/sandboxes/c1.pod-1/exec"
        self.fake.routes[("POST", path)] = err(503, "cluster_unavailable", "down", {"Retry-After": "1"})
        t0 = time.monotonic()
        with self.assertRaises(errors.ClusterUnavailable) as cm:
            self.c.exec("c1.pod-1", "true")
        self.assertEqual(cm.exception.retry_after, 1.0)
        with self.assertRaises(errors.ClusterUnavailable):
            self.arun(self.c.exec.aio("c1.pod-1", "true"))
        self.assertLess(time.monotonic() - t0, 0.9)
        self.assertEqual(self.fake.count("POST", path), 2)

    def test_dropped_connection_during_exec(self):
        path = "/v1/sandboxes/c1.pod-1/exec"
        self.fake.routes[("POST", path)] = lambda r: "drop"
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: (200, {}, {"clusters": []})
        self.c.clusters()  # a pooled keep-alive connection: the exec reuses it
        t0 = time.monotonic()
        with self.assertRaises(fedrouter.ConnectionLost) as cm:
            self.c.exec("c1.pod-1", "sleep", "1")
        self.assertTrue(cm.exception.request_id)
        with self.assertRaises(fedrouter.ConnectionLost):
            self.c.exec("c1.pod-1", "sleep", "1")    # fresh connection

        async def both():
            await self.c.clusters.aio()
            for _ in range(2):
                with self.assertRaises(fedrouter.ConnectionLost):
                    await self.c.exec.aio("c1.pod-1", "true")
        self.arun(both())
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(self.fake.count("POST", path), 4, "an exec was retried")

    def test_hanging_router_times_out(self):
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: ("hang", 4)
        t0 = time.monotonic()
        with self.assertRaises(fedrouter.Timeout):
            self.c.exec("c1.pod-1", "true", request_timeout=0.5)
        with self.assertRaises(fedrouter.Timeout):
            self.arun(self.c.exec.aio("c1.pod-1", "true", request_timeout=0.5))
        self.assertLess(time.monotonic() - t0, 3)

    def test_stale_keepalive(self):
        """The router closes a keep-alive connection after answering (as on
        its idle timeout): the next calls, exec included, use a new one."""
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: ("close_after", {"clusters": []})
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: ("close_after", EXEC_OK)
        for _ in range(3):
            self.c.clusters()
            time.sleep(0.05)
            self.assertEqual(self.c.exec("c1.pod-1", "x").stdout, "4\n")
            time.sleep(0.05)

        async def arun():
            for _ in range(3):
                await self.c.clusters.aio()
                await asyncio.sleep(0.05)
                self.assertEqual((await self.c.exec.aio("c1.pod-1", "x")).stdout, "4\n")
                await asyncio.sleep(0.05)
        self.arun(arun())
        self.assertEqual(self.fake.count("POST", "/v1/sandboxes/c1.pod-1/exec"), 6)


class TestKeepAlive(Base):
    def test_sync_reuse_and_threads(self):
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: (200, {}, {"clusters": []})
        for _ in range(20):
            self.c.clusters()
        self.assertEqual(len(self.fake.conns), 1)
        self.assertEqual(self.c._sync.opened, 1)
        ths = [threading.Thread(target=lambda: [self.c.clusters() for _ in range(10)]) for _ in range(8)]
        [t.start() for t in ths]
        [t.join(30) for t in ths]
        self.assertEqual(self.fake.count("GET", "/v1/clusters"), 100)
        self.assertLessEqual(self.c._sync.opened, 9)

    def test_aio_reuse_and_concurrency(self):
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: (200, {}, EXEC_OK)

        async def run():
            for _ in range(10):
                await self.c.exec.aio("c1.pod-1", "x")
            first = self.c._aio.opened()
            rs = await asyncio.gather(*(self.c.exec.aio("c1.pod-1", "x") for _ in range(100)))
            return first, self.c._aio.opened(), rs
        first, total, rs = self.arun(run())
        self.assertEqual(first, 1)
        self.assertTrue(all(r.stdout == "4\n" for r in rs))
        self.assertLessEqual(total, 101)
        self.assertEqual(self.fake.count("POST", "/v1/sandboxes/c1.pod-1/exec"), 110)

    def test_aio_pool_bound(self):
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: (time.sleep(0.05), (200, {}, {"clusters": []}))[1]
        c = Client(self.fake.url, "tok", max_connections=4)

        async def run():
            await asyncio.gather(*(c.clusters.aio() for _ in range(20)))
            n = c._aio.opened()
            await c.aclose()
            return n
        self.assertEqual(asyncio.run(run()), 4)


class TestStreaming(Base):
    CHUNKS = [{"stdout": "a\n"}, {"stderr_b64": base64.b64encode(b"\xff").decode()}, {"stdout": "b\n"},
              {"exit_code": 3, "timed_out": False, "duration_ms": 1000}]

    def test_exec_stream_sync_and_aio(self):
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: ("chunks", self.CHUNKS)
        sb = fedrouter.Sandbox(self.c, SB)
        got = list(sb.exec_stream("sh", "-c", "x", timeout=5))
        self.assertEqual(self.body(), {"argv": ["sh", "-c", "x"], "timeout_s": 5, "stream": True})
        self.assertEqual([c.kind for c in got], ["stdout", "stderr", "stdout", "exit"])
        self.assertEqual(got[1].data, b"\xff")
        r = fedrouter.collect(got)
        self.assertEqual((r.stdout, r.stderr_bytes, r.exit_code), ("a\nb\n", b"\xff", 3))

        async def arun():
            return [c async for c in sb.exec_stream.aio("sh", "-c", "x")]
        got2 = self.arun(arun())
        self.assertEqual(got2, got)
        list(sb.exec_stream("true"))  # the pooled connection is reusable after a full stream
        self.assertEqual(self.c._sync.opened, 1)

        async def twice():
            for _ in range(3):
                [c async for c in sb.exec_stream.aio("x")]
            return self.c._aio.opened()
        self.assertEqual(self.arun(twice()), 1)

    def test_stream_drop_raises(self):
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: ("chunks", [{"stdout": "a"}, "drop"])
        with self.assertRaises(fedrouter.ConnectionLost):
            list(self.c.exec_stream("c1.pod-1", "x"))

        async def arun():
            return [c async for c in self.c.exec_stream.aio("c1.pod-1", "x")]
        with self.assertRaises(fedrouter.ConnectionLost):
            self.arun(arun())

    def test_not_supported_detection_and_fallback(self):
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/exec")] = lambda r: (
            err(400, "invalid_field", 'unknown field "stream"', field="stream")(r)
            if json.loads(r["body"]).get("stream") else (200, {}, EXEC_OK))
        with self.assertRaises(fedrouter.NotSupported) as cm:
            list(self.c.exec_stream("c1.pod-1", "x"))
        self.assertIsInstance(cm.exception.__cause__, fedrouter.InvalidField)
        got = list(self.c.exec_stream("c1.pod-1", "x", fallback=True))
        self.assertEqual([(c.kind, c.text) for c in got], [("stdout", "4\n"), ("exit", "")])

        async def arun():
            return [c async for c in self.c.exec_stream.aio("c1.pod-1", "x", fallback=True)]
        self.assertEqual(self.arun(arun()), got)
        sb = fedrouter.Sandbox(self.c, SB)
        for call in (lambda: sb.files.read("/etc/x"), lambda: sb.files.write("/tmp/x", "hi"),
                     lambda: sb.files.list("/tmp"), lambda: sb.files.remove("/tmp/x"),
                     lambda: sb.processes.list(), lambda: sb.processes.start("sleep", "1")):
            with self.assertRaises(fedrouter.NotSupported):
                call()

    def test_files_and_processes_encoding(self):
        self.fake.routes[("PUT", "/v1/sandboxes/c1.pod-1/files")] = lambda r: (200, {}, {"written": len(r["body"])})
        self.fake.routes[("GET", "/v1/sandboxes/c1.pod-1/files")] = lambda r: (
            (200, {}, {"entries": [{"name": "x", "size": 2}]}) if "list=1" in r["query"] else (200, {}, b"\x00\x01"))
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/processes")] = lambda r: (201, {}, {"pid": 42})
        self.fake.routes[("POST", "/v1/sandboxes/c1.pod-1/processes/42/signal")] = lambda r: (200, {}, {})
        sb = fedrouter.Sandbox(self.c, SB)
        sb.files.write("/tmp/a b", b"\x00\x01")
        r = self.fake.requests[-1]
        self.assertEqual((r["query"], r["body"], r["headers"]["Content-Type"]),
                         ("path=/tmp/a+b", b"\x00\x01", "application/octet-stream"))
        self.assertEqual(sb.files.read("/tmp/a b"), b"\x00\x01")
        self.assertEqual(sb.files.list("/tmp")[0].name, "x")
        p = sb.processes.start("sleep", "10", env={"A": "b"}, timeout=5)
        self.assertEqual((p.pid, self.body()), (42, {"argv": ["sleep", "10"], "env": {"A": "b"}, "timeout_s": 5}))
        p.signal("SIGTERM")
        self.assertEqual(self.body(), {"signal": "SIGTERM"})


class TestMisc(Base):
    def test_env_config_and_region(self):
        self.fake.routes[("GET", "/v1/clusters")] = lambda r: (200, {}, {"clusters": []})
        old = dict(os.environ)
        try:
            os.environ.update(FEDROUTER_URL=self.fake.url + "/", FEDROUTER_TOKEN="envtok", FEDROUTER_REGION="apac")
            c = Client()
            c.clusters()
            c.close()
            h = self.fake.requests[-1]["headers"]
            self.assertEqual((h["Authorization"], h["X-Client-Region"]), ("Bearer envtok", "apac"))
            sandbox.close()
            sandbox._default = None
            sandbox.clusters()
            self.assertEqual(self.fake.requests[-1]["headers"]["Authorization"], "Bearer envtok")
        finally:
            os.environ.clear()
            os.environ.update(old)
            sandbox.close()
            sandbox._default = None

    def test_progress_callback_and_bar(self):
        self.fake.routes[("GET", "/v1/sandboxes")] = lambda r: (200, {}, {"sandboxes": [SB, SB]})
        seen = []

        def slow(req):
            # The create answers once the progress poll (every 0.5 s while
            # it is in flight) has reported the 2 running it lists: a
            # condition, not a race of a slow fake against the poll.
            deadline = time.monotonic() + 10
            while (2, 4) not in seen and time.monotonic() < deadline:
                time.sleep(0.01)
            return created(4, "big")(req)
        self.fake.routes[("POST", "/v1/sandboxes")] = slow
        sbs = self.c.create(name="big", num_sandboxes=4, progress=lambda d, t: seen.append((d, t)))
        self.assertEqual(len(sbs), 4)
        self.assertEqual((seen[0], seen[-1]), ((0, 4), (4, 4)))
        self.assertIn((2, 4), seen)
        self.assertIn("fr-sdk-batch", json.loads([r for r in self.fake.requests if r["method"] == "POST"][-1]
                                                 ["body"])["labels"])
        out = io.StringIO()
        bar = Bar("create big", 4, stream=out, force=True)
        bar(0, 4)
        bar(4, 4)
        bar.close()
        self.assertIn("4/4", out.getvalue())
        self.assertIn("100%", out.getvalue())
        quiet = io.StringIO()
        b2 = Bar("x", 2, stream=quiet)  # not a terminal: silent
        b2(2, 2)
        b2.close()
        self.assertEqual(quiet.getvalue(), "")

        async def arun():
            return await self.c.create.aio(name="big", num_sandboxes=4, progress=lambda d, t: seen.append((d, t)))
        seen.clear()
        self.assertEqual(len(self.arun(arun())), 4)
        self.assertEqual(seen[-1], (4, 4))

    def test_context_managers_terminate_on_exception(self):
        self.fake.routes[("POST", "/v1/sandboxes")] = created()
        self.fake.routes[("DELETE", "/v1/sandboxes/c1.pod-1")] = lambda r: (200, {}, {"terminated": True})
        with self.assertRaises(RuntimeError):
            with self.c.create():
                raise RuntimeError("boom")
        self.assertEqual(self.fake.count("DELETE", "/v1/sandboxes/c1.pod-1"), 1)

        async def arun():
            async with self.c.create.aio() as sb2:
                self.assertEqual(sb2.id, "c1.pod-1")
                raise RuntimeError("boom")
        with self.assertRaises(RuntimeError):
            self.arun(arun())
        self.assertEqual(self.fake.count("DELETE", "/v1/sandboxes/c1.pod-1"), 2)


class TestPackaging(unittest.TestCase):
    def test_stdlib_wheel_builder(self):
        """The fallback of sdk/python/_build_backend.py (no setuptools/wheel
        in pip's isolated build env, offline) makes an installable wheel."""
        import importlib
        import tempfile
        import zipfile
        sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))
        try:
            bb = importlib.import_module("_build_backend")
        finally:
            sys.path.pop(0)
        with tempfile.TemporaryDirectory() as d:
            name = bb._build_wheel(d)
            self.assertEqual(name, f"fedrouter-{fedrouter.__version__}-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = set(z.namelist())
                record = z.read(f"fedrouter-{fedrouter.__version__}.dist-info/RECORD").decode()
            for f in ("fedrouter/__init__.py", "fedrouter/py.typed", "fedrouter/client.py", "fedrouter/sandbox.py"):
                self.assertIn(f, names)
                self.assertIn(f + ",sha256=", record)
            self.assertFalse(any("__pycache__" in n for n in names))
            meta = bb.prepare_metadata_for_build_wheel(d) if bb._ST is None else None
            if meta:
                self.assertTrue(os.path.exists(os.path.join(d, meta, "METADATA")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
