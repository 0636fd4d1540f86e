#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubectl_nodes.sh — node failures and disruption budgets against kubesim
# with the real kubectl (v1.32): a node whose kubelet is lost (the admin
# API's POST /_sim/nodes/NAME) goes Ready=Unknown after the grace period,
# NotReady in `kubectl get nodes`, gets the unreachable taints, its pods go
# Ready=False and are evicted after their tolerationSeconds (the default
# 300 s ones every pod gets at create, or shorter), stay Terminating while
# the node is away, and new pods avoid it; the kubelet back undoes it. The
# not-ready path, and the status the disruption controller writes on
# PodDisruptionBudgets (kubectl get pdb's columns, the figures before and
# after evictions and a lost node).
#
# Usage: kubectl_nodes.sh PATH/TO/kubesim
#
# Same conventions as kubectl_drain.sh: named steps that all run, bounded
# waits, loopback only, the trap kills kubesim and removes the temp dir.
# Env: KEEP_TMP=1 keeps the temp dir for debugging.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
lib_require "${1:-}" kubectl curl python3

TOKEN="nodes-token-$$"
N1=nl-node-1
N2=nl-node-2
N3=nl-node-3
GRACE_MS=2000

# jp RESOURCE JSONPATH — kubectl get RESOURCE -o jsonpath into $OUT.
jp() { k get "$1" -o "jsonpath=$2"; }
# is RESOURCE JSONPATH VALUE — the jsonpath prints VALUE.
is() { jp "$1" "$2"; [ "$RC" -eq 0 ] && [ "$(cat "$OUT")" = "$3" ]; }
gone() { k get pod "$1" -o name; [ "$RC" -ne 0 ] && grep -q NotFound "$ERR"; }

POD_APP=nodes # pod_on's app label (lib.sh)

# admin METHOD PATH [BODY] — the /_sim/ admin API (behind the token, on the
# API port) with curl; body $OUT, HTTP status $RC.
# shellcheck disable=SC2034  # LAST_CMD is read by lib.sh's fail()
admin() {
  LAST_CMD="curl -X $1 /_sim$2 ${3:-}"
  RC=$(curl -sS -m 20 -o "$OUT" -w '%{http_code}' --cacert "$T/ca.pem" -H "Authorization: Bearer $TOKEN" \
    -X "$1" ${3:+--data-binary "$3"} "$(kubeconfig_server)/_sim$2" 2>"$ERR")
}

# py FILE SCRIPT — run the python SCRIPT over FILE; a failure goes to $ERR.
py() {
  local f="$1"
  shift
  python3 - "$f" "$@" >"$T/py" 2>&1
}

ready_of() { # ready_of NODE — the node's Ready condition status
  jp "node/$1" '{.status.conditions[?(@.type=="Ready")].status}'
  cat "$OUT"
}

# ------------------------------------------------------------------ start
echo "kubectl: $KUBECTL ($("$KUBECTL" version --client 2>/dev/null | head -n1))"
mkdir -p "$T/kcache"
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name nl --nodes 3 --start-ms 50 --terminate-ms 300 \
  --node-monitor-grace-ms "$GRACE_MS"
awk '$1 == "certificate-authority-data:" { print $2; exit }' "$KCFG" | base64 -d >"$T/ca.pem"

step "DefaultTolerationSeconds: 300 s not-ready/unreachable tolerations on a pod that has none"
pod_on plain ""
k get pod plain -o yaml
if expect_rc 0 "get pod plain -o yaml"; then
  cp "$OUT" "$T/plain.yaml"
  for key in not-ready unreachable; do
    grep -A3 -- "- effect: NoExecute" "$T/plain.yaml" | grep -q "key: node.kubernetes.io/$key" \
      || fail "kubectl get pod -o yaml shows no node.kubernetes.io/$key toleration"
  done
  [ "$(grep -c 'tolerationSeconds: 300' "$T/plain.yaml")" -eq 2 ] || fail "want two tolerationSeconds: 300"
