#!/usr/bin/env python3
"""fedctl's data-plane commands, black-box: the real fedctl against a
router and two kubesim clusters whose pods run the real fedrouter-agent
(d1, region us: two big nodes; d2, region eu: one GPU node, labelled
accel=a100 and tainted nvidia.com/gpu=present:NoSchedule, with a
RuntimeClass gvisor and a PersistentVolumeClaim data).
exec streams output as the command runs and exits with its code; cp
copies files both ways (20 MiB, stdin/stdout, directories) and, with -r,
directory trees (structure, bytes and modes compared, cp -r's destination
rules, symlinks skipped, the depth bound, errors naming the path); ps and kill;
shell on a pseudo-terminal driven from here (typing, window resize,
Ctrl-C, exit code, the local terminal restored) and on a pipe; proc
start, logs (-f, --json), stdin (--close, a process without stdin) and
attach (a pipe, a signal that detaches, a PTY in raw mode with the local
window size and Ctrl-] to detach); create with --secret (the value in the
sandbox, never in fedctl's output) and every pod option (the pod carries
them; explain names why the other cluster is skipped); pools create with
pod options.

Usage: test_fedctl_data.py --fedctl PATH --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
import test_data_plane as tdp  # noqa: E402
import test_podopts as tpo  # noqa: E402  (kube_post, pvc)
from test_router import TestFailure, check, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 280   # ctest's TIMEOUT is 300: clean up ourselves before it
SECRET_VAL = "hf-" + os.urandom(8).hex()
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}



def env_of(fed):
    e = dict(os.environ)
    e["FEDROUTER_URL"] = f"http://127.0.0.1:{fed.router.port}"
    e["FEDROUTER_TOKEN"] = tr.TOKEN_A
    e.pop("TERM", None)
    return e


def fc(fed, *args, stdin=b"", timeout=60, token=tr.TOKEN_A):
    """Runs fedctl to the end: (rc, stdout bytes, stderr text)."""
    p = subprocess.run([tr.ARGS.fedctl, *args], input=stdin, capture_output=True, timeout=timeout,
                       env=dict(env_of(fed), FEDROUTER_TOKEN=token))
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


@contextlib.contextmanager
def fedctl_running(fed, *args, **popen_kw):
    """fedctl started with <popen_kw> (pipes); killed if still running at
    the end of the block, its pipes closed."""
    p = subprocess.Popen([tr.ARGS.fedctl, *args], env=env_of(fed), **popen_kw)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()


def vm_hwm_kib(pid):
    """Peak resident size of a running process, from /proc, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise TestFailure(f"no VmHWM for pid {pid}")


def upload_peak_kib(fed, sid, data, path):
    """fedctl cp - ID:<path> fed <data> through a pipe; its peak memory
    read once all of <data> went into the pipe, before its end."""
    with fedctl_running(fed, "cp", "-", f"{sid}:{path}", stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE) as p:
        for i in range(0, len(data), 1 << 20):
            p.stdin.write(data[i:i + (1 << 20)])
        p.stdin.flush()
        peak = vm_hwm_kib(p.pid)
        p.stdin.close()
        err = p.stderr.read()
        rc = p.wait(60)
    check(rc == 0, f"upload of {len(data)} bytes: rc {rc} err {err!r}")
    return peak


