#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubectl_drain.sh — node maintenance against kubesim with the real kubectl
# (v1.32): cordon/uncordon, `kubectl drain` through the pods/eviction
# subresource (and the Eviction API's answers: 404, 400, 429 from a
# PodDisruptionBudget, a protobuf body), and the taint manager (NoExecute
# taints evict pods that do not tolerate them, tolerationSeconds honoured).
#
# Usage: kubectl_drain.sh PATH/TO/kubesim
#
# Same conventions as kubectl_fidelity.sh: named steps that all run, bounded
# waits, loopback only, the trap kills kubesim and removes the temp dir.
# Env: KEEP_TMP=1 keeps the temp dir for debugging.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
lib_require "${1:-}" kubectl

TOKEN="drain-token-$$"
N1=drn-node-1
N2=drn-node-2
N3=drn-node-3

K_LIMIT=90 # seconds per kubectl (lib.sh's k); a drain waits for evictions

POD_APP=drain # pod_on's app label (lib.sh)

gone() { k get pod "$1" -o name; [ "$RC" -ne 0 ] && grep -q NotFound "$ERR"; }
phase_is() { k get pod "$1" -o 'jsonpath={.status.phase}'; [ "$RC" -eq 0 ] && [ "$(cat "$OUT")" = "$2" ]; }
node_of() { k get pod "$1" -o 'jsonpath={.spec.nodeName}'; cat "$OUT"; }

# post_raw PATH FILE CONTENT-TYPE — POST FILE with curl (what kubectl does
# not show: the Status body, a protobuf request); body $OUT, HTTP status $RC.
post_raw() {
  LAST_CMD="curl -X POST $1 ($3)"
  awk '$1 == "certificate-authority-data:" { print $2; exit }' "$KCFG" | base64 -d >"$T/ca.pem"
  RC=$(curl -sS -m 20 -o "$OUT" -w '%{http_code}' --cacert "$T/ca.pem" -H "Authorization: Bearer $TOKEN" \
    -H "Content-Type: $3" --data-binary "@$2" "$(kubeconfig_server)$1" 2>"$ERR")
}

# ------------------------------------------------------------------ start
echo "kubectl: $KUBECTL ($("$KUBECTL" version --client 2>/dev/null | head -n1))"
mkdir -p "$T/kcache"
# Node 3 starts with a NoExecute taint from the flag: nothing without a
# toleration ever stays there, and the other steps never see it.
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name drn --nodes 3 --terminate-ms 800 --start-ms 50 \
  --node-taint 3@flagged=yes:NoExecute

step "discovery: /api/v1 lists pods/eviction as policy/v1 Eviction, verbs [create]"
k get --raw /api/v1
if expect_rc 0 "get --raw /api/v1"; then
  python3 - "$OUT" >"$T/py" 2>&1 <<'PY' || { cp "$T/py" "$ERR"; fail "pods/eviction entry wrong"; }
import json, sys
rs = {r["name"]: r for r in json.load(open(sys.argv[1]))["resources"]}
e = rs.get("pods/eviction")
assert e, "no pods/eviction"
want = {"group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"], "namespaced": True}
for key, v in want.items():
    assert e.get(key) == v, "%s = %r, want %r" % (key, e.get(key), v)
PY
fi

# ------------------------------------------------------------------ cordon
step "cordon: node SchedulingDisabled, new pods go to the other node; uncordon"
k cordon "$N1"
expect_rc 0 "kubectl cordon" && { grep -q "node/$N1 cordoned" "$OUT" || fail "no 'node/$N1 cordoned'"; }
k get node "$N1" -o 'jsonpath={.spec.unschedulable}'
out_is "true" "spec.unschedulable after cordon"
k get node "$N1" --no-headers
grep -q 'Ready,SchedulingDisabled' "$OUT" || fail "STATUS should be Ready,SchedulingDisabled"
for i in 1 2 3; do pod_on "c$i" ""; done
for i in 1 2 3; do
  wait_until 15 phase_is "c$i" Running || fail "c$i not Running"
  [ "$(node_of "c$i")" = "$N2" ] || fail "c$i scheduled on $(cat "$OUT"), want $N2 (cordoned $N1)"