fi
jp pod/plain '{range .spec.tolerations[*]}{.key}/{.operator}/{.effect}/{.tolerationSeconds} {end}'
out_is "node.kubernetes.io/not-ready/Exists/NoExecute/300 node.kubernetes.io/unreachable/Exists/NoExecute/300 " \
  "plain's tolerations"

step "DefaultTolerationSeconds: a pod's own unreachable toleration is kept, one tolerating all gets none"
pod_on own "" '[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":7}]'
jp pod/own '{range .spec.tolerations[*]}{.key}/{.tolerationSeconds} {end}'
out_is "node.kubernetes.io/unreachable/7 node.kubernetes.io/not-ready/300 " "own's tolerations"
pod_on all "" '[{"operator":"Exists"}]'
jp pod/all '{range .spec.tolerations[*]}{.key}/{.operator}/{.effect} {end}'
out_is "/Exists/ " "a pod tolerating everything gets no defaults"
k delete pod plain own all --grace-period=0
expect_rc 0 "delete plain own all"

step "admin API: GET /_sim/nodes lists kubelets; unknown node 404, bad body 400"
admin GET /nodes
[ "$RC" = 200 ] || fail "GET /_sim/nodes: HTTP $RC"
py "$OUT" <<'PY' || { cp "$T/py" "$ERR"; fail "GET /_sim/nodes body wrong"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["node_monitor_grace_ms"] == 2000, d
assert [(n["name"], n["kubelet"], n["ready"]) for n in d["nodes"]] == \
    [("nl-node-%d" % i, "ready", "True") for i in (1, 2, 3)], d
PY
admin POST /nodes/nl-node-9 '{"kubelet":"lost"}'
[ "$RC" = 404 ] || fail "unknown node: HTTP $RC, want 404"
admin POST /nodes/$N2 '{"kubelet":"asleep"}'
[ "$RC" = 400 ] || fail "bad kubelet value: HTTP $RC, want 400"

# ------------------------------------------------------------------ lost node
step "pods and a budget on $N2 before it is lost"
APP=n2 pod_on quick "$N2" '[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":2}]'
APP=n2 pod_on slow "$N2"
for p in quick slow; do wait_until 15 is "pod/$p" '{.status.phase}' Running || fail "$p not Running"; done
printf '{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"n2"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"n2"}}}}' >"$T/pdb-n2.json"
k create -f "$T/pdb-n2.json"
expect_rc 0 "create pdb n2"
wait_until 10 is pdb/n2 '{.status.currentHealthy}/{.status.disruptionsAllowed}' "2/1" \
  || fail "pdb n2 before the loss: currentHealthy/disruptionsAllowed want 2/1"

step "kubelet lost: Ready stays True for the grace period, then Unknown (NodeStatusUnknown); kubectl shows NotReady"
t0=$(date +%s)
admin POST /nodes/$N2 '{"kubelet":"lost"}'
[ "$RC" = 200 ] || fail "POST kubelet lost: HTTP $RC"
grep -q '"kubelet":"lost"' "$OUT" || fail "answer does not say kubelet lost"
# Within the 2 s grace period the controller has not noticed yet (curl:
# quicker than a kubectl start).
admin GET /nodes/$N2
grep -q '"ready":"True"' "$OUT" || fail "Ready went other than True before the grace period ended"
wait_until 10 is "node/$N2" '{.status.conditions[?(@.type=="Ready")].status}' Unknown || fail "Ready not Unknown"
jp "node/$N2" '{range .status.conditions[*]}{.type}={.status}/{.reason}/{.message};{end}'
out_is "Ready=Unknown/NodeStatusUnknown/Kubelet stopped posting node status.;MemoryPressure=Unknown/NodeStatusUnknown/Kubelet stopped posting node status.;DiskPressure=Unknown/NodeStatusUnknown/Kubelet stopped posting node status.;" \
  "conditions of the lost node"
jp "node/$N2" '{.status.conditions[?(@.type=="Ready")].lastTransitionTime}'
py "$OUT" "$t0" <<'PY' || { cp "$T/py" "$ERR"; fail "Unknown before the grace period was over"; }
import calendar, sys, time
t = calendar.timegm(time.strptime(open(sys.argv[1]).read().strip(), "%Y-%m-%dT%H:%M:%SZ"))
assert t >= int(sys.argv[2]) + 2, "transition at %d, lost at >= %s" % (t, sys.argv[2])
PY
k get nodes --no-headers
if expect_rc 0 "get nodes"; then
  awk -v n="$N2" '$1 == n { print $2 }' "$OUT" | grep -qx NotReady || fail "kubectl get nodes: $N2 not NotReady"
  [ "$(grep -c ' Ready ' "$OUT")" -eq 2 ] || fail "the other two nodes should stay Ready"
fi

step "the lost node has the unreachable NoSchedule and NoExecute taints (timeAdded)"
jp "node/$N2" '{range .spec.taints[*]}{.key}:{.effect}:{.timeAdded} {end}'
py "$OUT" <<'PY' || { cp "$T/py" "$ERR"; fail "taints wrong"; }
import sys
ts = open(sys.argv[1]).read().split()
keys = sorted(t.split(":")[0] + ":" + t.split(":")[1] for t in ts)
assert keys == ["node.kubernetes.io/unreachable:NoExecute", "node.kubernetes.io/unreachable:NoSchedule"], ts
ne = [t for t in ts if ":NoExecute:" in t][0]
assert ne.endswith("Z") and len(ne.split(":NoExecute:")[1]) == 20, "NoExecute taint without timeAdded: %r" % ts
PY

step "its pods go Ready=False (phase Running); the budget counts them unhealthy"
for p in quick slow; do
  wait_until 5 is "pod/$p" '{.status.conditions[?(@.type=="Ready")].status}' False || fail "$p not Ready=False"
done
is pod/slow '{.status.phase}' Running || fail "slow should stay phase Running"
wait_until 5 is pdb/n2 '{.status.currentHealthy}/{.status.disruptionsAllowed}/{.status.conditions[0].reason}' \
  "0/0/InsufficientPods" || fail "pdb n2 after the loss: want currentHealthy 0, disruptionsAllowed 0, InsufficientPods"

step "tolerationSeconds=2 evicts 'quick' (DeletionByTaintManager); it stays Terminating while the node is lost"
terminating() { jp pod/quick '{.metadata.deletionTimestamp}'; [ "$RC" -eq 0 ] && [ -s "$OUT" ]; }
wait_until 10 terminating || fail "quick not terminating 2 s after the taint"
jp pod/quick '{.status.conditions[?(@.type=="DisruptionTarget")].reason}'
out_is DeletionByTaintManager "quick's DisruptionTarget reason"
sleep 0.5
k get pod quick --no-headers
expect_rc 0 "quick must still exist (no kubelet to confirm it stopped)" && \
  { grep -q Terminating "$OUT" || fail "quick should show Terminating"; }
terminating_slow() { jp pod/slow '{.metadata.deletionTimestamp}'; [ "$RC" -eq 0 ] && [ -s "$OUT" ]; }
terminating_slow && fail "slow (default 300 s) was evicted already"

step "new pods avoid the lost node; one pinned to it is Unschedulable for the taint"
for i in 1 2 3 4; do pod_on "n$i" ""; done
for i in 1 2 3 4; do
  wait_until 15 is "pod/n$i" '{.status.phase}' Running || fail "n$i not Running"
  jp "pod/n$i" '{.spec.nodeName}'
  [ "$(cat "$OUT")" != "$N2" ] || fail "n$i scheduled on the lost node"
done
pod_on pinned "" "" "\"nodeSelector\":{\"kubernetes.io/hostname\":\"$N2\"}"
wait_until 10 is pod/pinned '{.status.conditions[?(@.type=="PodScheduled")].reason}' Unschedulable \
  || fail "pinned not Unschedulable"
jp pod/pinned '{.status.conditions[?(@.type=="PodScheduled")].message}'
grep -q 'node(s) had untolerated taint {node.kubernetes.io/unreachable: }' "$OUT" \
  || fail "Unschedulable message does not name the unreachable taint"

step "exec and logs of a pod on the lost node: the kubelet does not answer"
k exec slow -- echo hi
[ "$RC" -ne 0 ] || fail "exec into a pod on a lost node succeeded"
grep -q 'error dialing backend: dial tcp 10.1.0.3:10250: connect: no route to host' "$ERR" \
  || fail "exec: want 'error dialing backend ... no route to host'"
k logs slow
[ "$RC" -ne 0 ] || fail "logs of a pod on a lost node succeeded"
grep -q 'dial tcp 10.1.0.3:10250: connect: no route to host' "$ERR" || fail "logs: want 'no route to host'"

step "kubelet back: Ready True, taints gone, 'slow' Ready again, 'quick' removed, 'pinned' runs there"
admin POST /nodes/$N2 '{"kubelet":"ready"}'
[ "$RC" = 200 ] || fail "POST kubelet ready: HTTP $RC"
[ "$(ready_of "$N2")" = "True" ] || fail "Ready $(cat "$OUT") after the kubelet came back"
jp "node/$N2" '{.spec.taints}'
out_is "" "taints left on the recovered node"
wait_until 5 is pod/slow '{.status.conditions[?(@.type=="Ready")].status}' True || fail "slow not Ready again"
wait_until 5 gone quick || fail "quick not removed once the kubelet was back"
wait_until 15 is pod/pinned '{.spec.nodeName}/{.status.phase}' "$N2/Running" || fail "pinned not Running on $N2"
wait_until 5 is pdb/n2 '{.status.currentHealthy}/{.status.disruptionsAllowed}/{.status.expectedPods}' "1/0/1" \
  || fail "pdb n2 after recovery: want currentHealthy 1, disruptionsAllowed 0, expectedPods 1"
k exec slow -- echo hi
expect_rc 0 "exec after recovery" && out_is hi "exec output"
k delete pod slow pinned n1 n2 n3 n4 --grace-period=0
expect_rc 0 "delete pods"
k delete pdb n2
expect_rc 0 "delete pdb n2"

step "kubelet NotReady: at once Ready=False (KubeletNotReady), not-ready taints, pods Ready=False; back"
pod_on n3pod "$N3"
wait_until 15 is pod/n3pod '{.status.conditions[?(@.type=="Ready")].status}' True || fail "n3pod not Ready"
admin POST /nodes/$N3 '{"kubelet":"not-ready"}'
if [ "$RC" != 200 ] || ! grep -q '"ready":"False"' "$OUT"; then
  fail "POST kubelet not-ready: HTTP $RC, want 200 with ready False"
fi
jp "node/$N3" '{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}'
out_is "False/KubeletNotReady" "Ready of the NotReady node"
jp "node/$N3" '{range .spec.taints[*]}{.key}:{.effect} {end}'
out_is "node.kubernetes.io/not-ready:NoSchedule node.kubernetes.io/not-ready:NoExecute " "not-ready taints"
is pod/n3pod '{.status.conditions[?(@.type=="Ready")].status}' False || fail "n3pod not Ready=False"
admin POST /nodes/$N3 '{"kubelet":"ready"}'
[ "$(ready_of "$N3")" = "True" ] || fail "$N3 not Ready after the kubelet recovered"
jp "node/$N3" '{.spec.taints}'
out_is "" "taints left on $N3"
is pod/n3pod '{.status.conditions[?(@.type=="Ready")].status}' True || fail "n3pod not Ready again"
k delete pod n3pod --grace-period=0

# ------------------------------------------------------------------ PDB status
step "kubectl get pdb: MIN AVAILABLE / MAX UNAVAILABLE / ALLOWED DISRUPTIONS"
cat >"$T/rs.json" <<EOF
{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web"},
 "spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},
  "template":{"metadata":{"labels":{"app":"web"}},
   "spec":{"nodeSelector":{"kubernetes.io/hostname":"$N1"},
    "containers":[{"name":"main","image":"busybox","command":["sleep","3600"]}]}}}}
