#!/usr/bin/python3
"""test_codeint_sdk.py - the official E2B Code Interpreter JS SDK, unmodified,
against deploy/code-interpreter/server.py started on a loopback port
(codeint_sdk.mjs says what it checks). The SDK comes from
scripts/lib/code_interpreter_sdk.sh (npm, cached outside the tree).

Exit 0 pass, 1 fail, 77 skipped (no node, the SDK could not be installed,
or the server's Debian packages are missing and cannot be installed).
"""
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ci_server as cs  # noqa: E402


def sdk_modules():
    """The node_modules holding the pinned SDK, or None (said why)."""
    mods = os.environ.get("FR_CI_NODE_MODULES")
    if mods and os.path.isdir(os.path.join(mods, "@e2b", "code-interpreter")):
        return mods
    if shutil.which("node") is None:
        print("node not found (apt-get install nodejs npm)")
        return None
    try:
        out = subprocess.run(["bash", os.path.join(cs.ROOT, "scripts", "lib", "code_interpreter_sdk.sh")],
                             capture_output=True, timeout=330, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        print("npm install timed out")
        return None
    mods = out.stdout.decode().strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    if not mods or not os.path.isdir(os.path.join(mods, "@e2b", "code-interpreter")):
        sys.stdout.write(out.stderr.decode()[-2000:])
        return None
    return mods


def main():
    cs.ensure_packages()
    mods = sdk_modules()
    if mods is None:
        print("SKIP: the E2B Code Interpreter SDK could not be installed (npm registry unreachable?)")
        return cs.SKIP
    s = cs.Server()
    try:
        env = dict(os.environ, FR_CI_NODE_MODULES=mods, FR_CI_URL="http://127.0.0.1:%d" % s.port)
        p = subprocess.run(["node", os.path.join(cs.HERE, "codeint_sdk.mjs")], env=env, timeout=180,
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            print("---- server log ----\n" + s.log_text())
        rc = s.stop()
        if rc != 0:
            print("FAIL: the server exited %s on SIGTERM" % rc)
        return 0 if p.returncode == 0 and rc == 0 else 1
    finally:
        s.stop()


if __name__ == "__main__":
    sys.exit(main())