def download_peak_kib(fed, sid, path, size):
    """fedctl cp ID:<path> - into a pipe; its peak memory read when all but
    the last MiB arrived (fedctl still running)."""
    got, peak = 0, None
    with fedctl_running(fed, "cp", f"{sid}:{path}", "-", stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        while True:
            chunk = p.stdout.read1(1 << 16)
            if not chunk:
                break
            got += len(chunk)
            if peak is None and got >= size - (1 << 20):
                peak = vm_hwm_kib(p.pid)
        err = p.stderr.read()
        rc = p.wait(60)
    check(rc == 0 and got == size and peak is not None, f"download: rc {rc}, {got} of {size} bytes, err {err!r}")
    return peak


def sandbox_of(fed):
    """The sandbox the tests share (created by the first that needs it)."""
    if "sid" not in fed.shared:
        fed.shared["sid"] = fed.create_one(name="fc")["id"]
    return fed.shared["sid"]


def test_exec_streams_output_as_it_runs(fed):
    sid = sandbox_of(fed)
    t0 = time.monotonic()
    with fedctl_running(fed, "exec", sid, "--", "sh", "-c", "echo a; sleep 2; echo b",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        ready, _, _ = select.select([p.stdout], [], [], 30)
        check(ready, "no output within 30 s")
        first = os.read(p.stdout.fileno(), 65536)
        t_first = time.monotonic() - t0
        running = p.poll() is None
        rest = p.stdout.read()
        err = p.stderr.read()
        rc = p.wait(30)
    t_end = time.monotonic() - t0
    check(first == b"a\n", f"first chunk {first!r}")
    check(running, "fedctl had ended when the first chunk came: not streamed")
    check(t_end - t_first >= 1.5, f"first chunk at {t_first:.2f} s, end at {t_end:.2f} s: not streamed")
    check(first + rest == b"a\nb\n" and rc == 0 and err == b"", f"rc {rc} out {first + rest!r} err {err!r}")
    print(f"     first chunk after {t_first * 1000:.0f} ms, end after {t_end * 1000:.0f} ms")


def test_exec_exit_codes_streams_and_bytes(fed):
    sid = sandbox_of(fed)
    rc, out, err = fc(fed, "exec", sid, "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 7")
    check(rc == 7 and out == b"to-out\n" and err == "to-err\n", f"rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "exec", sid, "--", "sh", "-c", r"printf '\377\376A\000B'")
    check(rc == 0 and out == b"\xff\xfeA\x00B", f"binary: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "exec", "-i", sid, "--", "wc", "-l", stdin=b"1\n2\n3\n")
    check(rc == 0 and out.strip() == b"3", f"stdin: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "exec", "--env", "FOO=bar baz", "--workdir", "/tmp", sid, "--",
                      "sh", "-c", 'echo "$FOO"; pwd')
    check(rc == 0 and out == b"bar baz\n/tmp\n", f"env/workdir: rc {rc} out {out!r} err {err!r}")
    t0 = time.monotonic()
    rc, out, err = fc(fed, "exec", "--timeout", "1", sid, "--", "sh", "-c", "echo x; sleep 30")
    check(rc == 124 and out == b"x\n" and "timed out after 1s" in err and time.monotonic() - t0 < 20,
          f"timeout: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "exec", sid, "--", "no-such-cmd-x")
    check(rc == 127, f"missing command: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "exec", "d1.no-such-pod", "--", "true")
    check(rc == 1 and err.startswith("fedctl: sandbox_not_found: "), f"unknown sandbox: rc {rc} err {err!r}")
    # --json keeps the buffered answer verbatim.
    rc, out, err = fc(fed, "--json", "exec", sid, "--", "sh", "-c", "echo hi; exit 2")
    d = json.loads(out)
    check(rc == 2 and d.get("stdout") == "hi\n" and d.get("exit_code") == 2, f"--json: rc {rc} {out!r}")


def sha(b):
    return hashlib.sha256(b).hexdigest()


def test_cp_round_trip_both_ways(fed):
    sid = sandbox_of(fed)
    d = os.path.join(fed.root, "cp")
    os.makedirs(d)
    data = os.urandom(20 << 20)
    src = os.path.join(d, "big.bin")
    with open(src, "wb") as f:
        f.write(data)
    t0 = time.monotonic()
    rc, out, err = fc(fed, "cp", src, f"{sid}:/tmp/cp dir/big.bin")
    t_up = time.monotonic() - t0
    check(rc == 0 and out == b"" and err == "", f"upload: rc {rc} out {out!r} err {err!r}")
    r = fed.exec_ok(sid, ["sha256sum", "/tmp/cp dir/big.bin"])
    check(r["stdout"].split()[0] == sha(data), f"the sandbox's copy differs: {r}")
    dst = os.path.join(d, "back.bin")
    t0 = time.monotonic()
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/cp dir/big.bin", dst)
    t_down = time.monotonic() - t0
    check(rc == 0 and err == "", f"download: rc {rc} err {err!r}")
    with open(dst, "rb") as f:
        check(sha(f.read()) == sha(data), "the downloaded copy differs")
    # Streamed, not buffered: 20 MiB cost fedctl less than 8 MiB more
    # memory than 2 MiB do (more than a pipe holds, so fedctl is running
    # its transfer when the peak is read).
    base_up = upload_peak_kib(fed, sid, data[:2 << 20], "/tmp/small2.bin")
    base_down = download_peak_kib(fed, sid, "/tmp/small2.bin", 2 << 20)
    up = upload_peak_kib(fed, sid, data, "/tmp/big2.bin")
    down = download_peak_kib(fed, sid, "/tmp/big2.bin", len(data))
    check(up - base_up < 8192 and down - base_down < 8192,
          f"fedctl peak memory: {base_up}/{base_down} KiB up/down for 2 MiB, {up}/{down} KiB for 20 MiB")
    print(f"     20 MiB up {t_up:.2f} s, down {t_down:.2f} s; fedctl peak RSS up/down "
          f"{base_up}/{base_down} KiB for 2 MiB, {up}/{down} KiB for 20 MiB")
    # stdin and stdout, bytes of every value, an empty file.
    small = bytes(range(256)) * 3
    rc, out, err = fc(fed, "cp", "-", f"{sid}:/tmp/small.bin", stdin=small)
    check(rc == 0, f"upload from stdin: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/small.bin", "-")
    check(rc == 0 and out == small, f"download to stdout: rc {rc} {len(out)} bytes, err {err!r}")
    rc, out, err = fc(fed, "cp", "-", f"{sid}:/tmp/empty", stdin=b"")
    check(rc == 0, f"empty upload: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/empty", os.path.join(d, "empty"))
    check(rc == 0 and os.path.getsize(os.path.join(d, "empty")) == 0, f"empty download: rc {rc} err {err!r}")
    # A remote directory (trailing '/') and a local directory take the name.
    rc, out, err = fc(fed, "cp", src, f"{sid}:/tmp/into/")
    check(rc == 0, f"upload into a directory: rc {rc} err {err!r}")
    os.makedirs(os.path.join(d, "sub"))
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/into/big.bin", os.path.join(d, "sub"))
    check(rc == 0 and os.path.getsize(os.path.join(d, "sub", "big.bin")) == len(data),
          f"download into a directory: rc {rc} err {err!r}")
    # Errors: the API's code, no local file left; usage errors exit 2.
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/no-such-file", os.path.join(d, "none"))
    check(rc == 1 and "path_not_found" in err and not os.path.exists(os.path.join(d, "none")),
          f"missing remote: rc {rc} err {err!r}")
    with open(os.path.join(d, "keep"), "wb") as f:
        f.write(b"keep")
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/no-such-file", os.path.join(d, "keep"))
    with open(os.path.join(d, "keep"), "rb") as f:
        check(rc == 1 and f.read() == b"keep", f"a failed copy touched the local file: rc {rc}")
    rc, out, err = fc(fed, "cp", os.path.join(d, "no-such-local"), f"{sid}:/tmp/x")
    check(rc == 1 and "No such file" in err, f"missing local: rc {rc} err {err!r}")
    for args in ((src, f"{sid}:relative"), (src, os.path.join(d, "x")), (f"{sid}:/a", f"{sid}:/b"), (src,)):
        rc, out, err = fc(fed, "cp", *args)
        check(rc == 2 and "fedctl cp:" in err, f"cp {args}: rc {rc} err {err!r}")


# The tree cp -r is tested with: path -> bytes, or (bytes, mode); a path
# ending in '/' is a directory (with its mode when a tuple).
TREE = {
    "a.txt": b"hello\n",
    "empty": b"",
    "bin.dat": bytes(range(256)) * 64 + b"\x00\r\n\xff",
    "big.bin": None,   # 2 MiB of random bytes, made per run
    "with space.txt": b"spaces in the name\n",
    "\u00fcn\u00efc\u00f8d\u00e9 \u2603.txt": "snow \u2603\n".encode(),
    "sub/dir/deep.txt": b"deep\n",
    "sub dir \u00fc/x y": b"x y\n",
    "run.sh": (b"#!/bin/sh\necho run\n", 0o755),
    "secret": (b"s3cret", 0o600),
    "private/": 0o700,
    "private/p.txt": b"p\n",
    "empty_dir/": 0o755,
    "nested/empty/leaf/": 0o755,
    "odd mode/": 0o750,
}

# Prints {relative path: [kind, mode, sha256]} for the tree at argv[1], kind
# d (directory), f (file) or l (anything else); symlinks are not followed.
WALK = r"""
import hashlib, json, os, stat, sys
root, out = sys.argv[1], {}
for d, dirs, files in os.walk(root):
    for n in dirs + files:
        p = os.path.join(d, n)
        st = os.lstat(p)
        kind = "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "l"
        h = hashlib.sha256(open(p, "rb").read()).hexdigest() if kind == "f" else ""
        out[os.path.relpath(p, root)] = [kind, oct(st.st_mode & 0o777), h]
print(json.dumps(out, sort_keys=True))
"""


def make_tree(root):
    """TREE under <root> plus two symlinks (one in the tree, one out of
    it) cp -r must skip; returns what a copy must hold (walk_tree's shape)."""
    for rel, v in TREE.items():
        p = os.path.join(root, rel)
        if rel.endswith("/"):
            os.makedirs(p, exist_ok=True)
            os.chmod(p, v)
            continue
        os.makedirs(os.path.dirname(p), exist_ok=True)
        data, mode = (v, 0o644) if not isinstance(v, tuple) else v
        if data is None:
            data = os.urandom(2 << 20)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)
    os.chmod(root, 0o755)
    want = walk_tree(root)
    os.symlink("a.txt", os.path.join(root, "link"))
    os.symlink("/etc", os.path.join(root, "sub", "out"))
    return want


def walk_tree(root):
    out = subprocess.run([sys.executable, "-c", WALK, root], capture_output=True, check=True)
    return json.loads(out.stdout)


def remote_tree(fed, sid, root):
    r = fed.exec_ok(sid, ["python3", "-c", WALK, root])
    check(r.get("exit_code") == 0, f"walking {root} in the sandbox: {short(r)}")
    return json.loads(r["stdout"])


def same_tree(got, want, what):
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in want if k in got and got[k] != want[k])
    check(not missing and not extra and not differ,
          f"{what}: missing {missing}, extra {extra}, differ {[(k, got[k], want[k]) for k in differ]}")


def test_cp_recursive_both_ways(fed):
    sid = sandbox_of(fed)
    old_umask = os.umask(0o022)
    try:
        d = os.path.join(fed.root, "cpr")
        src = os.path.join(d, "tree src")
        os.makedirs(src)
        want = make_tree(src)
        check(len(want) == 20, f"the test tree has {len(want)} entries")
        # Up to a name that does not exist: it becomes the copy. The
        # symlinks are skipped with a warning naming them; no -v, no
        # progress; stdout stays empty.
        rc, out, err = fc(fed, "cp", "-r", src, f"{sid}:/tmp/up")
        check(rc == 0 and out == b"", f"cp -r up: rc {rc} out {out!r} err {err!r}")
        warn = [x for x in err.splitlines() if x]
        check(len(warn) == 2 and all("warning: skipped" in x and "symbolic link" in x for x in warn) and
              any(x.count(src + "/link:") for x in warn) and any(x.count(src + "/sub/out:") for x in warn),
              f"cp -r up: stderr {err!r}")
        same_tree(remote_tree(fed, sid, "/tmp/up"), want, "cp -r to a new remote name")
        # Into an existing directory: a subdirectory of the source's name,
        # merged when there; -v prints each file (on stderr).
        rc, out, err = fc(fed, "cp", "-r", "-v", src, f"{sid}:/tmp/up")
        check(rc == 0 and out == b"", f"cp -r into: rc {rc} err {err!r}")
        lines = err.splitlines()
        check(sum(1 for x in lines if " -> " in x and x.endswith(" bytes)")) == 11 and
              f"{src}/big.bin -> {sid}:/tmp/up/tree src/big.bin (2097152 bytes)" in lines and
              any(x.startswith("copied 11 files (") for x in lines), f"cp -r -v: stderr {err!r}")
        got = remote_tree(fed, sid, "/tmp/up")
        same_tree({k[len("tree src/"):]: v for k, v in got.items() if k.startswith("tree src/")}, want,
                  "cp -r into an existing remote directory")
        check(got.get("tree src", [""])[0] == "d" and len(got) == 2 * len(want) + 1, f"into: {sorted(got)[:5]}")
        # "D/" that does not exist: made, the source goes in under its name;
        # "SRC/." copies the contents.
        rc, out, err = fc(fed, "cp", "-r", src + "/", f"{sid}:/tmp/made/")
        check(rc == 0, f"cp -r to D/: rc {rc} err {err!r}")
        same_tree(remote_tree(fed, sid, "/tmp/made/tree src"), want, "cp -r to a new D/")
        fed.exec_ok(sid, ["mkdir", "-p", "/tmp/dot"])
        rc, out, err = fc(fed, "cp", "-r", src + "/.", f"{sid}:/tmp/dot")
        check(rc == 0, f"cp -r SRC/. : rc {rc} err {err!r}")
        same_tree(remote_tree(fed, sid, "/tmp/dot"), want, "cp -r SRC/. into a directory")

        # Down: a new name becomes the copy, an existing directory gets a
        # subdirectory, "D/" is made; byte for byte, modes, empty dirs.
        down = os.path.join(d, "down")
        rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/dot", down)
        check(rc == 0 and out == b"" and err == "", f"cp -r down: rc {rc} out {out!r} err {err!r}")
        same_tree(walk_tree(down), want, "cp -r down to a new name")
        check(oct(os.stat(down).st_mode & 0o777) == "0o755", "the copy's own mode")
        rc, out, err = fc(fed, "cp", "-r", "-v", f"{sid}:/tmp/up/tree src", down)
        check(rc == 0 and err.count(" -> ") == 11, f"cp -r down into: rc {rc} err {err!r}")
        got = walk_tree(down)
        same_tree({k[len("tree src/"):]: v for k, v in got.items() if k.startswith("tree src/")}, want,
                  "cp -r down into an existing directory")
        rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/made/", os.path.join(d, "new") + "/")
        check(rc == 0, f"cp -r down to D/: rc {rc} err {err!r}")
        same_tree(walk_tree(os.path.join(d, "new", "made", "tree src")), want, "cp -r down to a new D/")
        # A symlink in the sandbox is skipped with a warning, not followed.
        fed.exec_ok(sid, ["ln", "-s", "/etc", "/tmp/dot/etc-link"])
        rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/dot", os.path.join(d, "down-link"))
        check(rc == 0 and "skipped" in err and f"{sid}:/tmp/dot/etc-link" in err and
              not os.path.lexists(os.path.join(d, "down-link", "etc-link")), f"remote symlink: rc {rc} err {err!r}")
        # -r on a file copies the file.
        rc, out, err = fc(fed, "cp", "-r", os.path.join(src, "bin.dat"), f"{sid}:/tmp/one.dat")
        check(rc == 0, f"cp -r FILE: rc {rc} err {err!r}")
        rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/one.dat", os.path.join(d, "one.dat"))
        with open(os.path.join(d, "one.dat"), "rb") as f:
            check(rc == 0 and f.read() == TREE["bin.dat"], f"cp -r FILE down: rc {rc} err {err!r}")
    finally:
        os.umask(old_umask)


def test_cp_recursive_many_modes_and_empty_dirs(fed):
    """More modes to set and empty directories to make than one exec's argv
    carries: the batches together do all of them, both ways."""
    sid = sandbox_of(fed)
    old_umask = os.umask(0o022)
    try:
        src = os.path.join(fed.root, "cpr-many", "m\u00e4ny")
        os.makedirs(src)
        for i in range(200):
            p = os.path.join(src, f"scr\u00efpt-{i:03d}-" + "x" * 40)
            with open(p, "wb") as f:
                f.write(b"#!/bin/sh\n")
            os.chmod(p, 0o755 if i % 10 == 0 else 0o700)
            os.makedirs(os.path.join(src, f"\u00e9mpty-{i:03d}-" + "y" * 40))
        want = walk_tree(src)
        rc, out, err = fc(fed, "cp", "-r", "-v", src, f"{sid}:/tmp/many")
        execs = [x for x in err.splitlines() if x.startswith(f"{sid}:mkdir -p -- (") or
                 x.startswith(f"{sid}:chmod 0")]
        check(rc == 0 and len(execs) >= 4 and sum(int(x.split("(")[1].split()[0]) for x in execs) == 400,
              f"cp -r up: rc {rc} execs {execs} err {err[-300:]!r}")
        same_tree(remote_tree(fed, sid, "/tmp/many"), want, "many modes and empty directories up")
        down = os.path.join(fed.root, "cpr-many", "down")
        rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/many", down)
        check(rc == 0 and err == "", f"cp -r down: rc {rc} err {err[-500:]!r}")
        same_tree(walk_tree(down), want, "many modes and empty directories down")
    finally:
        os.umask(old_umask)


def test_cp_recursive_errors(fed):
    sid = sandbox_of(fed)
    d = os.path.join(fed.root, "cpr-err")
    src = os.path.join(d, "src")
    os.makedirs(os.path.join(src, "sub"))
    with open(os.path.join(src, "sub", "f"), "wb") as f:
        f.write(b"f")
    with open(os.path.join(d, "file"), "wb") as f:
        f.write(b"file")
    # Without -r a directory is refused, with a hint.
    rc, out, err = fc(fed, "cp", src, f"{sid}:/tmp/e1")
    check(rc == 1 and "is a directory" in err and "cp -r" in err, f"cp DIR: rc {rc} err {err!r}")
    fed.exec_ok(sid, ["mkdir", "-p", "/tmp/rdir/sub"])
    rc, out, err = fc(fed, "cp", f"{sid}:/tmp/rdir", os.path.join(d, "x"))
    check(rc == 1 and f"{sid}:/tmp/rdir is a directory" in err and "cp -r" in err and
          not os.path.exists(os.path.join(d, "x")), f"cp REMOTE-DIR: rc {rc} err {err!r}")
    # Missing sources.
    rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/no-such-dir", os.path.join(d, "x"))
    check(rc == 1 and "path_not_found" in err and "/tmp/no-such-dir" in err and
          not os.path.exists(os.path.join(d, "x")), f"missing remote: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", "-r", os.path.join(d, "no-such-dir"), f"{sid}:/tmp/x")
    check(rc == 1 and "No such file" in err and "no-such-dir" in err, f"missing local: rc {rc} err {err!r}")
    # A file where a directory is needed: the destination itself ...
    fed.exec_ok(sid, ["sh", "-c", "echo x > /tmp/afile"])
    rc, out, err = fc(fed, "cp", "-r", src, f"{sid}:/tmp/afile")
    check(rc == 1 and f"{sid}:/tmp/afile exists and is not a directory" in err, f"remote file dest: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", "-r", src, f"{sid}:/tmp/afile/x")
    check(rc == 1 and "/tmp/afile/x" in err and "Not a directory" in err and "exists" not in err,
          f"remote dest under a file: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/rdir", os.path.join(d, "file"))
    check(rc == 1 and "exists and is not a directory" in err, f"local file dest: rc {rc} err {err!r}")
    # ... or inside the tree: the path that failed is named.
    fed.exec_ok(sid, ["sh", "-c", "mkdir -p /tmp/clash && echo x > /tmp/clash/sub"])
    rc, out, err = fc(fed, "cp", "-r", src + "/.", f"{sid}:/tmp/clash")
    check(rc == 1 and "/tmp/clash/sub" in err and "stopped at" in err, f"remote clash: rc {rc} err {err!r}")
    os.makedirs(os.path.join(d, "lclash"))
    with open(os.path.join(d, "lclash", "sub"), "wb") as f:
        f.write(b"in the way")
    rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/rdir/.", os.path.join(d, "lclash"))
    check(rc == 1 and os.path.join(d, "lclash", "sub") + " exists and is not a directory" in err,
          f"local clash: rc {rc} err {err!r}")
    # Depth: more than 64 levels is refused, naming where, both ways.
    deep = os.path.join(d, "deep", *(["d"] * 70))
    os.makedirs(deep)
    rc, out, err = fc(fed, "cp", "-r", os.path.join(d, "deep"), f"{sid}:/tmp/deep")
    check(rc == 1 and "more than 64 directory levels" in err, f"deep local tree: rc {rc} err {err!r}")
    fed.exec_ok(sid, ["mkdir", "-p", "/tmp/rdeep/" + "/".join(["d"] * 70)])
    rc, out, err = fc(fed, "cp", "-r", f"{sid}:/tmp/rdeep", os.path.join(d, "rdeep"))
    check(rc == 1 and "more than 64 directory levels" in err and "/tmp/rdeep/" + "d/" * 64 in err,
          f"deep remote tree: rc {rc} err {err!r}")
    # Usage: a tree cannot come from stdin or go to stdout.
    for args in (("-r", "-", f"{sid}:/tmp/x"), ("-r", f"{sid}:/tmp/rdir", "-")):
        rc, out, err = fc(fed, "cp", *args)
        check(rc == 2 and "fedctl cp:" in err, f"cp {args}: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", "--help")
    check(rc == 0 and b"-r, --recursive" in out and b"-v, --verbose" in out, f"cp --help: {out!r}")


def test_cp_over_the_tenant_file_limit(fed):
    sid = fed.create_one(token=tr.TOKEN_B, name="fcb")["id"]
    big = os.path.join(fed.root, "over-limit.bin")
    with open(big, "wb") as f:
        f.write(b"x" * (tdp.FILE_LIMIT_B + 1))
    # A file says its size: refused before the bytes move.
    rc, out, err = fc(fed, "cp", big, f"{sid}:/tmp/big", token=tr.TOKEN_B)
    check(rc == 1 and err.startswith("fedctl: file_too_large: "), f"file over the limit: rc {rc} err {err!r}")
    # A pipe goes chunked: refused when the count passes the limit.
    with open(big, "rb") as f:
        data = f.read()
    rc, out, err = fc(fed, "cp", "-", f"{sid}:/tmp/big", stdin=data, token=tr.TOKEN_B)
    check(rc == 1 and "file_too_large" in err, f"pipe over the limit: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "cp", "-", f"{sid}:/tmp/ok", stdin=data[:1000], token=tr.TOKEN_B)
    check(rc == 0, f"under the limit: rc {rc} err {err!r}")


def ps_rows(fed, sid):
    rc, out, err = fc(fed, "ps", sid)
    check(rc == 0, f"ps: rc {rc} err {err!r}")
    lines = out.decode().splitlines()
    check(lines and lines[0].split() == ["PID", "TAG", "WORKDIR", "COMMAND"], f"ps header: {lines[:1]}")
    return lines[1:]


def test_ps_and_kill(fed):
    sid = sandbox_of(fed)
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes",
                    {"argv": ["sleep", "3071"], "tag": "nap", "workdir": "/tmp"})
    check(st == 201, f"start: {st} {r}")
    pid = r["pid"]
    rows = [x for x in ps_rows(fed, sid) if x.split()[0] == str(pid)]
    check(len(rows) == 1 and rows[0].split()[1:] == ["nap", "/tmp", "sleep", "3071"], f"ps row: {rows}")
    rc, out, err = fc(fed, "--json", "ps", sid)
    check(rc == 0 and any(p["pid"] == pid and p["argv"] == ["sleep", "3071"] for p in json.loads(out)["processes"]),
          f"ps --json: rc {rc} {out[:300]!r}")
    rc, out, err = fc(fed, "kill", sid, str(pid), "-s", "NOPE")
    check(rc == 1 and "invalid_field" in err, f"bad signal name: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "kill", sid, str(pid), "-s", "65")
    check(rc == 2, f"signal 65: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "kill", sid, "abc")
    check(rc == 2, f"bad pid: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "kill", sid, str(pid))
    check(rc == 0 and out == b"" and err == "", f"kill: rc {rc} err {err!r}")
    check(wait_until(lambda: all(x.split()[0] != str(pid) for x in ps_rows(fed, sid)), 10, 0.3),
          "the process still runs after fedctl kill")
    st, r = fed.api("POST", f"/v1/sandboxes/{sid}/processes", {"argv": ["sleep", "3072"]})
    pid = r["pid"]
    rc, out, err = fc(fed, "kill", "-s", "9", sid, str(pid))
    check(rc == 0, f"kill -s 9: rc {rc} err {err!r}")
    check(wait_until(lambda: all(x.split()[0] != str(pid) for x in ps_rows(fed, sid)), 10, 0.3),
          "the process still runs after fedctl kill -s 9")
    rc, out, err = fc(fed, "kill", sid, "999999")
    check(rc == 1 and "process_not_found" in err, f"unknown pid: rc {rc} err {err!r}")


def shells(fed, sid):
    """`fedctl ps` rows of the sandbox's shell sessions (tag "shell")."""
    return [x for x in ps_rows(fed, sid) if x.split()[1] == "shell"]


def proc_state(pid):
    """The state letter of /proc/<pid>/stat (R, S, T, Z, ...)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2:].split()[0].decode()


class PtySession:
    """fedctl shell on a pseudo-terminal whose other end the test holds."""

    def __init__(self, fed, sid, rows, cols, *extra, argv=None):
        self.master, self.slave = os.openpty()
        self.winsize(rows, cols)
        self.before = termios.tcgetattr(self.slave)
        self.buf = b""
        argv = argv or ["shell", sid, *extra]
        self.p = subprocess.Popen([tr.ARGS.fedctl, *argv], stdin=self.slave, stdout=self.slave,
                                  stderr=self.slave, env=dict(env_of(fed), TERM="dumb"), start_new_session=True)

    def winsize(self, rows, cols):
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, data):
        os.write(self.master, data)

    def expect(self, text, timeout=15):
        """Reads until <text> (bytes) appears after what earlier expects
        consumed; returns what came before it."""
        end = time.monotonic() + timeout
        while text not in self.buf:
            left = end - time.monotonic()
            check(left > 0, f"did not see {text!r} within {timeout} s; got {self.buf[-400:]!r}")
            r, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if r:
                try:
                    self.buf += os.read(self.master, 65536)
                except OSError:
                    break
        check(text in self.buf, f"no {text!r} before the terminal closed: {self.buf[-400:]!r}")
        before, _, self.buf = self.buf.partition(text)
        return before

    def wait(self, timeout=20):
        end = time.monotonic() + timeout
        while self.p.poll() is None and time.monotonic() < end:
            r, _, _ = select.select([self.master], [], [], 0.2)
            if r:
                try:
                    self.buf += os.read(self.master, 65536)
                except OSError:
                    pass
        return self.p.poll()

    def restored(self):
        """The local terminal's mode is what it was before fedctl."""
        now = termios.tcgetattr(self.slave)
        return now[:6] == self.before[:6]

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        os.close(self.master)
        os.close(self.slave)


def test_shell_on_a_pty(fed):
    sid = sandbox_of(fed)
    s = PtySession(fed, sid, 30, 90)
    try:
        s.type(b"echo $((6*7))\r")
        s.expect(b"42\r\n")
        s.type(b"stty size\r")
        s.expect(b"30 90\r\n")
        s.winsize(40, 100)
        os.kill(s.p.pid, signal.SIGWINCH)
        # The resize is asynchronous: ask until the remote sees it.
        seen = False
        for _ in range(20):
            s.type(b"stty size\r")
            try:
                s.expect(b"40 100\r\n", 1.5)
                seen = True
                break
            except TestFailure:
                continue
        check(seen, "stty size never showed 40 100 after the resize")
        # Ctrl-C is a byte for the remote terminal: it stops sleep, not the shell.
        t0 = time.monotonic()
        s.type(b"echo st$((1))art; sleep 100; echo after-sleep\r")
        s.expect(b"st1art\r\n")
        time.sleep(0.3)   # let the shell start sleep after the echo
        s.type(b"\x03")
        s.type(b"echo alive-$((1+1))\r")
        s.expect(b"alive-2\r\n", 15)
        check(time.monotonic() - t0 < 15, "Ctrl-C did not interrupt sleep 100")
        check(b"after-sleep\r\n" not in s.buf, "the command list went on after Ctrl-C")
        check(s.p.poll() is None, "fedctl ended on Ctrl-C")
        s.type(b"exit 3\r")
        rc = s.wait()
        check(rc == 3, f"fedctl shell exited {rc}, want 3 (the shell's exit)")
        check(s.restored(), "the local terminal was left in raw mode")
    finally:
        s.close()
    # Nothing of the session is left in the sandbox.
    check(wait_until(lambda: not shells(fed, sid), 10, 0.3), f"shell processes left: {shells(fed, sid)}")


def test_shell_stopped_or_killed_gives_the_terminal_back(fed):
    sid = sandbox_of(fed)
    s = PtySession(fed, sid, 24, 80)
    try:
        s.type(b"echo ready-$((2+2))\r")
        s.expect(b"ready-4\r\n")
        check(not s.restored(), "the local terminal is not in raw mode during the session")
        # Stopped from outside: the terminal is given back while stopped,
        # taken again (raw) after SIGCONT, and the session goes on.
        os.kill(s.p.pid, signal.SIGTSTP)
        check(wait_until(lambda: proc_state(s.p.pid) == "T", 10), "fedctl did not stop on SIGTSTP")
        check(s.restored(), "the terminal stayed raw while fedctl was stopped")
        os.kill(s.p.pid, signal.SIGCONT)
        check(wait_until(lambda: not s.restored(), 10), "the terminal is not raw again after SIGCONT")
        s.type(b"echo back-$((3+4))\r")
        s.expect(b"back-7\r\n")
        os.kill(s.p.pid, signal.SIGTERM)
        rc = s.wait()
        check(rc == 128 + signal.SIGTERM, f"fedctl exited {rc} on SIGTERM, want 143")
        check(s.restored(), "SIGTERM left the local terminal in raw mode")
    finally:
        s.close()
    check(wait_until(lambda: not shells(fed, sid), 10, 0.3),
          "the remote shell outlived the session it was hung up from")


def test_shell_with_a_pipe(fed):
    sid = sandbox_of(fed)
    rc, out, err = fc(fed, "shell", sid, stdin=b"echo piped-$((2*3))\nexit 5\n")
    check(rc == 5 and out == b"piped-6\n", f"shell on a pipe: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "shell", "--env", "X=y z", "--workdir", "/tmp", sid, stdin=b'echo "$X"; pwd\n')
    check(rc == 0 and out == b"y z\n/tmp\n", f"shell --env --workdir: rc {rc} out {out!r} err {err!r}")
    # More input than one request carries (and than the router's
    # max_body_bytes): sent in order, every byte.
    data = os.urandom(1 << 20)
    t0 = time.monotonic()
    rc, out, err = fc(fed, "shell", sid, "--", "sha256sum", stdin=data)
    check(rc == 0 and out.split()[0].decode() == sha(data), f"1 MiB through stdin: rc {rc} out {out!r} err {err!r}")
    print(f"     1 MiB of stdin through a shell in {time.monotonic() - t0:.2f} s")
    rc, out, err = fc(fed, "shell", sid, "--", "cat", stdin=b"through cat\n")
    check(rc == 0 and out == b"through cat\n", f"shell -- cat: rc {rc} out {out!r} err {err!r}")
    # fedctl's stdout closed: the session ends (exit 1) and is hung up.
    with fedctl_running(fed, "shell", sid, "--", "sh", "-c", "while :; do echo y; sleep 0.05; done",
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        check(p.stdout.read1(100).startswith(b"y\n"), "no output from the loop")
        p.stdout.close()
        rc = p.wait(20)
        err = p.stderr.read().decode(errors="replace")
    check(rc == 1 and "Broken pipe" in err and "may still run" not in err, f"stdout closed: rc {rc} err {err!r}")
    check(wait_until(lambda: not shells(fed, sid), 10, 0.3),
          "the session outlived fedctl's closed stdout")
    rc, out, err = fc(fed, "shell", "d1.no-such-pod", stdin=b"")
    check(rc == 1 and "sandbox_not_found" in err, f"unknown sandbox: rc {rc} err {err!r}")


def test_create_with_secret_env_and_labels(fed):
    # Tenant a's Secret in d1's sandbox namespace (docs/api.md, "Secrets").
    tpo.kube_post(fed.sims["d1"], "/api/v1/namespaces/default/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a-sandbox-secrets"}, "type": "Opaque",
        "data": {"HF_TOKEN": base64.b64encode(SECRET_VAL.encode()).decode()}})
    rc, out, err = fc(fed, "create", "--image", tr.IMAGE, "--name", "sec", "--secret", "HF_TOKEN",
                      "--env", "PROJECT=demo", "--label", "run=fcsec", "--cluster", "d1")
    check(rc == 0 and b"sec " in out and SECRET_VAL not in out.decode() + err, f"create: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "--json", "ls", "--label", "run=fcsec")
    sbs = json.loads(out)["sandboxes"]
    check(rc == 0 and len(sbs) == 1 and sbs[0]["secrets"] == ["HF_TOKEN"] and sbs[0]["labels"] == {"run": "fcsec"},
          f"ls: rc {rc} {out!r}")
    sid = sbs[0]["id"]
    rc, out, err = fc(fed, "exec", sid, "--", "sh", "-c", 'echo "$HF_TOKEN|$PROJECT"')
    check(rc == 0 and out.decode() == SECRET_VAL + "|demo\n", f"exec: rc {rc} out {out!r} err {err!r}")
    # A background process gets it too.
    rc, out, err = fc(fed, "proc", "start", sid, "--", "sh", "-c", 'echo "$HF_TOKEN"')
    check(rc == 0, f"proc start: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "logs", "-f", sid, out.decode().strip())
    check(rc == 0 and out.decode() == SECRET_VAL + "\n", f"proc logs: rc {rc} out {out!r} err {err!r}")
    # A key the Secret lacks: the API's error, exit 1, nothing made.
    rc, out, err = fc(fed, "create", "--image", tr.IMAGE, "--name", "nosec", "--secret", "NOPE", "--cluster", "d1")
    check(rc == 1 and err.startswith("fedctl: secret_not_found: ") and "NOPE" in err, f"missing key: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "--json", "ls", "--name-prefix", "nosec")
    check(rc == 0 and json.loads(out)["sandboxes"] == [], f"a refused create made sandboxes: {out!r}")
    rc, out, err = fc(fed, "terminate", sid)
    check(rc == 0, f"terminate: rc {rc} err {err!r}")


def test_create_and_pools_with_pod_options(fed):
    d2 = fed.sims["d2"]
    if not fed.shared.get("d2_objects"):
        tpo.kube_post(d2, "/apis/node.k8s.io/v1/runtimeclasses", {
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"})
        tpo.kube_post(d2, "/api/v1/namespaces/default/persistentvolumeclaims", tpo.pvc("data"))
        fed.shared["d2_objects"] = True
    opts = ["--gpus", "1", "--toleration", "nvidia.com/gpu:NoSchedule", "--node-selector", "accel=a100",
            "--runtime-class", "gvisor", "--volume", "/data=data"]

    # The router's informers see the new objects within moments: explain
    # until d2 is used and d1 is skipped for the RuntimeClass it lacks.
    def placed():
        rc, out, err = fc(fed, "explain", "--image", tr.IMAGE, *opts)
        text = out.decode()
        return rc == 0 and any(x.split()[:2] == ["d2", "use"] for x in text.splitlines()) and \
            any(x.split()[:2] == ["d1", "skip"] and "skipped: no_runtime_class" in x for x in text.splitlines())
    check(wait_until(placed, 15, 0.2), "explain never used d2 and skipped d1 (no_runtime_class)")
    rc, out, err = fc(fed, "explain", "--image", tr.IMAGE, *opts)
    check(rc == 0 and b"pod options: {" in out, f"explain shows no pod options: {out!r}")
    rc, out, err = fc(fed, "--json", "create", "--image", tr.IMAGE, "--name", "gpu", *opts)
    check(rc == 0, f"create: rc {rc} err {err!r}")
    sb = json.loads(out)["sandboxes"][0]
    check(sb["cluster"] == "d2", f"the GPU sandbox landed on {sb['cluster']}")
    sim, pod = fed.sim_of(sb["id"])
    spec = sim.pod(pod)["spec"]
    c = spec["containers"][0]
    check(spec.get("runtimeClassName") == "gvisor" and spec.get("nodeSelector") == {"accel": "a100"} and
          spec["tolerations"][0] == GPU_TOL and c["resources"]["limits"].get("nvidia.com/gpu") == "1",
          f"pod spec: {short(spec, 1500)}")
    vol = [v for v in spec["volumes"] if (v.get("persistentVolumeClaim") or {}).get("claimName") == "data"]
    check(len(vol) == 1 and any(m["mountPath"] == "/data" and m["name"] == vol[0]["name"]
                                for m in c.get("volumeMounts", [])), f"volume: {short(spec, 1500)}")
    rc, out, err = fc(fed, "terminate", sb["id"])
    check(rc == 0, f"terminate: rc {rc} err {err!r}")
    # Without the toleration no node of d2 takes it, and d1 has no GPUs.
    rc, out, err = fc(fed, "create", "--image", tr.IMAGE, "--gpus", "1")
    check(rc == 1 and "no_capacity" in err and "d1: skipped: no_gpu_node" in err, f"untolerated: rc {rc} err {err!r}")
    # A pool with pod options: created where they fit, shown by pools get.
    rc, out, err = fc(fed, "pools", "create", "gp", "--image", tr.IMAGE, "--replicas", "0", *opts)
    check(rc == 0 and b"pool gp created" in out, f"pools create: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "pools", "get", "gp")
    text = out.decode()
    check(rc == 0 and "gpus:    1" in text and 'runtime_class: "gvisor"' in text and
          'volumes: {"/data":"data"}' in text and '"accel":"a100"' in text, f"pools get: rc {rc} {text!r}")
    rc, out, err = fc(fed, "--json", "pools", "get", "gp")
    p = json.loads(out)
    check(rc == 0 and p.get("gpus") == 1 and [c["cluster"] for c in p["clusters"]] == ["d2"], f"pool: {short(p)}")
    rc, out, err = fc(fed, "pools", "delete", "gp")
    check(rc == 0, f"pools delete: rc {rc} err {err!r}")


def started(fed, *args):
    rc, out, err = fc(fed, "proc", "start", *args)
    check(rc == 0 and out.strip().isdigit() and err == "", f"proc start {args}: rc {rc} out {out!r} err {err!r}")
    return out.decode().strip()


def test_proc_start_logs_and_stdin(fed):
    sid = sandbox_of(fed)
    # It runs until it reads a line: ps sees it, whatever the timing.
    pid = started(fed, sid, "-i", "--tag", "two", "--env", "X=y z", "--workdir", "/tmp", "--",
                  "sh", "-c", 'echo "out1 $X $(pwd)"; echo err1 >&2; read go; echo out2; exit 7')
    rows = [x for x in ps_rows(fed, sid) if x.split()[0] == pid]
    check(len(rows) == 1 and rows[0].split()[1:3] == ["two", "/tmp"], f"ps row of {pid}: {rows}")
    rc, out, err = fc(fed, "proc", "stdin", sid, pid, stdin=b"go\n")
    check(rc == 0, f"stdin: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "logs", "-f", sid, pid)
    check(rc == 7 and out == b"out1 y z /tmp\nout2\n" and err == "err1\n", f"logs -f: rc {rc} out {out!r} err {err!r}")
    # The output stays readable after the end; without -f the exit is 0.
    rc, out, err = fc(fed, "proc", "logs", sid, pid)
    check(rc == 0 and out == b"out1 y z /tmp\nout2\n", f"logs: rc {rc} out {out!r} err {err!r}")
    rc, out, err = fc(fed, "--json", "proc", "logs", sid, pid)
    lines = [json.loads(x) for x in out.decode().splitlines()]
    check(rc == 0 and {"stdout": "out2\n"} in lines and lines[-1].get("exit_code") == 7, f"logs --json: {out!r}")
    # A running process: without -f the kept output, exit 0, at once.
    pid = started(fed, sid, "--", "sh", "-c", "echo early; sleep 300")
    check(wait_until(lambda: fc(fed, "proc", "logs", sid, pid)[1] == b"early\n", 10, 0.2), "no early output")
    rc, out, err = fc(fed, "--json", "proc", "logs", sid, pid)
    check(rc == 0 and json.loads(out.decode().splitlines()[-1]) == {"running": True}, f"running: {out!r}")
    rc, out, err = fc(fed, "kill", sid, pid)
    check(rc == 0, f"kill: rc {rc} err {err!r}")
    # --timeout kills it: logs -f exits 124.
    pid = started(fed, sid, "--timeout", "1", "--", "sleep", "60")
    t0 = time.monotonic()
    rc, out, err = fc(fed, "proc", "logs", "-f", sid, pid)
    check(rc == 124 and time.monotonic() - t0 < 30, f"timeout: rc {rc} err {err!r}")
    # stdin: in order, several calls, then closed.
    pid = started(fed, sid, "-i", "--", "sh", "-c", 'while read l; do echo "got:$l"; done; echo eof; exit 3')
    rc, out, err = fc(fed, "proc", "stdin", sid, pid, stdin=b"a\nb\n")
    check(rc == 0 and out == b"" and err == "", f"stdin: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "stdin", sid, pid, stdin=b"c\n")
    check(rc == 0, f"stdin again: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "stdin", "--close", sid, pid)
    check(rc == 0, f"stdin --close: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "logs", "-f", sid, pid)
    check(rc == 3 and out == b"got:a\ngot:b\ngot:c\neof\n", f"after stdin: rc {rc} out {out!r} err {err!r}")
    # More than one request carries, binary, then closed in the same call.
    data = os.urandom(700 << 10)
    pid = started(fed, sid, "-i", "--", "sha256sum")
    rc, out, err = fc(fed, "proc", "stdin", "--close", sid, pid, stdin=data)
    check(rc == 0, f"700 KiB of stdin: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "logs", "-f", sid, pid)
    check(rc == 0 and out.split()[0].decode() == sha(data), f"sha256sum of stdin: rc {rc} out {out!r}")
    # A process started without -i has no stdin; an unknown pid.
    pid = started(fed, sid, "--", "sleep", "300")
    rc, out, err = fc(fed, "proc", "stdin", sid, pid, stdin=b"x")
    check(rc == 1 and "failed_precondition" in err and "proc start -i" in err, f"no stdin: rc {rc} err {err!r}")
    fc(fed, "kill", sid, pid)
    for sub in ("logs", "attach"):
        rc, out, err = fc(fed, "proc", sub, sid, "999999")
        check(rc == 1 and err.startswith("fedctl: process_not_found: ") and "detached" not in err,
              f"proc {sub} of an unknown pid: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "stdin", sid, "999999", stdin=b"x")
    check(rc == 1 and "process_not_found" in err, f"stdin to an unknown pid: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "--json", "proc", "start", sid, "--", "true")
    check(rc == 0 and isinstance(json.loads(out).get("pid"), int), f"start --json: {out!r}")


def test_proc_attach_pipe_and_detach(fed):
    sid = sandbox_of(fed)
    # A pipe: what is written goes to the process; the exit is fedctl's.
    pid = started(fed, sid, "-i", "--", "sh", "-c", 'echo ready; read l; echo "got:$l"; exit 5')
    rc, out, err = fc(fed, "proc", "attach", sid, pid, stdin=b"hello\n")
    check(rc == 5 and out == b"ready\ngot:hello\n", f"attach: rc {rc} out {out!r} err {err!r}")
    # The end of fedctl's stdin is not the process's: it keeps reading.
    pid = started(fed, sid, "-i", "--", "sh", "-c", 'while read l; do echo "r:$l"; done; echo closed')
    with fedctl_running(fed, "proc", "attach", sid, pid, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE) as p:
        rc, out, err = fc(fed, "proc", "stdin", sid, pid, stdin=b"one\n")
        check(rc == 0, f"stdin beside attach: rc {rc} err {err!r}")
        got = b""
        while b"r:one\n" not in got:
            r, _, _ = select.select([p.stdout], [], [], 15)
            check(r, f"attach wrote no r:one within 15 s: {got!r}")
            chunk = os.read(p.stdout.fileno(), 4096)
            check(chunk, f"attach ended (rc {p.poll()}) before r:one: {got!r}")
            got += chunk
        # A signal detaches: 128 + SIGINT, the process lives on.
        p.send_signal(signal.SIGINT)
        rc = p.wait(20)
        err = p.stderr.read().decode()
    check(rc == 128 + signal.SIGINT and f"detached; process {pid} still runs" in err, f"SIGINT: rc {rc} err {err!r}")
    check(any(x.split()[0] == pid for x in ps_rows(fed, sid)), "the process did not outlive the detach")
    rc, out, err = fc(fed, "proc", "stdin", "--close", sid, pid)
    check(rc == 0, f"close: rc {rc} err {err!r}")
    rc, out, err = fc(fed, "proc", "logs", "-f", sid, pid)
    check(rc == 0 and out.endswith(b"r:one\nclosed\n"), f"after close: rc {rc} out {out!r}")
    # Typing into a process without stdin: said once, the output still
    # followed. The process ends when told (a file appears), after that.
    go = f"/tmp/go-{os.getpid()}"
    pid = started(fed, sid, "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; echo fin; exit 2")
    with fedctl_running(fed, "proc", "attach", sid, pid, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE) as p:
        p.stdin.write(b"ignored\n")
        p.stdin.flush()
        said = b""
        while b"stdin is not open" not in said:
            r, _, _ = select.select([p.stderr], [], [], 15)
            check(r, f"attach said nothing about the missing stdin within 15 s: {said!r}")
            chunk = os.read(p.stderr.fileno(), 4096)
            check(chunk, f"attach ended (rc {p.poll()}) without a word on the missing stdin: {said!r}")
            said += chunk
        p.stdin.write(b"more\n")
        p.stdin.flush()
        fed.exec_ok(sid, ["touch", go])
        out = p.stdout.read()
        said += p.stderr.read()
        rc = p.wait(20)
    check(rc == 2 and out == b"fin\n" and said.count(b"stdin is not open") == 1,
          f"no stdin: rc {rc} out {out!r} err {said!r}")


def test_proc_attach_pty_raw_resize_and_detach_key(fed):
    sid = sandbox_of(fed)
    pid = started(fed, sid, "--pty", "--tag", "repl", "--", "sh")
    s = PtySession(fed, sid, 33, 101, argv=["proc", "attach", "-t", sid, pid])
    try:
        s.type(b"echo $((6*7))\r")
        s.expect(b"42\r\n")
        check(not s.restored(), "the local terminal is not in raw mode while attached with -t")
        # Attaching gives the process the local window's size (a call of
        # its own beside the input: ask until the remote sees it).
        seen = False
        for _ in range(20):
            s.type(b"stty size\r")
            try:
                s.expect(b"33 101\r\n", 1.5)
                seen = True
                break
            except TestFailure:
                continue
        check(seen, "stty size never showed 33 101 after attaching")
        # Ctrl-C is the remote's: it interrupts the remote foreground
        # command, not fedctl. The command says when its trap is set (it is
        # in the foreground by then); what it prints on SIGINT is not in
        # the typed line that the terminal echoes.
        s.type(b"sh -c 'trap \"echo cau$((1+1))ght; exit 0\" INT; echo ar$((1))med; "
               b"while :; do sleep 0.1; done'\r")
        s.expect(b"ar1med\r\n")
        s.type(b"\x03")
        s.expect(b"cau2ght\r\n")
        s.type(b"echo alive-$((1+1))\r")
        s.expect(b"alive-2\r\n")
        check(s.p.poll() is None, "fedctl ended on Ctrl-C")
        # Ctrl-] detaches: exit 0, the terminal given back, the shell lives.
        s.type(b"\x1d")
        rc = s.wait()
        check(rc == 0 and s.restored(), f"Ctrl-]: rc {rc}, terminal restored {s.restored()}")
        # Written just before fedctl exited: still in the terminal's buffer.
        s.expect(b"detached; process " + pid.encode() + b" still runs", 5)
    finally:
        s.close()
    check(any(x.split()[0] == pid for x in ps_rows(fed, sid)), "the PTY process did not outlive the detach")
    # Attached again, it is the same shell: exit ends it and fedctl.
    s = PtySession(fed, sid, 24, 80, argv=["proc", "attach", "-t", sid, pid])
    try:
        s.type(b"exit 4\r")
        rc = s.wait()
        check(rc == 4 and s.restored(), f"exit through a second attach: rc {rc}")
    finally:
        s.close()


TESTS = [
    test_exec_streams_output_as_it_runs,
    test_exec_exit_codes_streams_and_bytes,
    test_cp_round_trip_both_ways,
    test_cp_recursive_both_ways,
    test_cp_recursive_many_modes_and_empty_dirs,
    test_cp_recursive_errors,
    test_cp_over_the_tenant_file_limit,
    test_ps_and_kill,
    test_shell_on_a_pty,
    test_shell_stopped_or_killed_gives_the_terminal_back,
    test_shell_with_a_pipe,
    test_create_with_secret_env_and_labels,
    test_create_and_pools_with_pod_options,
    test_proc_start_logs_and_stdin,
    test_proc_attach_pipe_and_detach,
    test_proc_attach_pty_raw_resize_and_detach_key,
]


if __name__ == "__main__":
    threading.Thread(target=tr.watchdog, daemon=True).start()
    sys.exit(tr.run_one_federation(
        __doc__, lambda: tdp.DataFed("fedctl-data", [
            ("d1", "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory", "256Gi",
                          "--agent-binary", os.path.abspath(tr.ARGS.agent)]),
            ("d2", "eu", ["--nodes", "1", "--gpu-nodes", "1", "--node-gpus", "2", "--node-label", "accel=a100",
                          "--node-taint", "nvidia.com/gpu=present:NoSchedule",
                          "--agent-binary", os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--fedctl", "--agent"]))
