#!/usr/bin/env python3
"""The E2B-compatible endpoint, black-box: the official E2B JS SDK
(pinned, installed by scripts/lib/e2b_sdk.sh) drives a router in front of
a kubesim cluster whose pods run the real fedrouter-agent
(e2b_sdk_blackbox.mjs), plus the wire answers the SDK relies on, checked
over plain HTTP (docs/e2b.md).

Usage: test_e2b.py --fedrouter PATH --kubesim PATH --agent PATH
Prints ok/FAIL per test and `N passed, M failed`; exits 77 (ctest: skipped)
with a loud message only when the SDK cannot be installed (npm registry
unreachable). Python 3 stdlib only.
"""
import argparse
import hashlib
import http.client
import json
import os
import shutil
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "router"))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, short  # noqa: E402

ARGS = None
POOL = "e2bpy"
SKIP = 77


def sdk_modules():
    """The node_modules holding the pinned SDK, or None."""
    mods = os.environ.get("FR_E2B_NODE_MODULES")
    if mods and os.path.isdir(os.path.join(mods, "e2b")):
        return mods
    if shutil.which("node") is None:
        return None
    try:
        out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "lib", "e2b_sdk.sh")], capture_output=True,
                             timeout=330, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    mods = out.stdout.decode().strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    if not mods or not os.path.isdir(os.path.join(mods, "e2b")):
        sys.stderr.write(out.stderr.decode()[-2000:])
        return None
    return mods


