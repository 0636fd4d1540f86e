#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubesim_api.sh — black-box checks of kubesim's Kubernetes REST API with curl:
# auth, Status error bodies, pagination, watches (incl. 410 Expired), label and
# field selectors, generateName, and the ReplicaSet controller.
#
# Usage: kubesim_api.sh PATH/TO/kubesim
# All steps run; each failure shows the response body and headers and the
# kubesim log tail; exit 1 if any step failed. Loopback only, every wait
# bounded, kubesim killed and the temp dir removed on every exit path.
# Env: KEEP_TMP=1 keeps the temp dir.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
lib_require "${1:-}" curl python3

TOKEN="api-token-$$"
OUT_LABEL="response body"
ERR_LABEL="response headers / curl errors"
NS=/api/v1/namespaces/default
RSS=/apis/apps/v1/namespaces/default/replicasets

# ------------------------------------------------------------------ helpers
# http CURL-ARGS... — curl with body -> $OUT, headers (+ curl's own errors)
# -> $ERR, HTTP status -> $RC (000 when the connection failed).
http() {
  RC=$(curl -sk --max-time 20 -o "$OUT" -D "$ERR" -w '%{http_code}' "$@" 2>"$T/curl.err")
  cat "$T/curl.err" >>"$ERR"
  [ -n "$RC" ] || RC=000
}

# req METHOD PATH [BODY [CONTENT-TYPE]] — body -> $OUT, headers -> $ERR,
# HTTP status -> $RC (000 when the connection failed).
req() {
  local method="$1" path="$2" body="${3:-}" ctype="${4:-application/json}"
  local args=(-X "$method" -H "Authorization: Bearer $TOKEN" -H "Accept: application/json")
  [ -n "$body" ] && args+=(-H "Content-Type: $ctype" --data-binary "$body")
  LAST_CMD="curl -X $method $path${body:+ (body ${body:0:200})}"
  http "${args[@]}" "$BASE$path"
}

# get_q PATH KEY=VALUE... — GET with URL-encoded query parameters.
get_q() {
  local path="$1"
  shift
  local args=(-G -H "Authorization: Bearer $TOKEN" -H "Accept: application/json")
  local kv
  for kv in "$@"; do
    args+=(--data-urlencode "$kv")
  done
  LAST_CMD="curl -G $path $*"
  http "${args[@]}" "$BASE$path"
}

expect_status() { # expect_status CODE what
  if [ "$RC" != "$1" ]; then
    fail "$2: expected HTTP $1, got $RC"
    return 1
  fi
}

# pycheck WHAT CODE — run python CODE with `d` = the JSON in $OUT (and the
# positional args after CODE in `args`); an AssertionError message fails the step.
pycheck() {
  local what="$1" code="$2"
  shift 2
  if ! python3 - "$OUT" "$@" >"$T/py" 2>&1 <<PY
import json, sys
args = sys.argv[2:]
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("response is not JSON: %s" % e)
    sys.exit(1)
try:
$(printf '%s\n' "$code" | sed 's/^/    /')
except AssertionError as e:
    print(e)
    sys.exit(1)
except (KeyError, IndexError, TypeError) as e:
    print("missing field: %r" % (e,))
    sys.exit(1)
PY
  then
    fail "$what: $(cat "$T/py")"
    return 1
  fi
}

# jval EXPR — print a python expression over `d` (the JSON in $OUT).
jval() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print("" if v is None else v)' \
    "$OUT" "$1" 2>/dev/null
}

# pod_json NAME LABELS_JSON — a small busybox pod.
pod_json() {
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":%s},"spec":{"containers":[{"name":"main","image":"busybox","command":["sleep","3600"],"resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}' "$1" "$2"
}

create_pod() { # create_pod NAME LABELS_JSON — expects 201
  req POST "$NS/pods" "$(pod_json "$1" "$2")"
  expect_status 201 "create pod $1"
}

