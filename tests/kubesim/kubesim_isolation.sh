#!/usr/bin/env bash
# shellcheck disable=SC2317,SC2016,SC2015  # helpers via traps; $ in pod commands expands in the pod; a && b || fail
# kubesim_isolation.sh — black-box checks that a kubesim pod (as root, the
# default) cannot touch or read its host, with kubectl exec and a stand-in
# fedrouter-agent (tests/kubesim/fedrouter-agent):
#   - writes outside /tmp (/work, /etc, /usr) stay in the pod and go with it;
#   - umount, mount and unshare -m fail; an unprivileged user namespace
#     unmounting /tmp sees nothing of the host either;
#   - hidden paths (--hide, the --workdir root, /tmp, /root, the checkout)
#     are empty in the pod;
#   - every process of the pod but its init has Docker's default
#     capabilities (no CAP_SYS_ADMIN) and no_new_privs, the agent included;
#     an added SYS_ADMIN is refused, an added SYS_NICE given;
#   - runAsUser/runAsGroup/capabilities drop ALL are what the processes run
#     as, an agent pod of uid 1000 becomes Ready;
#   - commands are found inside the pod (one the pod wrote runs; a missing
#     one gets runc's message); /dev has terminals but no disks; the
#     hostname is the pod's name;
#   - the image's commands: python, python3, pip, pip3 for python (and
#     pytorch) images, node, npm for node, none for busybox; --image-command.
# Needs root (namespaces); exits 77 (skipped) otherwise.
#
# Usage: kubesim_isolation.sh PATH/TO/kubesim
# Loopback only, every wait bounded, everything killed and removed at exit.
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
ROOT="$(cd "$HERE/../.." && pwd)"
AGENT="$HERE/fedrouter-agent"

if [ "$(id -u)" != 0 ]; then
  echo "SKIP: kubesim isolates pods only as root"
  exit 77
fi

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}" kubectl python3

TAG="iso$$$RANDOM"
SECRET="$T/secret"
mkdir -p "$SECRET"
printf 'top-secret-%s\n' "$TAG" >"$SECRET/agent.key"
DOCKER_CAPS=00000000a80425fb

# kx POD CMD... — kubectl exec POD -- CMD...; stdout in $OUT, stderr in $ERR.
kx() {
  local pod="$1"
  shift
  k exec "$pod" -- "$@"
}

# pod_json NAME [SPEC-EXTRA [CONTAINER-EXTRA]] — a pod of image $IMAGE
# (default busybox) running sleep.
pod_json() {
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{%s"containers":[{"name":"c","image":"%s","command":["sleep","3600"]%s}]}}\n' \
    "$1" "${2:+$2,}" "${IMAGE:-busybox}" "${3:+,$3}"
}

make_pod() { # make_pod NAME [SPEC-EXTRA [CONTAINER-EXTRA]]
  pod_json "$@" >"$T/$1.json"
  k create -f "$T/$1.json"
  expect_rc 0 "create $1" || return 1
  k wait --for=condition=Ready "pod/$1" --timeout=30s
  expect_rc 0 "$1 Ready"
}

pod_uid() { k get pod "$1" -o 'jsonpath={.metadata.uid}'; cat "$OUT"; }

# --hide of paths nothing else hides: a directory and a file the host has
# (lib.sh hides $T, where the key is, and the checkout).
HIDE_DIR=/usr/share/doc
HIDE_FILE=/etc/hostname
[ -d "$HIDE_DIR" ] && [ -n "$(ls -A "$HIDE_DIR")" ] && [ -s "$HIDE_FILE" ] ||
  { echo "FAIL: this test needs a non-empty $HIDE_DIR and $HIDE_FILE on the host"; exit 1; }
# A command of our own for busybox pods (--image-command).
printf '#!/bin/sh\necho "hello from the image: $*"\n' >"$T/hello"
chmod 755 "$T/hello"
start_kubesim "$KUBESIM" --name iso --nodes 1 --node-cpu 32 --agent-binary "$AGENT" \
  --hide "$SECRET" --hide "$HIDE_DIR" --hide "$HIDE_FILE" --image-command "busybox=$T/hello"

