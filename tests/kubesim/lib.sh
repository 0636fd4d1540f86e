# tests/kubesim/lib.sh — shared helpers for the kubesim black-box scripts.
# Sourced (not executed) by kubectl_fidelity.sh, kubectl_drain.sh,
# kubectl_logs.sh, kubesim_api.sh and kubesim_proxy.sh.
#
# Provides: lib_require (the kubesim argument and the tools needed), a temp
# dir $T removed on every exit path, start_kubesim (own
# session, killed with its children by the EXIT trap), named steps that keep
# going after a failure, fail() that shows the last command's output and the
# kubesim log tail, and finish() that prints the summary and sets the exit code.
# shellcheck shell=bash

T="$(mktemp -d "${TMPDIR:-/tmp}/kubesim-blackbox.XXXXXX")"
LOG="$T/kubesim.log"
KCFG="$T/kubeconfig"
KS_PID=""
KS_SID=""          # kubesim's session id (= its pid); kept after it exits
BG_PIDS=()

# shellcheck disable=SC2317  # invoked by the EXIT trap
lib_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p _
  for p in "${BG_PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null
  done
  if [ -n "$KS_PID" ]; then
    # kubesim runs in its own session (setsid): its exec children go too.
    kill -TERM -- "-$KS_PID" 2>/dev/null || kill -TERM "$KS_PID" 2>/dev/null
    for _ in $(seq 1 50); do
      kill -0 "$KS_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$KS_PID" 2>/dev/null; then
      echo "warning: kubesim did not exit within 5s of SIGTERM; sending SIGKILL" >&2
      kill -KILL -- "-$KS_PID" 2>/dev/null || kill -KILL "$KS_PID" 2>/dev/null
    fi
    wait "$KS_PID" 2>/dev/null
  fi
  # Whatever kubesim left in its session (exec'd commands) goes too.
  # (They may sit in process groups of their own, so go by session id.)
  if [ -n "$KS_SID" ]; then
    pkill -KILL -s "$KS_SID" 2>/dev/null
  fi
  for p in "${BG_PIDS[@]}"; do
    wait "$p" 2>/dev/null
  done
  if [ "${KEEP_TMP:-0}" = "1" ]; then
    echo "kept $T (KEEP_TMP=1)"
  else
    rm -rf "$T"
  fi
  exit "$rc"
}
trap lib_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# lib_require KUBESIM_PATH TOOL... — the kubesim binary named on the
# command line (sets $KUBESIM) and the tools the script needs on PATH (sets
# $KUBECTL); exits 1 with what is missing.
lib_require() {
  KUBESIM="$1"
  shift
  if [ -z "$KUBESIM" ] || [ ! -x "$KUBESIM" ]; then
    echo "FAIL: usage: $0 PATH/TO/kubesim (got '${KUBESIM}', not an executable)" >&2
    exit 1
  fi
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 && continue
    if [ "$tool" = kubectl ]; then
      echo "FAIL: kubectl not found on PATH; this test needs the real kubectl v1.32 (preinstalled on every machine)" >&2
    else
      echo "FAIL: $tool not found on PATH" >&2
    fi
    exit 1
  done
  # shellcheck disable=SC2034  # read by the scripts that source this file
  KUBECTL="$(command -v kubectl || true)"
}

# ------------------------------------------------------------------ kubectl
# k ARGS... — the real kubectl against kubesim ($KCFG, a discovery cache in
# $T); stdout -> $OUT, stderr -> $ERR, exit code -> $RC. Bounded by
# K_LIMIT seconds (default 60) on top of --request-timeout.
k() {
  LAST_CMD="kubectl $*"
  timeout --kill-after=5 "${K_LIMIT:-60}" "${KUBECTL:-kubectl}" --kubeconfig "$KCFG" \
    --cache-dir "$T/kcache" --request-timeout=20s "$@" \
    </dev/null >"$OUT" 2>"$ERR"
  RC=$?
}