done
# A pod only node 1 can take waits while it is cordoned, and runs after uncordon.
pod_on only1 "" "" "\"nodeSelector\":{\"kubernetes.io/hostname\":\"$N1\"}"
only1_unschedulable() {
  k get pod only1 -o 'jsonpath={.status.phase}/{.status.conditions[?(@.type=="PodScheduled")].status}'
  [ "$RC" -eq 0 ] && [ "$(cat "$OUT")" = "Pending/False" ]
}
wait_until 10 only1_unschedulable || fail "pod pinned to the cordoned node: want Pending/False (PodScheduled)"
k uncordon "$N1"
expect_rc 0 "kubectl uncordon" && { grep -q "node/$N1 uncordoned" "$OUT" || fail "no 'node/$N1 uncordoned'"; }
k get node "$N1" --no-headers
grep -q 'SchedulingDisabled' "$OUT" && fail "still SchedulingDisabled after uncordon"
wait_until 15 phase_is only1 Running || fail "only1 not Running after uncordon"
[ "$(node_of only1)" = "$N1" ] || fail "only1 on $(cat "$OUT"), want $N1"
k delete pod c1 c2 c3 only1 --grace-period=0
expect_rc 0 "delete c1..c3, only1"

# ------------------------------------------------------------------ drain
step "kubectl drain: evicts bare, emptyDir and ReplicaSet pods; watch sees the deletion"
pod_on d1 "$N1"
pod_on d2 "$N1" "" '"volumes":[{"name":"scratch","emptyDir":{}}]'
cat >"$T/rs.json" <<EOF
{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web"},
 "spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},
  "template":{"metadata":{"labels":{"app":"web"}},
   "spec":{"nodeSelector":{"kubernetes.io/hostname":"$N1"},
    "containers":[{"name":"main","image":"busybox","command":["sleep","3600"]}]}}}}
EOF
k create -f "$T/rs.json"
expect_rc 0 "create ReplicaSet web"
on_n1_running() {
  k get pods --field-selector "spec.nodeName=$N1,status.phase=Running" -o name
  [ "$RC" -eq 0 ] && [ "$(wc -l <"$OUT")" -eq 4 ]
}
wait_until 20 on_n1_running || fail "expected 4 Running pods on $N1"
# kubesim's count of open watches (GET /_sim/state, on the API port too).
watchers() {
  k get --raw /_sim/state
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["watchers"])' "$OUT" 2>/dev/null || echo -1
}
W0=$(watchers)
[ "$W0" -ge 0 ] || fail "GET /_sim/state gave no count of open watches: $(head -c 300 "$OUT")"
timeout --kill-after=5 120 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$T/kcache" \
  --request-timeout=100s get pods -w --watch-only --output-watch-events -o json \
  </dev/null >"$T/watch.out" 2>"$T/watch.err" &
WATCH_PID=$!
BG_PIDS+=("$WATCH_PID")
# The drain must start after the watch is open, or its events could be
# missed: wait for kubesim to count one more watch.
watch_open() { [ "$(watchers)" -gt "$W0" ]; }
wait_until 20 watch_open || fail "kubectl get pods -w opened no watch in 20 s ($W0 open before)"
K_LIMIT=90 k drain "$N1" --ignore-daemonsets --delete-emptydir-data --force --timeout=60s
if expect_rc 0 "kubectl drain"; then
  for p in d1 d2; do
    grep -q "evicting pod default/$p" "$OUT" || fail "drain did not say 'evicting pod default/$p'"
    grep -q "pod/$p evicted" "$OUT" || fail "drain did not say 'pod/$p evicted'"
  done
  grep -q "node/$N1 drained" "$OUT" || fail "no 'node/$N1 drained'"
