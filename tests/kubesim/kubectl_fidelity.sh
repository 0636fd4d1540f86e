#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubectl_fidelity.sh — drive kubesim with the real kubectl (v1.32) and check
# that what kubectl sees is what a real API server would show it.
#
# Usage: kubectl_fidelity.sh PATH/TO/kubesim
#
# Every check is a named step. All steps run (later ones may fail as a
# consequence of earlier ones); each failure prints kubectl's stdout/stderr and
# the tail of the kubesim log; the script exits 1 if any step failed.
# kubectl missing is a failure, never a skip. Everything binds to 127.0.0.1,
# every wait is bounded, and the trap kills kubesim and removes the temp dir
# on every exit path.
#
# Env: KEEP_TMP=1 keeps the temp dir (kubeconfig, kubesim.log) for debugging.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
lib_require "${1:-}" kubectl

TOKEN="fidelity-token-$$"

# pod_yaml NAME CPU MEMORY — a busybox pod running sleep.
pod_yaml() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels:
    app: fidelity
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
    resources:
      requests:
        cpu: $2
        memory: $3
EOF
}

# ------------------------------------------------------------------ start kubesim
echo "kubectl: $KUBECTL ($("$KUBECTL" version --client 2>/dev/null | head -n1))"
echo "workdir: $T"
mkdir -p "$T/kcache"
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name fid \
  --nodes 2 --node-cpu 4 --node-memory 8Gi --node-pods 20 \
  --namespace-quota pods=12 --schedule-ms 50 --image-pull-ms 200 --start-ms 100

step "kubeconfig: current-context is fid, server is https on 127.0.0.1"
k config current-context
expect_rc 0 "kubectl config current-context" && out_is "fid" "current context"
k config view --minify -o 'jsonpath={.clusters[0].cluster.server}'
if expect_rc 0 "kubectl config view"; then
  case "$(cat "$OUT")" in
    https://127.0.0.1:*) ;;
    *) fail "server should be https://127.0.0.1:PORT" ;;
  esac
fi

# --------------------------------------------------------------- nodes
step "get nodes: 2 nodes, both Ready"
k get nodes
if expect_rc 0 "kubectl get nodes"; then
  n=$(awk 'NR > 1 && $2 == "Ready"' "$OUT" | wc -l)
  total=$(awk 'NR > 1' "$OUT" | wc -l)
  if [ "$total" -ne 2 ] || [ "$n" -ne 2 ]; then
    fail "expected 2 Ready nodes, saw $n Ready of $total"
  fi
  head -n1 "$OUT" | grep -q '^NAME[[:space:]]\+STATUS' || fail "expected a NAME STATUS ... table header"
fi

step "get nodes -o json: allocatable cpu \"4\", pods \"20\""
k get nodes -o json
if expect_rc 0 "kubectl get nodes -o json"; then
  if ! python3 - "$OUT" >"$T/py" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
items = d.get("items", [])
assert d.get("kind") == "List" or d.get("kind") == "NodeList", "kind %r" % d.get("kind")
assert len(items) == 2, "expected 2 nodes, got %d" % len(items)
for n in items:
    name = n["metadata"]["name"]
    a = n["status"]["allocatable"]
    assert a.get("cpu") == "4", "%s allocatable.cpu = %r" % (name, a.get("cpu"))
    assert a.get("pods") == "20", "%s allocatable.pods = %r" % (name, a.get("pods"))
    assert "memory" in a, "%s has no allocatable.memory" % name
    ready = [c for c in n["status"].get("conditions", []) if c.get("type") == "Ready"]
    assert ready and ready[0].get("status") == "True", "%s Ready condition %r" % (name, ready)
PY
  then
    fail "node JSON check: $(cat "$T/py")"
  fi
fi

