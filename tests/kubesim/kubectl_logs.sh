#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubectl_logs.sh — pods/log: the real kubectl (v1.32) and curl read pod logs
# from kubesim as from a real API server (kubelet behind it).
#
# Usage: kubectl_logs.sh PATH/TO/kubesim
#
# kubesim runs with --tls --token and the stand-in agent
# (tests/kubesim/fedrouter-agent), whose POST /print writes lines to its
# stdout/stderr: what a test prints through the pod proxy must come back
# through `kubectl logs`. Checks: -c, --tail, --limit-bytes, --timestamps,
# --since, -f (live lines; ends when the client exits and when the pod is
# deleted), rotation past 4 MiB, a Completed agent pod's output, a non-agent
# pod's empty log, the errors (waiting pod, missing pod, unknown container,
# previous, bad and invalid query values) and the raw response (text/plain,
# chunked, 204 for an unscheduled pod). Every wait is bounded; the trap
# kills kubesim and removes the temp dir.
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
AGENT="$HERE/fedrouter-agent"

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}" kubectl curl python3

TOKEN="logs-token-$$"

# c METHOD PATH [curl args] — raw HTTPS to kubesim; body -> $OUT, headers
# -> $ERR, HTTP status -> $RC.
c() {
  local m="$1" p="$2"
  shift 2
  LAST_CMD="curl -X $m $p"
  RC=$(curl -sk --max-time 30 -X "$m" -H "Authorization: Bearer $TOKEN" -o "$OUT" -D "$ERR" \
    -w '%{http_code}' "$@" "$BASE$p" 2>"$T/curl.err")
}

