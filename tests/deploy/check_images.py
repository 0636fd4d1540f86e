#!/usr/bin/env python3
"""check_images.py - deploy/images/*.Containerfile would build images that
run the binaries this build produces.

Both build stages install every build dependency of scripts/lib/packages.sh.
Router image (router.Containerfile):
  - multi-stage: a Debian 12 build stage, a debian:12-slim runtime stage that
    copies fedrouter and fedctl from it, runs as a numeric non-root USER;
  - every shared library `ldd` lists for build/fedrouter and build/fedctl
    belongs (dpkg -S) to a Debian package the runtime stage provides: one it
    installs, a dependency of those (Depends/Pre-Depends, recursively, from
    the dpkg database), or one debian:12-slim already has (Essential or
    Priority required, and their dependencies);
  - the runtime stage installs nothing that provides none of those
    libraries (ca-certificates excepted: the system CA bundle).
Gateway image (gateway.Containerfile): the same checks for
build/fedrouter-gateway.
Code interpreter image (code-interpreter.Containerfile):
  - FROM debian:12(-slim); installs every Debian package whose module
    deploy/code-interpreter/server.py imports (its ImportError message
    names them) and python3 itself;
  - copies server.py, runs as a numeric non-root USER, EXPOSEs 49999 and
    its CMD runs server.py under /usr/bin/python3 listening on
    0.0.0.0:49999.
Agent image (agent.Containerfile):
  - its final stage is scratch or BusyBox, copies fedrouter-agent from the
    build stage and runs as non-root;
  - build/fedrouter-agent, when this build has it, is static (no program
    interpreter, no NEEDED entries); when it does not, that part is skipped
    with a message.

Usage: check_images.py REPO_ROOT BUILD_DIR
       check_images.py --self-test REPO_ROOT BUILD_DIR   (the checks can fail)
Exit: 0 all good, 1 problems (each printed).
"""
import os
import re
import shutil
import subprocess
import sys

problems = []
# Sanitizer builds (FR_SANITIZE) link these runtimes; images are built
# without sanitizers.
SANITIZER_PKGS = re.compile(r"^lib(asan|ubsan|lsan|tsan)\d*$")
NOT_LIBRARIES = {"ca-certificates"}


def problem(msg):
    problems.append(msg)


def stages(path):
    """[(from_image, alias, [instruction lines])] with continuations joined."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", s, re.I)
        if m:
            out.append((m.group(1), m.group(2), []))
        elif out:
            out[-1][2].append(s)
    return out


def apt_packages(instrs):
    pkgs = []
    for s in instrs:
        for m in re.finditer(r"apt-get install((?:\s+(?:-\S+|[a-z0-9][a-z0-9.+-]+))+)", s):
            pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
    return pkgs


class Dpkg:
    """The installed packages of this machine's dpkg database, read once."""

    def __init__(self):
        out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${db:Status-Status}\t${Essential}\t"
                              "${Priority}\t${Depends}, ${Pre-Depends}\t${Provides}\n"],
                             capture_output=True, text=True, check=True).stdout
        self.deps, self.base_roots, self.provides = {}, [], {}
        for line in out.splitlines():
            f = line.split("\t")
            if len(f) < 6 or f[1] != "installed":
                continue
            names = []
            for alt in f[4].split(","):
                choices = [re.sub(r"\(.*?\)", "", c).strip().split(":")[0] for c in alt.split("|")]
                names.append([c for c in choices if c])
            self.deps[f[0]] = [c for c in names if c]
            if f[2] == "yes" or f[3] == "required":
                self.base_roots.append(f[0])
            for v in f[5].split(","):
                v = re.sub(r"\(.*?\)", "", v).strip()
                if v:
                    self.provides.setdefault(v, f[0])

    def installed(self, pkg):
        return pkg in self.deps

    def closure(self, pkgs):
        """<pkgs> plus their Depends/Pre-Depends, recursively (the first
        installed alternative of each)."""
        seen, todo = set(), list(pkgs)
        while todo:
            p = todo.pop()
            if p in seen:
                continue
            seen.add(p)
            for alts in self.deps.get(p, []):
                for c in alts:
                    c = c if c in self.deps else self.provides.get(c)
                    if c:
                        todo.append(c)
                        break
        return seen


