#!/usr/bin/env bash
# shellcheck disable=SC2317,SC2016  # helpers run via traps/waits; $VARS in single quotes expand remotely
# fedctl_cli.sh — drive the real fedctl against a real fedrouter in front of
# two kubesim clusters, end to end, as a user or a script would.
#
# Usage: fedctl_cli.sh PATH/TO/fedctl PATH/TO/fedrouter PATH/TO/kubesim
#
# Every check is a named step; all steps run (later ones may fail as a
# consequence of earlier ones); a failure prints fedctl's stdout/stderr and
# the router log tail; the script exits 1 if any step failed. Everything
# binds to 127.0.0.1, every wait is bounded, and the EXIT trap stops the
# router and both simulators and removes the temp dir on every exit path.
#
# Env: KEEP_TMP=1 keeps the temp dir (config, logs) for debugging.
set -uo pipefail

FEDCTL="${1:-}"
FEDROUTER="${2:-}"
KUBESIM="${3:-}"
for b in "$FEDCTL" "$FEDROUTER" "$KUBESIM"; do
  if [ -z "$b" ] || [ ! -x "$b" ]; then
    echo "FAIL: usage: $0 PATH/TO/fedctl PATH/TO/fedrouter PATH/TO/kubesim ('$b' is not an executable)" >&2
    exit 1
  fi
done
for tool in curl python3 sha256sum setsid timeout; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found on PATH" >&2; exit 1; }
done

T="$(mktemp -d "${TMPDIR:-/tmp}/fedctl-cli.XXXXXX")"
SIM_TOKEN="sim-$$-$RANDOM$RANDOM"
TOKEN="fedctl-test-$$-$RANDOM$RANDOM"
IMAGE="python:3.12"
SIM_PIDS=()
ROUTER_PID=""