# --------------------------------------------------------------- empty list
step "get pods on an empty namespace: 'No resources found'"
k get pods
if expect_rc 0 "kubectl get pods"; then
  grep -q "No resources found in default namespace" "$OUT" "$ERR" \
    || fail "expected 'No resources found in default namespace.'"
fi

step "get resourcequota -o json: hard pods \"12\""
k get resourcequota -o json
if expect_rc 0 "kubectl get resourcequota -o json"; then
  if ! python3 - "$OUT" >"$T/py" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
items = d.get("items", [])
assert items, "no ResourceQuota in default namespace"
hard = [q.get("spec", {}).get("hard", {}).get("pods") for q in items]
assert "12" in hard, "spec.hard.pods values: %r" % hard
PY
  then
    fail "quota JSON check: $(cat "$T/py")"
  fi
fi

# --------------------------------------------------------------- create p1
pod_yaml p1 100m 64Mi >"$T/p1.yaml"
step "create -f pod.yaml (p1)"
k create -f "$T/p1.yaml"
expect_rc 0 "kubectl create -f p1.yaml" && out_is "pod/p1 created" "create output"

step "wait --for=condition=Ready pod/p1"
k wait --for=condition=Ready pod/p1 --timeout=30s
expect_rc 0 "kubectl wait" && out_is "pod/p1 condition met" "wait output"

step "p1 phase Running with a podIP"
k get pod p1 -o 'jsonpath={.status.phase}'
expect_rc 0 "get phase" && out_is "Running" "status.phase"
k get pod p1 -o 'jsonpath={.status.podIP}'
if expect_rc 0 "get podIP"; then
  [ -n "$(cat "$OUT")" ] || fail "status.podIP is empty"
fi

step "get pods (Table) lists p1 as Running 1/1"
k get pods
if expect_rc 0 "kubectl get pods"; then
  awk '$1 == "p1" && $2 == "1/1" && $3 == "Running" {found = 1} END {exit !found}' "$OUT" \
    || fail "expected a row 'p1 1/1 Running ...'"
fi

# --------------------------------------------------------------- watch
# watch_fail MESSAGE — fail showing the background watch's output.
watch_fail() {
  cp "$T/watch.out" "$OUT"
  cp "$T/watch.err" "$ERR"
  RC=-1
  LAST_CMD="kubectl get pods -w --output-watch-events (background)"
  if ! kill -0 "$WATCH_PID" 2>/dev/null; then
    set -- "$* (the watch had already exited)"
  fi
  fail "$*"
}
watch_has() { grep -Eq "$1" "$T/watch.out"; }
watch_count() { grep -Ec "$1" "$T/watch.out"; }

step "get pods -w sees a new pod (p2) and a label change (p1)"
timeout --kill-after=5 90 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$T/kcache" \
  --request-timeout=60s get pods -w --output-watch-events \
  </dev/null >"$T/watch.out" 2>"$T/watch.err" &
WATCH_PID=$!
BG_PIDS+=("$WATCH_PID")
# The initial list arrives as ADDED events.
wait_until 10 watch_has '^ADDED[[:space:]]+p1[[:space:]]' \
  || watch_fail "watch did not print the initial 'ADDED p1 ...' line within 10s"
pod_yaml p2 100m 64Mi >"$T/p2.yaml"
k create -f "$T/p2.yaml"
expect_rc 0 "kubectl create -f p2.yaml"
wait_until 10 watch_has '^ADDED[[:space:]]+p2[[:space:]]' \
  || watch_fail "no 'ADDED p2 ...' line within 10s of creating p2"
# A label change on p1 must show up as MODIFIED on the same watch.
before=$(watch_count '^MODIFIED[[:space:]]+p1[[:space:]]')
k label pod p1 watched=yes
expect_rc 0 "kubectl label pod p1 watched=yes"
p1_modified() { [ "$(watch_count '^MODIFIED[[:space:]]+p1[[:space:]]')" -gt "$before" ]; }
wait_until 10 p1_modified \
  || watch_fail "no new 'MODIFIED p1 ...' line within 10s of labelling p1"