# count_pods SELECTOR — number of pods matching a label selector (-1 on error).
count_pods() {
  get_q "$NS/pods" "labelSelector=$1"
  if [ "$RC" != 200 ]; then
    echo -1
    return
  fi
  jval 'len(d["items"])'
}

# status_check CODE REASON — the body is a Status with that code and reason.
STATUS_PY='
assert d.get("kind") == "Status", "kind is %r, want Status" % d.get("kind")
assert d.get("apiVersion") == "v1", "apiVersion %r" % d.get("apiVersion")
assert d.get("status") == "Failure", "status %r" % d.get("status")
assert d.get("code") == int(args[0]), "code %r, want %s" % (d.get("code"), args[0])
assert d.get("reason") == args[1], "reason %r, want %s" % (d.get("reason"), args[1])
assert d.get("message"), "empty message"
'
status_check() {
  pycheck "Status body" "$STATUS_PY" "$1" "$2"
}

# ------------------------------------------------------------------ start
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name api \
  --nodes 2 --node-cpu 8 --node-memory 16Gi --node-pods 50 \
  --schedule-ms 10 --image-pull-ms 10 --start-ms 10 --history 100
BASE="$(kubeconfig_server)"
case "$BASE" in
  https://127.0.0.1:*) ;;
  *) fatal "kubeconfig server is '$BASE', want https://127.0.0.1:PORT" ;;
esac

# ------------------------------------------------------------------ auth, discovery
step "no token: 401 Unauthorized Status"
LAST_CMD="curl $NS/pods (no Authorization)"
http "$BASE$NS/pods"
expect_status 401 "no token" && status_check 401 Unauthorized

step "wrong token: 401"
LAST_CMD="curl $NS/pods (wrong token)"
http -H "Authorization: Bearer not-$TOKEN" "$BASE$NS/pods"
expect_status 401 "wrong token"

step "GET /version and discovery"
req GET /version
expect_status 200 "/version" && pycheck "/version" '
assert d["major"] == "1", d
assert d["gitVersion"].startswith("v1."), d'
req GET /api
expect_status 200 "/api" && pycheck "/api" 'assert "v1" in d["versions"], d'
req GET /api/v1
expect_status 200 "/api/v1" && pycheck "/api/v1" '
names = {r["name"] for r in d["resources"]}
for want in ("pods", "pods/exec", "nodes", "namespaces", "resourcequotas"):
    assert want in names, "%s missing from %s" % (want, sorted(names))'
req GET /apis/apps/v1
expect_status 200 "/apis/apps/v1" && pycheck "/apis/apps/v1" '
names = {r["name"] for r in d["resources"]}
assert "replicasets" in names, sorted(names)'

# ------------------------------------------------------------------ errors
step "GET a missing pod: 404 NotFound Status with details"
req GET "$NS/pods/nope"
expect_status 404 "missing pod" && status_check 404 NotFound && pycheck "details" '
assert d["details"]["name"] == "nope", d["details"]
assert d["details"]["kind"] == "pods", d["details"]'

step "create twice: 409 AlreadyExists Status"
create_pod dup '{"t":"dup"}'
req POST "$NS/pods" "$(pod_json dup '{"t":"dup"}')"
expect_status 409 "second create" && status_check 409 AlreadyExists && pycheck "details" '
assert d["details"]["name"] == "dup", d["details"]'

step "create with generateName gets a unique name"
req POST "$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"gen-","labels":{"t":"gen"}},"spec":{"containers":[{"name":"main","image":"busybox"}]}}'
expect_status 201 "generateName create" && pycheck "generated name" '
n = d["metadata"]["name"]
assert n.startswith("gen-") and len(n) > 4, n'

