#!/usr/bin/env bash
# shellcheck disable=SC2317,SC2016,SC2015  # helpers via traps; $ in pod commands expands in the pod; a && b || fail
# kubesim_network.sh — black-box checks of kubesim's pod network, with
# curl, kubectl, python3 and a stand-in fedrouter-agent:
#   - as root: a bridge per kubesim with the range's first address, pods in
#     network namespaces of their own with addresses from the range; two
#     pods each serving 0.0.0.0:8000 do not collide and answer through the
#     pod proxy and directly from this host at their podIPs (agent's port
#     49983 too); `kubectl get pod -o wide` shows the IPs; pods reach each
#     other but nothing off the machine (no default route); a deleted pod's
#     veth goes; a second kubesim takes another range, an explicit range
#     that is taken is refused; the bridge goes on SIGTERM, and a stale one
#     left by SIGKILL is replaced at the next start;
#   - without network namespaces (--no-pod-namespaces, what a non-root
#     kubesim gets): each pod its own 127.x address, which its agent binds
#     and the proxy dials; logged once.
# The bridge steps need root and are skipped (with a note) otherwise.
#
# Usage: kubesim_network.sh PATH/TO/kubesim
# Loopback and namespaces this test's kubesims make only; every wait
# bounded; everything killed and removed at exit.
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
AGENT="$HERE/fedrouter-agent"

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}" curl kubectl python3

TOKEN="net-token-$$"
ROOT_USER=0
[ "$(id -u)" = 0 ] && ROOT_USER=1

# jq-less JSON field: json FILE EXPR (python, d = the document)
json() { python3 -c "import json,sys; d = json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# sim_state BASE — /_sim/state of the kubesim at BASE into $OUT.
sim_state() {
  RC=$(curl -sk --max-time 10 -o "$OUT" -w "%{http_code}" -H "Authorization: Bearer $TOKEN" "$1/_sim/state")
}

# agent_pod NAME [TAIL_JSON] — a pod running the stand-in agent and, after
# it, TAIL (a JSON list's items) as the container's main command.
agent_pod() {
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"containers":[{"name":"c","image":"python:3.12","command":["/opt/fedrouter/fedrouter-agent"%s],"ports":[{"containerPort":49983}]}]}}\n' \
    "$1" "${2:+,\"--\",$2}"
}

make_agent_pod() { # make_agent_pod NAME [TAIL_JSON]
  agent_pod "$@" >"$T/$1.json"
  k create -f "$T/$1.json"
  expect_rc 0 "create $1" || return 1
  k wait --for=condition=Ready "pod/$1" --timeout=30s
  expect_rc 0 "$1 Ready"
}

pod_ip() { k get pod "$1" -o 'jsonpath={.status.podIP}'; cat "$OUT"; }

# in_range IP CIDR — exit 0 when IP lies in CIDR.
in_range() {
  python3 -c 'import ipaddress, sys; sys.exit(ipaddress.ip_address(sys.argv[1]) not in ipaddress.ip_network(sys.argv[2]))' "$1" "$2"
}

