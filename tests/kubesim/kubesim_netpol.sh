#!/usr/bin/env bash
# shellcheck disable=SC2317,SC2016,SC2015  # helpers via traps; $ in pod commands expands in the pod; a && b || fail
# kubesim_netpol.sh — NetworkPolicy through the real kubectl, and egress
# enforced in the pods' own network namespaces:
#   - kubectl apply -f / get / get -o json / delete of a NetworkPolicy:
#     created, configured, unchanged; the Table's POD-SELECTOR column; the
#     API server's defaults (policyTypes from the rules, port protocol TCP)
#     and generation (a new one only when the defaulted spec changes);
#     422 Invalid naming the field for a cidr that is not one and an except
#     that is not a strict subset of its cidr;
#   - as root (pods with network namespaces): a policy selecting pod c1
#     lets it reach this host's listener on the bridge address and port,
#     and refuses the other pod (EHOSTUNREACH at once), another port of the
#     host, while c2, not selected, reaches both; labelling c2 puts it under
#     the policy; an ipBlock with except; deleting the policy opens c1 again.
# Needs kubectl, python3, curl; the enforcement steps need root and are
# skipped (with a note) otherwise, and nftables (scripts/lib/packages.sh).
#
# Usage: kubesim_netpol.sh PATH/TO/kubesim
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
AGENT="$HERE/fedrouter-agent"

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}" curl kubectl python3