# k_in FILE ARGS... — like k, with FILE on stdin.
k_in() {
  local in="$1"
  shift
  LAST_CMD="kubectl $* < $(basename "$in")"
  timeout --kill-after=5 "${K_LIMIT:-60}" "${KUBECTL:-kubectl}" --kubeconfig "$KCFG" \
    --cache-dir "$T/kcache" --request-timeout=20s "$@" \
    <"$in" >"$OUT" 2>"$ERR"
  RC=$?
}

# pod_on NAME NODE [TOLERATIONS-JSON] [EXTRA-SPEC-JSON] — creates a busybox
# pod running sleep, labelled app=$APP (else $POD_APP), bound to NODE by
# spec.nodeName ("" = left to the scheduler); EXTRA is more spec fields.
pod_on() {
  local spec='{"containers":[{"name":"main","image":"busybox","command":["sleep","3600"]}]'
  [ -n "$2" ] && spec="$spec,\"nodeName\":\"$2\""
  [ -n "${3:-}" ] && spec="$spec,\"tolerations\":$3"
  [ -n "${4:-}" ] && spec="$spec,$4"
  spec="$spec}"
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"app":"%s"}},"spec":%s}\n' \
    "$1" "${APP:-${POD_APP:-kubesim}}" "$spec" >"$T/$1.json"
  k create -f "$T/$1.json"
  expect_rc 0 "create pod $1"
}

# expect_rc N WHAT — the last command's $RC (exit code or HTTP status) must
# be N; fails the step with WHAT otherwise.
expect_rc() {
  if [ "$RC" != "$1" ]; then
    fail "$2: expected exit $1, got $RC"
    return 1
  fi
}

# out_is EXPECTED WHAT — $OUT must hold EXPECTED (plus a final newline).
out_is() {
  local got
  got="$(cat "$OUT")"
  if [ "$got" != "$1" ]; then
    fail "$2: expected '$1', got '$got'"
    return 1
  fi
}

# ------------------------------------------------------------------ steps
STEP=""
STEPS_RUN=0
STEP_FAILED=0
FAILED_STEPS=()
OUT="$T/out"       # stdout / response body of the last command
ERR="$T/err"       # stderr / response headers of the last command
RC=0               # exit code (or HTTP status) of the last command
LAST_CMD=""
SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
OUT_LABEL="stdout"
ERR_LABEL="stderr"

step() {
  end_step
  STEP="$*"
  STEPS_RUN=$((STEPS_RUN + 1))
  STEP_FAILED=0
  printf '\n--- step %d: %s\n' "$STEPS_RUN" "$STEP"
}

end_step() {
  [ -n "$STEP" ] || return 0
  if [ "$STEP_FAILED" -eq 0 ]; then
    echo "ok: $STEP"
  fi
  STEP=""
}

# fail MESSAGE — mark the current step failed; show what the last command said.
fail() {
  if [ "$STEP_FAILED" -eq 0 ]; then
    FAILED_STEPS+=("$STEP")
  fi
  STEP_FAILED=1
  {
    echo "FAIL [$STEP]: $*"
    [ -n "$LAST_CMD" ] && echo "  last command: $LAST_CMD (exit/status $RC)"
    echo "  ---- $OUT_LABEL ----"
    head -c 4000 "$OUT" 2>/dev/null | sed 's/^/  | /'
    echo
    echo "  ---- $ERR_LABEL ----"
    head -c 2000 "$ERR" 2>/dev/null | sed 's/^/  | /'
    echo
    if grep -Eq "$SAN_RE" "$LOG" 2>/dev/null; then
      echo "  ---- kubesim log: sanitizer report ----"
      grep -E -m 1 -A 45 "$SAN_RE" "$LOG" | sed 's/^/  | /'
    else
      echo "  ---- kubesim log (last 25 lines) ----"
      tail -n 25 "$LOG" 2>/dev/null | sed 's/^/  | /'
    fi
  } >&2
  # A dead simulator would make every later step fail the same way: stop here.
  if [ -n "$KS_PID" ] && ! kill -0 "$KS_PID" 2>/dev/null; then
    local rc
    wait "$KS_PID" 2>/dev/null
    rc=$?
    KS_PID=""
    FAILED_STEPS+=("kubesim died during the run (exit status $rc)")
    echo "FATAL: kubesim is no longer running (exit status $rc); stopping" >&2
    finish
  fi
}

