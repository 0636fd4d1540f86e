#!/usr/bin/python3
"""test_codeint.py - black-box suite of the code interpreter server
(deploy/code-interpreter/server.py), started directly on a loopback port.

Checks the wire contract the E2B Code Interpreter SDKs rely on: state kept
across cells, stdout/stderr in order and streamed while the cell runs, the
main result, display data (HTML, other MIME types in "extra", a matplotlib
PNG), errors, execution counts, contexts (create, list, cwd, restart,
remove), per-call env_vars, the 400/404/405/413/429 answers, keepalive
lines during a 6 s cell, interrupting the cell when the client hangs up,
a dead kernel replaced, the output bound, keep-alive and chunked requests,
and that no kernel outlives the server (SIGTERM or SIGKILL).

Usage: test_codeint.py            (exit 0 pass, 1 fail, 77 skipped)
"""
import base64
import datetime
import json
import os
import re
import signal
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ci_server as cs  # noqa: E402
from ci_server import Stream, count, main_result, of, wait_for  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def step(name):
    print("-- " + name, flush=True)


def proc_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_basics(s):
    step("health, state across cells, execution count, main result")
    st, _, body = s.call("GET", "/health")
    check(st == 200 and body == "OK", "health: %s %s" % (st, body))
    a = s.execute("x = 41")
    b = s.execute("x + 1")
    check(main_result(b)["text"] == "42", "state kept: %s" % b)
    check(count(b) == count(a) + 1, "execution count +1: %s %s" % (count(a), count(b)))
    check(of(a, "result") == [], "an assignment has no result: %s" % a)
    r = main_result(s.execute("'abc'"))
    check(r["text"] == "abc", "a str result loses its quotes as on E2B: %r" % r)
    check(main_result(s.execute("[1, 'a']"))["text"] == "[1, 'a']", "other reprs are kept")
    kinds = [x["type"] for x in b]
    check(kinds == ["number_of_executions", "result", "end_of_execution"], "line order: %s" % kinds)

    step("stdout and stderr in order, with timestamps")
    lines = s.execute("import sys\nprint('out1', flush=True)\nprint('err1', file=sys.stderr, flush=True)\n"
                      "print('out2', flush=True)\nprint('err2', file=sys.stderr, flush=True)")
    logs = [(x["type"], x["text"]) for x in lines if x["type"] in ("stdout", "stderr")]
    check(logs == [("stdout", "out1\n"), ("stderr", "err1\n"), ("stdout", "out2\n"), ("stderr", "err2\n")],
          "stream order: %s" % logs)
    for x in of(lines, "stdout") + of(lines, "stderr"):
        try:
            datetime.datetime.fromisoformat(x["timestamp"])
        except (KeyError, ValueError):
            check(False, "timestamp is ISO 8601: %s" % x)

    step("output streams while the cell runs")
    flag = os.path.join(s.cwd, "go")
    st = Stream(s, {"code": "import os, time\nprint('first', flush=True)\n"
                            "while not os.path.exists(%r):\n    time.sleep(0.01)\nprint('second')" % flag})
    got = st.until(lambda x: x["type"] == "stdout")
    check(got[-1]["text"] == "first\n", "first line before the cell ends: %s" % got)
    # The cell waits for this file: the line above came while it ran.
    open(flag, "w").close()
    rest = st.rest()
    check([x["text"] for x in of(rest, "stdout")] == ["second\n"] and rest[-1]["type"] == "end_of_execution",
          "the rest: %s" % rest)
    st.hang_up()

    step("errors: name, value, traceback")
    lines = s.execute("def f():\n    raise ValueError('boom')\nprint('before')\nf()\nprint('after')")
    errs = of(lines, "error")
    check(len(errs) == 1, "one error: %s" % lines)
    if errs:
        e = errs[0]
        check(e["name"] == "ValueError" and e["value"] == "boom", "error: %s" % e)
        tb = re.sub(r"\x1b\[[0-9;]*m", "", e["traceback"]) if isinstance(e["traceback"], str) else ""
        check("ValueError: boom" in tb and "----> 4 f()" in tb and "raise ValueError('boom')" in tb
              and "\n" in tb, "traceback is one string with the frames: %r" % tb[:600])
    check([x["text"] for x in of(lines, "stdout")] == ["before\n"], "output before the error only: %s" % lines)
    check(of(lines, "result") == [], "no result after an error")
    lines = s.execute("1 +")
    check([e["name"] for e in of(lines, "error")] == ["SyntaxError"], "syntax error: %s" % lines)

    step("display data: html, extra MIME types")
    lines = s.execute("from IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))\n"
                      "display({'application/x-fr-test': {'k': 1}, 'text/plain': 'plain'}, raw=True)\n7")
    res = of(lines, "result")
    check(len(res) == 3, "two displays and the main result: %s" % res)
    if len(res) == 3:
        check(res[0]["html"] == "<b>hi</b>" and res[0]["is_main_result"] is False, "html display: %s" % res[0])
        check(res[1].get("extra") == {"application/x-fr-test": {"k": 1}} and res[1]["text"] == "plain",
              "other MIME types in extra: %s" % res[1])
        check(res[2]["is_main_result"] is True and res[2]["text"] == "7", "main result last: %s" % res[2])