EOF
k create -f "$T/rs.json"
expect_rc 0 "create rs web"
web_ready() { is rs/web '{.status.readyReplicas}' 3; }
wait_until 20 web_ready || fail "rs web not 3 ready"
for spec in 'web-max "maxUnavailable":1' 'web-min "minAvailable":2' 'web-pct "minAvailable":"50%"'; do
  name=${spec%% *}
  printf '{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"%s"},"spec":{%s,"selector":{"matchLabels":{"app":"web"}}}}' \
    "$name" "${spec#* }" >"$T/$name.json"
  k create -f "$T/$name.json"
  expect_rc 0 "create pdb $name"
done
pdb_table() {
  k get pdb --no-headers
  [ "$RC" -eq 0 ] && [ "$(awk '{ print $1, $2, $3, $4 }' "$OUT" | tr '\n' ';')" = "web-max N/A 1 1;web-min 2 N/A 1;web-pct 50% N/A 1;" ]
}
wait_until 5 pdb_table || fail "kubectl get pdb rows wrong"
k get pdb
head -n1 "$OUT" | grep -Eq '^NAME +MIN AVAILABLE +MAX UNAVAILABLE +ALLOWED DISRUPTIONS +AGE$' || fail "kubectl get pdb header wrong"
k describe pdb web-max
expect_rc 0 "describe pdb web-max" && { grep -Eq '^ +Allowed disruptions: +1$' "$OUT" || fail "describe: no 'Allowed disruptions:  1'"; }
k get --raw /apis/policy/v1
expect_rc 0 "get --raw /apis/policy/v1" && { grep -q '"name":"poddisruptionbudgets/status"' "$OUT" || fail "discovery lacks poddisruptionbudgets/status"; }