# ------------------------------------------------------------------ root
step "writes outside /tmp (/work, /etc, /usr) stay inside the pod"
make_pod w1
kx w1 sh -c "mkdir -p /work && echo x >/work/x-$TAG && echo y >/etc/x-$TAG && echo z >/usr/x-$TAG && cat /work/x-$TAG /etc/x-$TAG /usr/x-$TAG"
expect_rc 0 "write in the pod" && out_is "$(printf 'x\ny\nz')" "the pod reads back what it wrote"
for f in "/work/x-$TAG" "/etc/x-$TAG" "/usr/x-$TAG"; do
  [ -e "$f" ] && fail "$f appeared on the host"
done

step "a deleted pod's files are gone: its directory is removed, a new pod of that name starts clean"
W1_UID="$(pod_uid w1)"
W1_DIR="$T/work/default_w1_${W1_UID:0:8}"
[ -d "$W1_DIR" ] || fail "no pod directory $W1_DIR"
k delete pod w1 --wait=true
expect_rc 0 "delete w1"
wait_until 10 test ! -e "$W1_DIR" || fail "$W1_DIR still there after the pod was deleted"
make_pod w1
kx w1 sh -c "cat /etc/x-$TAG"
[ "$RC" != 0 ] || fail "the new w1 sees the old one's /etc/x-$TAG"

step "umount, mount and unshare -m fail in a pod"
kx w1 umount /tmp
[ "$RC" != 0 ] || fail "umount /tmp succeeded"
kx w1 umount -l /run/kubesim
[ "$RC" != 0 ] || fail "umount -l /run/kubesim succeeded"
kx w1 unshare -m true
[ "$RC" != 0 ] || fail "unshare -m succeeded"
kx w1 mount -t tmpfs x /mnt
[ "$RC" != 0 ] || fail "mount -t tmpfs succeeded"

step "hidden paths are empty in the pod: --hide, the --workdir root, /tmp, /root, the checkout"
# The directory is there but empty, the file is gone, the rest of /etc is not.
kx w1 sh -c "ls -A $HIDE_DIR; test -e $HIDE_FILE || echo gone; ls /etc | grep -c ."
expect_rc 0 "ls of --hide paths"
[ "$(sed -n 1p "$OUT")" = gone ] && [ "$(sed -n 2p "$OUT")" -gt 10 ] 2>/dev/null && [ "$(wc -l <"$OUT")" = 2 ] ||
  fail "--hide $HIDE_DIR $HIDE_FILE: $(tr '\n' ' ' <"$OUT")"
# The attack from a sandbox: umount /tmp (here in a user namespace, which
# unprivileged processes may make) and read a key under the host's /tmp.
kx w1 sh -c "unshare -Urm sh -c 'umount -l /tmp; head -c 40 $SECRET/agent.key' 2>/dev/null; head -c 40 $SECRET/agent.key 2>/dev/null; ls -A $SECRET $T $T/work /root $ROOT 2>/dev/null"
grep -q "top-secret" "$OUT" && fail "the pod read $SECRET/agent.key"
grep -q "kubeconfig\|agent.key\|default_w1\|CMakeLists.txt" "$OUT" && fail "the pod lists host files: $(tr '\n' ' ' <"$OUT")"
kx w1 cat "$SECRET/agent.key"
[ "$RC" != 0 ] || fail "cat $SECRET/agent.key succeeded"
kx w1 cat "$KCFG"
[ "$RC" != 0 ] || fail "the pod read kubesim's kubeconfig"
kx w1 ls -A /tmp
expect_rc 0 "ls /tmp" && out_is "" "the pod's /tmp starts empty"

# ------------------------------------------------------------------ credentials
step "the pod's processes have Docker's default capabilities (no CAP_SYS_ADMIN) and no_new_privs"
kx w1 sh -c 'grep -E "^(CapEff|CapPrm|CapBnd|CapInh|CapAmb|NoNewPrivs):" /proc/self/status | tr -s "\t" " "'
expect_rc 0 "read /proc/self/status" && out_is "$(printf 'CapInh: 0000000000000000\nCapPrm: %s\nCapEff: %s\nCapBnd: %s\nCapAmb: 0000000000000000\nNoNewPrivs: 1' \
  "$DOCKER_CAPS" "$DOCKER_CAPS" "$DOCKER_CAPS")" "capability sets"
kx w1 sh -c 'id -u; id -g; hostname'
expect_rc 0 "id" && out_is "$(printf '0\n0\nw1')" "uid, gid, hostname"