def png_size(b64):
    raw = base64.b64decode(b64)
    if raw[:8] != b"\x89PNG\r\n\x1a\n" or raw[12:16] != b"IHDR":
        return None, raw
    w, h = struct.unpack(">II", raw[16:24])
    return (w, h), raw


def test_matplotlib(s):
    step("matplotlib: plt.show() and a last-expression figure as PNG results")
    lines = s.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('fr')\nplt.show()")
    pngs = [x for x in of(lines, "result") if x.get("png")]
    check(len(pngs) == 1 and pngs[0]["is_main_result"] is False, "plt.show() gives one display result: %s"
          % [{k: (v if k != "png" else "...") for k, v in x.items()} for x in of(lines, "result")])
    if pngs:
        size, raw = png_size(pngs[0]["png"])
        check(size is not None, "a PNG: %r" % raw[:16])
        check(size is not None and size[0] >= 200 and size[1] >= 150 and len(raw) > 2000,
              "a real figure: %s, %d bytes" % (size, len(raw)))
        check(pngs[0]["text"].startswith("<Figure"), "its text: %s" % pngs[0].get("text"))
    lines = s.execute("fig, ax = plt.subplots()\nax.bar([1, 2], [3, 4])\nfig")
    main = [x for x in of(lines, "result") if x["is_main_result"]]
    check(len(main) == 1 and main[0].get("png") and png_size(main[0]["png"])[0] is not None,
          "a figure as the last expression is the main result, a PNG")


def test_contexts(s):
    step("contexts: create, list, cwd, separate state, restart, remove")
    st, _, lst = s.call("GET", "/contexts")
    check(st == 200 and len(lst) == 1 and lst[0]["language"] == "python" and lst[0]["cwd"] == s.cwd,
          "the default context is listed: %s" % lst)
    default_id = lst[0]["id"] if lst else None
    sub = os.path.join(s.cwd, "sub dir")
    os.mkdir(sub)
    st, _, c = s.call("POST", "/contexts", {"language": "python", "cwd": sub})
    check(st == 200 and set(c) == {"id", "language", "cwd"} and c["cwd"] == sub and c["language"] == "python",
          "create: %s %s" % (st, c))
    cid = c["id"]
    st, _, c2 = s.call("POST", "/contexts", {})
    check(st == 200 and c2["cwd"] == s.cwd and c2["language"] == "python", "defaults: %s" % c2)
    st, _, lst = s.call("GET", "/contexts")
    check(sorted(x["id"] for x in lst) == sorted([default_id, cid, c2["id"]]), "list: %s" % lst)
    check(main_result(s.execute("import os; os.getcwd()", context_id=cid))["text"] == sub, "cwd applies")
    s.execute("y = 'in-context'", context_id=cid)
    lines = s.execute("y", context_id=c2["id"])
    check([e["name"] for e in of(lines, "error")] == ["NameError"], "contexts do not share state: %s" % lines)
    check(main_result(s.execute("y", context_id=cid))["text"] == "in-context", "state kept in a context")
    check(main_result(s.execute("1", language="python"))["text"] == "1", "language python: the default context")
    check(main_result(s.execute("x", language="Python "))["text"] == "41", "language normalized: default context")

    st, _, body = s.call("POST", "/contexts/%s/restart" % cid)
    check(st == 204 and body is None, "restart: %s %s" % (st, body))
    lines = s.execute("y", context_id=cid)
    check([e["name"] for e in of(lines, "error")] == ["NameError"], "restart drops the state: %s" % lines)
    check(count(lines) == 1, "restart starts counting again: %s" % count(lines))
    check(main_result(s.execute("import os; os.getcwd()", context_id=cid))["text"] == sub, "restart keeps cwd")

    st, _, body = s.call("DELETE", "/contexts/%s" % c2["id"])
    check(st == 204, "remove: %s %s" % (st, body))
    st, _, lst = s.call("GET", "/contexts")
    check(c2["id"] not in [x["id"] for x in lst], "removed context not listed")
    for method, path in (("DELETE", "/contexts/" + c2["id"]), ("POST", "/contexts/%s/restart" % c2["id"]),
                         ("POST", "/contexts/nope/restart"), ("DELETE", "/contexts/nope")):
        st, _, body = s.call(method, path)
        check(st == 404 and body["error"]["code"] == "context_not_found", "%s %s: %s %s" % (method, path, st, body))
    st, body = s.execute_raw({"code": "1", "context_id": c2["id"]})
    check(st == 404 and body["error"]["code"] == "context_not_found" and body["code"] == 404,
          "execute in a removed context: %s %s" % (st, body))
    s.call("DELETE", "/contexts/" + cid)