def packages_of(paths):
    """{path: package} through one dpkg -S call per candidate spelling."""
    out = {}
    for spell in (lambda x: x, os.path.realpath, lambda x: x.replace("/usr/lib/", "/lib/", 1),
                  lambda x: x.replace("/lib/", "/usr/lib/", 1)):
        todo = {spell(x): x for x in paths if x not in out}
        if not todo:
            break
        p = subprocess.run(["dpkg", "-S", *todo], capture_output=True, text=True)
        for line in p.stdout.splitlines():
            pkg, _, path = line.partition(": ")
            if path.strip() in todo:
                out[todo[path.strip()]] = pkg.split(":")[0].split(",")[0].strip()
    return out


def needed_libs(binary):
    p = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if p.returncode != 0:
        problem("ldd %s: %s" % (binary, p.stderr.strip()))
        return {}
    libs = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m and m.group(2) != "not":
            libs[m.group(1)] = m.group(2)
        elif "=> not found" in line:
            problem("%s: %s not found" % (binary, line.strip()))
        else:
            m = re.match(r"\s*(/\S+)\s+\(", line)  # the dynamic loader
            if m:
                libs[os.path.basename(m.group(1))] = m.group(1)
    return libs


def check_router_image(root, build):
    check_runtime_image(root, build, "router.Containerfile", ("fedrouter", "fedctl"))


def check_gateway_image(root, build):
    check_runtime_image(root, build, "gateway.Containerfile", ("fedrouter-gateway",))


def check_runtime_image(root, build, cfname, binaries):
    """A Debian 12 build stage, a debian:12-slim runtime stage that copies
    <binaries> and installs exactly the packages their libraries need."""
    cf = os.path.join(root, "deploy/images", cfname)
    st = stages(cf)
    if len(st) < 2:
        problem("%s: want a build stage and a runtime stage, got %d stage(s)" % (cfname, len(st)))
        return
    build_from, build_alias, build_instrs = st[0]
    run_from, _, run_instrs = st[-1]
    if not re.match(r"(docker\.io/)?(library/)?debian:12(\.\d+)?$", build_from):
        problem("%s: build stage FROM %s, want debian:12" % (cfname, build_from))
    if not re.match(r"(docker\.io/)?(library/)?debian:12(\.\d+)?-slim$", run_from):
        problem("%s: runtime stage FROM %s, want debian:12-slim" % (cfname, run_from))
    if not any(re.search(r"cmake\s+--build", s) for s in build_instrs):
        problem("%s: the build stage does not run the project's cmake build" % cfname)
    check_build_deps(root, cfname, build_instrs)
    copies = " ".join(s for s in run_instrs if s.upper().startswith("COPY") and "--from=" + (build_alias or "0") in s)
    for b in binaries:
        if not re.search(r"/%s\b" % re.escape(b), copies) and not re.search(r"/%s\s" % re.escape(b), copies + " "):
            problem("%s: the runtime stage does not copy %s from the build stage" % (cfname, b))
    users = [s.split()[1] for s in run_instrs if s.upper().startswith("USER ")]
    if not users or not re.match(r"^[1-9]\d*(:\d+)?$", users[-1]):
        problem("%s: runtime USER %s, want a numeric non-root uid (runAsNonRoot "
                "can only verify numbers)" % (cfname, users[-1] if users else "(none)"))
    listed = apt_packages(run_instrs)
    if not listed:
        problem("%s: the runtime stage installs no packages" % cfname)
        return
    db = Dpkg()
    missing = [p for p in listed if not db.installed(p)]
    if missing:
        problem("%s: packages not installed here, so not checkable: %s" % (cfname, missing))
    provided = db.closure(listed)
    by_listed = {p: db.closure([p]) for p in listed}
    base = db.closure(db.base_roots)
    needed = set()
    for name in binaries:
        binary = os.path.join(build, name)
        if not os.path.exists(binary):
            problem("%s: not built" % binary)
            continue
        libs = needed_libs(binary)
        owners = packages_of(sorted(set(libs.values())))
        for so, path in sorted(libs.items()):
            pkg = owners.get(path)
            if pkg is None:
                problem("%s needs %s (%s), which no Debian package owns" % (name, so, path))
                continue
            if SANITIZER_PKGS.match(pkg):
                continue
            needed.add(pkg)
            if pkg not in provided and pkg not in base:
                problem("%s needs %s from package %s, which the runtime stage neither installs nor "
                        "gets as a dependency or from debian:12-slim: add it to its apt-get install"
                        % (name, so, pkg))
    # A listed package earns its place by owning a needed library, or by
    # bringing one that neither those owners nor the base image bring.
    direct = [p for p in listed if p in needed]
    covered = db.closure(direct) | base
    for p in listed:
        if p not in direct and not (by_listed[p] & needed) - covered and p not in NOT_LIBRARIES:
            problem("%s: the runtime stage installs %s, which provides no library "
                    "%s needs" % (cfname, p, " or ".join(binaries)))
    print("check_images: the %s runtime stage installs %s" % (cfname, " ".join(listed)))