kill -TERM "$WATCH_PID" 2>/dev/null
wait "$WATCH_PID" 2>/dev/null
BG_PIDS=()

# --------------------------------------------------------------- conflicts
step "label with a stale --resource-version fails with Conflict"
k get pod p1 -o 'jsonpath={.metadata.resourceVersion}'
expect_rc 0 "get resourceVersion"
stale_rv="$(cat "$OUT")"
[ -n "$stale_rv" ] || fail "metadata.resourceVersion is empty"
k label pod p1 bump=1
expect_rc 0 "kubectl label pod p1 bump=1 (to make the RV stale)"
k label pod p1 a=b --resource-version="$stale_rv"
if [ "$RC" -eq 0 ]; then
  fail "label with stale resourceVersion $stale_rv succeeded"
elif ! grep -q "the object has been modified" "$ERR"; then
  fail "expected 'the object has been modified' (409 Conflict)"
fi

step "label without a precondition succeeds and sticks"
k label pod p1 a=b
expect_rc 0 "kubectl label pod p1 a=b" && out_is "pod/p1 labeled" "label output"
k get pod p1 -o 'jsonpath={.metadata.labels.a}'
expect_rc 0 "get label" && out_is "b" "metadata.labels.a"

# --------------------------------------------------------------- exec
step "exec p1 -- echo hi"
k exec p1 -- echo hi
if expect_rc 0 "kubectl exec echo"; then
  printf 'hi\n' | cmp -s - "$OUT" || fail "stdout is not exactly 'hi\\n' ($(od -c "$OUT" | head -n 3 | tr '\n' ' '))"
fi

step "exec p1 -- sh -c 'exit 3' exits 3"
k exec p1 -- sh -c 'exit 3'
if expect_rc 3 "kubectl exec exit 3"; then
  grep -q "command terminated with exit code 3" "$ERR" \
    || fail "expected 'command terminated with exit code 3' on stderr"
fi

step "exec -i p1 -- cat passes stdin through"
printf 'hello\n' >"$T/stdin.txt"
k_in "$T/stdin.txt" exec -i p1 -- cat
expect_rc 0 "kubectl exec -i cat" && out_is "hello" "cat output"

step "exec keeps stdout and stderr apart"
k exec p1 -- sh -c 'echo out; echo err >&2'
if expect_rc 0 "kubectl exec stdout/stderr"; then
  out_is "out" "stdout"
  grep -qx 'err' "$ERR" || fail "stderr has no line 'err'"
  grep -q 'err' "$OUT" && fail "'err' leaked into stdout"
fi

step "exec into a missing pod fails NotFound"
k exec nosuchpod -- echo hi
if [ "$RC" -eq 0 ]; then
  fail "exec into nosuchpod succeeded"
else
  grep -q 'pods "nosuchpod" not found' "$ERR" || fail "expected 'pods \"nosuchpod\" not found'"
fi

# --------------------------------------------------------------- delete
step "delete pod p1 returns once it is gone"
k delete pod p1 --timeout=30s
# kubectl 1.33 appends " from default namespace"; accept both.
if expect_rc 0 "kubectl delete pod p1"; then
  grep -q '^pod "p1" deleted' "$OUT" || fail "expected 'pod \"p1\" deleted'"
fi
k get pod p1
if [ "$RC" -eq 0 ]; then
  fail "p1 still exists after delete returned"
else
  if ! grep -q 'NotFound' "$ERR" || ! grep -q 'pods "p1" not found' "$ERR"; then
    fail "expected 'Error from server (NotFound): pods \"p1\" not found'"
  fi
fi