def test_errors(s):
    step("400, 404, 405, 413 answers")
    cases = [
        ({"code": "1", "context_id": "x", "language": "python"}, 400, "context_and_language"),
        ({"code": "1", "language": "r"}, 400, "unsupported_language"),
        ({"code": "1", "language": "bash"}, 400, "unsupported_language"),
        ({"code": 1}, 400, "invalid_field"),
        ({}, 400, "invalid_field"),
        ({"code": "1", "env_vars": {"A": 1}}, 400, "invalid_field"),
        ({"code": "1", "env_vars": ["A"]}, 400, "invalid_field"),
        ({"code": "1", "context_id": "no-such-context"}, 404, "context_not_found"),
    ]
    for body, want, code in cases:
        st, got = s.execute_raw(body)
        check(st == want and got["error"]["code"] == code and got["code"] == want and got["message"],
              "execute %s: want %s %s, got %s %s" % (body, want, code, st, got))
    st, _, got = s.call("POST", "/execute", raw=b"{not json")
    check(st == 400 and got["error"]["code"] == "invalid_json", "bad JSON: %s %s" % (st, got))
    st, _, got = s.call("POST", "/execute", raw=b"[1]")
    check(st == 400 and got["error"]["code"] == "invalid_json", "not an object: %s %s" % (st, got))
    for body, code in (({"language": "javascript"}, "unsupported_language"),
                       ({"cwd": "/no/such/dir"}, "invalid_cwd"), ({"cwd": 5}, "invalid_field")):
        st, _, got = s.call("POST", "/contexts", body)
        check(st == 400 and got["error"]["code"] == code, "create %s: %s %s" % (body, st, got))
    st, hdr, got = s.call("GET", "/execute")
    check(st == 405 and hdr.get("allow") == "POST" and got["error"]["code"] == "method_not_allowed",
          "GET /execute: %s %s" % (st, got))
    st, _, got = s.call("PUT", "/contexts")
    check(st == 405, "PUT /contexts: %s" % st)
    st, _, got = s.call("GET", "/nope")
    check(st == 404 and got["error"]["code"] == "not_found", "unknown route: %s %s" % (st, got))
    st, _, got = s.call("POST", "/execute", raw=b"x" * (4 * 1024 * 1024 + 1))
    check(st == 413 and got["error"]["code"] == "body_too_large", "body over the bound: %s %s" % (st, got))


def test_env_vars(s):
    step("env_vars hold for one cell only")
    code = "import os, subprocess\n(os.environ.get('FR_A'), subprocess.check_output(['sh', '-c', 'printf %s \"$FR_A\"']).decode())"
    val = "it's \"$1\" \\n\n"
    r = main_result(s.execute(code, env_vars={"FR_A": val}))
    check(r["text"] == repr((val, val)), "the cell and its children see it: %s" % r["text"])
    r = main_result(s.execute("import os; repr(os.environ.get('FR_A'))"))
    check(r["text"] == "None", "gone after the cell: %s" % r)
    s.execute("import os; os.environ['FR_B'] = 'orig'")
    r = main_result(s.execute("os.environ['FR_B']", env_vars={"FR_B": "tmp"}))
    check(r["text"] == "tmp", "overrides for the cell: %s" % r)
    r = main_result(s.execute("os.environ['FR_B']"))
    check(r["text"] == "orig", "the earlier value is back: %s" % r)
    lines = s.execute("raise RuntimeError('x')", env_vars={"FR_C": "1"})
    check(of(lines, "error")[0]["name"] == "RuntimeError", "error with env_vars")
    r = main_result(s.execute("'FR_C' in os.environ"))
    check(r["text"] == "False", "restored after a failing cell too: %s" % r)
    check(not any(k.startswith("_fr") or k.startswith("__fr") for k in
                  json.loads(main_result(s.execute("import json; json.dumps(list(globals()))"))["text"])),
          "nothing of the env handling in the user's globals")