# Packages of scripts/lib/packages.sh that only the tests and tools need.
TEST_ONLY = {"check", "libsubunit-dev", "prometheus", "chromium", "curl", "procps", "python3",
             "python3-yaml", "openssl", "ca-certificates",
             "python3-kubernetes",         # kube_python_client (the official client)
             "clang", "libclang-rt-dev",   # the fuzz build (tests/fuzz) only
             "haproxy",                    # replicas_haproxy and the replicas benchmark
             "wrk",                        # the gateway benchmark
             "python3-pip",                 # the pip of kubesim's python images
             "nftables",                    # kubesim's NetworkPolicy egress (kubesim_netpol, egress_blackbox)
             # the code interpreter (code-interpreter.Containerfile, tests/codeint)
             "python3-jupyter-client", "python3-ipykernel", "python3-matplotlib"}


def check_build_deps(root, name, instrs):
    """The build stage installs every build dependency scripts/test does
    (the same cmake configure must succeed in the image)."""
    path = os.path.join(root, "scripts/lib/packages.sh")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        m = re.search(r"FR_PACKAGES=\(([^)]*)\)", f.read())
    want = {w for w in re.sub(r"#[^\n]*", "", m.group(1)).split() if w not in TEST_ONLY} if m else set()
    have = set(apt_packages(instrs))
    for p in sorted(want - have):
        problem("%s: the build stage does not install %s, which scripts/lib/packages.sh lists "
                "as a build dependency" % (name, p))


