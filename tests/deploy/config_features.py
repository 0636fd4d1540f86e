#!/usr/bin/env python3
"""config_features.py - the example deployment enables every feature the
demo does: every setting (group and key, by path) of the router config that
scripts/demo writes must be in deploy/router/overlays/example's
fedrouter.conf too. The demo shows what the product does (the agent:
streaming, processes, files, shells, secrets, E2B; cluster prices: cost and
savings); an example that lacks a group the demo sets installs a router
without that feature, silently.

The demo's config comes from its own write_config function, run on its own
settings (no build, nothing started); both files are read with a small
libconfig reader (groups, lists, arrays, scalars, comments, @include).
check_manifests.py runs the comparison on the example config laid out as
the router pod mounts it (its @include of the tenants resolves there).

Usage:
  config_features.py --self-test REPO_ROOT
      the comparison itself: the demo's config against itself passes; the
      demo's config without its agent group, or without a cluster's cost,
      fails naming what is missing.
Exit: 0 all good, 1 problems (each printed).
"""
import os
import re
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------------------
# a libconfig reader (what router configs use of libconfig's grammar)

_TOKEN = re.compile(r'''
    (?P<ws>\s+) |
    (?P<comment>\#[^\n]*|//[^\n]*|/\*.*?\*/) |
    (?P<include>@include\s+"(?:[^"\\]|\\.)*") |
    (?P<string>"(?:[^"\\]|\\.)*") |
    (?P<number>[-+]?(?:0[xX][0-9A-Fa-f]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)L{0,2}) |
    (?P<name>[A-Za-z*][-A-Za-z0-9_*]*) |
    (?P<punct>[=:;,{}()\[\]])
''', re.S | re.X)


class ConfigError(Exception):
    pass


def _tokens(path, seen=()):
    """The tokens of <path> with its @includes (relative to its folder)
    spliced in."""
    if path in seen:
        raise ConfigError("%s: @include loop" % path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("%s: %s" % (path, e.strerror))
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConfigError("%s:%d: cannot read %r" % (path, text.count("\n", 0, pos) + 1, text[pos:pos + 20]))
        pos = m.end()
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        if kind == "include":
            inc = m.group(kind).split('"', 1)[1][:-1]
            yield from _tokens(os.path.join(os.path.dirname(path), inc), seen + (path,))
            continue
        yield kind, m.group(kind)


class _Parser:
    def __init__(self, toks):
        self.toks = list(toks)
        self.i = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, want=None):
        t = self.peek()
        if t[0] is None or (want is not None and t[1] != want):
            raise ConfigError("expected %r, found %r" % (want, t[1]))
        self.i += 1
        return t

    def settings(self, end):
        out = {}
        while self.peek()[1] != end:
            kind, name = self.take()
            if kind != "name":
                raise ConfigError("expected a setting name, found %r" % name)
            if self.peek()[1] not in ("=", ":"):
                raise ConfigError("expected = or : after %s" % name)
            self.take()
            out[name] = self.value()
            if self.peek()[1] in (";", ","):
                self.take()
        return out

    def value(self):
        kind, tok = self.take()
        if tok == "{":
            v = self.settings("}")
            self.take("}")
            return v
        if tok in ("(", "["):
            close = ")" if tok == "(" else "]"
            items = []
            while self.peek()[1] != close:
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.take()
            self.take(close)
            return items
        if kind == "string":
            s = tok[1:-1]
            while self.peek()[0] == "string":   # adjacent strings concatenate
                s += self.take()[1][1:-1]
            return s
        if kind == "number" or tok in ("true", "false", "TRUE", "FALSE"):
            return tok
        raise ConfigError("unexpected %r" % tok)


def read_config(path):
    """The config at <path> as nested dicts and lists."""
    p = _Parser(_tokens(os.path.abspath(path)))
    out = p.settings(None)
    return out


def setting_paths(v, prefix=""):
    """Every group and scalar setting of <v> by path ("agent.key_file",
    "clusters[].cost.per_core_hour"): the union over a list's groups."""
    out = set()
    if isinstance(v, dict):
        for k, x in v.items():
            p = prefix + "." + k if prefix else k
            out.add(p)
            out |= setting_paths(x, p)
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, (dict, list)):
                out |= setting_paths(x, prefix + "[]")
    return out


# ---------------------------------------------------------------------------
# the demo's config

DEMO_PARTS = (
    # (what, sed address range of scripts/demo): its settings, the helper
    # and the function that writes the config.
    ("its settings", "/^CLUSTERS=/,/^ROUTER_REGION=/p"),
    ("random_hex", "/^random_hex() /p"),
    ("write_config", "/^write_config() {$/,/^}$/p"),
)