step "PATCH with a stale resourceVersion: 409 Conflict"
req GET "$NS/pods/dup"
rv1="$(jval 'd["metadata"]["resourceVersion"]')"
req PATCH "$NS/pods/dup" '{"metadata":{"labels":{"x":"1"}}}' application/merge-patch+json
expect_status 200 "first patch"
req PATCH "$NS/pods/dup" "{\"metadata\":{\"resourceVersion\":\"$rv1\",\"labels\":{\"x\":\"2\"}}}" application/merge-patch+json
expect_status 409 "stale patch" && status_check 409 Conflict && pycheck "message" '
assert "the object has been modified" in d["message"], d["message"]'
req PATCH "$NS/pods/dup" '{"metadata":{"labels":{"x":null}}}' application/merge-patch+json
expect_status 200 "patch removing a label" && pycheck "label removed" '
assert "x" not in d["metadata"].get("labels", {}), d["metadata"].get("labels")'

step "activeDeadlineSeconds: set, lowered, never raised or removed (422)"
req PATCH "$NS/pods/dup" '{"spec":{"activeDeadlineSeconds":600}}' application/merge-patch+json
expect_status 200 "setting a deadline"
req PATCH "$NS/pods/dup" '{"spec":{"activeDeadlineSeconds":300}}' application/merge-patch+json
expect_status 200 "lowering it"
req PATCH "$NS/pods/dup" '{"spec":{"activeDeadlineSeconds":900}}' application/merge-patch+json
expect_status 422 "raising it" && status_check 422 Invalid && pycheck "message" '
assert "must be less than or equal to previous value" in d["message"], d["message"]'
req PATCH "$NS/pods/dup" '{"spec":{"activeDeadlineSeconds":null}}' application/merge-patch+json
expect_status 422 "removing it" && pycheck "message" '
assert "must not update from a positive integer to nil value" in d["message"], d["message"]'
req GET "$NS/pods/dup"
expect_status 200 "the pod" && pycheck "deadline kept" '
assert d["spec"]["activeDeadlineSeconds"] == 300, d["spec"]'

# ------------------------------------------------------------------ pagination
step "pagination: limit/continue keeps the list resourceVersion"
for i in 1 2 3 4 5 6 7; do
  create_pod "page-$i" '{"t":"page"}' || break
done
get_q "$NS/pods" "labelSelector=t=page" "limit=3"
names=()
pages=0
list_rv=""
while expect_status 200 "list page $((pages + 1))"; do
  pages=$((pages + 1))
  page_rv="$(jval 'd["metadata"]["resourceVersion"]')"
  [ -n "$list_rv" ] || list_rv="$page_rv"
  [ "$page_rv" = "$list_rv" ] || fail "page $pages has resourceVersion $page_rv, first page had $list_rv"
  n="$(jval 'len(d["items"])')"
  [ "${n:-0}" -le 3 ] || fail "page $pages has $n items with limit=3"
  while IFS= read -r name; do
    [ -n "$name" ] && names+=("$name")
  done < <(jval '"\n".join(i["metadata"]["name"] for i in d["items"])')
  cont="$(jval 'd["metadata"].get("continue", "")')"
  [ -n "$cont" ] || break
  [ "$pages" -lt 10 ] || { fail "more than 10 pages for 7 pods"; break; }
  # A pod created mid-pagination is not part of the snapshot being paged.
  [ "$pages" -eq 1 ] && create_pod page-late '{"t":"page"}'
  get_q "$NS/pods" "labelSelector=t=page" "limit=3" "continue=$cont"
done
sorted="$(printf '%s\n' "${names[@]}" | sort | tr '\n' ' ')"
want="page-1 page-2 page-3 page-4 page-5 page-6 page-7 "
[ "$pages" -eq 3 ] || fail "expected 3 pages of <=3 for 7 pods, got $pages"
[ "$sorted" = "$want" ] || fail "paged names: '$sorted', want '$want' (no duplicates, no page-late)"

step "pagination: a bogus continue token is 400 or 410, not a crash"
get_q "$NS/pods" "limit=3" "continue=not-a-token"
case "$RC" in
  400 | 410) ;;
  *) fail "bogus continue token: HTTP $RC, want 400 or 410" ;;
esac