def test_keepalive(s):
    step("keepalive lines during a 6 s cell")
    st = Stream(s, {"code": "import time\ntime.sleep(6)\n'done'"})
    lines = st.rest()
    st.hang_up()
    kinds = [x["type"] for x in lines]
    check(kinds.count("keepalive") >= 1, "keepalive during the cell: %s" % kinds)
    check(kinds[-1] == "end_of_execution" and main_result(lines)["text"] == "done", "then the result: %s" % kinds)
    check(lines[kinds.index("keepalive")] == {"type": "keepalive"}, "keepalive line: %s" % lines)


def test_interrupt(s):
    step("a client hanging up interrupts its cell; the context goes on")
    _, _, c = s.call("POST", "/contexts", {})
    cid = c["id"]
    s.execute("n = 0", context_id=cid)
    mark = os.path.join(s.cwd, "spinning")
    st = Stream(s, {"code": "import time\nopen(%r, 'w').close()\nwhile True:\n    n += 1\n    time.sleep(0.001)"
                    % mark, "context_id": cid})
    wait_for(lambda: os.path.exists(mark), 30, "the cell to run")
    st.hang_up()
    # The next cell queues behind the interrupted one; it answers with the
    # state intact (an interrupt, not a kernel restart).
    t0 = time.monotonic()
    lines = s.execute("n > 0, type(_ for _ in ()).__name__", context_id=cid)
    check(main_result(lines)["text"] == "(True, 'generator')", "state kept after the interrupt: %s" % lines)
    print("   next cell answered %.2f s after the hang-up" % (time.monotonic() - t0))
    hist = s.execute("import sys; type(sys.last_value).__name__", context_id=cid)
    check(main_result(hist)["text"] == "KeyboardInterrupt", "the cell ended by KeyboardInterrupt: %s" % hist)

    step("a restart ends the running cell with ContextRestarting")
    st = Stream(s, {"code": "import time\nwhile True:\n    time.sleep(0.01)", "context_id": cid})
    st.until(lambda x: x["type"] == "number_of_executions")
    code, _, _ = s.call("POST", "/contexts/%s/restart" % cid)
    rest = st.rest()
    st.hang_up()
    check(code == 204 and [x["name"] for x in of(rest, "error")] == ["ContextRestarting"]
          and rest[-1]["type"] == "end_of_execution", "restart under a cell: %s %s" % (code, rest))
    check(count(s.execute("1", context_id=cid)) == 1, "a fresh kernel after the restart")

    step("a dead kernel is replaced")
    lines = s.execute("import os; os._exit(3)", context_id=cid)
    check([x["name"] for x in of(lines, "error")] == ["KernelDied"], "KernelDied: %s" % lines)
    lines = s.execute("2 + 2", context_id=cid)
    check(main_result(lines)["text"] == "4" and count(lines) == 1, "works after: %s" % lines)
    s.call("DELETE", "/contexts/" + cid)