# serve_ok URL — the stand-in's or http.server's answer is 200/204.
http_code() { curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$1"; }

SERVER='"python3","-m","http.server","8000","--bind","0.0.0.0"'

# bridge_gone NAME IFINDEX — the bridge NAME that had IFINDEX is gone (other
# kubesims on this machine may take the freed range, and make a bridge of
# that name anew, at once).
ifindex() { cat "/sys/class/net/$1/ifindex" 2>/dev/null; }
bridge_gone() { [ "$(ifindex "$1")" != "$2" ]; }

start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name net --nodes 2 --node-cpu 32 --agent-binary "$AGENT"
BASE="$(kubeconfig_server)"

if [ "$ROOT_USER" = 1 ]; then
  # ---------------------------------------------------------------- bridge
  step "kubesim makes a bridge for its pod range, with the range's first address"
  sim_state "$BASE"
  expect_rc 200 "/_sim/state"
  CIDR="$(json "$OUT" 'd["pod_network"]["cidr"]')"
  BRIDGE="$(json "$OUT" 'd["pod_network"]["bridge"]')"
  GW="$(json "$OUT" 'd["pod_network"]["gateway"]')"
  [ "$(json "$OUT" 'd["pod_network"]["mode"]')" = bridge ] || fail "pod_network: $(cat "$OUT")"
  [ -d "/sys/class/net/$BRIDGE" ] || fail "no bridge $BRIDGE on this host"
  python3 - "$BRIDGE" "$GW" <<'PY' || fail "$BRIDGE lacks $GW"
import fcntl, socket, struct, sys
s = socket.socket()
addr = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", sys.argv[1].encode()))  # SIOCGIFADDR
sys.exit(socket.inet_ntoa(addr[20:24]) != sys.argv[2])
PY
  [ "$(cat "/proc/sys/net/ipv4/conf/$BRIDGE/forwarding" 2>/dev/null)" = 0 ] ||
    fail "IPv4 forwarding is on for $BRIDGE: pods' packets could be routed off this machine"
  echo "pod range $CIDR on $BRIDGE ($GW)"
  BRIDGE_MAC="$(cat "/sys/class/net/$BRIDGE/address")"
  BRIDGE_IDX="$(ifindex "$BRIDGE")"

  step "two pods each serve 0.0.0.0:8000 on addresses of their own; kubectl get pod -o wide shows them"
  make_agent_pod s1 "$SERVER"
  make_agent_pod s2 "$SERVER"
  IP1="$(pod_ip s1)"
  IP2="$(pod_ip s2)"
  [ -n "$IP1" ] && [ -n "$IP2" ] && [ "$IP1" != "$IP2" ] || fail "podIPs '$IP1' '$IP2'"
  in_range "$IP1" "$CIDR" && in_range "$IP2" "$CIDR" || fail "podIPs $IP1 $IP2 not in $CIDR"
  k get pods s1 s2 -o wide
  expect_rc 0 "get -o wide"
  grep -Eq "^s1 .* $IP1 " "$OUT" && grep -Eq "^s2 .* $IP2 " "$OUT" || fail "-o wide: $(cat "$OUT")"

  step "both answer through the pod proxy and directly from this host, port 8000 and the agent's 49983"
  for n in s1 s2; do
    ip="$IP1"
    [ "$n" = s2 ] && ip="$IP2"
    ok=0
    for _ in $(seq 1 100); do  # http.server starts after the agent is Ready
      [ "$(http_code "http://$ip:8000/")" = 200 ] && { ok=1; break; }
      sleep 0.1
    done
    [ "$ok" = 1 ] || fail "$n: http://$ip:8000/ does not answer"
    LAST_CMD="kubectl get --raw .../pods/$n:8000/proxy/"
    k get --raw "/api/v1/namespaces/default/pods/$n:8000/proxy/"
    expect_rc 0 "proxy to $n:8000" && grep -q "Directory listing" "$OUT" || fail "$n proxy: $(head -c 200 "$OUT")"
    [ "$(http_code "http://$ip:49983/health")" = 204 ] || fail "$n: the agent does not answer on $ip:49983"
  done

  step "pods reach each other, and nothing off this machine (no default route)"
  k exec s1 -- python3 -c "import urllib.request; print(urllib.request.urlopen('http://$IP2:8000/', timeout=5).status)"
  expect_rc 0 "s1 -> s2" && out_is 200 "s1 reaches s2:8000"
  k exec s1 -- python3 -c 'import errno, socket; s = socket.socket(); s.settimeout(3); print(errno.errorcode.get(s.connect_ex(("192.0.2.1", 80))))'
  expect_rc 0 "connect off the machine" && out_is ENETUNREACH "a connect to 192.0.2.1"
  k exec s1 -- sh -c 'tail -n +2 /proc/net/route | grep -c .'
  expect_rc 0 "routes" && out_is 1 "the pod's routes: its range only"

  step "deleting a pod removes its veth"
  VETH="ksv$(python3 -c 'import ipaddress, sys; print("%08x" % int(ipaddress.ip_address(sys.argv[1])))' "$IP2")"
  [ -e "/sys/class/net/$VETH" ] || fail "no veth $VETH for s2"
  k delete pod s2 --wait=true
  expect_rc 0 "delete s2"
  wait_until 10 test ! -e "/sys/class/net/$VETH" || fail "$VETH still there"

  step "the bridge keeps its MAC address as pods come and go (pods' neighbour entries stay right)"
  # A bridge without one of its own takes its lowest port's: a pod joining
  # or leaving would change it under the others' cached gateway entries.
  for n in m1 m2 m3 m4; do
    make_agent_pod "$n"
    [ "$(cat "/sys/class/net/$BRIDGE/address")" = "$BRIDGE_MAC" ] ||
      fail "the bridge's MAC changed from $BRIDGE_MAC to $(cat "/sys/class/net/$BRIDGE/address") when $n joined"
  done
  k delete pod m1 m2 m3 m4 --wait=true
  [ "$(cat "/sys/class/net/$BRIDGE/address")" = "$BRIDGE_MAC" ] || fail "the bridge's MAC changed when pods left"
  case "$BRIDGE_MAC" in 02:6b:*) ;; *) fail "the bridge's MAC $BRIDGE_MAC is not kubesim's (02:6b:...)" ;; esac

  step "a second kubesim takes another range; an explicit range that is taken is refused"
  mkdir -p "$T/k2"
  setsid "$KUBESIM" --port-file "$T/k2/port" --workdir "$T/k2/wd" --token "$TOKEN" --hide "$T" \
    </dev/null >"$T/k2.log" 2>&1 &
  K2=$!
  BG_PIDS+=("$K2")
  wait_until 20 test -s "$T/k2/port" || fail "the second kubesim did not start: $(tail -n 5 "$T/k2.log")"
  sim_state "http://127.0.0.1:$(cat "$T/k2/port")"
  CIDR2="$(json "$OUT" 'd["pod_network"]["cidr"]')"
  BRIDGE2="$(json "$OUT" 'd["pod_network"]["bridge"]')"
  BRIDGE2_IDX="$(ifindex "$BRIDGE2")"
  [ -n "$CIDR2" ] && [ "$CIDR2" != "$CIDR" ] && [ "$BRIDGE2" != "$BRIDGE" ] || fail "second range $CIDR2 ($BRIDGE2), first $CIDR"
  LAST_CMD="kubesim --pod-cidr $CIDR (taken)"
  timeout 20 "$KUBESIM" --pod-cidr "$CIDR" --port-file "$T/k3.port" --workdir "$T/k3" >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 2 "a taken --pod-cidr" && grep -q "is taken" "$ERR" || fail "taken range: $(cat "$ERR")"
  [ -e "$T/k3.port" ] && fail "the refused kubesim wrote its port file"
  kill -TERM "$K2"
  wait "$K2" || fail "second kubesim exit status $?"
  bridge_gone "$BRIDGE2" "$BRIDGE2_IDX" || fail "$BRIDGE2 left after SIGTERM"

  step "a bridge left by a killed kubesim is replaced at the next start; SIGTERM removes it"
  mkdir -p "$T/k4"
  START4() {
    setsid "$KUBESIM" --port-file "$T/k4/port" --workdir "$T/k4/wd" --pod-cidr "$CIDR4" --agent-binary "$AGENT" \
      --write-kubeconfig "$T/k4/kubeconfig" --hide "$T" </dev/null >>"$T/k4.log" 2>&1 &
    K4=$!
    BG_PIDS+=("$K4")
  }
  # A range of our own (retried when another kubesim on the machine has it).
  for _ in 1 2 3 4 5; do
    CIDR4="10.$((200 + RANDOM % 40)).$((RANDOM % 256)).0/24"
    rm -f "$T/k4/port"
    START4
    wait_until 20 sh -c "test -s '$T/k4/port' || ! kill -0 $K4 2>/dev/null"
    [ -s "$T/k4/port" ] && break
    wait "$K4"
  done
  BRIDGE4="ksim$(python3 -c 'import ipaddress, sys; n = ipaddress.ip_network(sys.argv[1]); print("%08x%02d" % (int(n.network_address), n.prefixlen))' "$CIDR4")"
  [ -d "/sys/class/net/$BRIDGE4" ] || fail "no $BRIDGE4 for $CIDR4: $(tail -n 3 "$T/k4.log")"
  # A pod with a process, so there is a veth too.
  agent_pod k4p >"$T/k4p.json"
  KUBECONFIG="$T/k4/kubeconfig" timeout 60 kubectl create -f "$T/k4p.json" >/dev/null 2>&1
  KUBECONFIG="$T/k4/kubeconfig" timeout 60 kubectl wait --for=condition=Ready pod/k4p --timeout=30s >/dev/null 2>&1 ||
    fail "k4p not Ready"
  kill -KILL "$K4"
  wait "$K4" 2>/dev/null
  [ -d "/sys/class/net/$BRIDGE4" ] || fail "SIGKILL took the bridge along (nothing to replace)"
  rm -f "$T/k4/port"
  START4
  wait_until 20 test -s "$T/k4/port" || fail "kubesim did not start over its stale bridge: $(tail -n 3 "$T/k4.log")"
  grep -q "deleted the stale bridge $BRIDGE4" "$T/k4.log" || fail "no word of the stale bridge: $(tail -n 3 "$T/k4.log")"
  [ -d "/sys/class/net/$BRIDGE4" ] || fail "no $BRIDGE4 after the restart"
  BRIDGE4_IDX="$(ifindex "$BRIDGE4")"
  kill -TERM "$K4"
  wait "$K4" || fail "kubesim exit status $? on SIGTERM"
  bridge_gone "$BRIDGE4" "$BRIDGE4_IDX" || fail "$BRIDGE4 left after SIGTERM"
else
  echo "note: not root: no network namespaces or bridges; only the loopback fallback is checked"
fi

# ------------------------------------------------------------------ fallback
step "without network namespaces: each pod its own 127.x address, which its agent binds and the proxy dials"
mkdir -p "$T/lo"
setsid "$KUBESIM" --port-file "$T/lo/port" --workdir "$T/lo/wd" --no-pod-namespaces --agent-binary "$AGENT" \
  --write-kubeconfig "$T/lo/kubeconfig" --hide "$T" </dev/null >"$T/lo.log" 2>&1 &
KLO=$!
BG_PIDS+=("$KLO")
wait_until 20 test -s "$T/lo/port" || fail "loopback kubesim did not start: $(tail -n 3 "$T/lo.log")"
LBASE="http://127.0.0.1:$(cat "$T/lo/port")"
sim_state "$LBASE"
[ "$(json "$OUT" 'd["pod_network"]["mode"]')" = loopback ] || fail "pod_network: $(cat "$OUT")"
LCIDR="$(json "$OUT" 'd["pod_network"]["cidr"]')"
in_range "${LCIDR%/*}" 127.64.0.0/10 || fail "loopback range $LCIDR not in 127.64.0.0/10"
[ "$(grep -c "no network namespaces for pods" "$T/lo.log")" = 1 ] || fail "the fallback is not logged once: $(cat "$T/lo.log")"
for n in l1 l2; do
  agent_pod "$n" >"$T/$n.json"
  KUBECONFIG="$T/lo/kubeconfig" timeout 60 kubectl create -f "$T/$n.json" >/dev/null 2>&1
done
KUBECONFIG="$T/lo/kubeconfig" timeout 60 kubectl wait --for=condition=Ready pod/l1 pod/l2 --timeout=30s >"$OUT" 2>"$ERR" ||
  fail "l1, l2 not Ready: $(cat "$ERR")"
L1="$(KUBECONFIG="$T/lo/kubeconfig" timeout 30 kubectl get pod l1 -o 'jsonpath={.status.podIP}')"
L2="$(KUBECONFIG="$T/lo/kubeconfig" timeout 30 kubectl get pod l2 -o 'jsonpath={.status.podIP}')"
[ "$L1" != "$L2" ] && in_range "$L1" "$LCIDR" && in_range "$L2" "$LCIDR" || fail "loopback podIPs '$L1' '$L2' (range $LCIDR)"
[ "$(http_code "http://$L1:49983/health")" = 204 ] || fail "l1's agent does not answer on $L1:49983"
LAST_CMD="curl $LBASE/api/v1/namespaces/default/pods/l2:49983/proxy/health"
RC=$(curl -s --max-time 10 -o "$OUT" -w "%{http_code}" \
  "$LBASE/api/v1/namespaces/default/pods/l2:49983/proxy/health")
expect_rc 204 "the proxy to l2's agent"
kill -TERM "$KLO"
wait "$KLO" || fail "loopback kubesim exit status $?"
grep -Eq "$SAN_RE" "$T/lo.log" && fail "sanitizer report in the loopback kubesim's log"

# ------------------------------------------------------------------ the end
if [ "$ROOT_USER" = 1 ]; then
  stop_kubesim_step
  step "the bridge is gone once kubesim exited"
  bridge_gone "$BRIDGE" "$BRIDGE_IDX" || fail "$BRIDGE left after SIGTERM"
fi
finish