step "status of maxUnavailable=1 over a ReplicaSet of 3: 3 healthy, 2 desired, 3 expected, 1 allowed"
k get pdb web-max -o json
expect_rc 0 "get pdb web-max -o json" && cp "$OUT" "$T/web-max.json"
py "$T/web-max.json" <<'PY' || { cp "$T/py" "$ERR"; fail "web-max status wrong"; }
import json, sys
d = json.load(open(sys.argv[1]))
st, gen = d["status"], d["metadata"]["generation"]
want = {"currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "disruptionsAllowed": 1, "observedGeneration": gen}
for k, v in want.items():
    assert st.get(k) == v, "%s = %r, want %r (%r)" % (k, st.get(k), v, st)
c = [c for c in st["conditions"] if c["type"] == "DisruptionAllowed"]
assert len(c) == 1 and c[0]["status"] == "True" and c[0]["reason"] == "SufficientPods" and \
    c[0]["observedGeneration"] == gen and c[0]["lastTransitionTime"], c
assert "disruptedPods" not in st, st
PY

step "an eviction takes one disruption (disruptedPods, watch); the next is refused with the status' figures"
k delete pdb web-min web-pct
expect_rc 0 "delete web-min web-pct (one budget per pod for evictions)"
k cordon "$N1"
expect_rc 0 "cordon $N1 (the replacement stays Pending)"
timeout --kill-after=5 60 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$T/kcache" --request-timeout=50s \
  get pdb web-max -w --output-watch-events -o json </dev/null >"$T/pdbwatch.out" 2>"$T/pdbwatch.err" &
WATCH_PID=$!
BG_PIDS+=("$WATCH_PID")
sleep 0.5
jp pods '{range .items[?(@.metadata.labels.app=="web")]}{.metadata.name} {end}'
read -r V1 V2 _ <"$OUT"
printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s"}}' "$V1" >"$T/ev1.json"
printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s"}}' "$V2" >"$T/ev2.json"
k create --raw "/api/v1/namespaces/default/pods/$V1/eviction" -f "$T/ev1.json"
expect_rc 0 "evict $V1"
k create --raw "/api/v1/namespaces/default/pods/$V2/eviction" -f "$T/ev2.json"
[ "$RC" -ne 0 ] || fail "a second eviction went through a budget with no disruption left"
grep -q "Cannot evict pod as it would violate the pod's disruption budget" "$ERR" || fail "want the budget's 429"
wait_until 5 is pdb/web-max '{.status.currentHealthy}/{.status.desiredHealthy}/{.status.expectedPods}/{.status.disruptionsAllowed}' \
  "2/2/3/0" || fail "web-max after one eviction: want 2/2/3/0 (healthy/desired/expected/allowed)"
k get pdb web-max --no-headers
awk '{ print $4 }' "$OUT" | grep -qx 0 || fail "ALLOWED DISRUPTIONS should show 0"
jp pdb/web-max '{.status.conditions[0].status}/{.status.conditions[0].reason}'
out_is "False/InsufficientPods" "DisruptionAllowed condition after the eviction"

step "the replacement runs: the budget allows one disruption again"
k uncordon "$N1"
expect_rc 0 "uncordon $N1"
wait_until 15 is pdb/web-max '{.status.currentHealthy}/{.status.disruptionsAllowed}/{.status.conditions[0].reason}' \
  "3/1/SufficientPods" || fail "web-max after the replacement: want 3 healthy, 1 allowed, SufficientPods"
sleep 0.3
kill -TERM "$WATCH_PID" 2>/dev/null
wait "$WATCH_PID" 2>/dev/null
BG_PIDS=()
py "$T/pdbwatch.out" "$V1" <<'PY' || { cp "$T/pdbwatch.out" "$OUT"; cp "$T/py" "$ERR"; fail "the pdb watch did not see the eviction"; }
import json, sys
text, dec, i, evs = open(sys.argv[1]).read(), json.JSONDecoder(), 0, []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    ev, i = dec.raw_decode(text, i)
    evs.append(ev)
sts = [e["object"]["status"] for e in evs if e["type"] == "MODIFIED"]
# The eviction: one disruption fewer and the pod named in disruptedPods ...
ev = [s for s in sts if sys.argv[2] in s.get("disruptedPods", {})]
assert ev and ev[0]["disruptionsAllowed"] == 0, "no MODIFIED with disruptedPods[%s]: %r" % (sys.argv[2], sts)
# ... then the controller's count without it, and the figures back up.
assert sts[-1]["disruptionsAllowed"] == 1 and "disruptedPods" not in sts[-1], sts[-1]
PY

step "a spec change bumps generation; observedGeneration follows"
k patch pdb web-max --type merge -p '{"spec":{"maxUnavailable":2}}'
expect_rc 0 "patch web-max"
wait_until 5 is pdb/web-max '{.metadata.generation}/{.status.observedGeneration}/{.status.desiredHealthy}/{.status.disruptionsAllowed}' \
  "2/2/1/2" || fail "after maxUnavailable=2: want generation 2 observed, desiredHealthy 1, allowed 2"

step "maxUnavailable over pods without a controller: none expected, nothing allowed (as the controller does)"
APP=bare pod_on b1 "$N3"
APP=bare pod_on b2 "$N3"
printf '{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"bare"},"spec":{"maxUnavailable":1,"selector":{"matchLabels":{"app":"bare"}}}}' >"$T/pdb-bare.json"
k create -f "$T/pdb-bare.json"
expect_rc 0 "create pdb bare"
wait_until 15 is pdb/bare '{.status.currentHealthy}/{.status.expectedPods}/{.status.disruptionsAllowed}' "2/0/0" \
  || fail "pdb bare: want currentHealthy 2, expectedPods 0, disruptionsAllowed 0"

step "a pod whose controller kubesim does not run: the sync fails safe (SyncFailed, nothing allowed)"
cat >"$T/owned.json" <<'EOF'
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"owned","labels":{"app":"owned"},
 "ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"db","uid":"0d3c1e4a-0000-4000-8000-000000000001","controller":true}]},
 "spec":{"containers":[{"name":"main","image":"busybox"}]}}
EOF
k create -f "$T/owned.json"
expect_rc 0 "create pod owned"
printf '{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"owned"},"spec":{"maxUnavailable":1,"selector":{"matchLabels":{"app":"owned"}}}}' >"$T/pdb-owned.json"
k create -f "$T/pdb-owned.json"
expect_rc 0 "create pdb owned"
wait_until 10 is pdb/owned '{.status.disruptionsAllowed}/{.status.conditions[0].status}/{.status.conditions[0].reason}/{.status.conditions[0].message}' \
  '0/False/SyncFailed/found no controllers for pod "owned"' || fail "pdb owned: want SyncFailed naming the pod"

finish