fi
k get pods --field-selector "spec.nodeName=$N1" -o name
expect_rc 0 "list pods on $N1" && out_is "" "pods left on the drained node"
k get node "$N1" --no-headers
grep -q 'Ready,SchedulingDisabled' "$OUT" || fail "drained node should be Ready,SchedulingDisabled"
# The ReplicaSet's replacements can only go to the cordoned node: Pending.
web_pending() {
  k get pods -l app=web -o 'jsonpath={range .items[*]}{.status.phase}{" "}{end}'
  [ "$RC" -eq 0 ] && [ "$(cat "$OUT")" = "Pending Pending " ]
}
wait_until 10 web_pending || fail "want the ReplicaSet's 2 replacements Pending while $N1 is cordoned"
# The watch has printed d1's deletion before it is stopped.
d1_deleted_seen() {
  python3 - "$T/watch.out" <<'PY' 2>/dev/null
import json, sys
text, dec, i = open(sys.argv[1]).read(), json.JSONDecoder(), 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        sys.exit(1)
    ev, i = dec.raw_decode(text, i)
    if ev["type"] == "DELETED" and ev["object"]["metadata"]["name"] == "d1":
        sys.exit(0)
PY
}
wait_until 10 d1_deleted_seen || fail "the watch printed no DELETED event for d1 within 10 s"
kill -TERM "$WATCH_PID" 2>/dev/null
wait "$WATCH_PID" 2>/dev/null
BG_PIDS=()
if ! python3 - "$T/watch.out" >"$T/py" 2>&1 <<'PY'; then
import json, sys
text, dec, i, evs = open(sys.argv[1]).read(), json.JSONDecoder(), 0, []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    ev, i = dec.raw_decode(text, i)
    evs.append(ev)
d1 = [e for e in evs if e["object"]["metadata"]["name"] == "d1"]
kinds = [e["type"] for e in d1]
assert kinds and kinds[-1] == "DELETED", "d1 events %r" % kinds
target = [c for e in d1 for c in e["object"].get("status", {}).get("conditions", [])
          if c["type"] == "DisruptionTarget"]
assert target and target[0]["reason"] == "EvictionByEvictionAPI", "DisruptionTarget %r" % target
assert any(e["type"] == "MODIFIED" and e["object"]["metadata"].get("deletionTimestamp") for e in d1), \
    "no MODIFIED event with deletionTimestamp (graceful deletion) before DELETED"
PY
  cp "$T/watch.out" "$OUT"
  cp "$T/py" "$ERR"
  fail "the watch did not see d1 evicted (DisruptionTarget, Terminating, DELETED)"
fi
k uncordon "$N1"
expect_rc 0 "kubectl uncordon after drain"
web_running() {
  k get pods -l app=web --field-selector status.phase=Running -o name
  [ "$RC" -eq 0 ] && [ "$(wc -l <"$OUT")" -eq 2 ]
}
wait_until 20 web_running || fail "the ReplicaSet's pods did not run again after uncordon"
k delete rs web
expect_rc 0 "delete rs web"

# ------------------------------------------------------------------ Eviction API
cat >"$T/ev-nope.json" <<'EOF'
{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"nope","namespace":"default"}}
EOF
step "Eviction of a missing pod: 404 NotFound"
k create --raw /api/v1/namespaces/default/pods/nope/eviction -f "$T/ev-nope.json"
[ "$RC" -ne 0 ] || fail "eviction of a missing pod succeeded"
if ! grep -q 'NotFound' "$ERR" || ! grep -q 'pods "nope" not found' "$ERR"; then
  fail "want NotFound 'pods \"nope\" not found'"
fi

step "Eviction whose body names another pod: 400 BadRequest"
pod_on e1 "$N2"
k create --raw /api/v1/namespaces/default/pods/e1/eviction -f "$T/ev-nope.json"
[ "$RC" -ne 0 ] || fail "a mismatched eviction succeeded"
if ! grep -q 'BadRequest' "$ERR" || ! grep -q 'name in URL does not match name in Eviction object' "$ERR"; then
  fail "want BadRequest 'name in URL does not match name in Eviction object'"
fi
k get pod e1 -o name
expect_rc 0 "e1 must still exist"

step "Eviction as JSON: 201 Status Success, pod deleted"
printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"e1"},"deleteOptions":{"gracePeriodSeconds":0}}' >"$T/ev-e1.json"
k create --raw /api/v1/namespaces/default/pods/e1/eviction -f "$T/ev-e1.json"
if expect_rc 0 "evict e1"; then
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["kind"]=="Status" and d["status"]=="Success" and d.get("code")==201, d' "$OUT" \
    2>"$ERR" || fail "answer is not a Status Success 201"
fi
wait_until 5 gone e1 || fail "e1 still there after its eviction"