# ------------------------------------------------------------------ selectors
step "label selectors"
create_pod sel-1 '{"app":"x","tier":"a"}'
create_pod sel-2 '{"app":"x","tier":"b"}'
create_pod sel-3 '{"app":"y"}'
check_sel() { # check_sel SELECTOR "expected names"
  get_q "$NS/pods" "labelSelector=$1"
  if expect_status 200 "labelSelector=$1"; then
    local got
    got="$(jval '" ".join(sorted(i["metadata"]["name"] for i in d["items"] if i["metadata"]["name"].startswith("sel-")))')"
    [ "$got" = "$2" ] || fail "labelSelector '$1' matched '$got', want '$2'"
  fi
}
check_sel 'app=x' 'sel-1 sel-2'
check_sel 'app==x' 'sel-1 sel-2'
check_sel 'app!=x' 'sel-3'
check_sel 'app=x,tier!=a' 'sel-2'
check_sel 'tier in (a,b)' 'sel-1 sel-2'
check_sel 'tier notin (a),app' 'sel-2 sel-3'
check_sel 'tier' 'sel-1 sel-2'
check_sel '!tier,app' 'sel-3'

step "field selectors"
get_q "$NS/pods" "fieldSelector=metadata.name=sel-1"
expect_status 200 "fieldSelector metadata.name" && pycheck "metadata.name" '
names = [i["metadata"]["name"] for i in d["items"]]
assert names == ["sel-1"], names'
wait_running() { req GET "$NS/pods/sel-1"; [ "$(jval 'd["status"]["phase"]')" = Running ]; }
wait_until 10 wait_running || fail "sel-1 not Running within 10s"
get_q "$NS/pods" "fieldSelector=status.phase=Running" "labelSelector=app=x"
expect_status 200 "fieldSelector status.phase" && pycheck "status.phase" '
assert all(i["status"]["phase"] == "Running" for i in d["items"]), [i["status"]["phase"] for i in d["items"]]
assert "sel-1" in [i["metadata"]["name"] for i in d["items"]]'
req GET "$NS/pods/sel-1"
node="$(jval 'd["spec"].get("nodeName", "")')"
[ -n "$node" ] || fail "running pod sel-1 has no spec.nodeName"
get_q "$NS/pods" "fieldSelector=spec.nodeName=$node,metadata.name=sel-1"
expect_status 200 "fieldSelector spec.nodeName" && pycheck "spec.nodeName" '
assert [i["metadata"]["name"] for i in d["items"]] == ["sel-1"], d["items"]'
get_q "$NS/pods" "fieldSelector=spec.bogus=1"
expect_status 400 "unknown field selector" && status_check 400 BadRequest

# ------------------------------------------------------------------ watches
step "watch from a resourceVersion sees later events only, ends after timeoutSeconds"
# Watch from the list RV: only what happens after it may be reported.
get_q "$NS/pods" "labelSelector=app"
list_rv="$(jval 'd["metadata"]["resourceVersion"]')"
curl -sk -N --max-time 15 -H "Authorization: Bearer $TOKEN" \
  "$BASE$NS/pods?watch=true&resourceVersion=$list_rv&timeoutSeconds=3" \
  >"$T/watch1" 2>"$T/watch1.err" &
wpid=$!
BG_PIDS+=("$wpid")
sleep 0.5
req PATCH "$NS/pods/sel-2" '{"metadata":{"labels":{"w":"1"}}}' application/merge-patch+json
expect_status 200 "patch sel-2"
t0=$SECONDS
wait "$wpid"
wrc=$?
BG_PIDS=()
cp "$T/watch1" "$OUT"
cp "$T/watch1.err" "$ERR"
LAST_CMD="curl watch=true&resourceVersion=$list_rv&timeoutSeconds=3"
RC=$wrc
[ "$wrc" -eq 0 ] || fail "watch curl exit $wrc (28 = still open after 15s: timeoutSeconds ignored?)"
[ $((SECONDS - t0)) -le 6 ] || fail "watch lasted $((SECONDS - t0))s after the patch, timeoutSeconds=3"
if ! python3 - "$T/watch1" >"$T/py" 2>&1 <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
assert lines, "no events at all"
evs = [json.loads(l) for l in lines]
for e in evs:
    assert e["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"), e["type"]