step "an agent pod: the agent and every process but the pod's init have those capabilities"
cat >"$T/ag.json" <<EOF
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"ag"},"spec":{"containers":[{"name":"sandbox","image":"python:3.12","command":["/opt/fedrouter/fedrouter-agent"],"ports":[{"containerPort":49983}]}]}}
EOF
k create -f "$T/ag.json"
k wait --for=condition=Ready pod/ag --timeout=30s
expect_rc 0 "ag Ready"
kx ag sh -c 'for s in /proc/[0-9]*/status; do p=${s#/proc/}; p=${p%/status}; [ "$p" = 1 ] && continue; c=$(tr "\0" " " </proc/$p/cmdline); echo "$(grep -E "^CapEff" $s | tr -s "\t" " ") $(grep -E "^NoNewPrivs" $s | tr -s "\t" " ") $c"; done'
expect_rc 0 "list the pod's processes"
grep -q -- "--port-file" "$OUT" || fail "the agent is not among the pod's processes"
if grep -v "CapEff: $DOCKER_CAPS NoNewPrivs: 1 " "$OUT" | grep -q .; then
  fail "processes with other capabilities: $(grep -v "CapEff: $DOCKER_CAPS" "$OUT")"
fi

step "runAsUser, runAsGroup, fsGroup and capabilities drop ALL are what the processes run as"
# HOME is the uid's in the pod's /etc/passwd (the host's here), else "/".
U1_HOME="$(awk -F: '$3 == 1000 { print $6; exit }' /etc/passwd)"
make_pod u1 '"securityContext":{"runAsUser":1000,"runAsGroup":1001,"fsGroup":2000}' \
  '"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}'
kx u1 sh -c 'id -u; id -g; id -G; grep -E "^(CapEff|CapBnd|NoNewPrivs):" /proc/self/status | tr -s "\t" " "; echo $HOME'
expect_rc 0 "id in u1" && out_is "$(printf '1000\n1001\n1001 2000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nNoNewPrivs: 1\n%s' "${U1_HOME:-/}")" "uid 1000"
if [ -n "$U1_HOME" ] && [ "$U1_HOME" != / ]; then
  # The host's home is hidden; the pod's user gets an empty one of its own.
  kx u1 sh -c 'touch "$HOME/h" && ls -A "$HOME"'
  expect_rc 0 "uid 1000 writes its HOME" && out_is "h" "a fresh, empty home"
fi
kx u1 sh -c "echo x >/etc/u1-$TAG"
[ "$RC" != 0 ] || fail "uid 1000 wrote /etc"
kx u1 sh -c "echo x >/tmp/u1-$TAG && cat /tmp/u1-$TAG"
expect_rc 0 "uid 1000 writes /tmp"

step "an agent pod running as uid 1000 becomes Ready; its agent runs as 1000"
sed 's/"name":"ag"/"name":"agu"/; s/"spec":{/"spec":{"securityContext":{"runAsUser":1000,"runAsGroup":1000},/' "$T/ag.json" >"$T/agu.json"
k create -f "$T/agu.json"
k wait --for=condition=Ready pod/agu --timeout=30s
expect_rc 0 "agu Ready"
kx agu sh -c 'for p in /proc/[0-9]*; do [ "$p" = /proc/1 ] || [ "$p" = /proc/$$ ] && continue; tr "\0" " " <$p/cmdline | grep -q -- --port-file && grep -E "^Uid:" $p/status | tr -s "\t" " "; done'
expect_rc 0 "find agu's agent" && out_is "Uid: 1000 1000 1000 1000" "the agent's uids"

step "capabilities add: SYS_NICE is given, SYS_ADMIN is not"
make_pod c1 '' '"securityContext":{"capabilities":{"add":["SYS_NICE","CAP_SYS_ADMIN"]}}'
kx c1 sh -c 'grep -E "^CapEff:" /proc/self/status | tr -s "\t" " "'
# a80425fb + SYS_NICE (bit 23) = a88425fb
expect_rc 0 "CapEff in c1" && out_is "CapEff: 00000000a88425fb" "SYS_NICE added, SYS_ADMIN left out"
grep -q "capability CAP_SYS_ADMIN is not given to pods" "$LOG" || fail "kubesim did not log the refused SYS_ADMIN"

