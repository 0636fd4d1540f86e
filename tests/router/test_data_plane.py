#!/usr/bin/env python3
"""The v1 data plane, black-box: streaming exec, background processes
(start, list, output with and without follow, reattach from a second
replica, stdin, signals, a PTY with resize) and files (streamed upload and
download, list, remove, limits) through the router and the real
fedrouter-agent in kubesim pods (docs/api.md "Inside a sandbox").

Usage: test_data_plane.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import base64
import hashlib
import http.client
import json
import os
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import TestFailure, check, short, wait_until  # noqa: E402

FILE_LIMIT_B = 1 << 20   # tenant b's max_file_bytes


class DataFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        with open(path) as f:
            text = f.read()
        text = text.replace('{ name = "b"; token_sha256', '{ name = "b"; max_file_bytes = %d; token_sha256' % FILE_LIMIT_B, 1)
        with open(path, "w") as f:
            f.write(text)


def stream(fed, method, path, body=None, token=tr.TOKEN_A, raw=None, router=None, timeout=60):
    """Opens a request and returns (connection, response) without reading."""
    port = (router or fed.router).port
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Authorization": "Bearer " + token}
    data = raw
    if body is not None:
        h["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    c.request(method, path, body=data, headers=h)
    return c, c.getresponse()


def ndjson(resp, t0=None):
    """All lines of an NDJSON answer as (seconds since t0, object)."""
    out, buf = [], b""
    while True:
        data = resp.read1(65536)   # what has arrived (readline may stop at a chunk edge)
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            out.append((time.monotonic() - (t0 or 0), json.loads(line)))
    check(buf == b"", f"an NDJSON answer ended inside a line: {buf[:200]!r}")
    return out


def text_of(lines, key="stdout"):
    return "".join(o.get(key, "") for _, o in lines)


def test_streaming_exec_sends_output_as_it_comes(fed):
    sid = fed.create_one(name="dp")["id"]
    fed.shared["sid"] = sid
    t0 = time.monotonic()
    c, r = stream(fed, "POST", f"/v1/sandboxes/{sid}/exec",
                  {"argv": ["sh", "-c", "echo a; sleep 1; echo b; echo e >&2; exit 3"], "stream": True})
    check(r.status == 200 and r.getheader("Content-Type", "").startswith("application/x-ndjson"),
          f"stream exec head: {r.status} {r.getheaders()}")
    lines = ndjson(r, t0)
    c.close()
    check(lines and lines[0][1] == {"stdout": "a\n"}, f"first line: {lines[:2]}")
    check(lines[0][0] < 0.9, f"the first chunk came {lines[0][0]:.2f} s after the request: not streamed")
    last = lines[-1][1]
    check(last.get("exit_code") == 3 and last.get("timed_out") is False and "duration_ms" in last,
          f"last line: {last}")
    check(lines[-1][0] >= 1.0, "the end came before the command could have ended")
    check(text_of(lines) == "a\nb\n" and text_of(lines, "stderr") == "e\n", f"output: {lines}")
    print(f"     first chunk after {lines[0][0] * 1000:.0f} ms, end after {lines[-1][0] * 1000:.0f} ms")


def test_streaming_exec_binary_timeout_and_missing_command(fed):
    sid = fed.shared["sid"]
    c, r = stream(fed, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["printf", "\\377\\376ok"], "stream": True})
    lines = ndjson(r)
    c.close()
    check(any("stdout_b64" in o for _, o in lines), f"non-UTF-8 output not base64: {lines}")
    # A multi-byte character split by the pipe still comes out as text.
    c, r = stream(fed, "POST", f"/v1/sandboxes/{sid}/exec",
                  {"argv": ["sh", "-c", "printf '\\342\\202'; sleep 0.3; printf '\\254\\n'"], "stream": True})
    lines = ndjson(r)
    c.close()
    check(text_of(lines) == "\u20ac\n" and not any("stdout_b64" in o for _, o in lines),
          f"a character split across pieces: {lines}")
    c, r = stream(fed, "POST", f"/v1/sandboxes/{sid}/exec",
                  {"argv": ["sh", "-c", "echo x; sleep 30"], "stream": True, "timeout_s": 1})
    lines = ndjson(r)
    c.close()
    check(lines[-1][1].get("timed_out") is True and lines[-1][1].get("exit_code") is None, f"timeout: {lines}")
    c, r = stream(fed, "POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["no-such-cmd-x"], "stream": True})
    lines = ndjson(r)
    c.close()
    check(lines[-1][1].get("exit_code") == 127, f"missing command: {lines}")
    st, e = fed.api("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["true"], "stream": "yes"})
    check(st == 400 and e["error"]["code"] == "invalid_field", f"stream must be a boolean: {st} {e}")


def test_streaming_exec_client_gone_kills_the_command(fed):
    sid = fed.shared["sid"]
    c, r = stream(fed, "POST", f"/v1/sandboxes/{sid}/exec",
                  {"argv": ["sh", "-c", "echo up; exec sleep 3051"], "stream": True})
    first = r.read1(65536)
    check(json.loads(first) == {"stdout": "up\n"}, f"no first line: {first!r}")
    c.close()

    def left():
        return fed.exec_ok(sid, ["sh", "-c", "ps -eo args | grep '^sleep 3051' || true"]).get("stdout")
    check(wait_until(lambda: left() == "", 10, 0.3), f"the command outlived its client: {left()!r}")


def test_background_process_output_stdin_signal(fed):
    sid = fed.shared["sid"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"cmd": "echo hi; exec sleep 3061", "tag": "t1"})
    check(st == 201 and isinstance(r.get("pid"), int), f"start: {st} {r}")
    pid = r["pid"]
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}/processes")
    mine = [p for p in r.get("processes", []) if p.get("pid") == pid]
    check(st == 200 and mine and mine[0].get("tag") == "t1" and mine[0]["argv"][0] == "/bin/sh",
          f"list: {st} {short(r)}")

    def output(follow=False, router=None):
        c, resp = stream(fed, "GET", f"/v1/sandboxes/{sid}/processes/{pid}/output" + ("?follow=1" if follow else ""),
                         router=router)
        if resp.status != 200:
            raise TestFailure(f"output: {resp.status} {resp.read()[:300]}")
        lines = ndjson(resp)
        c.close()
        return lines
    check(wait_until(lambda: text_of(output()) == "hi\n", 10, 0.3), f"output kept: {output()}")
    lines = output()
    check(lines[-1][1] == {"running": True}, f"without follow the last line says it runs: {lines}")
    # Reattach from a second replica with the same key.
    r2 = fed.shared.get("r2") or fed.start_router()
    fed.shared["r2"] = r2
    check(text_of(output(router=r2)) == "hi\n", "a second replica does not serve the process's output")
    # SIGTERM ends it; a follow stream sees the end.
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes/{pid}/signal", {"signal": "SIGTERM"})
    check(st == 204, f"signal: {st} {r}")
    lines = output(follow=True)
    check(lines[-1][1].get("exit_code") == 143, f"end after SIGTERM: {lines}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes/{pid}/signal", {"signal": "SIGNOPE"})
    check(st == 400 and r["error"]["code"] == "invalid_field", f"bad signal: {st} {r}")
    # stdin
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["cat"], "stdin": True})
    check(st == 201, f"start cat: {st} {r}")
    cat = r["pid"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes/{cat}/stdin", raw=b"hello\n",
                    headers={"Content-Type": "application/octet-stream"})
    check(st == 204, f"stdin: {st} {r}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes/{cat}/stdin?close=1", raw=b"bye\n",
                    headers={"Content-Type": "application/octet-stream"})
    check(st == 204, f"stdin + close: {st} {r}")
    c, resp = stream(fed, "GET", f"/v1/sandboxes/{sid}/processes/{cat}/output?follow=1")
    lines = ndjson(resp)
    c.close()
    check(text_of(lines) == "hello\nbye\n" and lines[-1][1].get("exit_code") == 0, f"cat: {lines}")
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}/processes/999999/output")
    check(st == 404 and r["error"]["code"] == "process_not_found", f"unknown pid: {st} {r}")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["x"], "cmd": "y"})
    check(st == 400, f"argv and cmd: {st} {r}")


def test_pty_process_with_resize(fed):
    sid = fed.shared["sid"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["sh"], "pty": {"cols": 90, "rows": 30}})
    check(st == 201, f"pty start: {st} {r}")
    pid = r["pid"]
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes/{pid}/stdin", raw=b"stty size\n",
                    headers={"Content-Type": "application/octet-stream"})
    check(st == 204, f"pty input: {st} {r}")
    def seen(text):
        c, resp = stream(fed, "GET", f"/v1/sandboxes/{sid}/processes/{pid}/output")
        out = text_of(ndjson(resp))
        c.close()
        return text in out
    check(wait_until(lambda: seen("30 90"), 10, 0.2), "stty size did not show the start size")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes/{pid}/resize", {"cols": 100, "rows": 40})
    check(st == 204, f"resize: {st} {r}")
    fed.api("POST", f"/v1/sandboxes/{sid}/processes/{pid}/stdin", raw=b"stty size; exit 3\n",
            headers={"Content-Type": "application/octet-stream"})
    c, resp = stream(fed, "GET", f"/v1/sandboxes/{sid}/processes/{pid}/output?follow=1")
    lines = ndjson(resp)
    c.close()
    out = text_of(lines)
    check("30 90" in out and "40 100" in out and lines[-1][1].get("exit_code") == 3, f"pty session: {lines}")


def test_files_round_trip_list_remove(fed):
    sid = fed.shared["sid"]
    data = os.urandom(5 << 20)
    st, r = fed.api("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/d%20p/blob.bin", raw=data,
                    headers={"Content-Type": "application/octet-stream"})
    check(st == 201 and r == {"path": "/tmp/d p/blob.bin", "size": len(data)}, f"upload: {st} {short(r)}")
    c, resp = stream(fed, "GET", f"/v1/sandboxes/{sid}/files?path=/tmp/d%20p/blob.bin")
    got = resp.read()
    c.close()
    check(resp.status == 200 and int(resp.getheader("Content-Length")) == len(data), f"download head: {resp.status}")
    check(hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), "download differs from upload")
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/d%20p&list=1")
    check(st == 200 and [e["name"] for e in r["entries"]] == ["blob.bin"] and r["entries"][0]["type"] == "file"
          and r["entries"][0]["size"] == len(data), f"list: {st} {short(r)}")
    st, r = fed.api("DELETE", f"/v1/sandboxes/{sid}/files?path=/tmp/d%20p")
    check(st == 204, f"remove: {st} {r}")
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/d%20p/blob.bin")
    check(st == 404 and r["error"]["code"] == "path_not_found" and "/tmp/d p/blob.bin" in r["error"]["message"],
          f"gone: {st} {r}")
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}/files?path=relative")
    check(st == 400 and r["error"]["code"] == "invalid_path", f"relative: {st} {r}")
    # Chunked upload (no Content-Length) works too.
    port = fed.router.port
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.putrequest("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/chunked.txt")
    c.putheader("Authorization", "Bearer " + tr.TOKEN_A)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for piece in (b"one ", b"two ", b"three"):
        c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    c.send(b"0\r\n\r\n")
    resp = c.getresponse()
    body = json.loads(resp.read())
    c.close()
    check(resp.status == 201 and body["size"] == 13, f"chunked upload: {resp.status} {body}")
    r = fed.exec_ok(sid, ["cat", "/tmp/chunked.txt"])
    check(r["stdout"] == "one two three", f"chunked content: {r}")


def test_listing_past_the_agents_bound_is_not_retryable(fed):
    """More than 100,000 entries: 400 listing_too_large (retrying cannot
    help, so no 429 with Retry-After)."""
    sid = fed.shared["sid"]
    r = fed.exec_ok(sid, ["python3", "-c",
                          "import os\nos.makedirs('/tmp/many')\n"
                          "for i in range(100001): open('/tmp/many/%d' % i, 'w').close()"], timeout_s=120)
    check(r["exit_code"] == 0, f"made the files: {r}")
    st, r = fed.api("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/many&list=1")
    check(st == 400 and r["error"]["code"] == "listing_too_large" and "100000" in r["error"]["message"],
          f"listing: {st} {short(r)}")
    fed.exec_ok(sid, ["rm", "-rf", "/tmp/many"], timeout_s=120)


BIG_TEXT = r"""
import sys
sys.stdout.write("".join(chr(32 + i % 90) + ('"\\\t\n' if i % 7 == 0 else "") + ("\u00e9\u6f22" if i % 11 == 0 else "")
                         for i in range(300000)))