def check_code_interpreter_image(root):
    cf = os.path.join(root, "deploy/images/code-interpreter.Containerfile")
    server = os.path.join(root, "deploy/code-interpreter/server.py")
    st = stages(cf)
    if not st:
        problem("code-interpreter.Containerfile: no stage")
        return
    final_from, _, instrs = st[-1]
    if not re.match(r"(docker\.io/)?(library/)?debian:12(\.\d+)?(-slim)?$", final_from):
        problem("code-interpreter.Containerfile: FROM %s, want debian:12 or debian:12-slim (the Debian "
                "packages the server runs on)" % final_from)
    with open(server, encoding="utf-8") as f:
        src = f.read()
    # The packages the server says it needs when an import fails.
    m = re.search(r"install Debian's ([a-z0-9-]+) and\s*\"\s*\"([a-z0-9-]+)", src)
    want = {"python3", "python3-matplotlib"} | (set(m.groups()) if m else set())
    if not m:
        problem("server.py: its ImportError message no longer names the Debian packages it needs")
    have = set(apt_packages(instrs))
    for p in sorted(want - have):
        problem("code-interpreter.Containerfile: does not install %s, which the server needs" % p)
    if not any(s.upper().startswith("COPY") and "deploy/code-interpreter/server.py" in s for s in instrs):
        problem("code-interpreter.Containerfile: does not copy deploy/code-interpreter/server.py")
    users = [s.split()[1] for s in instrs if s.upper().startswith("USER ")]
    if not users or not re.match(r"^[1-9]\d*(:\d+)?$", users[-1]):
        problem("code-interpreter.Containerfile: USER %s, want a numeric non-root uid"
                % (users[-1] if users else "(none)"))
    if not any(re.match(r"EXPOSE\s+.*\b49999\b", s) for s in instrs):
        problem("code-interpreter.Containerfile: does not EXPOSE 49999")
    cmds = [s for s in instrs if s.upper().startswith("CMD")]
    if not cmds or not re.search(r'"/usr/bin/python3",\s*"[^"]*/server\.py".*"0\.0\.0\.0:49999"', cmds[-1]):
        problem("code-interpreter.Containerfile: CMD %s, want server.py under /usr/bin/python3 with "
                "--listen 0.0.0.0:49999" % (cmds[-1] if cmds else "(none)"))
    print("check_images: the code-interpreter image installs %s" % " ".join(sorted(have)))


