#!/usr/bin/env bash
# loadtest/bench.sh — one benchmark scenario end to end: start simulated
# clusters (kubesim) and fedrouter in front of them, make a warm pool, run
# build/loadgen, stop everything (also on failure or Ctrl-C).
#
#   loadtest/bench.sh seed|overhead|fanout|spillover|regions|failover|
#                     scale|soak|abuse|agent|replicas|gateway|ports|all
#                     [--smoke] [--build-dir DIR]
#                     [--out DIR] [--plots DIR] [-- extra loadgen arguments]
#
#   --smoke          tiny N and short delays: seconds per scenario (ctest
#                    bench_smoke runs `all --smoke`)
#   --build-dir DIR  where fedrouter, kubesim and loadgen are (default build/)
#   --out DIR        where the JSON reports go (default DIR/bench-results)
#   --plots DIR      after scale and soak, PNG plots of the run's JSON into
#                    DIR (loadtest/plot/plot.sh: scale-rss.png,
#                    scale-create-rate.png, soak-rss-fds.png; installs
#                    gnuplot-nox when missing); a failed plot fails the run
#
# Clusters (docs/benchmarks.md explains the numbers). Every kubesim runs with
# --fast-exec (echo/true/sh -c 'echo ..' answered without forking), TLS and a
# token, 20 nodes of 32 cpu / 128Gi / 110 pods.
#   seed, fanout: 2 clusters in region us with the delays of a real cluster
#                 (KUBE_PROTOCOL.md §7): scheduling 50 ms, image pull 3 s
#                 (once per node and image), container start 1.5 s,
#                 scheduler 100 pods/s, API latency 20 ms — a cold start takes
#                 ~4.5 s (~1.5 s once the node has the image), a warm claim
#                 ~0.1 s (a few API round trips).
#                 Warm pool "bench", 100 pods per cluster (smoke: 5).
#   overhead:     1 cluster, no delays at all, so the router's own cost is
#                 what differs between the two sides.
#   spillover:    3 clusters of 2 nodes x 100 pods (smoke: 1 node x 40 pods),
#                 cold creates (no pool): capacity 600 (smoke 120), filled in
#                 batches of 50 (smoke 10), then 20 (smoke 6) more creates.
#   regions:      us-east (region us) and ap-tokyo (region apac), each with
#                 an in-region API latency of 20 ms, behind a region-aware
#                 router; a second, US-only router has one cluster "us-east"
#                 whose kubesim adds the trans-Pacific round trip (100 ms
#                 more: 120 ms per API request), as an APAC client sees it.
#                 Warm pool of 5 per cluster; 50 cycles per client (smoke 5).
#   failover:     3 clusters (short delays, 5 ms API latency), warm pool of
#                 20 per cluster (smoke 5); 8 (smoke 4) concurrent cycles;
#                 after 5 s (smoke 2 s) the busiest cluster goes down through
#                 its kubesim admin API for 10 s (smoke 4 s), then comes back.
#   scale:        SCALE_CLUSTERS (20; smoke 3) clusters, near-zero delays
#                 (1 ms schedule and start, no pull, unlimited scheduler),
#                 each with room for 1.5 x its share of SCALE_N (100000;
#                 smoke 300) sandboxes in nodes of 500 pods; cold creates in
#                 batches of 1000 (smoke 50), 4 in flight. First the
#                 create-rate curve at 1, 5, 20 clusters (smoke 1, 3) with
#                 SCALE_PER_CLUSTER (1000; smoke 50) sandboxes per cluster.
#                 After terminating them all, the router's RSS must come
#                 back to within max(32 MiB, 15% of what the create added)
#                 of its idle RSS within 60 s (loadgen --settle-s), else the
#                 run fails (not checked in a sanitizer build). SCALE_N=1000000
#                 is the million.
#   abuse:        loadtest/abuse.py: one cluster, two tenants; idle
#                 connections (20,000; smoke 2,000), output floods (10 execs
#                 x 2 x 20 MiB; smoke 2 x 2 x 4 MiB), an exec burst (3,000;
#                 smoke 200) beside a victim tenant, creates past a tenant
#                 limit; router RSS, fds and /healthz latency during each.
#   agent:        loadtest/agent_bench.py: one kubesim running the real
#                 agent in its pods, routers with and without the agent:
#                 exec/s and latency via the agent vs via pods/exec, the
#                 router's added latency, streaming first chunk, 1 GiB
#                 (smoke 16 MiB) file upload/download with the router's RSS,
#                 and exec/s against kubesim's in-process agent.
#   replicas:     loadtest/replicas.py: three routers behind HAProxy
#                 (deploy/haproxy/haproxy.cfg) over two clusters, 16 client
#                 threads of two tenants cycling create -> exec -> terminate;
#                 a rolling restart, a kill -9, the sweep for hidden and
#                 leaked sandboxes, bursts through all three at once against
#                 nearly full clusters. Needs haproxy; not part of `all` (its
#                 short version is the ctest replicas_haproxy).
#   gateway:      loadtest/gateway_bench.py: fedrouter-gateway in-cluster
#                 against one kubesim, the real agent behind it: GET /health
#                 req/s and p50/p99 with wrk (straight to the agent, through
#                 the gateway over TLS and plain), sequential exec p50, 1 GiB
#                 (smoke 32 MiB) up and down through it with its RSS, its
#                 RSS watching 50,000 (smoke 2,000) sandbox pods, and the
#                 whole path through a router (a second kubesim, two routers
#                 on it: with the gateway and through the pod proxy):
#                 gateway_exec_per_s, apiserver_exec_per_s,
#                 apiserver_requests_per_exec, gateway/apiserver/direct_agent
#                 p50. Needs wrk; not part of `all`.
#   ports:        loadtest/ports_bench.py: one kubesim running the real
#                 agent (and the Code Interpreter in code-interpreter pods),
#                 a router with a ports domain: GET of 1 KiB from a server
#                 in a sandbox with wrk straight to the pod, by path and by
#                 host; FILE_MB (1024; smoke 32) down through a port with the
#                 router's RSS; WebSocket opens and echo round trips
#                 straight to the pod, by path and by host, and 1 MiB
#                 messages echoed; runCode('1+1') p50 in one sandbox and
#                 cells/s over 64 (smoke 4) sandboxes. Needs wrk for the
#                 request rates; not part of `all`.
#   soak:         3 clusters, same delays; 8 workers creating batches of 5,
#                 exec in each, terminate each, for SOAK_S seconds (600;
#                 smoke 8), router RSS and fds sampled every 5 s (smoke 1 s);
#                 fd growth allowed 20 (smoke 60).
#
# Exit: 0 every scenario passed (loadgen exit 0), 1 otherwise, 2 usage.
# (Functions here run from traps and through "scenario_$sc"; the delay
# arrays are read through namerefs. shellcheck cannot see either.)
# shellcheck disable=SC2317,SC2034
set -uo pipefail

ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
BUILD="$ROOT/build"
OUT=""
PLOTS=""
SMOKE=0
SCENARIO=""
EXTRA=()