mods = [e for e in evs if e["type"] == "MODIFIED" and e["object"]["metadata"]["name"] == "sel-2"]
assert mods, "no MODIFIED sel-2 event in %s" % [(e["type"], e["object"].get("metadata", {}).get("name")) for e in evs]
assert mods[-1]["object"]["metadata"]["labels"].get("w") == "1", mods[-1]["object"]["metadata"]["labels"]
added = [e for e in evs if e["type"] == "ADDED"]
assert not added, "replayed ADDED events for %s despite resourceVersion" % [e["object"]["metadata"]["name"] for e in added]
PY
then
  fail "watch events: $(cat "$T/py")"
fi

step "watch with resourceVersion=0 starts with ADDED for existing pods"
LAST_CMD="curl watch=true&resourceVersion=0&labelSelector=app=y&timeoutSeconds=1"
curl -sk -N --max-time 10 -H "Authorization: Bearer $TOKEN" \
  "$BASE$NS/pods?watch=true&resourceVersion=0&labelSelector=app%3Dy&timeoutSeconds=1" \
  >"$OUT" 2>"$ERR"
RC=$?
if ! python3 - "$OUT" >"$T/py" 2>&1 <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]).read().splitlines() if l.strip()]
added = [e["object"]["metadata"]["name"] for e in evs if e["type"] == "ADDED"]
assert added == ["sel-3"], "ADDED %r, want ['sel-3']" % added
PY
then
  fail "initial events: $(cat "$T/py")"
fi

step "watch from an expired resourceVersion: 410 Expired"
# --history 100: push more than 100 events past the oldest RV we know.
old_rv="$rv1"
for i in $(seq 1 130); do
  req PATCH "$NS/pods/dup" "{\"metadata\":{\"labels\":{\"n\":\"$i\"}}}" application/merge-patch+json
  [ "$RC" = 200 ] || { fail "patch $i: HTTP $RC"; break; }
done
LAST_CMD="curl watch=true&resourceVersion=$old_rv"
http -N -H "Authorization: Bearer $TOKEN" \
  "$BASE$NS/pods?watch=true&resourceVersion=$old_rv&timeoutSeconds=5"
if [ "$RC" = 410 ]; then
  status_check 410 Expired
elif [ "$RC" = 200 ]; then
  if ! python3 - "$OUT" >"$T/py" 2>&1 <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]).read().splitlines() if l.strip()]
assert evs, "200 with no events"
e = evs[0]
assert e["type"] == "ERROR", "first event is %s, want ERROR" % e["type"]
o = e["object"]
assert o["kind"] == "Status" and o["code"] == 410 and o["reason"] == "Expired", o
assert len(evs) == 1, "events after the ERROR: %d" % (len(evs) - 1)
PY
  then
    fail "expired watch: $(cat "$T/py")"
  fi
else
  fail "expired watch: HTTP $RC, want 410 or 200 + ERROR event"
fi

# ------------------------------------------------------------------ ReplicaSets
rs_json() { # rs_json NAME REPLICAS
  printf '{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"%s","labels":{"pool":"%s"}},"spec":{"replicas":%d,"selector":{"matchLabels":{"pool":"%s"}},"template":{"metadata":{"labels":{"pool":"%s"}},"spec":{"containers":[{"name":"main","image":"busybox","command":["sleep","3600"],"resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}}' \
    "$1" "$1" "$2" "$1" "$1"
}
rs_pods_are() { [ "$(count_pods "pool=warm")" = "$1" ]; }