def is_static(binary):
    p = subprocess.run(["readelf", "-l", "-d", binary], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    interp = "Requesting program interpreter" in p.stdout
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", p.stdout)
    return not interp and not needed, "; ".join((["a program interpreter"] if interp else []) +
                                                ["NEEDED " + n for n in needed])


def sanitizer_build(build):
    """1 when <build>'s CMake cache says FR_SANITIZE=ON."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return any(line.strip().upper() in ("FR_SANITIZE:BOOL=ON", "FR_SANITIZE:BOOL=TRUE", "FR_SANITIZE:BOOL=1")
                       for line in f)
    except OSError:
        return False


def check_agent_image(root, build):
    cf = os.path.join(root, "deploy/images/agent.Containerfile")
    st = stages(cf)
    if len(st) < 2:
        problem("agent.Containerfile: want a build stage and a final stage")
        return
    final_from, _, instrs = st[-1]
    if not re.match(r"^(scratch|(docker\.io/)?(library/)?busybox(:[\w.-]+)?)$", final_from):
        problem("agent.Containerfile: final stage FROM %s, want scratch or busybox" % final_from)
    if not any(s.upper().startswith("COPY") and "--from=" in s and "fedrouter-agent" in s for s in instrs):
        problem("agent.Containerfile: the final stage does not copy fedrouter-agent from the build stage")
    users = [s.split()[1] for s in instrs if s.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problem("agent.Containerfile: the init container must run as non-root (Pod Security restricted)")
    if not any(re.search(r"--target\s+fedrouter-agent", s) for s in st[0][2]):
        problem("agent.Containerfile: the build stage does not build the fedrouter-agent target")
    check_build_deps(root, "agent.Containerfile", st[0][2])
    agent = os.path.join(build, "fedrouter-agent")
    if not os.path.exists(agent):
        print("check_images: SKIP the static check: %s does not exist in this build (no agent/ yet)" % agent)
        return
    if sanitizer_build(build):
        # ASan and UBSan have no static runtime: a sanitizer build links the
        # agent dynamically on purpose (agent/CMakeLists.txt). Images are
        # built from release builds, which the other ctest run checks.
        print("check_images: SKIP the static check: %s is a sanitizer build" % build)
        return
    if shutil.which("readelf") is None:
        problem("readelf not found (binutils): cannot check that fedrouter-agent is static")
        return
    static, detail = is_static(agent)
    if static is None:
        problem("readelf %s: %s" % (agent, detail))
    elif not static:
        problem("%s is dynamically linked (%s): it must run in any sandbox image, static or libc only"
                % (agent, detail))
    else:
        print("check_images: %s is static" % agent)


def self_test(root, build):
    """The checker can fail: it must flag a runtime stage missing a library
    package or carrying a useless one, a root agent image, and a dynamic
    agent binary, and pass a static one."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="fr-images-selftest-")
    bad = []
    try:
        os.makedirs(os.path.join(tmp, "deploy/images"))
        os.makedirs(os.path.join(tmp, "build"))
        for name in ("fedrouter", "fedctl"):
            shutil.copy(os.path.join(build, name), os.path.join(tmp, "build", name))
        with open(os.path.join(root, "deploy/images/router.Containerfile")) as f:
            router = f.read()
        with open(os.path.join(root, "deploy/images/agent.Containerfile")) as f:
            agent = f.read()
        with open(os.path.join(tmp, "deploy/images/router.Containerfile"), "w") as f:
            f.write(router.replace(" libyaml-0-2 ", " curl "))
        with open(os.path.join(tmp, "deploy/images/agent.Containerfile"), "w") as f:
            f.write(re.sub(r"(?m)^USER .*$", "USER root", agent))
        with open(os.path.join(root, "deploy/images/code-interpreter.Containerfile")) as f:
            ci = f.read()
        with open(os.path.join(tmp, "deploy/images/code-interpreter.Containerfile"), "w") as f:
            f.write(re.sub(r"(?m)^USER .*$", "USER 0", ci.replace(" python3-ipykernel ", " ")))
        os.makedirs(os.path.join(tmp, "deploy/code-interpreter"))
        shutil.copy(os.path.join(root, "deploy/code-interpreter/server.py"),
                    os.path.join(tmp, "deploy/code-interpreter/server.py"))
        src = os.path.join(tmp, "hello.c")
        with open(src, "w") as f:
            f.write("int main(void) { return 0; }\n")
        subprocess.run(["cc", "-o", os.path.join(tmp, "build/fedrouter-agent"), src], check=True)
        check_router_image(tmp, os.path.join(tmp, "build"))
        check_agent_image(tmp, os.path.join(tmp, "build"))
        check_code_interpreter_image(tmp)
        want = ["libyaml-0-2", "installs curl", "non-root", "dynamically linked",
                "does not install python3-ipykernel", "code-interpreter.Containerfile: USER 0"]
        for w in want:
            if not any(w in p for p in problems):
                bad.append("the checker missed: %s (found: %s)" % (w, problems))
        del problems[:]
        subprocess.run(["cc", "-static", "-o", os.path.join(tmp, "build/fedrouter-agent"), src], check=True)
        static, detail = is_static(os.path.join(tmp, "build/fedrouter-agent"))
        if not static:
            bad.append("a static binary was not recognised as static: %s" % detail)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for b in bad:
        print("FAIL: self-test: " + b)
    print("check_images: self-test %s" % ("failed" if bad else "OK (a missing library package, a useless "
                                                              "package, a root agent image, a dynamic "
                                                              "agent and a code-interpreter image without "
                                                              "ipykernel or as root are each caught)"))
    return 1 if bad else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "--self-test":
        return self_test(os.path.abspath(argv[2]), os.path.abspath(argv[3]))
    if len(argv) != 3:
        print("usage: check_images.py [--self-test] REPO_ROOT BUILD_DIR", file=sys.stderr)
        return 2
    for tool in ("ldd", "dpkg", "dpkg-query"):
        if shutil.which(tool) is None:
            print("FAIL: %s not found (a Debian machine is needed to map libraries to packages)" % tool)
            return 1
    root, build = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    check_router_image(root, build)
    check_gateway_image(root, build)
    check_agent_image(root, build)
    check_code_interpreter_image(root)
    for p in problems:
        print("FAIL: " + p)
    if problems:
        print("check_images: %d problem(s)" % len(problems))
        return 1
    print("check_images: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
