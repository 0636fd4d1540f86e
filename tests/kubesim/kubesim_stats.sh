#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubesim_stats.sh — black-box checks of kubesim's API request counters
# (GET|DELETE /_sim/stats, GET /metrics) with curl and kubectl: after a
# reset, exactly the requests made are counted, by verb (GET, LIST, WATCH,
# POST, PATCH, DELETE, CONNECT), group, resource and subresource as they
# arrive, and with their status code as they complete; kubectl exec costs
# one GET of the pod and one CONNECT pods/exec; the pod proxy is CONNECT
# pods/proxy; the admin surface is not counted; /metrics on the API port
# (behind the token) and on the admin port give the same counters as
# Prometheus text.
#
# Usage: kubesim_stats.sh PATH/TO/kubesim
# Loopback only, every wait bounded, everything killed and removed at exit.
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
AGENT="$HERE/fedrouter-agent"

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}" curl kubectl python3

TOKEN="stats-token-$$"
NS=/api/v1/namespaces/default

req() { # req METHOD PATH [BODY [CONTENT-TYPE]] — the API, with the token
  local args=(-sk --max-time 20 -o "$OUT" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN")
  [ -n "${3:-}" ] && args+=(-H "Content-Type: ${4:-application/json}" --data-binary "$3")
  LAST_CMD="curl -X $1 $2"
  RC=$(curl "${args[@]}" "$BASE$2" 2>"$ERR")
}

admin() { # admin METHOD PATH — the admin port
  LAST_CMD="curl -X $1 (admin) $2"
  RC=$(curl -s --max-time 20 -o "$OUT" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $TOKEN" \
    "http://127.0.0.1:$(cat "$T/admin-port")$2" 2>"$ERR")
}

# stats_is PY — the Python expression PY (over c(verb, resource,
# subresource[, code, group]) = the count) holds for /_sim/stats.
stats_is() {
  admin GET /_sim/stats
  expect_rc 200 "GET /_sim/stats" || return 1
  if ! python3 - "$OUT" "$1" >"$T/py" 2>&1 <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
def c(verb, resource, sub="", code=None, group=""):
    rows = d["requests"] if code is None else d["responses"]
    return sum(r["count"] for r in rows if r["verb"] == verb and r["resource"] == resource and
               r["subresource"] == sub and r["group"] == group and (code is None or r["code"] == code))
total = d["requests_total"]
if not eval("(" + sys.argv[2] + ")"):
    print("requests:", [(r["verb"], r["resource"], r["subresource"], r["count"]) for r in d["requests"]])
    print("responses:", [(r["verb"], r["resource"], r["subresource"], r["code"], r["count"]) for r in d["responses"]])
    sys.exit(1)
PY
    fail "/_sim/stats: not $1: $(cat "$T/py")"
  fi
}

start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name stats --nodes 1 --agent-binary "$AGENT" \
  --admin-listen 127.0.0.1:0 --admin-port-file "$T/admin-port"
BASE="$(kubeconfig_server)"
export KUBECONFIG="$KCFG"

step "DELETE /_sim/stats starts the counters afresh; the admin surface is not counted"
admin DELETE /_sim/stats
expect_rc 200 "reset"
admin GET /_sim/state
stats_is 'total == 0 and d["requests"] == [] and d["responses"] == []'

step "each API request is counted by verb, resource and subresource, and by its status code"
POD='{"apiVersion":"v1","kind":"Pod","metadata":{"name":"ag"},"spec":{"containers":[{"name":"c","image":"python:3.12","command":["/opt/fedrouter/fedrouter-agent"],"ports":[{"containerPort":49983}]}]}}'
req POST "$NS/pods" "$POD"
expect_rc 201 "create"
req GET "$NS/pods/ag"
req GET "$NS/pods/ag"
req GET "$NS/pods/nosuch"
expect_rc 404 "GET nosuch"
req GET "$NS/pods"
req GET "/apis/apps/v1/namespaces/default/deployments"
req GET "$NS/pods?watch=1&timeoutSeconds=1"
expect_rc 200 "watch"
req PATCH "$NS/pods/ag" '{"metadata":{"labels":{"x":"y"}}}' application/merge-patch+json
expect_rc 200 "patch"
req GET "$NS/pods/ag/status"
req GET /version
LAST_CMD="curl $NS/pods (no token)"
RC=$(curl -sk --max-time 20 -o "$OUT" -w '%{http_code}' "$BASE$NS/pods")
expect_rc 401 "no token"
stats_is 'c("POST", "pods") == 1 and c("POST", "pods", code=201) == 1
  and c("GET", "pods") == 3 and c("GET", "pods", code=200) == 2 and c("GET", "pods", code=404) == 1
  and c("LIST", "pods") == 2 and c("LIST", "pods", code=401) == 1 and c("LIST", "pods", code=200) == 1
  and c("LIST", "deployments", group="apps") == 1
  and c("WATCH", "pods") == 1 and c("WATCH", "pods", code=200) == 1
  and c("PATCH", "pods") == 1 and c("GET", "pods", "status") == 1
  and c("GET", "") == 1 and total == 11'

step "kubectl exec costs one GET of the pod and one CONNECT pods/exec (101)"
k wait --for=condition=Ready pod/ag --timeout=30s
expect_rc 0 "ag Ready"
admin DELETE /_sim/stats
for i in 1 2 3; do
  k exec ag -- echo "$i"
  expect_rc 0 "exec $i"
done
stats_is 'c("CONNECT", "pods", "exec") == 3 and c("CONNECT", "pods", "exec", code=101) == 3
  and c("GET", "pods") == 3 and c("POST", "pods", "exec") == 0'

step "the pod proxy is CONNECT pods/proxy; DELETE and DELETECOLLECTION apart"
admin DELETE /_sim/stats
req GET "$NS/pods/ag:49983/proxy/health"
expect_rc 204 "proxy /health"
req DELETE "$NS/pods?labelSelector=none%3Dsuch"
req DELETE "$NS/pods/ag"
stats_is 'c("CONNECT", "pods", "proxy", code=204) == 1 and c("DELETECOLLECTION", "pods") == 1
  and c("DELETE", "pods", code=200) == 1 and total == 3'

step "GET /metrics (API port with the token, admin port) gives the counters as Prometheus text"
req GET /metrics
expect_rc 200 "/metrics on the API port"
grep -qx 'apiserver_request_total{code="204",group="",resource="pods",subresource="proxy",verb="CONNECT",version="v1"} 1' "$OUT" ||
  fail "no apiserver_request_total line for the proxied request: $(head -c 1500 "$OUT")"
grep -qx '# TYPE apiserver_request_total counter' "$OUT" || fail "no TYPE line"
admin GET /metrics
expect_rc 200 "/metrics on the admin port"
grep -qx 'kubesim_api_requests_received_total{group="",resource="pods",subresource="",verb="DELETECOLLECTION",version="v1"} 1' "$OUT" ||
  fail "no kubesim_api_requests_received_total line: $(head -c 1500 "$OUT")"
LAST_CMD="curl /metrics (no token)"
RC=$(curl -sk --max-time 20 -o "$OUT" -w '%{http_code}' "$BASE/metrics")
expect_rc 401 "/metrics without the token"

finish
