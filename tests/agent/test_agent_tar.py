#!/usr/bin/env python3
"""fedrouter-agent black-box tests of GET and POST /tar (directory
snapshots): the real binary on 127.0.0.1:0, archives read and written with
Python's tarfile. agent/README.md is the contract.

Covered: a tree (nested directories, an empty file, a long name, a pax-size
name, a symlink, modes, mtimes) streamed as tar and as gzip and read back by
tarfile; unpacking into a new and into an existing directory (its content
replaced); the agent's own archive unpacked again (round trip); refusals
that name the entry and leave the target as it was, with nothing written
outside it and no temporary directory left: "..", absolute names, symlinks
out, hard links out, entries through a symlink, devices; 413 past
max_bytes; truncated and corrupt archives; errors before the stream (404,
400, 401); memory behind a slow reader bounded by GET /_fr/held.

Usage: test_agent_tar.py --agent PATH
Prints `ok NAME` / `FAIL NAME: details` per test and `N passed, M failed`.
"""
import argparse
import gzip
import io
import json
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import threading
import time
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_agent as ta  # noqa: E402  (Agent, check, TOKEN)
from test_agent import TestFailure, check  # noqa: E402

LONG = "d" * 60 + "/" + "n" * 120 + ".txt"


def make_tree(root):
    os.makedirs(os.path.join(root, "a/b/c"))
    with open(os.path.join(root, "a/b/c/deep.txt"), "w") as f:
        f.write("deep\n")
    open(os.path.join(root, "empty"), "w").close()
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024 + 17))
    os.makedirs(os.path.join(root, os.path.dirname(LONG)))
    with open(os.path.join(root, LONG), "w") as f:
        f.write("long\n")
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(os.path.join(root, "run.sh"), 0o750)
    os.utime(os.path.join(root, "run.sh"), (1700000000, 1700000000))
    os.symlink("a/b/c/deep.txt", os.path.join(root, "link"))
    os.mkfifo(os.path.join(root, "fifo"))  # not archived