# ------------------------------------------------------------------ commands, /dev
step "commands are found inside the pod: one the pod wrote runs, a missing one gets runc's message"
kx w1 sh -c "printf '#!/bin/sh\necho from-the-pod\n' >/usr/local/bin/only-in-$TAG && chmod +x /usr/local/bin/only-in-$TAG"
expect_rc 0 "write a command"
kx w1 "only-in-$TAG"
expect_rc 0 "run it" && out_is "from-the-pod" "its output"
kx w1 "no-such-$TAG"
[ "$RC" != 0 ] && grep -q "exec: \"no-such-$TAG\": executable file not found in \$PATH" "$ERR" ||
  fail "missing command: exit $RC, $(cat "$ERR")"
kx w1 sh -c 'echo data >/tmp/not-exec && chmod 644 /tmp/not-exec'
kx w1 /tmp/not-exec
[ "$RC" != 0 ] && grep -q 'exec: "/tmp/not-exec": permission denied' "$ERR" ||
  fail "not executable: exit $RC, $(cat "$ERR")"

# ------------------------------------------------------------------ images
step "a python:3.12 pod has python, python3, pip and pip3 in /usr/local/bin, as the image does"
IMAGE=python:3.12 make_pod py
kx py python -c 'print(2 ** 10)'
expect_rc 0 "python -c" && out_is "1024" "python -c 'print(2 ** 10)'"
kx py sh -c 'for c in python python3 pip pip3; do command -v $c; done; pip --version | cut -d" " -f1'
expect_rc 0 "command -v" && out_is "$(printf '/usr/local/bin/python\n/usr/local/bin/python3\n/usr/local/bin/pip\n/usr/local/bin/pip3\npip')" "the image's commands"

step "images match by repository: docker.io/library/python:3.12-slim and nvcr.io/nvidia/pytorch have python; busybox has not"
IMAGE=docker.io/library/python:3.12-slim@sha256:0000000000000000000000000000000000000000000000000000000000000000 make_pod pys
kx pys python -c 'print(6 * 7)'
expect_rc 0 "python in pys" && out_is "42" "python in python:3.12-slim"
IMAGE=nvcr.io/nvidia/pytorch:24.05-py3 make_pod pt
kx pt python -c 'print(6 * 7)'
expect_rc 0 "python in pt" && out_is "42" "python in pytorch"
kx w1 python -c 1
[ "$RC" != 0 ] && grep -q 'exec: "python": executable file not found in $PATH' "$ERR" ||
  fail "busybox has python: exit $RC, $(cat "$ERR")"

step "--image-command: busybox pods get a copy of the given file"
kx w1 hello a b
expect_rc 0 "hello" && out_is "hello from the image: a b" "the copied command"
kx py sh -c 'command -v hello || echo none'
expect_rc 0 "hello in py" && out_is "none" "only the pattern's images get it"

step "a node:20 pod has node, npm and npx (or says the host lacks them)"
IMAGE=node:20 make_pod nd
kx nd node -e 'console.log(6 * 7)'
if [ -x /usr/bin/node ]; then
  expect_rc 0 "node -e" && out_is "42" "node -e"
else
  [ "$RC" = 127 ] && grep -q "node: not installed on this kubesim host" "$ERR" || fail "node stub: exit $RC, $(cat "$ERR")"
fi
kx nd npm --version
if [ -x /usr/bin/npm ]; then
  expect_rc 0 "npm --version" && grep -Eq '^[0-9]+\.' "$OUT" || fail "npm --version: $(cat "$OUT")"
else
  [ "$RC" = 127 ] && grep -q "npm: not installed on this kubesim host" "$ERR" || fail "npm stub: exit $RC, $(cat "$ERR")"
fi

step "/dev has null, urandom and terminals, but no disks"
kx w1 sh -c 'echo x >/dev/null && head -c 4 /dev/urandom | wc -c && ls /dev | tr "\n" " "'
expect_rc 0 "/dev"
grep -q "^4$" "$OUT" || fail "urandom: $(cat "$OUT")"
grep -Eq "vd|sd|nvme|mem|kmsg" "$OUT" && fail "disk or kernel nodes in /dev: $(tail -n 1 "$OUT")"
kx ag python3 -c 'import os, pty; m, s = pty.openpty(); print(os.ttyname(s))'
expect_rc 0 "a pseudo-terminal in the pod" && out_is "/dev/pts/0" "its name"
kx w1 sh -c 'mknod /tmp/disk b 254 0 && head -c 1 /tmp/disk'
[ "$RC" != 0 ] || fail "the pod read a block device it made"

finish