sys.stderr.buffer.write(bytes(range(256)) * 1000)
"""


def test_large_answers_go_out_in_pieces(fed):
    """Outputs past the one-shot size are written in pieces: exact JSON
    escaping of text, base64 where not UTF-8, the same keys and flags."""
    sid = fed.shared["sid"]
    want = {}
    exec(BIG_TEXT.replace("sys.stdout.write", "want['out'] = ").replace("sys.stderr.buffer.write", "want['err'] = "),
         {"want": want, "sys": sys})
    r = fed.exec_ok(sid, ["python3", "-c", BIG_TEXT])
    check(r.get("stdout") == want["out"] and "stdout_encoding" not in r,
          f"text answer differs: {len(r.get('stdout', ''))} chars vs {len(want['out'])}")
    check(r.get("stderr_encoding") == "base64" and base64.b64decode(r.get("stderr", "")) == want["err"],
          "binary stderr did not come back as exact base64")
    check(r.get("exit_code") == 0 and r.get("timed_out") is False and r.get("stdout_truncated") is False and
          r.get("stderr_truncated") is False and isinstance(r.get("duration_ms"), int),
          f"flags: { {k: v for k, v in r.items() if k not in ('stdout', 'stderr')} }")
    # Characters cut by the pieces the router scans (256 KiB) are whole.
    r = fed.exec_ok(sid, ["python3", "-c", "import sys; sys.stdout.write('ab' + '\\u6f22' * 300000)"])
    check(r.get("stdout") == "ab" + "\u6f22" * 300000 and "stdout_encoding" not in r,
          f"three-byte characters across pieces: {r.get('stdout_encoding')} {len(r.get('stdout', ''))}")
    # Truncated and NUL-only, on the same path.
    r = fed.exec_ok(sid, ["sh", "-c", "head -c 300000 /dev/zero"], max_output_bytes=200000)
    check(r.get("stdout_encoding") == "base64" and base64.b64decode(r["stdout"]) == b"\0" * 200000 and
          r.get("stdout_truncated") is True, "200,000 NULs, truncated, as base64")
    # A client that stops reading and goes away mid-answer: the router
    # drops the rest and goes on serving.
    body = json.dumps({"argv": ["sh", "-c", "head -c 2000000 /dev/zero; head -c 2000000 /dev/zero >&2"]}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the router's writes back up
    sock.settimeout(60)
    sock.connect(("127.0.0.1", fed.router.port))
    sock.sendall(f"POST /v1/sandboxes/{sid}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tr.TOKEN_A}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    head = sock.recv(1000)
    check(head.startswith(b"HTTP/1.1 200"), f"a large answer: {head[:200]!r}")
    sock.close()
    r = fed.exec_ok(sid, ["echo", "still"])
    check(r.get("stdout") == "still\n", f"after a client left mid-answer: {r}")


def test_tenant_rules(fed):
    sid = fed.shared["sid"]
    for path in ("/processes", "/files?path=/tmp", "/processes/1/output"):
        st, r = fed.api("GET", f"/v1/sandboxes/{sid}{path}", token=tr.TOKEN_B)
        check(st == 404 and r["error"]["code"] == "sandbox_not_found", f"tenant b reads a's {path}: {st} {r}")
    sb = fed.create_one(token=tr.TOKEN_B, name="bfiles")["id"]
    st, r = fed.api("PUT", f"/v1/sandboxes/{sb}/files?path=/tmp/big", raw=b"x" * (FILE_LIMIT_B + 1),
                    token=tr.TOKEN_B, headers={"Content-Type": "application/octet-stream"})
    check(st == 413 and r["error"]["code"] == "file_too_large", f"over max_file_bytes: {st} {r}")
    st, r = fed.api("PUT", f"/v1/sandboxes/{sb}/files?path=/tmp/ok", raw=b"x" * 1000,
                    token=tr.TOKEN_B, headers={"Content-Type": "application/octet-stream"})
    check(st == 201, f"under the limit: {st} {r}")
    # A chunked upload that grows past the limit over that file: 413, and
    # the file is as it was (the agent renames an upload in place only
    # once it is whole), nothing of the refused bytes left in the directory.
    c = http.client.HTTPConnection("127.0.0.1", fed.router.port, timeout=60)
    try:
        c.request("PUT", f"/v1/sandboxes/{sb}/files?path=/tmp/ok", body=(b"y" * 65536 for _ in range(40)),
                  headers={"Authorization": "Bearer " + tr.TOKEN_B, "Content-Type": "application/octet-stream",
                           "Transfer-Encoding": "chunked"}, encode_chunked=True)
        resp = c.getresponse()
        st, r = resp.status, json.loads(resp.read() or b"null")
    except (BrokenPipeError, ConnectionResetError):
        resp = c.getresponse()
        st, r = resp.status, json.loads(resp.read() or b"null")
    finally:
        c.close()
    check(st == 413 and r["error"]["code"] == "file_too_large", f"chunked over max_file_bytes: {st} {r}")
    r = fed.exec_ok(sb, ["sh", "-c", "wc -c < /tmp/ok; head -c 3 /tmp/ok"], token=tr.TOKEN_B)
    check(r.get("stdout") == "1000\nxxx", f"the file after a refused upload: {r}")
    check(wait_until(lambda: fed.exec_ok(sb, ["sh", "-c", "ls -A /tmp | grep -c fr-upload || true"],
                                         token=tr.TOKEN_B).get("stdout") == "0\n", 10, 0.2),
          "the refused upload's temporary file stays")


TESTS = [
    test_streaming_exec_sends_output_as_it_comes,
    test_streaming_exec_binary_timeout_and_missing_command,
    test_streaming_exec_client_gone_kills_the_command,
    test_background_process_output_stdin_signal,
    test_pty_process_with_resize,
    test_files_round_trip_list_remove,
    test_listing_past_the_agents_bound_is_not_retryable,
    test_large_answers_go_out_in_pieces,
    test_tenant_rules,
]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: DataFed("data", [("d1", "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi",
                                                         "--agent-binary", os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--agent"]))
