"""example_overlay.py - deploy/router/overlays/example as an operator renders
it: the overlay generates the sandbox agent key's Secret from
agent-key/current, a file the operator makes and never commits, so the tests
render a copy of the overlay (outside the source tree) with a key of their
own. Imported by check_manifests.py and apply_kubesim.py.
"""
import os
import secrets
import shutil
import subprocess

import yaml

EXAMPLE = os.path.join("deploy", "router", "overlays", "example")
KEY_FILE = os.path.join("agent-key", "current")


def copy_example(root, tmp, with_key=True):
    """Copies the example overlay to <tmp>/example with its resources still
    pointing at the repository's base, and, <with_key>, an agent key in
    agent-key/current (an operator's own never reaches the copy). Returns
    the copy's path."""
    src = os.path.join(root, EXAMPLE)
    dst = os.path.join(tmp, "example")
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if os.path.join(d, n) ==
                                                       os.path.join(src, KEY_FILE)])
    kpath = os.path.join(dst, "kustomization.yaml")
    with open(kpath, encoding="utf-8") as f:
        k = yaml.safe_load(f)
    k["resources"] = [r if r.endswith(".yaml") else os.path.relpath(os.path.normpath(os.path.join(src, r)), dst)
                      for r in k.get("resources", [])]
    with open(kpath, "w", encoding="utf-8") as f:
        yaml.safe_dump(k, f, sort_keys=False)
    if with_key:
        os.makedirs(os.path.join(dst, "agent-key"), exist_ok=True)
        with open(os.path.join(dst, KEY_FILE), "w", encoding="utf-8") as f:
            f.write(secrets.token_hex(32) + "\n")
    return dst


def kustomize(path):
    """kubectl kustomize <path>: (returncode, objects or None, stderr)."""
    p = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return p.returncode, None, p.stderr
    return 0, [d for d in yaml.safe_load_all(p.stdout) if d], p.stderr