def cluster_code(name):
    """The end of the cluster's short sandbox ids: each of the first four
    bytes of SHA-256(name) as a base-36 digit (docs/e2b.md)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(digits[b % 36] for b in hashlib.sha256(name.encode()).digest()[:4])


def e2b(fed, method, path, body=None, key=tr.TOKEN_A, headers=None):
    h = dict(headers or {})
    if key is not None:
        h["X-API-Key"] = key
    return tr.api_call(fed.router.port, method, "/e2b" + path, body, None, h)


def test_pool_is_warm(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": POOL, "image": tr.IMAGE, "replicas": 2, "cpus": 0.5,
                                          "memory_gb": 0.5})
    check(st == 201, f"pool: {st} {r}")
    check(tr.wait_until(lambda: all(any(p.get("name") == POOL and p.get("ready", 0) >= 2 for p in c["pools"])
                                    for c in fed.api("GET", "/v1/clusters")[1]["clusters"]), 30),
          "the pool did not fill in 30 s")


def test_region_header_places_the_create(fed):
    ids = {}
    for region, cluster in (("apac", "e2"), (None, "e1")):
        st, r = e2b(fed, "POST", "/v2/sandboxes", body={"templateID": POOL, "timeout": 60},
                    headers={"X-Client-Region": region} if region else None)
        check(st == 201 and r.get("templateID") == POOL and r.get("envdVersion") == "0.5.7"
              and len(r.get("envdAccessToken", "")) == 64 and r.get("clientID") == cluster,
              f"create with region {region}: {st} {r}")
        check(r["sandboxID"].endswith("-" + cluster_code(cluster)), f"region {region} placed it in {r['sandboxID']}")
        ids[cluster] = r["sandboxID"]
    for sid in ids.values():
        st, r = e2b(fed, "DELETE", "/sandboxes/" + sid)
        check(st == 204, f"kill {sid}: {st} {r}")
        st, r = e2b(fed, "GET", "/sandboxes/" + sid)
        check(st == 404, f"{sid} after kill: {st} {r}")


def test_wire_answers(fed):
    st, r = e2b(fed, "GET", "/v2/sandboxes", key=None)
    check(st == 401 and r.get("code") == 401 and r["error"]["code"] == "unauthorized", f"no key: {st} {r}")
    st, r = e2b(fed, "GET", "/v2/sandboxes", key="not-a-token")
    check(st == 401 and r.get("code") == 401, f"bad key: {st} {r}")
    st, r = e2b(fed, "GET", "/v2/sandboxes")
    check(st == 200 and r == [], f"empty list: {st} {r}")
    st, r = e2b(fed, "POST", "/sandboxes/x.y/pause", body={})
    check(st == 404 and r.get("code") == 404, f"pause of an unknown sandbox: {st} {r}")
    st, r = e2b(fed, "POST", "/sandboxes/x.y/resume", body={})
    check(st == 404 and r.get("code") == 404, f"resume of an unknown sandbox: {st} {r}")
    for method, path in (("POST", "/v3/templates"), ("GET", "/volumes"),
                         ("POST", "/sandboxes/x.y/snapshots"), ("GET", "/sandboxes/x.y/metrics")):
        t0 = time.monotonic()
        st, r = e2b(fed, method, path, body={})
        check(st == 501 and r.get("code") == 501 and "fedrouter does not support" in r.get("message", "")
              and r["error"]["code"] == "not_supported", f"{method} {path}: {st} {r}")
        check(time.monotonic() - t0 < 2, f"{method} {path} took {time.monotonic() - t0:.1f} s")
    st, r = e2b(fed, "POST", "/v2/sandboxes", body={"metadata": {}})
    check(st == 400 and r["error"]["field"] == "templateID", f"no templateID: {st} {r}")
    st, r = e2b(fed, "POST", "/v2/sandboxes", body={"templateID": POOL, "timeout": 10 ** 9})
    check(st == 400 and r.get("code") == 400 and r["error"]["field"] == "timeout", f"timeout beyond the maximum: {st} {r}")
    st, r = e2b(fed, "POST", "/v2/sandboxes", body={"templateID": POOL, "metadata": {"bad key!": "x"}})
    check(st == 400 and "label" in r.get("message", ""), f"metadata that is no label: {st} {r}")
    st, r = e2b(fed, "POST", "/v2/sandboxes", body={"templateID": POOL, "mcp": {"x": {}}})
    check(st == 501, f"mcp: {st} {r}")
    st, r = e2b(fed, "GET", "/sandboxes/nope.nope")
    check(st == 404 and r.get("code") == 404, f"unknown id: {st} {r}")
    # In-sandbox calls need the access token; a missing one is 401 whatever the id.
    st, r = e2b(fed, "POST", "/process.Process/List", body={}, key=None, headers={"E2b-Sandbox-Id": "e1.nope"})
    check(st == 401, f"in-sandbox call without a token: {st} {r}")
    st, r = e2b(fed, "GET", "/files?path=/tmp/x&signature=v1_abc", key=None)
    check(st == 400 and r["error"]["code"] == "sandbox_id_required", f"a pre-signed file URL: {st} {r}")
    # Another port of a sandbox is relayed to it (tests/router/test_ports.py);
    # an unknown sandbox there is the same 404 as anywhere.
    st, r = e2b(fed, "GET", "/health", key=None, headers={"E2b-Sandbox-Id": "e1.nope", "E2b-Sandbox-Port": "8000"})
    check(st == 404 and r.get("code") == 404, f"another port of an unknown sandbox: {st} {r}")
    # isRunning() of a sandbox that is gone: GET /health answers 502, which
    # the SDK reads as "not running".
    st, r = e2b(fed, "GET", "/health", key=None, headers={"E2b-Sandbox-Id": "e1.nope", "X-Access-Token": "0" * 64})
    check(st == 502 and r.get("code") == 502, f"envd health of an unknown sandbox: {st} {r}")


def test_files_stream_both_ways_with_backpressure(fed):
    """48 MiB up through /e2b/files (a body far past max_body_bytes: it is
    streamed, not buffered), then down to a reader that stops: the router
    does not take the file into memory (half of it is the bound, checked
    in the release build: in ASan's, its quarantine keeps freed memory
    resident); the bytes come back intact."""
    st, sb = e2b(fed, "POST", "/v2/sandboxes", body={"templateID": POOL, "timeout": 120})
    check(st == 201, f"create: {st} {sb}")
    sid, token = sb["sandboxID"], sb["envdAccessToken"]
    size, chunk = 48 << 20, bytes(range(256)) * 4096   # 1 MiB pieces
    h = {"E2b-Sandbox-Id": sid, "X-Access-Token": token, "Content-Type": "application/octet-stream"}
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=60)
    c.request("POST", "/e2b/files?path=/tmp/big.bin", body=(chunk for _ in range(size // len(chunk))),
              headers=h, encode_chunked=True)
    r = c.getresponse()
    body = r.read()
    c.close()
    check(r.status == 200 and json.loads(body)[0]["path"] == "/tmp/big.bin", f"upload: {r.status} {body[:300]!r}")
    base = tr.rss_kib(fed.router.proc.pid)
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=60)
    c.request("GET", "/e2b/files?path=/tmp/big.bin", headers={"E2b-Sandbox-Id": sid, "X-Access-Token": token})
    r = c.getresponse()
    check(r.status == 200 and r.getheader("Content-Length") == str(size), f"download head: {r.status} {r.getheaders()}")
    got = r.read(1 << 20)
    # The reader stops; the agent's stream must stop too: wait until the
    # router's RSS holds still (two samples 0.5 s apart within 256 KiB),
    # at most 10 s, then compare.
    pid, last, end = fed.router.proc.pid, -1, time.monotonic() + 10
    while time.monotonic() < end:
        now = tr.rss_kib(pid)
        if last >= 0 and abs(now - last) < 256:
            break
        last = now
        time.sleep(0.5)
    grown = tr.rss_kib(pid) - base
    rest = r.read()
    c.close()
    check(len(got) + len(rest) == size and got == chunk and rest[-len(chunk):] == chunk, "the file came back different")
    # ASan's quarantine keeps freed memory resident: RSS says nothing there.
    with open(f"/proc/{pid}/maps") as f:
        asan = "libasan" in f.read()
    check(asan or grown < 24 << 10, f"the router grew by {grown} KiB while the reader stood still: no backpressure")
    print(f"     router RSS grew {grown} KiB holding a {size >> 20} MiB download for a stopped reader")
    st, r = e2b(fed, "DELETE", "/sandboxes/" + sid)
    check(st == 204, f"kill: {st} {r}")


def test_watch_stream_through_the_router(fed):
    """WatchDir through /e2b: the start message and keepalives arrive as the
    agent sends them (nothing buffers the stream), a stream quiet for
    seconds is not cut (no idle timeout on the router, its agent calls or
    kubesim's pod proxy while a response streams), and an event after the
    quiet spell still arrives."""
    st, sb = e2b(fed, "POST", "/v2/sandboxes", body={"templateID": POOL, "timeout": 60})
    check(st == 201, f"create: {st} {sb}")
    sid, token = sb["sandboxID"], sb["envdAccessToken"]
    h = {"E2b-Sandbox-Id": sid, "X-Access-Token": token}
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=30)
    c.request("POST", "/e2b/files?path=/tmp/w/keep", body=b"k",
              headers=dict(h, **{"Content-Type": "application/octet-stream"}))
    r = c.getresponse()
    check(r.status == 200, f"upload: {r.status} {r.read()[:200]!r}")
    r.read()

    def watch(interval):
        body = json.dumps({"path": "/tmp/w"}).encode()
        w = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=30)
        w.request("POST", "/e2b/filesystem.Filesystem/WatchDir", body=struct.pack(">BI", 0, len(body)) + body,
                  headers=dict(h, **{"Content-Type": "application/connect+json", "Keepalive-Ping-Interval": interval}))
        resp = w.getresponse()
        check(resp.status == 200 and resp.getheader("Content-Type") == "application/connect+json",
              f"WatchDir: {resp.status} {resp.getheaders()}")
        return w, resp

    def message(resp):
        flags, n = struct.unpack(">BI", resp.read(5))
        return flags, json.loads(resp.read(n))

    def upload(name):
        c.request("POST", "/e2b/files?path=/tmp/w/" + name, body=b"x",
                  headers=dict(h, **{"Content-Type": "application/octet-stream"}))
        r = c.getresponse()
        r.read()
        check(r.status == 200, f"upload {name}: {r.status}")

    def event_after_keepalives(name):
        """Reads keepalives until the event of <name>: nothing else may come
        before it. Returns how many keepalives came first."""
        n = 0
        while True:
            m = message(resp)
            if m == (0, {"keepalive": {}}):
                n += 1
                continue
            check(m == (0, {"filesystem": {"name": name, "type": "EVENT_TYPE_CREATE"}}),
                  f"after {n} keepalives, want the event of {name}, got {m}")
            return n

    # Order, not time: each step waits for the message before it, so a
    # router (or kubesim's pod proxy) that held messages back until more
    # came, or until the stream ended, stalls the test (30 s socket timeout).
    w, resp = watch("1")
    check(message(resp) == (0, {"start": {}}), "the start message")
    upload("ka-1")
    event_after_keepalives("ka-1")
    # An otherwise idle stream: keepalives keep coming (after the upload's
    # write events, if any).
    for i in range(2):
        m = message(resp)
        while m == (0, {"filesystem": {"name": "ka-1", "type": "EVENT_TYPE_WRITE"}}):
            m = message(resp)
        check(m == (0, {"keepalive": {}}), f"keepalive {i} after the event: {m}")
    upload("ka-2")
    event_after_keepalives("ka-2")
    w.close()
    w, resp = watch("3600")
    check(message(resp) == (0, {"start": {}}), "the start message (quiet stream)")
    time.sleep(4)
    c.request("POST", "/e2b/files?path=/tmp/w/after-quiet", body=b"q",
              headers=dict(h, **{"Content-Type": "application/octet-stream"}))
    r = c.getresponse()
    r.read()
    check(r.status == 200, f"upload after the quiet spell: {r.status}")
    m = message(resp)
    check(m == (0, {"filesystem": {"name": "after-quiet", "type": "EVENT_TYPE_CREATE"}}),
          f"the event after 4 quiet seconds: {m}")
    w.close()
    c.close()
    st, r = e2b(fed, "DELETE", "/sandboxes/" + sid)
    check(st == 204, f"kill: {st} {r}")


def test_official_sdk(fed):
    mods = fed.shared["mods"]
    env = dict(os.environ, FR_E2B_NODE_MODULES=mods, E2B_API_URL=f"http://127.0.0.1:{fed.router.port}/e2b",
               E2B_SANDBOX_URL=f"http://127.0.0.1:{fed.router.port}/e2b", E2B_API_KEY=tr.TOKEN_A,
               E2B_TEST_POOL=POOL, E2B_TEST_OTHER_KEY=tr.TOKEN_B)
    t0 = time.monotonic()
    out = subprocess.run(["node", os.path.join(HERE, "e2b_sdk_blackbox.mjs")], env=env, capture_output=True,
                         timeout=150, stdin=subprocess.DEVNULL)
    text = out.stdout.decode(errors="replace")
    for line in text.splitlines():
        print("     " + line, flush=True)
    check(out.returncode == 0 and "e2b sdk ok" in text,
          f"the SDK run failed (exit {out.returncode}): {out.stderr.decode(errors='replace')[-1500:]}")
    print(f"     SDK run took {time.monotonic() - t0:.1f} s")
    # It killed what it made: the cluster holds none of its sandboxes.
    st, r = fed.api("GET", "/v1/sandboxes?label=run=e2b-bb")
    check(st == 200 and r["sandboxes"] == [], f"sandboxes left behind: {short(r)}")


TESTS = [test_pool_is_warm, test_wire_answers, test_region_header_places_the_create,
         test_files_stream_both_ways_with_backpressure, test_watch_stream_through_the_router, test_official_sdk]


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fedrouter", required=True)
    ap.add_argument("--kubesim", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()
    tr.ARGS = ARGS
    mods = sdk_modules()
    if mods is None:
        print("SKIPPED: the official E2B JS SDK could not be installed (node or npm missing, or the npm registry "
              "unreachable); the E2B endpoint was NOT tested", flush=True)
        return SKIP

    def make_fed():
        sim = ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi", "--agent-binary", os.path.abspath(ARGS.agent)]
        fed = tap.AgentFed("e2b", [("e1", "us", sim), ("e2", "apac", sim)])
        fed.shared = {"mods": mods}
        return fed
    return tr.run_suite(make_fed, TESTS)


if __name__ == "__main__":
    sys.exit(main())