step "Eviction as protobuf (client-go's encoding): 201, pod deleted"
pod_on e2 "$N2"
wait_until 15 phase_is e2 Running || fail "e2 not Running"
python3 - "$T/ev-e2.pb" <<'PY'
import sys
def f(num, data):  # a length-delimited field
    n, out = len(data), b""
    while True:
        b = n & 0x7F; n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n: break
    return bytes([num << 3 | 2]) + out + data
meta = f(1, b"e2") + f(3, b"default")
opts = bytes([1 << 3 | 0, 0])  # gracePeriodSeconds: 0
ev = f(1, meta) + f(2, opts)
body = b"k8s\0" + f(1, f(1, b"policy/v1") + f(2, b"Eviction")) + f(2, ev)
open(sys.argv[1], "wb").write(body)
PY
post_raw /api/v1/namespaces/default/pods/e2/eviction "$T/ev-e2.pb" application/vnd.kubernetes.protobuf
[ "$RC" = 201 ] || fail "protobuf eviction: HTTP $RC, want 201"
grep -q '"status":"Success"' "$OUT" || fail "no Status Success"
wait_until 5 gone e2 || fail "e2 still there after its protobuf eviction"

step "PodDisruptionBudget: minAvailable=2 of 2 refuses (429), minAvailable=1 lets one go"
APP=guarded pod_on g1 "$N2"
APP=guarded pod_on g2 "$N2"
wait_until 15 phase_is g1 Running || fail "g1 not Running"
wait_until 15 phase_is g2 Running || fail "g2 not Running"
printf '{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"guard"},"spec":{"minAvailable":2,"selector":{"matchLabels":{"app":"guarded"}}}}' >"$T/pdb.json"
k apply -f "$T/pdb.json"
expect_rc 0 "apply pdb minAvailable=2"
printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"g1"}}' >"$T/ev-g1.json"
printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"g2"}}' >"$T/ev-g2.json"
k create --raw /api/v1/namespaces/default/pods/g1/eviction -f "$T/ev-g1.json"
[ "$RC" -ne 0 ] || fail "eviction against an exhausted budget succeeded"
grep -q "Cannot evict pod as it would violate the pod's disruption budget" "$ERR" \
  || fail "want 429 'Cannot evict pod as it would violate the pod's disruption budget'"
phase_is g1 Running || fail "g1 should still run"
sed -i 's/"minAvailable":2/"minAvailable":1/' "$T/pdb.json"
k apply -f "$T/pdb.json"
expect_rc 0 "apply pdb minAvailable=1"
k create --raw /api/v1/namespaces/default/pods/g1/eviction -f "$T/ev-g1.json"
expect_rc 0 "evict g1 under minAvailable=1"
# g1 is terminating: g2 is the last healthy pod the budget keeps.
post_raw /api/v1/namespaces/default/pods/g2/eviction "$T/ev-g2.json" application/json
[ "$RC" = 429 ] || fail "evicting the last pod of a minAvailable=1 budget: HTTP $RC, want 429"
python3 - "$OUT" 2>"$ERR" <<'PY' || fail "429 Status body wrong"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "Status" and d["reason"] == "TooManyRequests" and d["code"] == 429, d
c = d["details"]["causes"]
assert c == [{"reason": "DisruptionBudget", "message": "The disruption budget guard needs 1 healthy pods and has 1 currently"}], c
PY

step "kubectl drain against an exhausted budget retries, then times out"
k drain "$N2" --ignore-daemonsets --delete-emptydir-data --force --timeout=3s
[ "$RC" -ne 0 ] || fail "drain succeeded although the budget keeps g2"
grep -q "error when evicting pods/\"g2\" -n \"default\" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget" "$ERR" \
  || fail "drain did not report the budget and retry"
phase_is g2 Running || fail "g2 should still run"
k uncordon "$N2"
expect_rc 0 "uncordon $N2"
k delete pdb guard
expect_rc 0 "delete pdb"
k delete pod g2 --grace-period=0
expect_rc 0 "delete g2"