step "ReplicaSet: creates and keeps its replicas (owned pods)"
req POST "$RSS" "$(rs_json warm 3)"
expect_status 201 "create ReplicaSet"
wait_until 15 rs_pods_are 3 || fail "pool=warm has $(count_pods pool=warm) pods after 15s, want 3"
get_q "$NS/pods" "labelSelector=pool=warm"
pycheck "owner references" '
for p in d["items"]:
    refs = [r for r in p["metadata"].get("ownerReferences", []) if r.get("controller")]
    assert refs and refs[0]["kind"] == "ReplicaSet" and refs[0]["name"] == "warm", (p["metadata"]["name"], refs)'
rs_ready() { req GET "$RSS/warm"; [ "$(jval 'd["status"].get("readyReplicas", 0)')" = 3 ]; }
wait_until 15 rs_ready || fail "status.readyReplicas not 3 within 15s"
pycheck "RS status" 'assert d["status"]["replicas"] == 3, d["status"]'

step "ReplicaSet: a deleted pod is replaced"
get_q "$NS/pods" "labelSelector=pool=warm"
victim="$(jval 'd["items"][0]["metadata"]["name"]')"
req DELETE "$NS/pods/$victim"
case "$RC" in 200 | 202) ;; *) fail "delete $victim: HTTP $RC" ;; esac
replaced() {
  get_q "$NS/pods" "labelSelector=pool=warm"
  [ "$(jval 'len([i for i in d["items"] if not i["metadata"].get("deletionTimestamp")])')" = 3 ] &&
    ! grep -q "\"$victim\"" "$OUT"
}
wait_until 15 replaced || fail "no replacement for deleted $victim within 15s (want 3 pods without it)"

step "ReplicaSet: a relabelled pod is orphaned and replaced"
get_q "$NS/pods" "labelSelector=pool=warm"
orphan="$(jval 'd["items"][0]["metadata"]["name"]')"
req PATCH "$NS/pods/$orphan" '{"metadata":{"labels":{"pool":"released"}}}' application/merge-patch+json
expect_status 200 "relabel $orphan"
wait_until 15 rs_pods_are 3 || fail "pool=warm has $(count_pods pool=warm) pods, want 3 (replacement)"
orphaned() {
  req GET "$NS/pods/$orphan"
  [ "$RC" = 200 ] &&
    [ "$(jval 'len([r for r in d["metadata"].get("ownerReferences", []) if r.get("controller")])')" = 0 ]
}
wait_until 15 orphaned || fail "$orphan still has a controller ownerReference (or is gone: HTTP $RC)"

step "ReplicaSet: scale down to 1"
req PATCH "$RSS/warm" '{"spec":{"replicas":1}}' application/merge-patch+json
expect_status 200 "scale to 1"
live_pods_are() {
  get_q "$NS/pods" "labelSelector=pool=warm"
  [ "$(jval 'len([i for i in d["items"] if not i["metadata"].get("deletionTimestamp")])')" = "$1" ]
}
wait_until 15 live_pods_are 1 || fail "pool=warm still has $(count_pods pool=warm) pods after scaling to 1"

step "ReplicaSet: delete removes its pods, not the orphan"
req DELETE "$RSS/warm" '{"propagationPolicy":"Background"}'
case "$RC" in 200 | 202) ;; *) fail "delete ReplicaSet: HTTP $RC" ;; esac
wait_until 15 rs_pods_are 0 || fail "pool=warm still has $(count_pods pool=warm) pods 15s after the RS was deleted"
req GET "$RSS/warm"
expect_status 404 "deleted ReplicaSet"
req GET "$NS/pods/$orphan"
expect_status 200 "orphaned pod $orphan must survive the RS delete"

# ------------------------------------------------------------------ delete
step "DELETE a pod: it goes away (404 afterwards)"
req DELETE "$NS/pods/sel-3"
case "$RC" in 200 | 202) ;; *) fail "delete sel-3: HTTP $RC" ;; esac
gone() { req GET "$NS/pods/sel-3"; [ "$RC" = 404 ]; }
wait_until 15 gone || fail "sel-3 still there 15s after DELETE (HTTP $RC)"
req DELETE "$NS/pods/sel-3"
expect_status 404 "second delete" && status_check 404 NotFound

finish