usage() { sed -n '2,/^# (Functions/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    seed|overhead|fanout|spillover|regions|failover|scale|soak|abuse|agent|replicas|gateway|ports|all) SCENARIO="$1" ;;
    --smoke) SMOKE=1 ;;
    --build-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; BUILD="$2"; shift ;;
    --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift ;;
    --plots) [ $# -ge 2 ] || { usage >&2; exit 2; }; PLOTS="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$SCENARIO" ] || { usage >&2; exit 2; }
BUILD="$(cd "$BUILD" 2>/dev/null && pwd)" || { echo "bench.sh: no build dir" >&2; exit 2; }
for b in fedrouter kubesim loadgen; do
  [ -x "$BUILD/$b" ] || { echo "bench.sh: $BUILD/$b is missing (cmake --build $BUILD)" >&2; exit 2; }
done
OUT="${OUT:-$BUILD/bench-results}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)" || exit 2

WORK="$(mktemp -d "${TMPDIR:-/tmp}/fr-bench.XXXXXX")" || exit 1
TOKEN="bench-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
SIM_TOKEN="sim-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
declare -a PIDS=()
URL=""

say() { printf '==> %s\n' "$*"; }

# ---------------------------------------------------------------- processes
alive() { kill -0 "$1" 2>/dev/null; }

# Stops every process this script started: the router first, then the
# clusters (each kills its sandbox processes on SIGTERM).
stop_all() {
  local p i j n="${#PIDS[@]}"
  for ((i = n - 1; i >= 0; i--)); do
    p="${PIDS[$i]}"
    alive "$p" && kill -TERM "$p" 2>/dev/null
    for ((j = 0; j < 150; j++)); do alive "$p" || break; sleep 0.1; done
    alive "$p" && { echo "bench.sh: pid $p ignored SIGTERM; killing it" >&2; kill -KILL "$p" 2>/dev/null; }
    wait "$p" 2>/dev/null
  done
  PIDS=()
}

# shellcheck disable=SC2317 # runs from the trap
on_exit() {
  local rc=$?
  trap - EXIT INT TERM HUP
  stop_all
  rm -rf -- "${WORK:?}"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# start_sim <name> <extra kubesim flags...>; SIM_REGION (default us) and
# SIM_NODES (default 20 nodes of 32 cpu / 128Gi / 110 pods) change the
# cluster. The plain-HTTP admin port goes to $WORK/<name>.admin.
start_sim() {
  local name="$1" i
  local nodes=()
  read -ra nodes <<<"${SIM_NODES:---nodes 20 --node-cpu 32 --node-memory 128Gi --node-pods 110}"
  shift
  mkdir -p "$WORK/$name.wd"
  "$BUILD/kubesim" --name "$name" --region "${SIM_REGION:-us}" --tls --token "$SIM_TOKEN" \
    --write-kubeconfig "$WORK/$name.kubeconfig" --port-file "$WORK/$name.port" \
    --admin-listen 127.0.0.1:0 --admin-port-file "$WORK/$name.admin" \
    --workdir "$WORK/$name.wd" --log-level warn --fast-exec --event-limit 0 \
    "${nodes[@]}" "$@" \
    >"$WORK/$name.log" 2>&1 </dev/null &
  PIDS+=($!)
  for ((i = 0; i < 300; i++)); do
    [ -s "$WORK/$name.port" ] && return 0
    alive "${PIDS[-1]}" || break
    sleep 0.05
  done
  tail -n 20 "$WORK/$name.log" >&2
  echo "bench.sh: kubesim $name did not start" >&2
  return 1
}

# start_router <cluster[=kubesim]...>: the cluster's region is
# ${REGION_OF[cluster]:-us}; ROUTER (default fedrouter) names the files, so
# two routers can run side by side; ROUTER_SPLIT (fill_first or spread)
# writes a policy file with that batch split. Sets URL.
declare -A REGION_OF=()
start_router() {
  local c i line sha r="${ROUTER:-fedrouter}"
  line=""
  sha="$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
  {
    echo "listen = \"127.0.0.1:0\";"
    echo "region = \"us\";"
    echo "limits = { max_batch = 5000; };"
    if [ -n "${ROUTER_SPLIT:-}" ]; then
      printf 'split = "%s";\n' "$ROUTER_SPLIT" >"$WORK/$r.policy"
      echo "policy = \"$r.policy\";"
    fi
    # The benchmark's one tenant: its pools and concurrency are what is
    # measured, so no tenant limits beyond the router's own.
    echo "tenants = ( { name = \"bench\"; token_sha256 = \"$sha\"; max_pool_replicas = 0;"
    echo "              max_requests_in_flight = 1000000; max_concurrent_execs = 1000000; } );"
    echo "clusters = ("
    local sep=""
    for c in "$@"; do
      printf '%s  { name = "%s"; region = "%s"; kubeconfig = "%s.kubeconfig"; }' "$sep" "${c%%=*}" \
        "${REGION_OF[${c%%=*}]:-us}" "${c#*=}"
      sep=$',\n'
    done
    printf '\n);\n'
  } >"$WORK/$r.conf"
  "$BUILD/fedrouter" --config "$WORK/$r.conf" >"$WORK/$r.out" 2>"$WORK/$r.log" </dev/null &
  PIDS+=($!)
  for ((i = 0; i < 300; i++)); do
    line="$(grep -m1 '^fedrouter listening on ' "$WORK/$r.out" 2>/dev/null)"
    [ -n "$line" ] && break
    alive "${PIDS[-1]}" || break
    sleep 0.05
  done
  if [ -z "$line" ]; then
    tail -n 20 "$WORK/$r.log" >&2
    echo "bench.sh: fedrouter did not start" >&2
    return 1
  fi
  URL="${line#fedrouter listening on }"
  for ((i = 0; i < 600; i++)); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/readyz")" = 200 ] && return 0
    sleep 0.1
  done
  echo "bench.sh: fedrouter not ready after 60 s" >&2
  return 1
}

api() { # api METHOD PATH [JSON] -> body on stdout, fails on HTTP >= 400
  local args=(-sS --fail-with-body --max-time 60 -X "$1" -H "Authorization: Bearer $TOKEN")
  [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
  curl "${args[@]}" "$URL$2"
}

# make_pool <replicas per cluster> <number of clusters>: creates pool
# "bench" and waits until every cluster has it full (5 minutes at most).
make_pool() {
  local replicas="$1" nclusters="$2" i body
  api POST /v1/pools "{\"name\":\"bench\",\"image\":\"python:3.12\",\"cpus\":1,\"memory_gb\":2,\"replicas\":$replicas}" >/dev/null ||
    { echo "bench.sh: could not create the pool" >&2; return 1; }
  for ((i = 0; i < 1500; i++)); do
    body="$(api GET /v1/pools/bench 2>/dev/null)"
    if printf '%s' "$body" | python3 -c '
import json, sys
d = json.load(sys.stdin)
cs = d["clusters"]
sys.exit(0 if len(cs) == int(sys.argv[1]) and all(c["ready"] >= c["target"] for c in cs) else 1)' "$nclusters" 2>/dev/null; then
      say "pool bench warm: $replicas per cluster x $nclusters (after $((i / 5)) s)"
      return 0
    fi
    sleep 0.2
  done
  echo "bench.sh: pool not warm after 300 s: $body" >&2
  return 1
}

# ---------------------------------------------------------------- scenarios
REALISTIC=(--schedule-ms 50 --image-pull-ms 3000 --start-ms 1500 --scheduler-qps 100 --api-latency-ms 20)
SMOKE_DELAYS=(--schedule-ms 10 --image-pull-ms 200 --start-ms 100 --scheduler-qps 100)

RAN_JSON="" # the report of the scenario that ran last (--plots)
run_loadgen() { # run_loadgen <scenario> args...
  local sc="$1"
  shift
  RAN_JSON="$OUT/$sc.json"
  rm -f -- "$RAN_JSON"
  say "build/loadgen $sc $* ${EXTRA[*]}"
  "$BUILD/loadgen" "$sc" --url "$URL" --token "$TOKEN" --json-out "$OUT/$sc.json" "$@" "${EXTRA[@]}"
  local rc=$?
  say "report: $OUT/$sc.json"
  return "$rc"
}

federation() { # federation <delays array name> <clusters>
  local -n delays="$1"
  local n="$2" c names=()
  for ((c = 1; c <= n; c++)); do
    start_sim "c$c" "${delays[@]}" || return 1
    names+=("c$c")
  done
  start_router "${names[@]}" || return 1
  say "$n cluster(s) (${delays[*]}) behind $URL"
}

scenario_seed() {
  local delays=REALISTIC pool=100 n=200
  [ "$SMOKE" = 1 ] && { delays=SMOKE_DELAYS; pool=5; n=10; }
  federation "$delays" 2 && make_pool "$pool" 2 && run_loadgen seed --pool bench -n "$n" -c 10
}

scenario_overhead() {
  local none=() args=(--levels '1,1000' --duration 10)
  [ "$SMOKE" = 1 ] && args=(--levels '1,20' -n 50 --warmup 10)
  federation none 1 && make_pool 2 1 &&
    run_loadgen overhead --pool bench --direct-kubeconfig "$WORK/c1.kubeconfig" "${args[@]}"
}

scenario_fanout() {
  local delays=REALISTIC pool=100 n=1000 batch=100
  [ "$SMOKE" = 1 ] && { delays=SMOKE_DELAYS; pool=5; n=20; batch=5; }
  federation "$delays" 2 && make_pool "$pool" 2 && run_loadgen fanout --pool bench -n "$n" --batch "$batch" -c 4
}

scenario_spillover() {
  local delays=REALISTIC batch=50 cap=600 beyond=20
  local SIM_NODES="--nodes 2 --node-cpu 256 --node-memory 1024Gi --node-pods 100"
  if [ "$SMOKE" = 1 ]; then
    delays=SMOKE_DELAYS batch=10 cap=120 beyond=6
    SIM_NODES="--nodes 1 --node-cpu 64 --node-memory 256Gi --node-pods 40"
  fi
  federation "$delays" 3 &&
    run_loadgen spillover --image python:3.12 --capacity "$cap" --batch "$batch" --beyond "$beyond"
}

# In-region API latency and the trans-Pacific round trip added on top of it
# for the US-only deployment (docs/benchmarks.md explains the choice).
REGION_API_MS=20
TRANSPACIFIC_MS=100
scenario_regions() {
  local n=50 base=(--schedule-ms 10 --image-pull-ms 200 --start-ms 100 --scheduler-qps 100) url_aware
  [ "$SMOKE" = 1 ] && n=5
  SIM_REGION=us start_sim us-east "${base[@]}" --api-latency-ms "$REGION_API_MS" &&
    SIM_REGION=apac start_sim ap-tokyo "${base[@]}" --api-latency-ms "$REGION_API_MS" &&
    SIM_REGION=us start_sim us-east-far "${base[@]}" --api-latency-ms $((REGION_API_MS + TRANSPACIFIC_MS)) ||
    return 1
  REGION_OF=([us-east]=us [ap-tokyo]=apac)
  ROUTER=aware start_router us-east=us-east ap-tokyo=ap-tokyo && make_pool 5 2 || return 1
  url_aware="$URL"
  ROUTER=usonly start_router us-east=us-east-far && make_pool 5 1 || return 1
  say "region-aware router $url_aware (us-east, ap-tokyo); US-only router $URL (us-east +${TRANSPACIFIC_MS} ms)"
  local compare="$URL"
  URL="$url_aware"
  run_loadgen regions --pool bench -n "$n" -c 1 --compare-url "$compare" \
    --us-cluster us-east --apac-cluster ap-tokyo
}

scenario_failover() {
  local fo_delays=(--schedule-ms 10 --image-pull-ms 200 --start-ms 100 --scheduler-qps 100 --api-latency-ms 5)
  local pool=20 c=8 at=5 down=10 admins=() i
  [ "$SMOKE" = 1 ] && { pool=5 c=4 at=2 down=4; }
  federation fo_delays 3 && make_pool "$pool" 3 || return 1
  for i in 1 2 3; do admins+=(--sim-admin "c$i=http://127.0.0.1:$(cat "$WORK/c$i.admin")"); done
  run_loadgen failover --pool bench -c "$c" --fault-at "$at" --down "$down" --held 5 \
    --sim-token "$SIM_TOKEN" "${admins[@]}"
}

# SCALE_QPS (default 0 = unlimited) sets every cluster's scheduler rate,
# e.g. 100 to see the create-rate curve with real clusters' limit.
FAST_DELAYS=(--schedule-ms 1 --image-pull-ms 0 --start-ms 1 --scheduler-qps "${SCALE_QPS:-0}")

# nodes_for <sandboxes per cluster>: kubesim node flags with room for 1.5x.
nodes_for() {
  local want=$(($1 * 3 / 2 + 100))
  echo "--nodes $(((want + 499) / 500)) --node-cpu 1000 --node-memory 4000Gi --node-pods 500"
}

scenario_scale() {
  local ncl="${SCALE_CLUSTERS:-20}" n="${SCALE_N:-100000}" per="${SCALE_PER_CLUSTER:-1000}"
  local batch=1000 curve="1,5,20" fresh=10 share
  if [ "$SMOKE" = 1 ]; then
    ncl="${SCALE_CLUSTERS:-3}" n="${SCALE_N:-300}" per="${SCALE_PER_CLUSTER:-50}" batch=50 curve="1,3" fresh=3
  fi
  share=$(((n + ncl - 1) / ncl))
  [ "$per" -gt "$share" ] && share="$per"
  # With a real pod rate per cluster, batches are spread over the clusters
  # (the built-in policy fills one cluster first); SCALE_SPLIT overrides.
  local ROUTER_SPLIT="${SCALE_SPLIT:-}"
  [ "${SCALE_QPS:-0}" != 0 ] && ROUTER_SPLIT="${SCALE_SPLIT:-spread}"
  local SIM_NODES
  SIM_NODES="$(nodes_for "$share")"
  federation FAST_DELAYS "$ncl" || return 1
  # A request may take long at a million (the terminate of all by label):
  # 3 ms a sandbox, 10 minutes at least.
  local tmo=$((n * 3 > 600000 ? n * 3 : 600000))
  # The memory-back check measures glibc's malloc giving pages back; a
  # sanitizer build's allocator keeps freed memory in quarantine, so there
  # it would fail for nothing: not checked.
  local settle=()
  grep -q '^FR_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null && settle=(--settle-s 0)
  run_loadgen scale --image python:3.12 -n "$n" --batch "$batch" -c 4 --curve "$curve" \
    --curve-per-cluster "$per" --fresh-samples "$fresh" --router-pid "${PIDS[-1]}" --timeout-ms "$tmo" \
    "${settle[@]}"
}

scenario_soak() {
  local dur="${SOAK_S:-600}" sample=5 slack=20
  # An 8 s run cannot tell a leak from the exec connections' swing; the
  # smoke only keeps the code alive.
  [ "$SMOKE" = 1 ] && { dur="${SOAK_S:-8}" sample=1 slack=60; }
  local SIM_NODES
  SIM_NODES="$(nodes_for 200)"
  federation FAST_DELAYS 3 || return 1
  run_loadgen soak --image python:3.12 -c 8 --batch 5 --duration "$dur" --sample-s "$sample" --fd-slack "$slack" \
    --router-pid "${PIDS[-1]}"
}

# py_scenario <name> <script>: a scenario run by a Python script of
# loadtest/ that starts its own clusters and routers.
py_scenario() {
  local smoke=()
  [ "$SMOKE" = 1 ] && smoke=(--smoke)
  RAN_JSON="$OUT/$1.json"
  say "loadtest/$2 ${smoke[*]}"
  python3 "$ROOT/loadtest/$2" --build-dir "$BUILD" --json-out "$RAN_JSON" "${smoke[@]}"
}

scenario_abuse() { py_scenario abuse abuse.py; }
scenario_agent() { py_scenario agent agent_bench.py; }
scenario_replicas() { py_scenario replicas replicas.py; }
scenario_ports() { py_scenario ports ports_bench.py; }
scenario_gateway() {
  local b
  for b in fedrouter-gateway fedrouter-agent; do
    [ -x "$BUILD/$b" ] || { echo "bench.sh: $BUILD/$b is missing (cmake --build $BUILD --target $b)" >&2; return 1; }
  done
  py_scenario gateway gateway_bench.py
}

ulimit -n 65536 2>/dev/null || true
rc=0
if [ "$SCENARIO" = all ]; then
  list=(seed overhead fanout spillover regions failover scale soak abuse agent)
else
  list=("$SCENARIO")
fi
for sc in "${list[@]}"; do
  say "scenario $sc$([ "$SMOKE" = 1 ] && echo ' (smoke)')"
  if ! "scenario_$sc"; then
    echo "bench.sh: scenario $sc FAILED; the logs:" >&2
    for f in "$WORK"/*.log; do echo "--- $f"; tail -n 15 "$f"; done >&2
    rc=1
  fi
  stop_all
  rm -rf -- "${WORK:?}"/*
  if [ -n "$PLOTS" ] && [ -s "$RAN_JSON" ] && { [ "$sc" = scale ] || [ "$sc" = soak ]; }; then
    say "plots of $RAN_JSON into $PLOTS"
    "$ROOT/loadtest/plot/plot.sh" --out "$PLOTS" "$RAN_JSON" || { echo "bench.sh: plots of $sc FAILED" >&2; rc=1; }
  fi
  RAN_JSON=""
done
[ "$rc" = 0 ] && say "all passed: ${list[*]}"
exit "$rc"