# status_is CODE REASON MESSAGE — $OUT is a Status with these.
status_is() {
  python3 - "$OUT" "$1" "$2" "$3" >"$T/py" 2>&1 <<'PY' || { fail "Status: $(cat "$T/py")"; return 1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d.get("kind") == "Status", d
assert d.get("code") == int(sys.argv[2]), "code %r" % d.get("code")
assert d.get("reason") == sys.argv[3], "reason %r" % d.get("reason")
assert d.get("message") == sys.argv[4], "message %r, want %r" % (d.get("message"), sys.argv[4])
PY
}

agent_print() { # agent_print POD QUERY — POST /print on the pod's agent
  c POST "/api/v1/namespaces/default/pods/$1:49983/proxy/print?$2"
  [ "$RC" = 204 ] || fail "print through the pod proxy: HTTP $RC"
}

log_has() { # log_has POD CONTAINER TEXT — kubectl logs shows a line TEXT
  k logs "$1" -c "$2"
  grep -qx "$3" "$OUT"
}

echo "workdir: $T"
mkdir -p "$T/kcache"
# One node: the first pod pulls "busybox" (8 s), later ones find it cached;
# a pod with an image no one pulled stays ContainerCreating for 8 s.
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name logs --nodes 1 \
  --image-pull-ms 8000 --agent-binary "$AGENT"
BASE="https://127.0.0.1:$(cat "$T/port")"

cat >"$T/ag.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: ag
spec:
  containers:
  - name: agent
    image: busybox
    command: ["/usr/local/bin/fedrouter-agent"]
    ports:
    - containerPort: 49983
  - name: side
    image: busybox
    command: ["sleep", "3600"]
EOF
cat >"$T/done.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: done
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: ["fedrouter-agent", "--", "sh", "-c", "echo out-line; echo err-line >&2; printf no-newline"]
EOF
cat >"$T/plain.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: plain
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
EOF
cat >"$T/slow.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: slow
spec:
  containers:
  - name: main
    image: never-pulled:1
EOF
cat >"$T/big.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: big
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests:
        cpu: "64"
EOF

# ------------------------------------------------------------------ discovery
step "discovery: /api/v1 lists pods/log with verbs [get]"
k get --raw /api/v1
if expect_rc 0 "kubectl get --raw /api/v1"; then
  python3 - "$OUT" >"$T/py" 2>&1 <<'PY' || fail "$(cat "$T/py")"
import json, sys
d = json.load(open(sys.argv[1]))
r = [x for x in d["resources"] if x["name"] == "pods/log"]
assert r, "no pods/log"
assert r[0]["verbs"] == ["get"] and r[0]["kind"] == "Pod" and r[0]["namespaced"], r[0]
PY
fi

# ------------------------------------------------------------------ agent pod
step "an agent pod becomes Ready; lines it prints come back through kubectl logs -c"
k_in "$T/ag.yaml" create -f -
expect_rc 0 "kubectl create ag"
k wait --for=condition=Ready pod/ag --timeout=40s
expect_rc 0 "kubectl wait ag Ready"
agent_print ag "text=line-1"
agent_print ag "text=line-2"
agent_print ag "text=line-3"
wait_until 10 log_has ag agent line-3 || fail "line-3 not in the log"
# stderr after stdout is in the file (two pipes: order across them is the
# order kubesim read them in).
agent_print ag "text=err-1&stream=stderr"
wait_until 10 log_has ag agent err-1 || fail "err-1 (stderr) not in the log"
k logs ag -c agent
expect_rc 0 "kubectl logs ag -c agent" && out_is "line-1
line-2
line-3
err-1" "the whole log"

step "kubectl logs --tail=2 gives the last two lines"
k logs ag -c agent --tail=2
expect_rc 0 "kubectl logs --tail=2" && out_is "line-3
err-1" "tail 2"

step "kubectl logs --limit-bytes=9 gives the first 9 bytes"
k logs ag -c agent --limit-bytes=9
expect_rc 0 "kubectl logs --limit-bytes=9" && [ "$(head -c 20 "$OUT" | od -An -c | tr -s ' ')" = " l i n e - 1 \n l i" ] ||
  fail "limit-bytes 9: got '$(od -An -c "$OUT" | head -2)'"

step "kubectl logs --timestamps prefixes RFC3339Nano timestamps (recent, in order)"
k logs ag -c agent --timestamps
if expect_rc 0 "kubectl logs --timestamps"; then
  python3 - "$OUT" >"$T/py" 2>&1 <<'PY' || fail "$(cat "$T/py")"
import re, sys, datetime
lines = open(sys.argv[1]).read().splitlines()
assert [l.split(" ", 1)[1] for l in lines] == ["line-1", "line-2", "line-3", "err-1"], lines
prev = None
for l in lines:
    ts = l.split(" ", 1)[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", ts), ts
    t = datetime.datetime.strptime(ts[:26] + "Z", "%Y-%m-%dT%H:%M:%S.%fZ")
    age = (datetime.datetime.utcnow() - t).total_seconds()
    assert -5 < age < 300, "timestamp %s is %s s old" % (ts, age)
    assert prev is None or ts >= prev, "out of order"
    prev = ts
PY
fi

step "kubectl logs --since=1h shows all; sinceTime in the future shows nothing"
k logs ag -c agent --since=1h
expect_rc 0 "kubectl logs --since=1h" && [ "$(wc -l <"$OUT")" -eq 4 ] || fail "--since=1h: $(wc -l <"$OUT") lines"
k logs ag -c agent --since-time=2099-01-01T00:00:00Z
expect_rc 0 "kubectl logs --since-time=2099" && out_is "" "since 2099"

step "kubectl logs -c side (a container kubesim does not run): empty"
k logs ag -c side
expect_rc 0 "kubectl logs -c side" && out_is "" "side container"

step "kubectl logs -c nope: container nope is not valid for pod ag"
k logs ag -c nope
[ "$RC" -ne 0 ] || fail "expected a failure"
grep -q "container nope is not valid for pod ag" "$ERR" || fail "message"

# ------------------------------------------------------------------ follow
step "kubectl logs -f streams new lines and ends when the client exits"
LAST_CMD="kubectl logs -f ag -c agent"
: >"$T/f1.out"
timeout 60 kubectl --kubeconfig "$KCFG" --cache-dir "$T/kcache" logs -f ag -c agent \
  >"$T/f1.out" 2>"$T/f1.err" &
F1=$!
BG_PIDS+=("$F1")
wait_until 10 grep -qx err-1 "$T/f1.out" || fail "follower did not get the existing lines"
agent_print ag "text=live-1"
wait_until 10 grep -qx live-1 "$T/f1.out" || fail "follower did not get live-1"
kill -TERM "$F1" 2>/dev/null
wait "$F1" 2>/dev/null
conns_back() {
  c GET /_sim/state
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["connections"] <= 1 else 1)' "$OUT"
}
wait_until 10 conns_back || fail "kubesim still holds the follower's connection: $(cat "$OUT")"
k logs ag -c agent --tail=1
out_is "live-1" "log after the follower left"

step "rotation: after 5 MB of output the log is the current file only (< 4.4 MB), ends with the last line; a follower got every line across the rotation"
: >"$T/f3.out"
timeout 60 kubectl --kubeconfig "$KCFG" --cache-dir "$T/kcache" logs -f ag -c agent --tail=0 \
  >"$T/f3.out" 2>"$T/f3.err" &
F3=$!
BG_PIDS+=("$F3")
sleep 1
agent_print ag "bytes=5000000"
last=$(printf '%099d' 49999)
wait_until 20 log_has ag agent "$last" || fail "last big line not in the log"
wait_until 20 grep -qx "$last" "$T/f3.out" || fail "the follower did not get the last line"
kill -TERM "$F3" 2>/dev/null
wait "$F3" 2>/dev/null
python3 - "$T/f3.out" >"$T/py" 2>&1 <<'PY' || fail "follower across the rotation: $(cat "$T/py")"
import sys
lines = open(sys.argv[1]).read().splitlines()
want = ["%099d" % i for i in range(50000)]
assert lines == want, "got %d lines, first %r, want 50000 numbered lines in order" % (len(lines), lines[:1])
PY
k logs ag -c agent
n=$(wc -c <"$OUT")
if [ "$n" -le 0 ] || [ "$n" -gt 4400000 ]; then
  fail "log is $n bytes after rotation, want 0 < n <= 4.4 MB"
fi
grep -qx line-1 "$OUT" && fail "line-1 still shown after rotation"
ls "$T"/work/default_ag_*/.kubesim-agent.log.1 >/dev/null 2>&1 || fail "no rotated file .1 in the pod directory"

step "a follower that reads slowly holds back kubesim's reading, not its memory (20 MB printed)"
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$KS_PID/status" 2>/dev/null || echo 0; }
before=$(rss_kb)
: >"$T/slow.out"
curl -skN --max-time 60 --limit-rate 20k -H "Authorization: Bearer $TOKEN" \
  "$BASE/api/v1/namespaces/default/pods/ag/log?container=agent&follow=true&tailLines=0" \
  >"$T/slow.out" 2>/dev/null &
SLOW=$!
BG_PIDS+=("$SLOW")
sleep 0.5
for _ in 1 2 3 4; do agent_print ag "bytes=5000000"; done
sleep 2
after=$(rss_kb)
LAST_CMD="VmRSS before $before kB, after $after kB; slow follower got $(wc -c <"$T/slow.out") bytes"
echo "$LAST_CMD"
# Without backpressure the 20 MB would sit in kubesim for the slow client.
[ "$((after - before))" -lt 12288 ] || fail "kubesim grew $((after - before)) kB with a slow follower (want < 12 MiB)"
[ -s "$T/slow.out" ] || fail "the slow follower got nothing"
kill -TERM "$SLOW" 2>/dev/null
wait "$SLOW" 2>/dev/null
wait_until 10 conns_back || fail "kubesim still holds the slow follower's connection"

step "kubectl logs -f ends (exit 0) when the pod is deleted"
LAST_CMD="kubectl logs -f ag -c agent --tail=1"
: >"$T/f2.out"
timeout 60 kubectl --kubeconfig "$KCFG" --cache-dir "$T/kcache" logs -f ag -c agent --tail=1 \
  >"$T/f2.out" 2>"$T/f2.err" &
F2=$!
BG_PIDS+=("$F2")
wait_until 10 grep -qx "$last" "$T/f2.out" || fail "follower did not get the tail line"
agent_print ag "text=before-delete"
wait_until 10 grep -qx before-delete "$T/f2.out" || fail "follower did not get before-delete"
k delete pod ag --wait=false
expect_rc 0 "kubectl delete pod ag"
gone() { ! kill -0 "$F2" 2>/dev/null; }
if wait_until 15 gone; then
  wait "$F2"
  rc=$?
  [ "$rc" -eq 0 ] || fail "kubectl logs -f exited $rc after the delete, want 0"
else
  fail "kubectl logs -f still running 15 s after the pod was deleted"
fi

# ------------------------------------------------------------------ ended and plain pods
step "a Completed agent pod's output (stdout, stderr, a last line without newline) stays readable"
k_in "$T/done.yaml" create -f -
expect_rc 0 "kubectl create done"
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/done --timeout=30s
expect_rc 0 "wait Succeeded"
k logs done
expect_rc 0 "kubectl logs done"
printf 'out-line\nerr-line\nno-newline' >"$T/want"
cmp -s "$OUT" "$T/want" && true || {
  # stdout and stderr are two pipes: their relative order is not fixed.
  sort "$OUT" >"$T/a"; sort "$T/want" >"$T/b"
  [ "$(tr -d '\n' <"$T/a" | wc -c)" -eq "$(tr -d '\n' <"$T/b" | wc -c)" ] &&
    grep -qx out-line "$OUT" && grep -qx err-line "$OUT" && grep -q no-newline "$OUT" ||
    fail "done's log: '$(cat "$OUT")'"
}
k logs done -f
expect_rc 0 "kubectl logs -f of a completed pod returns"

step "a pod whose container kubesim does not run has an empty log"
k_in "$T/plain.yaml" create -f -
k wait --for=condition=Ready pod/plain --timeout=30s
expect_rc 0 "plain Ready"
k logs plain
expect_rc 0 "kubectl logs plain" && out_is "" "plain's log"

# ------------------------------------------------------------------ errors
step "a pod still pulling its image: container \"main\" in pod \"slow\" is waiting to start: ContainerCreating"
k_in "$T/slow.yaml" create -f -
expect_rc 0 "kubectl create slow"
k logs slow
[ "$RC" -ne 0 ] || fail "expected a failure"
grep -qF 'Error from server (BadRequest): container "main" in pod "slow" is waiting to start: ContainerCreating' "$ERR" ||
  fail "message"

step "a missing pod: kubectl's GET of it is NotFound (raw pods/log: 404 below)"
k logs nope
[ "$RC" -ne 0 ] || fail "expected a failure"
grep -qF 'error from server (NotFound): pods "nope" not found in namespace "default"' "$ERR" || fail "message"

step "kubectl logs --previous: previous terminated container not found"
k logs plain --previous
[ "$RC" -ne 0 ] || fail "expected a failure"
grep -qF 'previous terminated container "main" in pod "plain" not found' "$ERR" || fail "message"

# ------------------------------------------------------------------ raw HTTP
P=/api/v1/namespaces/default/pods
step "raw: 200 text/plain, chunked"
c GET "$P/done/log"
expect_rc 200 "GET done/log"
grep -qi '^content-type: text/plain' "$ERR" || fail "content type"
grep -qi '^transfer-encoding: chunked' "$ERR" || fail "not chunked"

step "raw: extreme values: tailLines=2^63-1 gives all, sinceTime=9999-... nothing, tailLines=2^63 is 400"
c GET "$P/done/log?tailLines=9223372036854775807"
expect_rc 200 "huge tailLines" && grep -qx out-line "$OUT" || fail "huge tailLines lost lines: '$(cat "$OUT")'"
c GET "$P/done/log?sinceTime=9999-12-31T23:59:59Z"
expect_rc 200 "sinceTime 9999" && out_is "" "since 9999"
c GET "$P/done/log?tailLines=9223372036854775808"
expect_rc 400 "tailLines 2^63" &&
  status_is 400 BadRequest 'strconv.ParseInt: parsing "9223372036854775808": value out of range'

step "raw: tailLines=abc is 400 with the API server's parse error"
c GET "$P/done/log?tailLines=abc"
expect_rc 400 "tailLines=abc" && status_is 400 BadRequest 'strconv.ParseInt: parsing "abc": invalid syntax'

step "raw: tailLines=-1 is 422 Invalid"
c GET "$P/done/log?tailLines=-1"
expect_rc 422 "tailLines=-1" &&
  status_is 422 Invalid 'PodLogOptions "done" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0'

step "raw: sinceSeconds with sinceTime is 422; limitBytes=x is 400"
c GET "$P/done/log?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z"
expect_rc 422 "both since"
c GET "$P/done/log?limitBytes=x"
expect_rc 400 "limitBytes=x"

step "raw: several containers and no container= is 400 naming them; unknown one 400"
k_in "$T/ag.yaml" create -f -
c GET "$P/ag/log"
expect_rc 400 "no container" &&
  status_is 400 BadRequest 'a container name must be specified for pod ag, choose one of: [agent side]'
c GET "$P/ag/log?container=zz"
expect_rc 400 "container zz" && status_is 400 BadRequest 'container zz is not valid for pod ag'

step "raw: an unscheduled pod answers 204; POST is 405; a missing pod 404"
k_in "$T/big.yaml" create -f -
c GET "$P/big/log"
expect_rc 204 "unscheduled pod"
c POST "$P/done/log"
expect_rc 405 "POST"
c GET "$P/nope/log"
expect_rc 404 "missing pod" && status_is 404 NotFound 'pods "nope" not found'

finish