def test_http(s):
    step("keep-alive across an execute stream, chunked request bodies")
    c = s.conn()
    try:
        for i in range(3):
            c.request("POST", "/execute", body=json.dumps({"code": "%d * 2" % i}))
            r = c.getresponse()
            lines = [json.loads(x) for x in r.read().decode().splitlines()]
            check(r.status == 200 and main_result(lines)["text"] == str(i * 2), "request %d on one connection" % i)
        c.request("GET", "/health")
        r = c.getresponse()
        check(r.status == 200 and json.loads(r.read()) == "OK", "then a plain request")
    finally:
        c.close()
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sk:
        body = json.dumps({"code": "'chunked'"}).encode()
        req = (b"POST /execute HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               + b"%x\r\n%s\r\n" % (5, body[:5]) + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) - 5, body[5:]))
        sk.sendall(req)
        data = b""
        while True:
            d = sk.recv(65536)
            if not d:
                break
            data += d
    check(data.startswith(b"HTTP/1.1 200") and b'"text": "chunked"' in data, "chunked body: %r" % data[:300])
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sk:
        sk.sendall(b"POST /execute HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")
        data = sk.recv(65536)
    check(data.startswith(b"HTTP/1.1 400"), "Content-Length with Transfer-Encoding: %r" % data[:100])


def test_bounds():
    step("bounds: contexts, output per cell, body size")
    s = cs.Server("--max-contexts", "2", "--max-output-bytes", "4096", "--max-body-bytes", "1024",
                  "--interrupt-grace-s", "1")
    try:
        st, _, c = s.call("POST", "/contexts", {})
        check(st == 200, "second context: %s %s" % (st, c))
        st, _, got = s.call("POST", "/contexts", {})
        check(st == 429 and got["error"]["code"] == "too_many_contexts", "third context: %s %s" % (st, got))
        lines = s.execute("for i in range(2000):\n    print('x' * 99)\n'after'")
        out = "".join(x["text"] for x in of(lines, "stdout"))
        notes = [x["text"] for x in of(lines, "stderr")]
        check(len(out) <= 4096, "stdout bounded: %d bytes" % len(out))
        check(len(notes) == 1 and "4096 bytes" in notes[0], "one stderr line says so: %s" % notes)
        check(len(lines) < 100, "the rest dropped: %d lines" % len(lines))
        lines = s.execute("'small'")
        check(main_result(lines)["text"] == "small", "the next cell is whole")
        st, _, got = s.call("POST", "/execute", {"code": "x" * 2000})
        check(st == 413, "body bound: %s" % st)
        st, _, _ = s.call("DELETE", "/contexts/" + c["id"])
        st, _, c = s.call("POST", "/contexts", {})
        check(st == 200, "room again after a removal: %s" % st)

        step("a cell that ignores the interrupt: the kernel is restarted after --interrupt-grace-s")
        s.execute("kept = 1", context_id=c["id"])
        mark = os.path.join(s.cwd, "deaf")
        st = Stream(s, {"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                "open(%r, 'w').close()\nwhile True:\n    time.sleep(0.01)" % mark,
                        "context_id": c["id"]})
        wait_for(lambda: os.path.exists(mark), 30, "the cell to run")
        st.hang_up()
        lines = s.execute("'kept' in globals()", context_id=c["id"])
        check(main_result(lines)["text"] == "False" and count(lines) == 1, "a fresh kernel: %s" % lines)
    finally:
        check(s.stop() == 0, "clean exit")


def kernel_pids(s):
    pids = []
    _, _, lst = s.call("GET", "/contexts")
    for c in lst:
        pids.append(int(main_result(s.execute("import os; os.getpid()", context_id=c["id"]))["text"]))
    return pids


def test_shutdown(s):
    step("no kernel outlives the server: SIGTERM")
    s.call("POST", "/contexts", {})
    pids = kernel_pids(s)
    check(len(pids) >= 2 and all(proc_alive(p) for p in pids), "kernels run: %s" % pids)
    step("kernels talk over Unix sockets, no TCP port another kernel could take")
    for pid in pids:
        argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        conn = argv[argv.index(b"-f") + 1].decode() if b"-f" in argv else None
        info = json.load(open(conn)) if conn else {}
        check(info.get("transport") == "ipc" and info.get("ip", "").startswith("/"),
              "kernel %d connection: %s" % (pid, {k: info.get(k) for k in ("transport", "ip")}))
    rc = s.stop(signal.SIGTERM)
    check(rc == 0, "SIGTERM: exit %s" % rc)
    wait_for(lambda: not any(proc_alive(p) for p in pids), 20, "the kernels to end")

    step("no kernel outlives the server: SIGKILL")
    # As in a pod, where the agent (a subreaper) adopts orphans: this test
    # adopts the killed server's kernels, so ipykernel's parent poller (it
    # looks for a reparenting to PID 1) cannot be what ends them.
    import ctypes
    check(ctypes.CDLL(None, use_errno=True).prctl(36, 1) == 0, "PR_SET_CHILD_SUBREAPER")
    s2 = cs.Server()
    pids = kernel_pids(s2)
    s2.proc.kill()
    s2.proc.wait(10)
    # Not through the session kill of stop(): the kernels are in sessions
    # of their own and must go by themselves (PR_SET_PDEATHSIG).
    ok = True
    try:
        wait_for(lambda: not any(proc_alive(p) for p in pids), 20, "the kernels to die with the server")
    except AssertionError as e:
        ok = check(False, str(e))
    if not ok:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    s2.stop()
    while True:  # reap the adopted kernels
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def main():
    cs.ensure_packages()
    t0 = time.monotonic()
    s = cs.Server()
    print("server up on 127.0.0.1:%d in %.1f s" % (s.port, time.monotonic() - t0), flush=True)
    try:
        test_basics(s)
        test_matplotlib(s)
        test_contexts(s)
        test_errors(s)
        test_env_vars(s)
        test_http(s)
        test_interrupt(s)
        test_keepalive(s)
        test_bounds()
        test_shutdown(s)
    except AssertionError as e:
        check(False, str(e))
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if s.proc.poll() is None or FAILS:
            if FAILS:
                print("---- server log ----\n" + s.log_text())
            s.stop()
    print("%d failure(s)" % len(FAILS) if FAILS else "PASS", flush=True)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