TOKEN="netpol-token-$$"
PORT=18512
json() { python3 -c "import json,sys; d = json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name np --nodes 2 --node-cpu 32 --agent-binary "$AGENT"
BASE="$(kubeconfig_server)"
ADMIN="$T/admin.json"
sim_admin() { # sim_admin PATH — GET /_sim/PATH into $ADMIN
  RC=$(curl -sk --max-time 10 -o "$ADMIN" -w "%{http_code}" -H "Authorization: Bearer $TOKEN" "$BASE/_sim/$1")
}

# --------------------------------------------------------------- the API
step "kubectl apply -f creates a NetworkPolicy; the server fills in its defaults"
cat >"$T/np.yaml" <<'EOF'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: client-out
spec:
  podSelector:
    matchLabels:
      app: client
  egress:
    - to:
        - ipBlock:
            cidr: 192.0.2.0/24
      ports:
        - port: 443
EOF
k apply -f "$T/np.yaml"
expect_rc 0 "apply" && grep -q "networkpolicy.networking.k8s.io/client-out created" "$OUT" || fail "apply: $(cat "$OUT")"
k get networkpolicy client-out -o json
expect_rc 0 "get -o json"
[ "$(json "$OUT" 'd["spec"]["policyTypes"]')" = "['Ingress', 'Egress']" ] || fail "policyTypes: $(cat "$OUT")"
[ "$(json "$OUT" 'd["spec"]["egress"][0]["ports"][0]["protocol"]')" = TCP ] || fail "port protocol: $(cat "$OUT")"
[ "$(json "$OUT" 'd["metadata"]["generation"]')" = 1 ] || fail "generation: $(cat "$OUT")"

step "kubectl get networkpolicy / netpol: NAME, POD-SELECTOR, AGE"
k get networkpolicy
expect_rc 0 "get networkpolicy"
head -1 "$OUT" | grep -Eq '^NAME +POD-SELECTOR +AGE$' || fail "header: $(cat "$OUT")"
grep -Eq '^client-out +app=client +[0-9]+s$' "$OUT" || fail "row: $(cat "$OUT")"
k get netpol -A
expect_rc 0 "get netpol -A" && grep -q "client-out" "$OUT" || fail "short name: $(cat "$OUT")"

step "apply again: the spec is the same once defaulted (generation 1); a change is generation 2; unchanged"
# The egress list is atomic and the server defaulted a protocol the file
# leaves out, so kubectl sends the list again ("configured"), as it does
# with an API server; the spec is the same once defaulted: no new generation.
k apply -f "$T/np.yaml"
expect_rc 0 "apply again"
k get networkpolicy client-out -o 'jsonpath={.metadata.generation}'
expect_rc 0 "get" && out_is 1 "the generation after the same spec again"
sed 's/port: 443/port: 8443/' "$T/np.yaml" >"$T/np2.yaml"
k apply -f "$T/np2.yaml"
expect_rc 0 "apply changed" && grep -q "client-out configured" "$OUT" || fail "changed: $(cat "$OUT")"
k get networkpolicy client-out -o 'jsonpath={.spec.egress[0].ports[0].port} {.metadata.generation}'
expect_rc 0 "get changed" && out_is "8443 2" "the changed port and generation"
sed 's/- port: 8443/- port: 8443\n          protocol: TCP/' "$T/np2.yaml" >"$T/np3.yaml"
k apply -f "$T/np3.yaml"
expect_rc 0 "apply with the protocol written out"
k apply -f "$T/np3.yaml"
expect_rc 0 "apply it again" && grep -q "client-out unchanged" "$OUT" || fail "reapply: $(cat "$OUT")"
k get networkpolicy client-out -o 'jsonpath={.metadata.generation}'
expect_rc 0 "get" && out_is 2 "the generation after applies that change nothing"

step "422 Invalid naming the field: a cidr that is not one, an except outside its cidr"
for bad in "cidr: 10.0.0.0/33|spec.egress[0].to[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value" \
           "cidr: example.com|spec.egress[0].to[0].ipBlock.cidr: Invalid value: \"example.com\": must be a valid CIDR value" \
           "cidr: 10.0.0.0/8\n            except: [192.168.0.0/16]|spec.egress[0].to[0].ipBlock.except[0]: Invalid value: \"192.168.0.0/16\": must be a strict subset of \`cidr\`" \
           "cidr: 10.0.0.0/8\n            except: [10.0.0.0/8]|spec.egress[0].to[0].ipBlock.except[0]: Invalid value: \"10.0.0.0/8\": must be a strict subset of \`cidr\`"; do
  block="${bad%%|*}"
  want="${bad#*|}"
  printf 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: bad\nspec:\n  podSelector: {}\n  egress:\n    - to:\n        - ipBlock:\n            %b\n' "$block" >"$T/bad.yaml"
  k apply -f "$T/bad.yaml"
  expect_rc 1 "apply of a bad ipBlock" || continue
  grep -qF 'The NetworkPolicy "bad" is invalid' "$ERR" && grep -qF "$want" "$ERR" || fail "want '$want': $(cat "$ERR")"
done
k get networkpolicy bad
expect_rc 1 "the bad policy is not stored"

step "kubectl delete networkpolicy; then NotFound"
k delete networkpolicy client-out
expect_rc 0 "delete" && grep -q 'networkpolicy.networking.k8s.io "client-out" deleted' "$OUT" || fail "delete: $(cat "$OUT")"
k get networkpolicy client-out
expect_rc 1 "get after delete" && grep -q 'NotFound\|not found' "$ERR" || fail "after delete: $(cat "$ERR")"

# ---------------------------------------------------------- enforcement
sim_admin netpol
if [ "$(id -u)" != 0 ] || [ "$(json "$ADMIN" 'd["enforcing"]')" != True ]; then
  echo "note: pods have no network namespaces of their own (not root): enforcement is not checked"
  finish
fi

pod_json() { # pod_json NAME LABEL [TAIL_JSON]
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":{"app":"%s"}},"spec":{"containers":[{"name":"c","image":"python:3.12","command":["/opt/fedrouter/fedrouter-agent"%s]}]}}\n' \
    "$1" "$2" "${3:+,\"--\",$3}"
}
SERVER='"python3","-m","http.server","8000","--bind","0.0.0.0"'
# connect POD IP PORT — "ok", or "refused <errno name>" as the pod sees it.
connect() {
  k exec "$1" -- python3 -c 'import errno, socket, sys
s = socket.socket(); s.settimeout(5)
e = s.connect_ex((sys.argv[1], int(sys.argv[2])))
print("ok" if e == 0 else "refused " + errno.errorcode.get(e, str(e)))' "$2" "$3"
  expect_rc 0 "exec in $1" || return 1
  cat "$OUT"
}
# in_force POD NAMES — waits until kubesim applied the policies NAMES
# (comma-separated, "" for none) to POD.
in_force() {
  local _
  for _ in $(seq 1 200); do
    sim_admin netpol
    python3 - "$ADMIN" "$1" "$2" <<'PY' && return 0
import json, sys
d = json.load(open(sys.argv[1]))
want = sorted(x for x in sys.argv[3].split(",") if x)
sys.exit(not any(p["name"] == sys.argv[2] and not p["pending"] and sorted(p["policies"]) == want and
                 p["error"] == "" for p in d["pods"]))
PY
    sleep 0.05
  done
  fail "kubesim did not apply [$2] to $1: $(cat "$ADMIN")"
  return 1
}

step "two pods and a listener of this host on the bridge address; without a policy both reach everything"
GW="$(curl -sk --max-time 10 -H "Authorization: Bearer $TOKEN" "$BASE/_sim/state" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["pod_network"]["gateway"])')"
python3 - "$GW" "$PORT" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
while True:
    c, _ = s.accept(); c.close()
PY
BG_PIDS+=("$!")
pod_json c1 client "$SERVER" >"$T/c1.json"
pod_json c2 other "$SERVER" >"$T/c2.json"
k create -f "$T/c1.json" && k create -f "$T/c2.json"
k wait --for=condition=Ready pod/c1 pod/c2 --timeout=30s
expect_rc 0 "c1, c2 Ready"
k get pod c1 -o 'jsonpath={.status.podIP}'; IP1="$(cat "$OUT")"
k get pod c2 -o 'jsonpath={.status.podIP}'; IP2="$(cat "$OUT")"
wait_until 20 sh -c "curl -s -o /dev/null --max-time 2 http://$IP2:8000/ && curl -s -o /dev/null --max-time 2 http://$IP1:8000/" ||
  fail "the pods' servers do not answer"
[ "$(connect c1 "$IP2" 8000)" = ok ] || fail "c1 -> c2 without a policy: $(cat "$OUT")"
[ "$(connect c1 "$GW" "$PORT")" = ok ] || fail "c1 -> host without a policy: $(cat "$OUT")"

step "a policy selecting c1: only the host's address and port; the rest refused at once"
cat >"$T/only-host.yaml" <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: only-host
spec:
  podSelector:
    matchLabels:
      app: client
  policyTypes: [Egress]
  egress:
    - to:
        - ipBlock:
            cidr: $GW/32
      ports:
        - protocol: TCP
          port: $PORT
EOF
k apply -f "$T/only-host.yaml"
expect_rc 0 "apply only-host"
in_force c1 only-host && in_force c2 ""
[ "$(connect c1 "$GW" "$PORT")" = ok ] || fail "c1 -> the allowed host port: $(cat "$OUT")"
[ "$(connect c1 "$IP2" 8000)" = "refused EHOSTUNREACH" ] || fail "c1 -> c2 under the policy: $(cat "$OUT")"
[ "$(connect c1 "$GW" "$((PORT + 1))")" = "refused EHOSTUNREACH" ] || fail "c1 -> another port of the host: $(cat "$OUT")"
[ "$(connect c2 "$IP1" 8000)" = ok ] || fail "c2 (not selected) -> c1: $(cat "$OUT")"
# Connections into c1 (the proxy, this host) still work: replies pass.
curl -s -o /dev/null --max-time 5 "http://$IP1:8000/" || fail "this host -> c1 under an egress policy"
k get --raw "/api/v1/namespaces/default/pods/c1:8000/proxy/"
expect_rc 0 "the pod proxy to c1"

step "labelling c2 app=client puts it under the policy; an ipBlock with except"
k label pod c2 app=client --overwrite
expect_rc 0 "label c2"
in_force c2 only-host
[ "$(connect c2 "$IP1" 8000)" = "refused EHOSTUNREACH" ] || fail "c2 relabelled -> c1: $(cat "$OUT")"
cat >"$T/except.yaml" <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: all-but-c1
spec:
  podSelector:
    matchLabels:
      app: client
  policyTypes: [Egress]
  egress:
    - to:
        - ipBlock:
            cidr: 0.0.0.0/0
            except: [$IP1/32]
EOF
k apply -f "$T/except.yaml"
expect_rc 0 "apply all-but-c1"
in_force c2 "all-but-c1,only-host"
[ "$(connect c2 "$GW" "$((PORT + 1))")" = "refused ECONNREFUSED" ] || fail "c2 -> host:$((PORT + 1)) (allowed; nothing listens): $(cat "$OUT")"
[ "$(connect c2 "$IP1" 8000)" = "refused EHOSTUNREACH" ] || fail "c2 -> c1 (excepted): $(cat "$OUT")"
[ "$(connect c1 "$IP2" 8000)" = ok ] || fail "c1 -> c2 (allowed by all-but-c1): $(cat "$OUT")"

step "deleting the policies opens the pods again"
k delete networkpolicy only-host all-but-c1
expect_rc 0 "delete both"
in_force c1 "" && in_force c2 ""
[ "$(connect c1 "$GW" "$((PORT + 1))")" = "refused ECONNREFUSED" ] || fail "c1 -> host:$((PORT + 1)) after the delete: $(cat "$OUT")"
[ "$(connect c2 "$IP1" 8000)" = ok ] || fail "c2 -> c1 after the delete: $(cat "$OUT")"
grep -q "cannot apply its egress rules" "$LOG" && fail "kubesim failed to apply rules: $(grep 'egress rules' "$LOG" | head -3)"

finish