# --------------------------------------------------------------- unschedulable
# `cpu: 64` is a YAML integer, so kubectl sends a JSON number: the API server
# must accept it as a Quantity and hand it back as the string "64".
step "a pod requesting cpu 64 stays Pending/Unschedulable"
pod_yaml big 64 64Mi >"$T/big.yaml"
k create -f "$T/big.yaml"
if expect_rc 0 "kubectl create -f big.yaml"; then
  sleep 1
  reason=""
  for _ in $(seq 1 20); do
    k get pod big -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}'
    reason="$(cat "$OUT")"
    [ "$reason" = "Unschedulable" ] && break
    sleep 0.5
  done
  [ "$reason" = "Unschedulable" ] || fail "PodScheduled reason is '$reason', want Unschedulable"
  k get pod big -o 'jsonpath={.status.phase}'
  expect_rc 0 "get big phase" && out_is "Pending" "big status.phase"
  k get pod big -o 'jsonpath={.spec.nodeName}'
  [ -z "$(cat "$OUT")" ] || fail "unschedulable pod has spec.nodeName '$(cat "$OUT")'"
  k get pod big -o json
  if expect_rc 0 "get pod big -o json"; then
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["spec"]["containers"][0]["resources"]["requests"]; sys.exit(0 if r.get("cpu") == "64" else 1)' "$OUT" \
      || fail "requests.cpu should read back as the string \"64\" (a Quantity), got: $(grep -o '"cpu": *[^,}]*' "$OUT" | head -n1)"
  fi
fi

# --------------------------------------------------------------- protobuf creates
# kubectl create secret generic / configmap / namespace post the object as
# application/vnd.kubernetes.protobuf; kubesim decodes those kinds.
step "kubectl create secret generic / configmap / namespace (protobuf bodies)"
k create namespace proto-ns
expect_rc 0 "kubectl create namespace proto-ns"
k create secret generic s1 -n proto-ns --from-literal=HF_TOKEN=hf-x1 --from-literal=EMPTY=
if expect_rc 0 "kubectl create secret generic s1"; then
  k get secret s1 -n proto-ns -o 'jsonpath={.data.HF_TOKEN}/{.type}'
  expect_rc 0 "get secret s1" && out_is "aGYteDE=/Opaque" "secret s1 data.HF_TOKEN and type"
  k get secret s1 -n proto-ns -o yaml
  expect_rc 0 "get secret s1 -o yaml" && { grep -q '^  EMPTY: ""' "$OUT" || fail "EMPTY key missing: $(cat "$OUT")"; }
fi
k create configmap c1 -n proto-ns --from-literal=a=b
if expect_rc 0 "kubectl create configmap c1"; then
  k get configmap c1 -n proto-ns -o 'jsonpath={.data.a}'
  expect_rc 0 "get configmap c1" && out_is "b" "configmap c1 data.a"
fi
k delete secret s1 -n proto-ns
expect_rc 0 "kubectl delete secret s1"

# --------------------------------------------------------------- quota
step "creating pods past the quota (pods=12) is Forbidden: exceeded quota"
k get pods -o name
expect_rc 0 "kubectl get pods -o name"
existing=$(grep -c '^pod/' "$OUT")
allowed=$((12 - existing))
echo "pods already in the namespace: $existing; expecting $allowed more to fit"
created=0
forbidden=0
for i in $(seq 1 15); do
  pod_yaml "q$i" 10m 16Mi >"$T/q.yaml"
  k_in "$T/q.yaml" create -f -
  if [ "$RC" -eq 0 ]; then
    created=$((created + 1))
    continue
  fi
  if grep -q 'Forbidden' "$ERR" && grep -q 'exceeded quota' "$ERR"; then
    forbidden=1
  else
    fail "create q$i failed, but not with 'Forbidden ... exceeded quota'"
  fi
  break
done
if [ "$forbidden" -ne 1 ]; then
  [ "$STEP_FAILED" -eq 1 ] || fail "created $created pods without hitting the quota"
elif [ "$created" -ne "$allowed" ]; then
  fail "quota hit after $created more pods; expected exactly $allowed (12 - $existing existing)"
fi

finish