def read_tree(root):
    """{relative path: ('f', bytes, mode) | ('d',) | ('l', target)}"""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("l", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("d",)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out[rel] = ("f", f.read(), os.stat(p).st_mode & 0o7777)
    return out


def get_tar(agent, path, gz=False):
    st, h, body = agent.request("GET", "/tar?path=%s%s" % (path, "&gzip=1" if gz else ""))
    return st, h, body


def post_tar(agent, path, data, extra=""):
    return agent.request("POST", "/tar?path=%s%s" % (path, extra), data,
                         {"Content-Type": "application/x-tar"})


def build_tar(entries, gz=False, fmt=tarfile.PAX_FORMAT, end=True):
    """entries: (name, kind, payload) with kind f/d/l/h/c."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as t:
        for name, kind, payload in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if kind == "f":
                ti.size = len(payload)
                t.addfile(ti, io.BytesIO(payload))
                continue
            ti.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
                       "c": tarfile.CHRTYPE}[kind]
            if kind in "lh":
                ti.linkname = payload
            t.addfile(ti)
    data = bio.getvalue()
    if not end:
        data = data[:-1024 * 10] if len(data) > 10240 else data[:len(data) - 1024]
    return gzip.compress(data) if gz else data


def test_get_tree(a):
    src = os.path.join(ta.TMP, "src")
    make_tree(src)
    want = read_tree(src)
    for gz in (False, True):
        st, h, body = get_tar(a, src, gz)
        check(st == 200, "GET /tar: %d %r" % (st, body[:200]))
        check(h.get("content-type") == ("application/gzip" if gz else "application/x-tar"),
              "content type: %s" % h.get("content-type"))
        check(h.get("transfer-encoding") == "chunked", "streamed (chunked): %s" % h)
        if gz:
            check(body[:2] == b"\x1f\x8b", "gzip magic")
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz" if gz else "r:") as t:
            names = {m.name.rstrip("/"): m for m in t.getmembers()}
            check(set(names) == set(want), "members %s != %s" % (sorted(names), sorted(want)))
            for n, v in want.items():
                m = names[n]
                if v[0] == "f":
                    check(m.isfile() and t.extractfile(m).read() == v[1], "content of " + n)
                    check(m.mode == v[2], "mode of %s: %o" % (n, m.mode))
                elif v[0] == "l":
                    check(m.issym() and m.linkname == v[1], "symlink " + n)
                else:
                    check(m.isdir(), "dir " + n)
            check(names["run.sh"].mtime == 1700000000, "mtime kept")


def test_unpack_new_and_replace(a):
    src = os.path.join(ta.TMP, "src")
    st, _, body = get_tar(a, src, True)
    check(st == 200, "GET: %d" % st)
    want = read_tree(src)
    dst = os.path.join(ta.TMP, "dst", "new")
    st, _, res = post_tar(a, dst, body)
    check(st == 200, "POST into a new directory: %d %r" % (st, res))
    r = json.loads(res)
    check(r["path"] == dst and r["bytes"] == sum(len(v[1]) for v in want.values() if v[0] == "f"),
          "answer: %s" % r)
    check(read_tree(dst) == want, "unpacked tree differs")
    check(os.stat(os.path.join(dst, "run.sh")).st_mtime == 1700000000, "mtime")
    # Into an existing directory: its content is replaced.
    old = os.path.join(ta.TMP, "dst", "old")
    os.makedirs(os.path.join(old, "stale"))
    with open(os.path.join(old, "stale", "x"), "w") as f:
        f.write("stale")
    tar = build_tar([("one.txt", "f", b"1"), ("sub", "d", None), ("sub/two.txt", "f", b"22")])
    st, _, res = post_tar(a, old, tar)
    check(st == 200, "POST into an existing directory: %d %r" % (st, res))
    check(read_tree(old) == {"one.txt": ("f", b"1", 0o644), "sub": ("d",), "sub/two.txt": ("f", b"22", 0o644)},
          "replaced: %s" % read_tree(old))
    check(not [n for n in os.listdir(old) if n.startswith(".fr-restore")], "no temporary directory left")
    # Uncompressed, GNU format long names.
    tar = build_tar([(LONG, "f", b"gnu")], fmt=tarfile.GNU_FORMAT)
    st, _, res = post_tar(a, old, tar)
    check(st == 200 and read_tree(old).get(LONG) == ("f", b"gnu", 0o644), "GNU long name: %d %r" % (st, res))


def refused(a, entries, what, status=400, extra=""):
    target = os.path.join(ta.TMP, "victim")
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    with open(os.path.join(target, "keep"), "w") as f:
        f.write("keep")
    before = set(os.listdir(ta.TMP))
    st, _, res = post_tar(a, target, build_tar(entries) if isinstance(entries, list) else entries, extra)
    check(st == status, "%s: want %d, got %d %r" % (what, status, st, res))
    check(read_tree(target) == {"keep": ("f", b"keep", 0o644)}, "%s: target changed: %s" % (what, read_tree(target)))
    check(set(os.listdir(ta.TMP)) == before, "%s: something was written outside: %s"
          % (what, set(os.listdir(ta.TMP)) ^ before))
    return json.loads(res)


def test_unsafe_entries(a):
    r = refused(a, [("ok.txt", "f", b"x"), ("../evil", "f", b"x")], "dot-dot")
    check("../evil" in r["message"], "names the entry: %s" % r)
    r = refused(a, [("/" + ta.TMP.strip("/") + "/evil2", "f", b"x")], "absolute")
    check("evil2" in r["message"], "names the entry: %s" % r)
    r = refused(a, [("out", "l", "/etc")], "absolute symlink")
    check("out" in r["message"] and "/etc" in r["message"], "names the link: %s" % r)
    refused(a, [("d", "d", None), ("d/up", "l", "../../x")], "symlink climbing out")
    r = refused(a, [("in", "l", "sub"), ("sub", "d", None), ("in/x", "f", b"x")], "entry through a symlink")
    check("in/x" in r["message"], "names it: %s" % r)
    refused(a, [("h", "h", "../keep")], "hard link out")
    refused(a, [("h", "h", "/etc/passwd")], "absolute hard link")
    refused(a, [("h", "h", "nothere")], "hard link to nothing")
    refused(a, [("dev", "c", None)], "device")
    # Allowed: a symlink inside, a hard link to an earlier file.
    target = os.path.join(ta.TMP, "fine")
    st, _, res = post_tar(a, target, build_tar([("d", "d", None), ("d/f", "f", b"f"), ("d/l", "l", "../d/f"),
                                                 ("h", "h", "d/f")]))
    check(st == 200, "links inside: %d %r" % (st, res))
    check(os.readlink(os.path.join(target, "d/l")) == "../d/f" and
          os.stat(os.path.join(target, "h")).st_ino == os.stat(os.path.join(target, "d/f")).st_ino, "links")


def test_limits_and_corruption(a):
    r = refused(a, [("a", "f", b"x" * 600000), ("b", "f", b"y" * 600000)], "over max_bytes", 413,
                "&max_bytes=1000000")
    check("1000000" in r["message"] and "b" in r["message"], "413 says the bound and the entry: %s" % r)
    refused(a, [("a", "f", b"x" * 600000)], "max_bytes=1", 413, "&max_bytes=1")
    refused(a, build_tar([("a", "f", b"x" * 20000)], end=False), "truncated")
    refused(a, b"this is not a tar archive at all" * 40, "garbage")
    refused(a, gzip.compress(b"\0" * 100)[:-8] + b"garbage!", "bad gzip")
    st, _, res = post_tar(a, os.path.join(ta.TMP, "x"), b"", "&max_bytes=-1")
    check(st == 400, "negative max_bytes: %d" % st)
    check(not os.path.exists(os.path.join(ta.TMP, "x")), "nothing made for a refused request")


def test_errors_before_stream(a):
    st, _, body = get_tar(a, os.path.join(ta.TMP, "nope"))
    check(st == 404 and json.loads(body)["code"] == 404, "missing: %d %r" % (st, body))
    with open(os.path.join(ta.TMP, "afile"), "w") as f:
        f.write("x")
    st, _, body = get_tar(a, os.path.join(ta.TMP, "afile"))
    check(st == 400 and b"not a directory" in body, "a file: %d %r" % (st, body))
    st, _, body = get_tar(a, "relative/path")
    check(st == 400, "relative: %d" % st)
    st, _, body = a.request("GET", "/tar")
    check(st == 400, "no path: %d" % st)
    st, _, body = a.request("GET", "/tar?path=/tmp", token="wrong")
    check(st == 401, "bad token: %d" % st)
    st, _, body = a.request("DELETE", "/tar?path=/tmp")
    check(st == 405, "method: %d" % st)
    st, _, body = post_tar(a, "/", b"")
    check(st == 400, "unpack over /: %d" % st)


def test_slow_reader_bounded(a):
    big = os.path.join(ta.TMP, "bigtree")
    os.makedirs(big)
    with open(os.path.join(big, "f"), "wb") as f:
        f.truncate(200 * 1024 * 1024)  # sparse: 200 MiB read as zeros
    s = socket.create_connection(("127.0.0.1", a.port), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.sendall(("GET /tar?path=%s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n\r\n" % (big, ta.TOKEN)).encode())
    got = 0
    peak = 0
    while got < 8 * 1024 * 1024:
        d = s.recv(65536)
        check(d, "stream ended early")
        got += len(d)
        if got % (1024 * 1024) < 65536:
            time.sleep(0.02)
            peak = max(peak, a.held()["output_capacity"])
    check(peak <= 2 * 1024 * 1024, "output held behind a slow reader: %d bytes" % peak)
    # Drain the rest and count it: 200 MiB + headers + trailer.
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += len(d)
        if got > 220 * 1024 * 1024:
            break
        if b"0\r\n\r\n" == d[-5:]:
            break
    s.close()
    check(got > 200 * 1024 * 1024, "whole stream: %d" % got)


def test_round_trip_through_agent(a):
    """The agent's own archive, streamed straight into its POST."""
    src = os.path.join(ta.TMP, "src")
    st, _, body = get_tar(a, src)
    check(st == 200, "GET")
    dst = os.path.join(ta.TMP, "rt")
    st, _, res = post_tar(a, dst, body)
    check(st == 200, "POST: %d %r" % (st, res))
    want = read_tree(src)
    check(read_tree(dst) == want, "round trip differs")


TESTS = [test_get_tree, test_unpack_new_and_replace, test_unsafe_entries, test_limits_and_corruption,
         test_errors_before_stream, test_slow_reader_bounded, test_round_trip_through_agent]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", required=True)
    ta.ARGS = ap.parse_args()
    ta.TMP = tempfile.mkdtemp(prefix="fr-agent-tar-")
    passed = failed = 0
    a = None

    def watchdog():
        print("watchdog: giving up", flush=True)
        for ag in ta.LIVE:
            if ag.proc.poll() is None:
                ag.proc.kill()
        shutil.rmtree(ta.TMP, ignore_errors=True)
        os._exit(2)
    timer = threading.Timer(100, watchdog)
    timer.daemon = True
    timer.start()
    try:
        a = ta.Agent()
        st, _, body = a.init()
        check(st == 204, "init: %d %r" % (st, body))
        for t in TESTS:
            try:
                t(a)
                print("ok", t.__name__[5:], flush=True)
                passed += 1
            except Exception as e:  # noqa: BLE001 - report and go on
                failed += 1
                print("FAIL %s: %s" % (t.__name__[5:], e), flush=True)
                if not isinstance(e, TestFailure):
                    traceback.print_exc()
        rc = a.stop()
        if rc != 0:
            failed += 1
            print("FAIL shutdown: agent exit status %d\n%s" % (rc, a.logtext()[-3000:]))
    finally:
        if a is not None and a.proc.poll() is None:
            a.proc.kill()
        timer.cancel()
        shutil.rmtree(ta.TMP, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