# fatal MESSAGE — fail and stop (for when nothing after this can work).
fatal() {
  fail "$@"
  echo "FATAL: cannot continue" >&2
  finish
}

# stop_kubesim_step — SIGTERM kubesim and require a clean exit: status 0
# within 10 s and no sanitizer report in its log (this is what catches leaks
# and UB in the ASan build, where kubesim runs the whole test).
stop_kubesim_step() {
  [ -n "$KS_PID" ] || return 0
  local pid="$KS_PID" _ rc
  step "kubesim exits cleanly on SIGTERM (status 0, no sanitizer reports)"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  LAST_CMD="kill -TERM kubesim"
  : >"$OUT"
  : >"$ERR"
  if kill -0 "$pid" 2>/dev/null; then
    RC=-1
    fail "kubesim still running 10s after SIGTERM"
    return
  fi
  wait "$pid" 2>/dev/null
  rc=$?
  RC=$rc
  KS_PID=""
  # Its exec children (same session) must not outlive it.
  if pgrep -s "$pid" >"$OUT" 2>/dev/null; then
    fail "processes left in kubesim's session after it exited: $(tr '\n' ' ' <"$OUT")"
  fi
  [ "$rc" -eq 0 ] || fail "kubesim exit status $rc after SIGTERM, want 0"
  if grep -Eq "$SAN_RE" "$LOG"; then
    fail "sanitizer report in the kubesim log"
  fi
}

# finish — stop kubesim (checking it exits cleanly), print the summary, and
# exit 0 if every step passed, else 1.
finish() {
  stop_kubesim_step
  end_step
  local name="${0##*/}" s
  echo
  if [ "${#FAILED_STEPS[@]}" -eq 0 ]; then
    echo "$name: all $STEPS_RUN steps passed"
    exit 0
  fi
  echo "$name: ${#FAILED_STEPS[@]} of $STEPS_RUN steps FAILED:"
  for s in "${FAILED_STEPS[@]}"; do
    echo "  - $s"
  done
  exit 1
}

# ------------------------------------------------------------------ kubesim
# start_kubesim BINARY ARGS... — start kubesim on loopback with a port file
# and a kubeconfig in $T, wait (20 s max) until both exist. Sets KS_PID.
# $T (tokens, kubeconfig) and the checkout are hidden from the pods.
start_kubesim() {
  local bin="$1" checkout
  shift
  checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  mkdir -p "$T/work"
  echo "kubesim: $bin $*"
  setsid "$bin" --listen 127.0.0.1:0 --port-file "$T/port" \
    --write-kubeconfig "$KCFG" --workdir "$T/work" --hide "$T" --hide "$checkout" "$@" \
    </dev/null >"$LOG" 2>&1 &
  KS_PID=$!
  KS_SID=$KS_PID
  step "kubesim starts and writes its port file and kubeconfig"
  local _
  for _ in $(seq 1 200); do
    [ -s "$T/port" ] && [ -s "$KCFG" ] && break
    kill -0 "$KS_PID" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$KS_PID" 2>/dev/null; then
    wait "$KS_PID" 2>/dev/null
    local rc=$?
    KS_PID=""
    fatal "kubesim exited during startup (exit $rc)"
  fi
  if ! [ -s "$T/port" ] || ! [ -s "$KCFG" ]; then
    fatal "no port file ($T/port) or kubeconfig ($KCFG) after 20s"
  fi
  echo "kubesim pid $KS_PID, port file: $(head -c 100 "$T/port")"
}

# kubeconfig_server — the server URL written into $KCFG.
kubeconfig_server() {
  awk '$1 == "server:" { gsub(/["\047]/, "", $2); print $2; exit }' "$KCFG"
}

# wait_until SECONDS CMD... — run CMD every 0.2 s until it succeeds; 1 on timeout.
wait_until() {
  local limit="$1"
  shift
  local end=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$end" ]; do
    "$@" && return 0
    sleep 0.2
  done
  "$@"
}