def demo_config(root, tmp):
    """Runs scripts/demo's write_config (on the demo's own settings) into
    <tmp>; returns the path of the config it wrote."""
    demo = os.path.join(root, "scripts", "demo")
    with open(demo, encoding="utf-8") as f:
        text = f.read()
    for what, addr in DEMO_PARTS:
        p = subprocess.run(["sed", "-n", addr, demo], capture_output=True, text=True, check=True)
        if not p.stdout.strip():
            raise ConfigError("scripts/demo has no %s where this check looks (%s): update DEMO_PARTS in %s"
                              % (what, addr, os.path.basename(__file__)))
    if "write_config" not in text:
        raise ConfigError("scripts/demo does not call write_config")
    script = "set -euo pipefail\n" + "".join(
        "eval \"$(sed -n '%s' \"$1\")\"\n" % addr for _, addr in DEMO_PARTS) + \
        'DIR="$2" TOKEN=demo-token LISTEN=127.0.0.1:8080 PROM_PORT=9090\nwrite_config\n'
    p = subprocess.run(["bash", "-c", script, "config_features", demo, tmp], capture_output=True, text=True,
                       timeout=30)
    conf = os.path.join(tmp, "fedrouter.conf")
    if p.returncode != 0 or not os.path.exists(conf):
        raise ConfigError("running scripts/demo's write_config failed (rc %d): %s" % (p.returncode, p.stderr.strip()))
    return conf


def missing_features(demo_conf, example_conf):
    """The settings of <demo_conf> that <example_conf> lacks (sorted)."""
    return sorted(setting_paths(read_config(demo_conf)) - setting_paths(read_config(example_conf)))


def describe(missing, example_name):
    return ["%s has no %s, which scripts/demo's config sets: a deployment made from it lacks that feature "
            "(add it; docs/operations.md has every key)" % (example_name, m) for m in missing]


# ---------------------------------------------------------------------------
# self-test

def self_test(root):
    problems = []
    with tempfile.TemporaryDirectory(prefix="fr-features-") as tmp:
        conf = demo_config(root, tmp)
        demo = read_config(conf)
        have = setting_paths(demo)
        for want in ("agent", "agent.image", "agent.key_file", "clusters[].cost.per_core_hour", "tenants[].name"):
            if want not in have:
                problems.append("the demo's config has no %s: %s" % (want, sorted(have)))
        if missing_features(conf, conf):
            problems.append("the demo's config lacks its own settings: %s" % missing_features(conf, conf))
        with open(conf, encoding="utf-8") as f:
            text = f.read()
        # Without the agent group: every agent setting is named.
        no_agent = os.path.join(tmp, "no-agent.conf")
        with open(no_agent, "w", encoding="utf-8") as f:
            f.write(re.sub(r"(?m)^agent = \{.*\};\n", "", text))
        got = missing_features(conf, no_agent)
        if got != ["agent", "agent.image", "agent.key_file", "agent.port"]:
            problems.append("without the agent group the check found %s" % got)
        # Without any cluster's cost (a group inside a list of groups).
        no_cost = os.path.join(tmp, "no-cost.conf")
        with open(no_cost, "w", encoding="utf-8") as f:
            f.write(re.sub(r"(?m)^\s*cost = \{[^}]*\};\n", "", text))
        got = missing_features(conf, no_cost)
        if got != ["clusters[].cost", "clusters[].cost.per_core_hour", "clusters[].cost.per_gib_hour"]:
            problems.append("without the clusters' cost the check found %s" % got)
        # The reader: includes, comments, adjacent strings, lists, arrays.
        inc = os.path.join(tmp, "inc.conf")
        with open(inc, "w", encoding="utf-8") as f:
            f.write('tenants = ( { name = "a" "b"; /* c */ token_sha256 = "x"; } );\n')
        main = os.path.join(tmp, "main.conf")
        with open(main, "w", encoding="utf-8") as f:
            f.write('# x\nlisten = "h:1"; // y\n@include "inc.conf"\ng : { a = [1, 2]; b = 0x10L; c = -1.5e3; '
                    'd = true; e = ( 1, "s" ) }\n')
        cfg = read_config(main)
        if cfg != {"listen": "h:1", "tenants": [{"name": "ab", "token_sha256": "x"}],
                   "g": {"a": ["1", "2"], "b": "0x10L", "c": "-1.5e3", "d": "true", "e": ["1", "s"]}}:
            problems.append("the libconfig reader read %r" % cfg)
    return problems


def main(argv):
    if len(argv) != 3 or argv[1] != "--self-test":
        print(__doc__.split("Usage:")[1].split("Exit:")[0].strip(), file=sys.stderr)
        return 2
    try:
        problems = self_test(os.path.abspath(argv[2]))
    except ConfigError as e:
        problems = [str(e)]
    for p in problems:
        print("FAIL: " + p)
    print("config_features: %s" % ("%d problem(s)" % len(problems) if problems else "OK (self-test)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