# ------------------------------------------------------------------ cleanup
cleanup() {
  local rc=$? p _
  trap - EXIT INT TERM
  if [ -n "$ROUTER_PID" ]; then
    kill -TERM "$ROUTER_PID" 2>/dev/null
  fi
  for p in "${SIM_PIDS[@]}"; do
    # Each kubesim leads its own session (setsid): its exec'd commands go too.
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null
  done
  for p in $ROUTER_PID "${SIM_PIDS[@]}"; do
    for _ in $(seq 1 100); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
      echo "warning: pid $p did not exit within 10s of SIGTERM; sending SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null
    fi
    wait "$p" 2>/dev/null
  done
  # Whatever is left in a simulator's session (exec'd commands, which may
  # sit in process groups of their own) goes by session id.
  for p in "${SIM_PIDS[@]}"; do
    pkill -KILL -s "$p" 2>/dev/null
  done
  if [ "${KEEP_TMP:-0}" = "1" ]; then
    echo "kept $T (KEEP_TMP=1)"
  else
    rm -rf "$T"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ steps
STEP=""
STEPS_RUN=0
STEP_FAILED=0
FAILED_STEPS=()
OUT="$T/out"
ERR="$T/err"
RC=0
LAST_CMD=""

step() {
  end_step
  STEP="$*"
  STEPS_RUN=$((STEPS_RUN + 1))
  STEP_FAILED=0
  printf '\n--- step %d: %s\n' "$STEPS_RUN" "$STEP"
}

end_step() {
  [ -n "$STEP" ] || return 0
  [ "$STEP_FAILED" -eq 0 ] && echo "ok: $STEP"
  STEP=""
}

fail() {
  [ "$STEP_FAILED" -eq 0 ] && FAILED_STEPS+=("$STEP")
  STEP_FAILED=1
  {
    echo "FAIL [$STEP]: $*"
    [ -n "$LAST_CMD" ] && echo "  last command: $LAST_CMD (exit $RC)"
    echo "  ---- stdout ----"
    head -c 3000 "$OUT" 2>/dev/null | sed 's/^/  | /'
    echo
    echo "  ---- stderr ----"
    head -c 2000 "$ERR" 2>/dev/null | sed 's/^/  | /'
    echo
    echo "  ---- fedrouter log (last 15 lines) ----"
    tail -n 15 "$T/router.log" 2>/dev/null | sed 's/^/  | /'
  } >&2
  return 1
}

fatal() {
  fail "$@"
  echo "FATAL: cannot continue" >&2
  finish
}

finish() {
  end_step
  local s
  echo
  if [ "${#FAILED_STEPS[@]}" -eq 0 ]; then
    echo "fedctl_cli.sh: all $STEPS_RUN steps passed"
    exit 0
  fi
  echo "fedctl_cli.sh: ${#FAILED_STEPS[@]} of $STEPS_RUN steps FAILED:"
  for s in "${FAILED_STEPS[@]}"; do
    echo "  - $s"
  done
  exit 1
}

# A sanitizer build of fedctl reports leaks and UB on stderr: always a failure.
SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
check_san() {
  if grep -Eq "$SAN_RE" "$ERR"; then
    fail "sanitizer report on fedctl's stderr"
  fi
}

# fc ARGS... — run fedctl (bounded); stdout -> $OUT, stderr -> $ERR, exit -> $RC.
FC_LIMIT=90
fc() {
  LAST_CMD="fedctl $*"
  timeout --kill-after=5 "$FC_LIMIT" "$FEDCTL" "$@" </dev/null >"$OUT" 2>"$ERR"
  RC=$?
  check_san
}

# fc_in FILE ARGS... — like fc, with FILE on stdin.
fc_in() {
  local in="$1"
  shift
  LAST_CMD="fedctl $* < $(basename "$in")"
  timeout --kill-after=5 "$FC_LIMIT" "$FEDCTL" "$@" <"$in" >"$OUT" 2>"$ERR"
  RC=$?
  check_san
}

expect_rc() { # expect_rc N
  [ "$RC" -eq "$1" ] || fail "expected exit $1, got $RC"
}
expect_out() { # expect_out REGEX — stdout matches (grep -E)
  grep -Eq -- "$1" "$OUT" || fail "stdout does not match /$1/"
}
expect_err() { # expect_err REGEX — stderr matches
  grep -Eq -- "$1" "$ERR" || fail "stderr does not match /$1/"
}
expect_json() { # expect_json — stdout is one JSON document
  python3 -c 'import json,sys; json.load(sys.stdin)' <"$OUT" 2>/dev/null ||
    fail "stdout is not valid JSON"
}
# pyjson EXPR — evaluate a Python expression over d = the JSON on stdout;
# prints the result (used to pull ids and counts out of --json output).
pyjson() {
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$OUT" 2>/dev/null
}

# wait_until SECONDS CMD... — run CMD every 0.3 s until it succeeds.
wait_until() {
  local limit="$1"
  shift
  local end=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$end" ]; do
    "$@" && return 0
    sleep 0.3
  done
  "$@"
}

# ------------------------------------------------------------------ setup
# start_sim NAME REGION — a TLS kubesim with a token, own session, own dir.
start_sim() {
  local name="$1" region="$2" d="$T/$1" _
  mkdir -p "$d/wd"
  setsid "$KUBESIM" --listen 127.0.0.1:0 --tls --token "$SIM_TOKEN" --name "$name" \
    --region "$region" --write-kubeconfig "$d/kubeconfig" --port-file "$d/port" \
    --workdir "$d/wd" --nodes 4 --schedule-ms 20 --start-ms 50 --log-level warn \
    </dev/null >"$d/kubesim.log" 2>&1 &
  SIM_PIDS+=("$!")
  for _ in $(seq 1 200); do
    [ -s "$d/port" ] && [ -s "$d/kubeconfig" ] && return 0
    kill -0 "$!" 2>/dev/null || break
    sleep 0.1
  done
  LAST_CMD="kubesim --name $name"
  cp "$d/kubesim.log" "$ERR" 2>/dev/null
  fatal "kubesim $name did not write its port file and kubeconfig within 20s"
}

step "two kubesim clusters start (us-a in region us, eu-b in region eu)"
start_sim us-a us
start_sim eu-b eu

step "fedrouter starts on 127.0.0.1:0 with both clusters and one tenant"
TOKEN_SHA="$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
cat >"$T/fedrouter.conf" <<EOF
# written by tests/router/fedctl_cli.sh
listen = "127.0.0.1:0";
region = "us";
sandbox = { default_lifetime_s = 600; max_lifetime_s = 3600; };
limits = { max_batch = 100; max_exec_timeout_s = 120; };
tenants = (
  { name = "cli"; token_sha256 = "$TOKEN_SHA"; }
);
clusters = (
  { name = "us-a"; region = "us"; kubeconfig = "$T/us-a/kubeconfig"; },
  { name = "eu-b"; region = "eu"; kubeconfig = "$T/eu-b/kubeconfig"; }
);
EOF
"$FEDROUTER" --config "$T/fedrouter.conf" </dev/null >"$T/router.out" 2>"$T/router.log" &
ROUTER_PID=$!
PORT=""
for _ in $(seq 1 200); do
  PORT="$(sed -n 's|^fedrouter listening on http://127\.0\.0\.1:\([0-9][0-9]*\)$|\1|p' "$T/router.out" | head -n 1)"
  [ -n "$PORT" ] && break
  kill -0 "$ROUTER_PID" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$PORT" ]; then
  LAST_CMD="fedrouter --config $T/fedrouter.conf"
  cp "$T/router.out" "$OUT"
  cp "$T/router.log" "$ERR"
  fatal "fedrouter did not print 'fedrouter listening on http://127.0.0.1:PORT' within 20s"
fi
export FEDROUTER_URL="http://127.0.0.1:$PORT"
export FEDROUTER_TOKEN="$TOKEN"
echo "fedrouter pid $ROUTER_PID at $FEDROUTER_URL"

step "fedrouter /readyz is 200 once both clusters synced"
readyz() {
  LAST_CMD="curl $FEDROUTER_URL/readyz"
  RC="$(curl -s -o "$OUT" -w '%{http_code}' --max-time 5 "$FEDROUTER_URL/readyz")"
  [ "$RC" = "200" ]
}
wait_until 30 readyz || fatal "/readyz not 200 within 30s"

# ------------------------------------------------------------------ usage
step "usage errors exit 2 without contacting the router"
fc create -n abc --pool p
expect_rc 2 && expect_err "not a whole number"
fc create -n 0 --pool p
expect_rc 2
fc create --pool p --cpus -1
expect_rc 2
fc create --pool p --memory-gb lots
expect_rc 2
fc create --pool p --label 'not a label'
expect_rc 2
fc create
expect_rc 2 && expect_err "--pool or --image"
fc exec
expect_rc 2 && expect_err "missing sandbox ID"
fc exec us-a.x
expect_rc 2 && expect_err "missing the command"
fc exec --timeout 1.5 us-a.x -- true
expect_rc 2
fc exec -i --stdin-file /dev/null us-a.x -- cat
expect_rc 2
fc pools resize p many
expect_rc 2
fc terminate
expect_rc 2
fc terminate us-a.x --label a=b
expect_rc 2
fc ls --bogus
expect_rc 2 && expect_err "unknown option --bogus"
fc frobnicate
expect_rc 2 && expect_err "unknown command"
fc explain
expect_rc 2 && expect_err "give --pool or --image"
fc
expect_rc 2
fc cp only-one-arg
expect_rc 2 && expect_err "give a source and a destination"
fc cp a.txt b.txt
expect_rc 2 && expect_err "one side must be ID:/abs/path"
fc cp us-a.x:/a us-a.y:/b
expect_rc 2 && expect_err "both sides are in a sandbox"
fc ps
expect_rc 2 && expect_err "missing sandbox ID"
fc kill us-a.x
expect_rc 2 && expect_err "give the sandbox ID and the PID"
fc kill us-a.x 12 -s 0
expect_rc 2
fc shell
expect_rc 2 && expect_err "missing sandbox ID"

step "create's pod option and secret flags: a bad value is a usage error (2) naming the flag"
# flag value | what the message says
while IFS='|' read -r flag val msg; do
  fc create --image "$IMAGE" "$flag" "$val"
  expect_rc 2 && expect_err "^fedctl create: $flag '.*': .*$msg"
  fc explain --image "$IMAGE" "$flag" "$val"
  expect_rc 2 && expect_err "^fedctl explain: $flag "
done <<'EOF2'
--gpus|65|want a whole number from 0 to 64
--gpus|one|want a whole number from 0 to 64
--runtime-class|Not_A_Name|want a RuntimeClass name
--node-selector|accel|want KEY=VALUE
--node-selector|bad key=x|not a valid label key
--toleration|k:NoSchedule:30|NoExecute only
--toleration|k:Sometimes|is not NoSchedule, PreferNoSchedule or NoExecute
--toleration|:NoSchedule|give a taint KEY, or '\*' for every taint
--toleration|*=v|takes no value
--toleration|k:NoExecute:-5|is not a number of seconds
--volume|data=claim|must be absolute and clean
--volume|/a/../b=claim|must be absolute and clean
--volume|/fr-agent=claim|must be absolute and clean
--volume|/data=Data_1|is not a PersistentVolumeClaim name
--volume|/data|want /MOUNT/PATH=CLAIM
--secret|1BAD|want an env var name
--secret|A-B|want an env var name
EOF2
fc create --image "$IMAGE" --node-selector a=1 --node-selector a=2
expect_rc 2 && expect_err "the key a is given twice"
fc create --image "$IMAGE" --volume /d=x --volume /d=y
expect_rc 2 && expect_err "the mount path /d is given twice"
fc create --image "$IMAGE" --secret TOK --secret TOK
expect_rc 2 && expect_err "--secret TOK is given twice"
fc create --image "$IMAGE" --secret TOK --env TOK=x
expect_rc 2 && expect_err "TOK is both --env and --secret"
fc pools create p --image "$IMAGE" --replicas 1 --toleration 'k:NoSchedule:1'
expect_rc 2 && expect_err "^fedctl pools create: --toleration "
fc pools create p --image "$IMAGE" --replicas 1 --secret TOK
expect_rc 2 && expect_err "unknown option --secret"

step "a malformed sandbox id is a usage error (2) in every command that takes one, before any call"
# No router at this URL: a call would exit 1.
for id in US-A.x us-a nodot .x us-a. 'us_a.x' 'us-a.x/y'; do
  fc --url http://127.0.0.1:1 exec "$id" -- true
  expect_rc 2 && expect_err "is not a sandbox id"
done
fc --url http://127.0.0.1:1 terminate us-a.ok BAD.x
expect_rc 2 && expect_err "^fedctl terminate: 'BAD.x' is not a sandbox id"
fc --url http://127.0.0.1:1 ps Bad
expect_rc 2 && expect_err "^fedctl ps: 'Bad' is not a sandbox id"
fc --url http://127.0.0.1:1 kill Bad 12
expect_rc 2 && expect_err "^fedctl kill: 'Bad' is not a sandbox id"
fc --url http://127.0.0.1:1 shell Bad
expect_rc 2 && expect_err "^fedctl shell: 'Bad' is not a sandbox id"
fc --url http://127.0.0.1:1 cp Bad:/etc/hostname "$T/h"
expect_rc 2 && expect_err "^fedctl cp: 'Bad' is not a sandbox id"
for sub in "start Bad -- true" "logs Bad 1" "attach Bad 1" "stdin Bad 1" "ps Bad" "kill Bad 1"; do
  # shellcheck disable=SC2086  # the words of the subcommand
  fc --url http://127.0.0.1:1 proc $sub
  expect_rc 2 && expect_err "'Bad' is not a sandbox id"
done
# A well-formed id the router does not know is the API's answer: 1.
fc exec us-a.no-such-pod -- true
expect_rc 1 && expect_err "^fedctl: sandbox_not_found: "

step "proc: usage errors exit 2"
fc proc
expect_rc 2 && expect_err "missing the subcommand"
fc proc frob
expect_rc 2 && expect_err "unknown subcommand 'frob'"
fc proc start
expect_rc 2 && expect_err "missing sandbox ID"
fc proc start us-a.x
expect_rc 2 && expect_err "missing the command"
fc proc start --timeout 0 us-a.x -- true
expect_rc 2 && expect_err "out of range"
fc proc start --tag '' us-a.x -- true
expect_rc 2 && expect_err "--tag must be 1 to 128 bytes"
for sub in logs attach stdin; do
  fc proc "$sub" us-a.x
  expect_rc 2 && expect_err "give the sandbox ID and the PID"
  fc proc "$sub" us-a.x 0
  expect_rc 2 && expect_err "PID: 0 is out of range"
  fc proc "$sub" us-a.x 1 2
  expect_rc 2 && expect_err "unexpected argument '2'"
done
fc proc logs --bogus us-a.x 1
expect_rc 2 && expect_err "unknown option --bogus"

step "version and --version: fedctl's version, exit 0, nothing contacted"
VERSION="$(sed -n 's/^project(fedrouter VERSION \([0-9.]*\).*/\1/p' "$(dirname "$0")/../../CMakeLists.txt")"
[ -n "$VERSION" ] || fail "no project version in CMakeLists.txt"
fc --url http://127.0.0.1:1 version
expect_rc 0
[ "$(cat "$OUT")" = "fedctl $VERSION" ] || fail "version printed '$(cat "$OUT")', want 'fedctl $VERSION'"
fc --url http://127.0.0.1:1 --version
expect_rc 0
[ "$(cat "$OUT")" = "fedctl $VERSION" ] || fail "--version printed '$(cat "$OUT")'"
fc --json version
expect_rc 0 && expect_json
[ "$(pyjson "d['fedctl']")" = "$VERSION" ] || fail "version --json"
fc ls --version
expect_rc 2 && expect_err "--version goes before the command"
fc version extra
expect_rc 2

step "--help per command exits 0 and shows the command's usage"
for c in create exec terminate ls pools clusters cp ps kill shell proc events version explain; do
  fc "$c" --help
  expect_rc 0 && expect_out "usage: fedctl $c"
done
for c in start logs attach stdin; do
  fc proc "$c" --help
  expect_rc 0 && expect_out "usage: fedctl proc $c"
done
fc --help
expect_rc 0 && expect_out "Commands:"
for c in proc events version; do
  expect_out "^  $c "
done
expect_out "^  2    usage error: .*" && expect_out "malformed sandbox id"
expect_out "^  N    exec, shell, proc attach and proc logs -f: the remote command's own"

step "connection refused: exit 1 with a message naming the URL"
fc --url http://127.0.0.1:1 ls
expect_rc 1 && expect_err "cannot reach fedrouter at http://127.0.0.1:1"

step "wrong token: fedctl: unauthorized: ..., exit 1"
fc --token wrong-token ls
expect_rc 1 && expect_err "^fedctl: unauthorized: "

# ------------------------------------------------------------------ clusters
step "clusters: table with both clusters, healthy"
fc clusters
expect_rc 0
expect_out "^NAME +REGION +HEALTHY +LATENCY +NODES +CPU\(req/alloc\) +SANDBOXES +WARM +POOLS"
expect_out "^us-a +us +yes "
expect_out "^eu-b +eu +yes "

step "clusters --json: the API's JSON verbatim, both clusters"
fc --json clusters
expect_rc 0 && expect_json
[ "$(pyjson "sorted(c['name'] for c in d['clusters'])")" = "['eu-b', 'us-a']" ] ||
  fail "clusters in --json are not [eu-b, us-a]"

step "explain: an EU client's request ranks eu-b first, creates nothing"
fc --region eu explain -n 3 --image busybox
expect_rc 0
expect_out "^CLUSTER +VERDICT +COUNT +WARM +TIER +SCORE +REASON"
expect_out "^eu-b +use +3 "
expect_out "^us-a +use +0 "
fc --json ls
[ "$(pyjson "len(d['sandboxes'])")" = 0 ] || fail "explain created sandboxes"

step "explain --json: the plan as the API gives it"
fc --region us --json explain -n 2 --image busybox
expect_rc 0 && expect_json
[ "$(pyjson "d['plan']['clusters'][0]['cluster']")" = us-a ] || fail "a US client's plan does not start with us-a"

step "explain with every pod option: the router gets exactly the options given (request.pod_options)"
fc --json explain --image "$IMAGE" --gpus 2 --runtime-class gvisor --node-selector accel=a100 \
  --node-selector zone=z1 --toleration 'nvidia.com/gpu:NoSchedule' --toleration 'dedicated=sandbox' \
  --toleration 'k=:PreferNoSchedule' --toleration '*:NoExecute:60' --volume /data=shared-data --volume '/a=b=c1'
expect_rc 0 && expect_json
got="$(pyjson "json.dumps(d['request']['pod_options'], sort_keys=True)")"
want='{"gpus": 2, "node_selector": {"accel": "a100", "zone": "z1"}, "runtime_class": "gvisor", "tolerations": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "dedicated", "operator": "Equal", "value": "sandbox"}, {"effect": "PreferNoSchedule", "key": "k", "operator": "Equal"}, {"effect": "NoExecute", "operator": "Exists", "tolerationSeconds": 60}], "volumes": {"/a=b": "c1", "/data": "shared-data"}}'
[ "$got" = "$want" ] || fail "pod_options: got $got"

step "explain and create with pod options no cluster can host: explain says why per cluster, create exits 1"
fc explain --image "$IMAGE" --runtime-class gvisor --gpus 1
expect_rc 0
expect_out '^pod options: \{"runtime_class":"gvisor","gpus":1\}$|^pod options: \{"gpus":1,"runtime_class":"gvisor"\}$'
expect_out "^us-a +skip +0 .*skipped: no_runtime_class" && expect_out "^eu-b +skip +0 .*skipped: no_runtime_class"
fc create --image "$IMAGE" --volume /data=no-such-claim
expect_rc 1 && expect_err "^fedctl: no_capacity: "
expect_err "^  us-a: skipped: no_pvc " && expect_err "^  eu-b: skipped: no_pvc "

step "create --secret on a router without the agent: agent_required, exit 1"
fc create --image "$IMAGE" --secret HF_TOKEN
expect_rc 1 && expect_err "^fedctl: agent_required: "

step "an unknown --region: create warns on stderr (table and --json), explain says so; a known one does not"
fc --region europe create --image "$IMAGE" --name where1 --label "ev=$$"
expect_rc 0 && expect_out "^ID +NAME +CLUSTER +START"
expect_err "^fedctl: warning: region 'europe' is not one this router knows .*placed with no regional preference"
fc --json --region europe create --image "$IMAGE" --name where2 --label "ev=$$"
expect_rc 0 && expect_json
[ "$(pyjson "d['placement']['client_region_known']")" = False ] || fail "client_region_known is not false"
expect_err "^fedctl: warning: region 'europe' is not one this router knows"
fc --region eu create --image "$IMAGE" --name where3 --label "ev=$$"
expect_rc 0
grep -q "warning" "$ERR" && fail "a known region warned: $(cat "$ERR")"
fc --region europe explain --image "$IMAGE"
expect_rc 0
expect_out "^request: .*region europe \(unknown\)"
expect_out "^region europe is not one this router knows" && expect_out "placed with no regional preference"
fc --region eu explain --image "$IMAGE"
expect_rc 0
grep -q "unknown\|not one this router knows" "$OUT" && fail "explain of a known region says unknown"
fc terminate --label "ev=$$"
expect_rc 0 && expect_out "^terminated 3 sandboxes"

step "events: none yet; a create us-a fails (injected 5xx) moves to eu-b and is listed, newest first"
fc events
expect_rc 0 && expect_err "^No events\.$"
[ ! -s "$OUT" ] || fail "stdout not empty without events"
fc --json events
expect_rc 0 && expect_json
[ "$(pyjson "d['events']")" = "[]" ] || fail "events --json: want []"
sim_faults() { # sim_faults CLUSTER JSON — kubesim's /_sim/faults (same port and token as its API)
  curl -sk --max-time 5 -H "Authorization: Bearer $SIM_TOKEN" -o /dev/null -w '%{http_code}' \
    "https://127.0.0.1:$(cat "$T/$1/port")/_sim/faults" -d "$2"
}
us_a_healthy() {
  fc --json clusters
  [ "$(pyjson "[c['healthy'] for c in d['clusters'] if c['name'] == 'us-a'] == [True]")" = True ]
}
spilled() {
  fc --json events
  [ "$(pyjson "any(e['cluster'] == 'us-a' and e['reason'].startswith('unavailable: ') for e in d['events'])")" = True ]
}
# us-a fails every call from now on; the create is planned before the
# circuit breaker (two failed probes, 2 s apart) opens, so us-a gets its
# share, fails it, and the rest moves on. Should the breaker win the race,
# us-a is skipped without an event: wait for it to close and try again.
for attempt in 1 2 3 4 5; do
  wait_until 30 us_a_healthy || fail "us-a not healthy within 30s"
  [ "$(sim_faults us-a '{"error_rate":1.0}')" = 200 ] || fail "could not set us-a's fault"
  fc --json --region us create --image "$IMAGE" --name spilled --cluster us-a --cluster eu-b --label "ev=$$"
  [ "$(sim_faults us-a '{"error_rate":0}')" = 200 ] || fail "could not clear us-a's fault"
  spilled && break
  echo "attempt $attempt: no event (the breaker opened first); again"
done
spilled || fail "no unavailable event for us-a after 5 attempts"
fc events
expect_rc 0
expect_out "^AGE +CLUSTER +REQUEST +REASON$"
expect_out "^[0-9]+[smhd][0-9smh]* +us-a +[0-9a-f-]+ +unavailable: "
wait_until 30 us_a_healthy || fail "us-a not healthy again within 30s"
fc terminate --label "ev=$$"
expect_rc 0

# ------------------------------------------------------------------ pools
step "pools create warm --replicas 2 in both clusters"
fc pools create warm --image "$IMAGE" --cpus 1 --memory-gb 1 --replicas 2
expect_rc 0 && expect_out "pool warm created"

step "pools create of an existing name: pool_exists, exit 1"
fc pools create warm --image "$IMAGE" --replicas 1
expect_rc 1 && expect_err "^fedctl: pool_exists: "

step "pools (list) shows warm with ready/target per cluster, 2/2 within 30s"
pool_ready() { # pool_ready NAME N — every cluster of pool NAME has ready=target=N
  fc --json pools get "$1"
  [ "$RC" -eq 0 ] || return 1
  [ "$(pyjson "all(c['ready'] == $2 and c['target'] == $2 for c in d['clusters']) and len(d['clusters']) == 2")" = "True" ]
}
wait_until 30 pool_ready warm 2 || fail "pool warm not 2/2 ready in both clusters within 30s"
fc pools
expect_rc 0
expect_out "^NAME +IMAGE +CPUS +MEM +"
expect_out "^warm +python:3\.12 +1 +1G +2/2 +2/2"
fc pools list --json
expect_rc 0 && expect_json

step "pools get warm: image and per-cluster table"
fc pools get warm
expect_rc 0 && expect_out "image: +python:3\.12" && expect_out "^us-a +2 +2"

step "pools resize warm 3: target 3 everywhere, ready within 30s"
fc pools resize warm 3
expect_rc 0 && expect_out "resized to 3"
wait_until 30 pool_ready warm 3 || fail "pool warm not 3/3 ready within 30s after resize"

step "pools get of an unknown pool: pool_not_found, exit 1"
fc pools get no-such-pool
expect_rc 1 && expect_err "^fedctl: pool_not_found: "

# ------------------------------------------------------------------ create
RUN="run$$"
step "create -n 3 --pool warm: three sandboxes, placement summary, final progress line"
fc create -n 3 --pool warm --name batch --label "run=$RUN" --timeout 600
expect_rc 0
expect_out "^ID +NAME +CLUSTER +START"
[ "$(grep -Ec '^[a-z0-9-]+\.[^ ]+ +batch-000[123] +(us-a|eu-b) +warm$' "$OUT")" -eq 3 ] ||
  fail "want 3 lines 'ID batch-000N CLUSTER warm'"
expect_out "^created 3 of 3 sandboxes \(3 warm, 0 cold\)"
# stderr is not a terminal here: one final line instead of a bar.
expect_err "^create: 3/3 sandboxes running after"
mapfile -t IDS < <(awk 'NR > 1 && $2 ~ /^batch-/ { print $1 }' "$OUT")
echo "sandboxes: ${IDS[*]}"
[ "${#IDS[@]}" -eq 3 ] || fatal "could not read 3 sandbox ids from the create output"
SB="${IDS[0]}"

step "create -n 2 with stderr on a terminal: a progress bar counting running sandboxes"
LAST_CMD="fedctl create -n 2 --pool warm --name tty (stderr on a pty)"
python3 - "$FEDCTL" "$OUT" "$ERR" "$RUN" <<'PY'
import os, pty, subprocess, sys, time
fedctl, out, err, run = sys.argv[1:5]
master, slave = pty.openpty()
with open(out, "wb") as fo:
    p = subprocess.Popen([fedctl, "create", "-n", "2", "--pool", "warm", "--name", "tty",
                          "--label", "run=" + run], stdin=subprocess.DEVNULL, stdout=fo,
                         stderr=slave)
os.close(slave)
data = b""
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break  # EIO: the child closed the pty
    if not chunk:
        break
    data += chunk
rc = p.wait(timeout=max(1, deadline - time.monotonic()))
open(err, "wb").write(data)
sys.exit(rc)
PY
RC=$?
expect_rc 0
expect_err $'\r\\[#+\\] 2/2 running, 0 pending'
expect_out "^created 2 of 2 sandboxes"
mapfile -t TTY_IDS < <(awk 'NR > 1 && $2 ~ /^tty-/ { print $1 }' "$OUT")

step "create a cold sandbox on eu-b (--image, --cluster, --region, --json)"
fc --json create --image "$IMAGE" --name cold1 --cluster eu-b --region eu --cpus 0.5 --memory-gb 1 \
  --label "run=$RUN" --env GREETING=hello
expect_rc 0 && expect_json
COLD="$(pyjson "d['sandboxes'][0]['id']")"
[ "$(pyjson "(d['sandboxes'][0]['cluster'], d['sandboxes'][0]['warm'], d['placement']['cold'])")" = "('eu-b', False, 1)" ] ||
  fail "want one cold sandbox on eu-b"

step "create from an unknown pool fails with the API's error, exit 1"
fc create --pool no-such-pool
expect_rc 1 && expect_err "^fedctl: pool_not_found: "

step "create too big for any node: no_capacity with per-cluster reasons, exit 1"
# 20 cpus: within a cluster's total (4 x 8) but on no single node.
fc create --image "$IMAGE" --cpus 20 --name huge
expect_rc 1 && expect_err "^fedctl: no_capacity: "
expect_err "^  us-a: " && expect_err "^  eu-b: "

step "create too big for any cluster: no_capacity at once, exit 1"
# 200 cpus: more than a whole cluster has. The API says placement skips a
# cluster without room for the shape, so the answer must come quickly.
FC_LIMIT=20
fc create --image "$IMAGE" --cpus 200 --name huger
FC_LIMIT=90
expect_rc 1 && expect_err "^fedctl: no_capacity: "

# ------------------------------------------------------------------ ls
step "ls --label: table of this run's 6 sandboxes, all running"
fc ls --label "run=$RUN"
expect_rc 0
expect_out "^ID +NAME +CLUSTER +POOL +WARM +STATE +AGE/EXPIRES"
[ "$(grep -Ec ' running +[0-9]+[smhd][0-9smh]*/[0-9]+[smhd]' "$OUT")" -eq 6 ] ||
  fail "want 6 running rows with AGE/EXPIRES"
grep -Eq "^${SB//./\\.} +batch-000[123] +(us-a|eu-b) +warm +yes +running " "$OUT" ||
  fail "row of $SB does not show pool warm, WARM yes, running"

step "ls --json and filters (--name-prefix, --pool, --cluster)"
fc --json ls --label "run=$RUN" --name-prefix batch-
expect_rc 0 && expect_json
[ "$(pyjson "len(d['sandboxes'])")" = "3" ] || fail "name_prefix=batch- should give 3"
fc --json ls --label "run=$RUN" --cluster eu-b --pool warm
expect_rc 0 && expect_json
[ "$(pyjson "all(s['cluster'] == 'eu-b' and s['pool'] == 'warm' for s in d['sandboxes'])")" = "True" ] ||
  fail "--cluster eu-b --pool warm returned other sandboxes"

# ------------------------------------------------------------------ exec
step "exec ID -- echo hi: prints hi, exit 0"
fc exec "$SB" -- echo hi
expect_rc 0
[ "$(cat "$OUT")" = "hi" ] || fail "stdout is not 'hi'"
[ ! -s "$ERR" ] || fail "stderr not empty"

step "exec without -- (command after the id) works the same"
fc exec "$SB" echo hi there
expect_rc 0
[ "$(cat "$OUT")" = "hi there" ] || fail "stdout is not 'hi there'"

step "exec sh -c 'exit 3': exit 3"
fc exec "$SB" -- sh -c 'exit 3'
expect_rc 3

step "exec keeps stdout and stderr apart"
fc exec "$SB" -- sh -c 'echo to-out; echo to-err >&2; exit 5'
expect_rc 5
[ "$(cat "$OUT")" = "to-out" ] || fail "stdout is not 'to-out'"
[ "$(cat "$ERR")" = "to-err" ] || fail "stderr is not 'to-err'"

step "exec -i passes stdin; --stdin-file too"
printf 'line one\nline two\n' >"$T/stdin.txt"
fc_in "$T/stdin.txt" exec -i "$SB" -- cat
expect_rc 0
cmp -s "$OUT" "$T/stdin.txt" || fail "cat of stdin differs from the input"
fc exec --stdin-file "$T/stdin.txt" "$SB" -- wc -l
expect_rc 0
[ "$(tr -d ' ' <"$OUT")" = "2" ] || fail "wc -l of the stdin file is not 2"

step "exec --env and --workdir"
fc exec --env FOO=bar --env 'SPACED=a b' --workdir /tmp "$SB" -- sh -c 'echo "$FOO|$SPACED"; pwd'
expect_rc 0
[ "$(cat "$OUT")" = $'bar|a b\n/tmp' ] || fail "want 'bar|a b' and '/tmp'"

step "exec of non-UTF-8 output writes the exact bytes (base64 decoded)"
fc exec "$SB" -- sh -c 'printf "\377\376A\000B"'
expect_rc 0
[ "$(od -An -tx1 "$OUT" | tr -d ' \n')" = "fffe410042" ] ||
  fail "stdout bytes are $(od -An -tx1 "$OUT" | tr -d '\n'), want ff fe 41 00 42"

step "exec --timeout 1 of sleep 30: killed, exit 124 with a warning"
start=$SECONDS
fc exec --timeout 1 "$SB" -- sleep 30
expect_rc 124 && expect_err "timed out"
[ $((SECONDS - start)) -lt 20 ] || fail "took $((SECONDS - start))s, want well under 30"

step "exec --json: the API's JSON verbatim, exit code still the command's"
fc --json exec "$SB" -- sh -c 'echo hi; exit 2'
expect_rc 2 && expect_json
[ "$(pyjson "(d['stdout'], d['exit_code'], d['timed_out'])")" = "('hi\\n', 2, False)" ] ||
  fail "want stdout 'hi\\n', exit_code 2, timed_out false"

step "exec in the cold sandbox on eu-b sees its --env"
fc exec "$COLD" -- sh -c 'echo "$GREETING"'
expect_rc 0
[ "$(cat "$OUT")" = "hello" ] || fail "GREETING is not 'hello'"

step "exec in an unknown sandbox: sandbox_not_found, exit 1"
fc exec us-a.no-such-pod -- echo hi
expect_rc 1 && expect_err "^fedctl: sandbox_not_found: "
fc --json exec us-a.no-such-pod -- echo hi
expect_rc 1 && expect_json
[ "$(pyjson "d['error']['code']")" = "sandbox_not_found" ] || fail "--json error body code"

step "a sandbox without the agent: exec still works (buffered), the data-plane commands say agent_required"
fc exec "$SB" -- sh -c 'echo still; exit 4'
expect_rc 4 && expect_out "still"
fc ps "$SB"
expect_rc 1 && expect_err "^fedctl: agent_required: "
fc cp "$SB:/tmp/x" "$T/x"
expect_rc 1 && expect_err "^fedctl: agent_required: "
[ ! -e "$T/x" ] || fail "a failed cp created the local file"
printf 'data' >"$T/up.txt"
fc cp "$T/up.txt" "$SB:/tmp/up.txt"
expect_rc 1 && expect_err "^fedctl: agent_required: "
fc shell "$SB" </dev/null
expect_rc 1 && expect_err "^fedctl: agent_required: "
fc proc start "$SB" -- sleep 1
expect_rc 1 && expect_err "^fedctl: agent_required: "
for sub in logs attach; do
  fc proc "$sub" "$SB" 1
  expect_rc 1 && expect_err "^fedctl: agent_required: "
  grep -q "detached" "$ERR" && fail "proc $sub says it detached from what it never attached to"
done
fc proc stdin --close "$SB" 1
expect_rc 1 && expect_err "^fedctl: agent_required: "

# ------------------------------------------------------------------ terminate
step "terminate ID: terminated, then gone from ls (or terminating) within 20s"
fc terminate "$SB"
expect_rc 0 && expect_out "^terminated ${SB//./\\.}$"
gone() {
  fc --json ls --label "run=$RUN"
  [ "$(pyjson "all(s['id'] != '$SB' or s['state'] in ('terminating',) for s in d['sandboxes'])")" = "True" ]
}
wait_until 20 gone || fail "$SB still listed as live 20s after terminate"

step "terminate of an unknown id: sandbox_not_found, exit 1"
fc terminate us-a.no-such-pod
expect_rc 1 && expect_err "^fedctl: sandbox_not_found: "
fc --json terminate us-a.no-such-pod
expect_rc 1 && expect_json

step "terminate two ids with --json: one JSON array"
fc --json terminate "${IDS[1]}" "${TTY_IDS[0]:-us-a.missing}"
expect_rc 0 && expect_json
[ "$(pyjson "len(d)")" = "2" ] || fail "want an array of 2 answers"

step "terminate --label: the rest of this run, then ls is empty within 20s"
fc terminate --label "run=$RUN"
expect_rc 0 && expect_out "^terminated [0-9]+ sandbox"
none_left() {
  fc --json ls --label "run=$RUN"
  [ "$RC" -eq 0 ] && [ "$(pyjson "sum(s['state'] in ('running', 'pending') for s in d['sandboxes'])")" = "0" ]
}
wait_until 20 none_left || fail "sandboxes of run=$RUN still running 20s after terminate --label"

# ------------------------------------------------------------------ pools delete
step "pools delete warm; then pools get: pool_not_found"
fc pools delete warm
expect_rc 0 && expect_out "pool warm deleted"
fc pools get warm
expect_rc 1 && expect_err "^fedctl: pool_not_found: "

finish