# ------------------------------------------------------------------ NoExecute
step "kubectl taint NoExecute: evicts the untolerating pod, keeps the tolerating one"
pod_on plain "$N2"
pod_on keep "$N2" '[{"key":"maint","operator":"Equal","value":"yes","effect":"NoExecute"}]'
pod_on brief "$N2" '[{"key":"maint","operator":"Exists","effect":"NoExecute","tolerationSeconds":2}]'
pod_on huge "$N2" '[{"key":"maint","operator":"Exists","effect":"NoExecute","tolerationSeconds":9223372036854775807}]'
for p in plain keep brief huge; do wait_until 15 phase_is "$p" Running || fail "$p not Running"; done
t0=$(date +%s)
k taint nodes "$N2" maint=yes:NoExecute
expect_rc 0 "kubectl taint NoExecute" && { grep -q "node/$N2 tainted" "$OUT" || fail "no 'node/$N2 tainted'"; }
wait_until 10 gone plain || fail "plain (no toleration) not evicted"

step "a toleration with tolerationSeconds=2 is evicted after 2 s, by the taint manager"
wait_until 15 gone brief || fail "brief (tolerationSeconds=2) not evicted"
# The DisruptionTarget condition the taint manager set carries the time;
# the watch history from resourceVersion 1 still has both pods' last states.
timeout 20 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$T/kcache" get --raw \
  "/api/v1/namespaces/default/pods?watch=1&resourceVersion=1&timeoutSeconds=1" >"$T/hist.out" 2>"$ERR"
if ! python3 - "$T/hist.out" "$t0" >"$T/py" 2>&1 <<'PY'; then
import json, sys, calendar, time
t0 = int(sys.argv[2])
seen = {}
for line in open(sys.argv[1]):
    ev = json.loads(line)
    o = ev["object"]
    for c in o.get("status", {}).get("conditions", []):
        if c["type"] == "DisruptionTarget" and o["metadata"]["name"] in ("plain", "brief"):
            seen[o["metadata"]["name"]] = c
for name in ("plain", "brief"):
    c = seen.get(name)
    assert c and c["reason"] == "DeletionByTaintManager", "%s: DisruptionTarget %r" % (name, c)
t = calendar.timegm(time.strptime(seen["brief"]["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))
# Evicted >= 2 s after the taint, which came after t0: floor(t0 + 2) <= t.
assert t >= t0 + 2, "brief evicted at %d, taint at >= %d: before its tolerationSeconds" % (t, t0)
PY
  cp "$T/hist.out" "$OUT"
  cp "$T/py" "$ERR"
  fail "taint manager's DisruptionTarget conditions / timing wrong"
fi
phase_is keep Running || fail "keep (tolerates without tolerationSeconds) should stay Running"
phase_is huge Running || fail "huge (tolerationSeconds 2^63-1) should stay Running"

step "a pod bound later to the NoExecute node is evicted; the scheduler never picks it"
pod_on late "$N2"
wait_until 10 gone late || fail "late (bound by nodeName) not evicted"
for i in 1 2; do pod_on "s$i" ""; done
for i in 1 2; do
  wait_until 15 phase_is "s$i" Running || fail "s$i not Running"
  [ "$(node_of "s$i")" = "$N1" ] || fail "s$i scheduled on $(cat "$OUT"), want $N1"
done

step "--node-taint NoExecute: a pod bound there is evicted, one tolerating all taints stays"
pod_on flag1 "$N3"
pod_on flag2 "$N3" '[{"operator":"Exists"}]'
wait_until 10 gone flag1 || fail "flag1 (bound to the --node-taint NoExecute node) not evicted"
wait_until 15 phase_is flag2 Running || fail "flag2 (tolerates everything) should run on $N3"

step "removing the taint before tolerationSeconds cancels the eviction"
pod_on stay "$N1" '[{"key":"blip","operator":"Exists","effect":"NoExecute","tolerationSeconds":2}]'
wait_until 15 phase_is stay Running || fail "stay not Running"
k taint nodes "$N1" blip:NoExecute
expect_rc 0 "taint blip"
k taint nodes "$N1" blip:NoExecute-
expect_rc 0 "untaint blip" && { grep -q "node/$N1 untainted" "$OUT" || fail "no 'node/$N1 untainted'"; }
sleep 3
phase_is stay Running || fail "stay was evicted although the taint went before its tolerationSeconds"
k taint nodes "$N2" maint:NoExecute-
expect_rc 0 "untaint maint"
phase_is keep Running || fail "keep should still run"

finish
