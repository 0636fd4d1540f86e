#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# kubesim_proxy.sh — black-box checks of kubesim's pods/proxy subresource and
# of the agents it runs, with curl, kubectl and a stand-in fedrouter-agent
# (tests/kubesim/fedrouter-agent, a small python server honouring the real
# agent's CLI):
#   - proxy: streaming (first chunk before the end), 1 GiB each way with
#     kubesim's RSS bounded, a slow reader (backpressure), keep-alive, headers
#     (Authorization stripped, X-Forwarded-For), Status errors (404, 400
#     address not allowed, 503 connection refused, 301), auth, faults,
#     kubectl get --raw, upgrades (the pod's 101, bytes both ways, half-close);
#   - agent: Ready only once the agent listens, deleting the pod kills the
#     agent, a setsid'd grandchild and a setsid'd child of an exec; as root,
#     two pods cannot see each other's /tmp; the container's command ending
#     ends the pod;
#   - --agent-mode=inproc answers /health, /init and process.Process/Start
#     for `echo hi` with envd's Connect framing;
#   - boolean query parameters read like the API server (watch=True, ...).
#
# Usage: kubesim_proxy.sh PATH/TO/kubesim
# Env: KUBESIM_PROXY_BYTES (default 1 GiB) per direction; KEEP_TMP=1.
# Loopback only, every wait bounded, everything killed and removed at exit.
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
AGENT="$HERE/fedrouter-agent"

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}" curl python3 kubectl pgrep sha256sum

TOKEN="proxy-token-$$"
TAG="$$$RANDOM"          # marks this run's sleep processes
BYTES="${KUBESIM_PROXY_BYTES:-1073741824}"
OUT_LABEL="response body"
ERR_LABEL="response headers / curl errors"
NS=/api/v1/namespaces/default
# ASan keeps freed memory in quarantine (256 MiB by default), which would
# read as growth; a small quarantine keeps the RSS check meaningful.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}quarantine_size_mb=16"

http() {
  RC=$(curl -sk --max-time 60 -o "$OUT" -D "$ERR" -w '%{http_code}' "$@" 2>"$T/curl.err")
  cat "$T/curl.err" >>"$ERR"
  [ -n "$RC" ] || RC=000
}

req() { # req METHOD PATH [BODY [CONTENT-TYPE]]
  local method="$1" path="$2" body="${3:-}" ctype="${4:-application/json}"
  local args=(-X "$method" -H "Authorization: Bearer $TOKEN" -H "Accept: application/json")
  [ -n "$body" ] && args+=(-H "Content-Type: $ctype" --data-binary "$body")
  LAST_CMD="curl -X $method $path${body:+ (body ${body:0:200})}"
  http "${args[@]}" "$BASE$path"
}

expect_status() {
  if [ "$RC" != "$1" ]; then
    fail "$2: expected HTTP $1, got $RC"
    return 1
  fi
}

pycheck() { # pycheck WHAT CODE [ARGS...] — `d` is the JSON in $OUT
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

jval() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print("" if v is None else v)' \
    "$OUT" "$1" 2>/dev/null
}

STATUS_PY='
assert d.get("kind") == "Status", "kind is %r, want Status" % d.get("kind")
assert d.get("status") == "Failure", "status %r" % d.get("status")
assert d.get("code") == int(args[0]), "code %r, want %s" % (d.get("code"), args[0])
assert d.get("reason") == args[1], "reason %r, want %s" % (d.get("reason"), args[1])
assert args[2] in d.get("message", ""), "message %r lacks %r" % (d.get("message"), args[2])
'
status_check() { pycheck "Status body" "$STATUS_PY" "$1" "$2" "$3"; }

# agent_pod NAME [ENV_JSON [TAIL_JSON]] — a pod whose container runs
# fedrouter-agent; TAIL_JSON: the command after the agent (default: none).
agent_pod() {
  local env="${2:-[]}" tail="${3:-}"
  printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s"},"spec":{"containers":[{"name":"sandbox","image":"python:3.12","command":["/opt/fedrouter/fedrouter-agent"%s],"env":%s,"ports":[{"name":"agent","containerPort":49983}]}]}}' \
    "$1" "${tail:+,\"--\",$tail}" "$env"
}

pod_field() { # pod_field NAME EXPR
  req GET "$NS/pods/$1"
  [ "$RC" = 200 ] && jval "$2"
}
pod_phase() { pod_field "$1" 'd["status"].get("phase")'; }
pod_ready() {
  pod_field "$1" '[c["status"] for c in d["status"].get("conditions", []) if c["type"] == "Ready"][0]'
}
is_running() { [ "$(pod_phase "$1")" = Running ]; }
is_ready() { [ "$(pod_ready "$1")" = True ]; }
is_gone() { req GET "$NS/pods/$1"; [ "$RC" = 404 ]; }
proc_gone() { ! pgrep -f "$1" >/dev/null 2>&1; }
# pod_procs UID — pids of the processes kubesim started for the pod with
# that uid (their environment carries KUBESIM_POD_UID=UID), one a line.
pod_procs() {
  local f
  for f in /proc/[0-9]*/environ; do
    tr '\0' '\n' <"$f" 2>/dev/null | grep -qx "KUBESIM_POD_UID=$1" && { f="${f#/proc/}"; echo "${f%/environ}"; }
  done
  return 0
}
pod_procs_gone() { [ -z "$(pod_procs "$1")" ]; }

# ------------------------------------------------------------------ start
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name proxy --nodes 1 --node-cpu 16 \
  --agent-binary "$AGENT"
BASE="$(kubeconfig_server)"
export KUBECONFIG="$KCFG"
AG="$NS/pods/ag1:49983/proxy"

# ------------------------------------------------------------------ readiness
step "an agent pod is Running but not Ready until its agent listens"
req POST "$NS/pods" "$(agent_pod ag1 '[{"name":"STANDIN_WAIT_FILE","value":"/tmp/go"}]')"
expect_status 201 "create ag1"
wait_until 20 is_running ag1 || fail "ag1 not Running (phase $(pod_phase ag1))"
[ "$(pod_ready ag1)" = False ] || fail "ag1 Ready=$(pod_ready ag1) before its agent listens"
req GET "$AG/health"
expect_status 503 "proxy before the agent listens" &&
  status_check 503 ServiceUnavailable "connection refused"

step "the pod turns Ready once the agent writes its port file; /health answers 204"
LAST_CMD="kubectl exec ag1 -- touch /tmp/go"
timeout 60 kubectl exec ag1 -- touch /tmp/go >"$OUT" 2>"$ERR" || fail "kubectl exec touch /tmp/go failed"
wait_until 20 is_ready ag1 || fail "ag1 not Ready after the agent started"
req GET "$AG/health"
expect_status 204 "GET /health through the proxy"

# ------------------------------------------------------------------ proxy basics
step "auth: no token or a wrong one is 401, like every other endpoint"
LAST_CMD="curl $AG/health (no token)"
http "$BASE$AG/health"
expect_status 401 "no token" && status_check 401 Unauthorized Unauthorized
http -H "Authorization: Bearer x$TOKEN" "$BASE$AG/health"
expect_status 401 "wrong token"

step "the pod sees the path and query, not the caller's Authorization; X-Forwarded-For set"
req GET "$AG/headers?a=1&b=x%2Fy"
expect_status 200 "GET /headers" && pycheck "forwarded request" '
h = {k.lower(): v for k, v in d["headers"].items()}
assert d["path"] == "/headers?a=1&b=x%2Fy", d["path"]
assert "authorization" not in h, h
assert h.get("x-forwarded-for") == "127.0.0.1", h
assert h.get("accept") == "application/json", h'

step "upgrades: the pod's 101 comes back, bytes both ways, the caller's FIN reaches the pod and the pod's last bytes come after it"
LAST_CMD="python3 upgrade client $AG/upgrade"
python3 - "$BASE" "$TOKEN" "$AG" >"$OUT" 2>"$ERR" <<'PY' || fail "upgrade through pods/proxy"
import os, socket, ssl, sys, urllib.parse
base, token, ag = sys.argv[1:4]
u = urllib.parse.urlsplit(base)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
s = ctx.wrap_socket(socket.create_connection((u.hostname, u.port), timeout=30), server_hostname=u.hostname)
s.sendall(f"GET {ag}/upgrade?x=1 HTTP/1.1\r\nHost: {u.netloc}\r\nAuthorization: Bearer {token}\r\n"
          "Connection: keep-alive, Upgrade\r\nUpgrade: x-test/1\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    b = s.recv(4096)
    assert b, head
    head += b
head, rest = head.split(b"\r\n\r\n", 1)
lines = head.decode().split("\r\n")
h = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
assert lines[0].startswith("HTTP/1.1 101 "), lines
assert h.get("upgrade") == "x-test/1" and h.get("connection", "").lower() == "upgrade", h
assert h.get("x-seen-path") == "/upgrade?x=1", h
data = os.urandom(3 << 20)
s.sendall(data)
# Our FIN (TCP, under TLS): the pod reads EOF and still answers after it.
socket.socket(fileno=os.dup(s.fileno())).shutdown(socket.SHUT_WR)
got = rest
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    got += b
assert got == data + b"END", (len(got), got[-10:])
print("ok", len(got))
PY

step "kubectl get --raw through the proxy (pod:port and the port's name)"
LAST_CMD="kubectl get --raw $NS/pods/ag1:49983/proxy/health"
timeout 60 kubectl get --raw "$NS/pods/ag1:49983/proxy/health" >"$OUT" 2>"$ERR" || fail "kubectl get --raw /health failed"
timeout 60 kubectl get --raw "$NS/pods/ag1:agent/proxy/headers" >"$OUT" 2>"$ERR" || fail "kubectl get --raw via the port name failed"
pycheck "kubectl --raw body" 'assert d["path"] == "/headers", d'

step "keep-alive: two proxied requests on one client connection"
LAST_CMD="curl (two URLs, one connection)"
curl -sk --max-time 20 -H "Authorization: Bearer $TOKEN" -o /dev/null -o /dev/null \
  -w '%{num_connects}\n' "$BASE$AG/health" "$BASE$AG/headers" >"$OUT" 2>"$ERR"
[ "$(tr '\n' ' ' <"$OUT")" = "1 0 " ] || fail "connects per request: $(tr '\n' ' ' <"$OUT"), want 1 0"

step "streaming: the first chunk arrives before the upstream ends the response"
LAST_CMD="curl -N $AG/stream"
curl -skN --max-time 60 -H "Authorization: Bearer $TOKEN" "$BASE$AG/stream" >"$T/stream" 2>"$ERR" &
SPID=$!
BG_PIDS+=("$SPID")
wait_until 20 grep -q '^first$' "$T/stream" || fail "no first chunk while the stream is open"
grep -q second "$T/stream" && fail "second chunk before the release"
req POST "$AG/release"
expect_status 204 "POST /release"
wait "$SPID" || fail "streaming curl failed"
[ "$(tr '\n' ' ' <"$T/stream")" = "first second " ] || fail "stream body: $(cat "$T/stream")"

# RSS sampling of kubesim while the big transfers run.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$KS_PID/status" 2>/dev/null || echo 0; }
rss_watch_start() {
  RSS_BASE=$(rss_kb)
  (while :; do rss_kb; sleep 0.1; done) >"$T/rss" 2>/dev/null &
  RSS_PID=$!
  BG_PIDS+=("$RSS_PID")
}
rss_watch_check() { # rss_watch_check WHAT
  kill "$RSS_PID" 2>/dev/null
  wait "$RSS_PID" 2>/dev/null
  local max
  max=$(sort -n "$T/rss" | tail -1)
  echo "kubesim RSS: $RSS_BASE kB before, $max kB at most during $1"
  [ "$((max - RSS_BASE))" -lt 131072 ] || fail "kubesim RSS grew by $(((max - RSS_BASE) / 1024)) MiB during $1"
}

step "a $BYTES-byte streamed (chunked) upload arrives whole; kubesim RSS stays flat"
rss_watch_start
LAST_CMD="head -c $BYTES /dev/urandom | curl -T - $AG/upload"
head -c "$BYTES" /dev/urandom | tee >(sha256sum | cut -c1-64 >"$T/up.sha") |
  curl -sk --max-time 300 -H "Authorization: Bearer $TOKEN" -T - -o "$OUT" "$BASE$AG/upload" 2>"$ERR"
rss_watch_check "the upload"
sleep 0.2
pycheck "upload digest" 'assert d["bytes"] == int(args[0]), d
assert d["sha256"] == args[1], (d, args[1])' "$BYTES" "$(cat "$T/up.sha")"

step "an upload with Content-Length keeps it (and the body) intact"
head -c 3000000 /dev/urandom >"$T/cl.bin"
LAST_CMD="curl --data-binary @cl.bin $AG/upload"
http -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/octet-stream" \
  --data-binary "@$T/cl.bin" "$BASE$AG/upload"
expect_status 200 "POST /upload" && pycheck "upload digest" '
assert d["bytes"] == 3000000, d
assert d["sha256"] == args[0], d' "$(sha256sum "$T/cl.bin" | cut -c1-64)"
grep -qi '^transfer-encoding' "$ERR" && fail "a Content-Length response came back chunked"

step "a $BYTES-byte download arrives whole with its Content-Length; kubesim RSS stays flat"
rss_watch_start
LAST_CMD="curl $AG/download?bytes=$BYTES"
curl -sk --max-time 300 -H "Authorization: Bearer $TOKEN" -D "$ERR" "$BASE$AG/download?bytes=$BYTES" |
  sha256sum | cut -c1-64 >"$T/down.sha"
rss_watch_check "the download"
want=$(python3 -c '
import hashlib, sys
n = int(sys.argv[1]); p = bytes(range(256)) * 256; h = hashlib.sha256()
while n > 0:
    h.update(p[:min(n, len(p))]); n -= len(p)
print(h.hexdigest())' "$BYTES")
[ "$(cat "$T/down.sha")" = "$want" ] || fail "download digest $(cat "$T/down.sha"), want $want"
grep -qi "^content-length: $BYTES" "$ERR" || fail "no Content-Length: $BYTES in the response head"

step "a slow reader: kubesim holds back the pod instead of buffering (RSS flat)"
rss_watch_start
LAST_CMD="curl --limit-rate 40M $AG/download?bytes=120000000"
curl -sk --max-time 120 --limit-rate 40M -H "Authorization: Bearer $TOKEN" \
  "$BASE$AG/download?bytes=120000000" | wc -c >"$OUT"
rss_watch_check "the slow download"
[ "$(cat "$OUT")" = 120000000 ] || fail "slow download got $(cat "$OUT") bytes"

# ------------------------------------------------------------------ errors
step "a missing pod: 404 NotFound Status"
req GET "$NS/pods/nosuch:49983/proxy/health"
expect_status 404 "missing pod" && status_check 404 NotFound 'pods "nosuch" not found'

step "a pod port nothing listens on: 503 ServiceUnavailable (connection refused)"
req POST "$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"plain"},"spec":{"containers":[{"name":"c","image":"busybox","command":["sleep","3600"],"ports":[{"name":"web","containerPort":8080}]}]}}'
expect_status 201 "create plain"
wait_until 20 is_running plain || fail "plain not Running"
req GET "$NS/pods/plain:web/proxy/x"
expect_status 503 "no listener" && status_check 503 ServiceUnavailable "error trying to reach service: dial tcp"
pycheck "target" 'assert ":8080: connect: connection refused" in d["message"], d["message"]'
req GET "$NS/pods/plain:nosuchport/proxy/x"
expect_status 503 "unknown port name"

step "a pod without an address yet: 400 BadRequest 'address not allowed'"
req POST "$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"big"},"spec":{"containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":"64"}}}]}}'
expect_status 201 "create big"
req GET "$NS/pods/big/proxy/x"
expect_status 400 "no pod IP" && status_check 400 BadRequest "address not allowed"

step "GET .../proxy without a path: 301 to .../proxy/ (as the API server redirects)"
req GET "$NS/pods/ag1:49983/proxy?x=/1"
expect_status 301 "empty path" && grep -qi "^location: $NS/pods/ag1:49983/proxy/?x=/1" "$ERR" ||
  fail "Location header: $(grep -i '^location' "$ERR")"

step "fault injection applies: error_rate 1 answers 500 instead of proxying"
req POST /_sim/faults '{"error_rate":1,"error_code":500}'
expect_status 200 "set faults"
req GET "$AG/health"
expect_status 500 "injected fault"
req POST /_sim/faults '{"error_rate":0}'
req GET "$AG/health"
expect_status 204 "faults cleared"

step "injected latency delays a proxied upload without losing any of its body"
req POST /_sim/faults '{"latency_ms":100}'
expect_status 200 "set latency"
LAST_CMD="curl --data-binary @cl.bin $AG/upload (latency 100 ms)"
http -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/octet-stream" \
  --data-binary "@$T/cl.bin" "$BASE$AG/upload"
expect_status 200 "POST /upload with latency" && pycheck "upload digest" '
assert d["bytes"] == 3000000, d
assert d["sha256"] == args[0], d' "$(sha256sum "$T/cl.bin" | cut -c1-64)"
req POST /_sim/faults '{"latency_ms":0}'

# ------------------------------------------------------------------ booleans
step "boolean query parameters: watch=True and watch= watch; watch=0 and watch=FALSE list"
for v in True 1 ""; do
  LAST_CMD="curl $NS/pods?watch=$v"
  curl -sk --max-time 1 -H "Authorization: Bearer $TOKEN" "$BASE$NS/pods?watch=$v&allowWatchBookmarks=True" \
    >"$OUT" 2>/dev/null
  head -n 1 "$OUT" | grep -q '"type":"ADDED"' || fail "watch=$v did not watch: $(head -c 200 "$OUT")"
done
for v in 0 false FALSE; do
  req GET "$NS/pods?watch=$v"
  expect_status 200 "watch=$v" && pycheck "watch=$v lists" 'assert d["kind"] == "PodList", d["kind"]'
done

# ------------------------------------------------------------------ processes
step "deleting the pod kills its agent, a setsid'd grandchild and a setsid'd exec child"
req POST "$AG/spawn?tag=1$TAG"
expect_status 200 "spawn"
wait_until 10 pgrep -f "sleep 3000.1$TAG" >/dev/null || fail "the grandchild did not start"
LAST_CMD="kubectl exec ag1 -- sh -c 'setsid sleep 3000.2$TAG &'"
timeout 60 kubectl exec ag1 -- sh -c "setsid sleep 3000.2$TAG </dev/null >/dev/null 2>&1 & echo started" \
  >"$OUT" 2>"$ERR" || fail "kubectl exec failed"
wait_until 10 pgrep -f "sleep 3000.2$TAG" >/dev/null || fail "the exec's setsid child did not start"
AGUID="$(pod_field ag1 'd["metadata"]["uid"]')"
[ -n "$(pod_procs "$AGUID")" ] || fail "no process of ag1 found by its KUBESIM_POD_UID"
LAST_CMD="kubectl delete pod ag1"
timeout 60 kubectl delete pod ag1 --wait=true >"$OUT" 2>"$ERR" || fail "kubectl delete failed"
wait_until 10 proc_gone "sleep 3000.1$TAG" || fail "the agent's setsid'd grandchild survived its pod"
wait_until 10 proc_gone "sleep 3000.2$TAG" || fail "the exec's setsid'd child survived its pod"
wait_until 10 pod_procs_gone "$AGUID" || fail "the agent survived its pod: $(pod_procs "$AGUID" | tr '\n' ' ')"

step "the container's command ending ends the pod (Succeeded for exit 0)"
req POST "$NS/pods" "$(agent_pod done1 '[]' '"sh","-c","exit 0"')"
expect_status 201 "create done1"
is_succeeded() { [ "$(pod_phase done1)" = Succeeded ]; }
wait_until 20 is_succeeded || fail "done1 phase $(pod_phase done1), want Succeeded"

if [ "$(id -u)" = 0 ]; then
  step "as root, two pods cannot see each other's /tmp (files nor exec)"
  req POST "$NS/pods" "$(agent_pod iso1)"
  req POST "$NS/pods" "$(agent_pod iso2)"
  wait_until 20 is_ready iso1 || fail "iso1 not Ready"
  wait_until 20 is_ready iso2 || fail "iso2 not Ready"
  req PUT "$NS/pods/iso1:49983/proxy/tmpfile?name=secret-$TAG" "only-iso1" text/plain
  expect_status 204 "write /tmp in iso1"
  req GET "$NS/pods/iso1:49983/proxy/tmpfile?name=secret-$TAG"
  expect_status 200 "iso1 reads its /tmp" && [ "$(cat "$OUT")" = only-iso1 ] || fail "iso1 read: $(cat "$OUT")"
  req GET "$NS/pods/iso2:49983/proxy/tmpfile?name=secret-$TAG"
  expect_status 404 "iso2 must not see iso1's /tmp"
  [ -e "/tmp/secret-$TAG" ] && fail "the pod's /tmp file landed in the host's /tmp"
  LAST_CMD="kubectl exec iso2 -- cat /tmp/secret-$TAG"
  if timeout 60 kubectl exec iso2 -- cat "/tmp/secret-$TAG" >"$OUT" 2>"$ERR"; then
    fail "an exec in iso2 read iso1's /tmp file"
  fi
  LAST_CMD="kubectl exec iso1 -- cat /tmp/secret-$TAG"
  timeout 60 kubectl exec iso1 -- cat "/tmp/secret-$TAG" >"$OUT" 2>"$ERR" || fail "an exec in iso1 cannot read its /tmp"
  LAST_CMD="kubectl exec iso2 -- ls $T/work"
  timeout 60 kubectl exec iso2 -- ls "$T/work" >"$OUT" 2>"$ERR"
  grep -q iso1 "$OUT" && fail "iso2 sees iso1's working directory: $(tr '\n' ' ' <"$OUT")"
else
  echo "note: not root, so pods share the host's /tmp (no mount namespaces); isolation step skipped"
fi

# ------------------------------------------------------------------ inproc
step "--agent-mode=inproc: /health, /init and Start for 'echo hi' with envd's Connect framing"
mkdir -p "$T/inproc"
"$KUBESIM" --listen 127.0.0.1:0 --port-file "$T/inproc/port" --workdir "$T/inproc" \
  --agent-mode inproc --name inproc </dev/null >"$T/inproc.log" 2>&1 &
IPID=$!
BG_PIDS+=("$IPID")
wait_until 20 test -s "$T/inproc/port" || fail "inproc kubesim did not start"
IBASE="http://127.0.0.1:$(cat "$T/inproc/port")"
curl -s --max-time 10 -o /dev/null -X POST -H 'Content-Type: application/json' \
  --data-binary "$(agent_pod ip1)" "$IBASE$NS/pods"
LAST_CMD="python3 inproc client"
python3 - "$IBASE" >"$OUT" 2>&1 <<'PY' || fail "inproc agent: $(cat "$OUT")"
import base64, http.client, json, struct, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
base = "/api/v1/namespaces/default/pods/ip1:49983/proxy"
for _ in range(100):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", base + "/health")
    r = c.getresponse(); r.read()
    if r.status == 204:
        break
    time.sleep(0.1)
assert r.status == 204, r.status
c.request("POST", base + "/init", body=b'{"envVars":{"A":"1"}}', headers={"Content-Type": "application/json"})
r = c.getresponse(); r.read()
assert r.status == 204, ("init", r.status)
msg = json.dumps({"process": {"cmd": "echo", "args": ["hi"]}}).encode()
for attempt in range(2):  # the same connection serves both
    c.request("POST", base + "/process.Process/Start", body=struct.pack(">BI", 0, len(msg)) + msg,
              headers={"Content-Type": "application/connect+json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "application/connect+json", r.status
    b = r.read()
    frames = []
    while b:
        flags, n = struct.unpack(">BI", b[:5])
        frames.append((flags, json.loads(b[5:5 + n])))
        b = b[5 + n:]
    assert [f for f, _ in frames] == [0, 0, 0, 2], frames
    assert isinstance(frames[0][1]["event"]["start"]["pid"], int), frames[0]
    assert base64.b64decode(frames[1][1]["event"]["data"]["stdout"]) == b"hi\n", frames[1]
    assert frames[2][1] == {"event": {"end": {"exitCode": 0, "exited": True, "status": "exit status 0"}}}, frames[2]
    assert frames[3][1] == {}, frames[3]
msg = json.dumps({"process": {"cmd": "python3", "args": ["-c", "1"]}}).encode()
c.request("POST", base + "/process.Process/Start", body=struct.pack(">BI", 0, len(msg)) + msg,
          headers={"Content-Type": "application/connect+json"})
r = c.getresponse(); b = r.read()
assert b[0] == 2 and json.loads(b[5:])["error"]["code"] == "unimplemented", b
print("ok")
PY
kill -TERM "$IPID" 2>/dev/null
wait "$IPID" 2>/dev/null || fail "inproc kubesim exit status $?"
grep -Eq "$SAN_RE" "$T/inproc.log" && fail "sanitizer report in the inproc kubesim log"

# ------------------------------------------------------------------ no namespaces
step "--no-pod-namespaces (what a non-root kubesim does): setsid'd processes still die with the pod"
mkdir -p "$T/nons"
"$KUBESIM" --listen 127.0.0.1:0 --port-file "$T/nons/port" --workdir "$T/nons" --no-pod-namespaces \
  --write-kubeconfig "$T/nons/kubeconfig" --agent-binary "$AGENT" --name nons </dev/null >"$T/nons.log" 2>&1 &
NPID=$!
BG_PIDS+=("$NPID")
wait_until 20 test -s "$T/nons/port" || fail "no-namespaces kubesim did not start"
NBASE="http://127.0.0.1:$(cat "$T/nons/port")"
nreq() { # nreq METHOD PATH [BODY]
  LAST_CMD="curl -X $1 (nons) $2"
  http -X "$1" -H "Content-Type: application/json" ${3:+--data-binary "$3"} "$NBASE$2"
}
nphase() { nreq GET "$NS/pods/$1"; [ "$RC" = 200 ] && jval 'd["status"].get("phase")'; }
n_ready() { nreq GET "$NS/pods/$1"; [ "$(jval '[c["status"] for c in d["status"].get("conditions", []) if c["type"] == "Ready"][0]')" = True ]; }
nreq POST "$NS/pods" "$(agent_pod na1)"
nreq POST "$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"np1"},"spec":{"containers":[{"name":"c","image":"busybox","command":["sleep","3600"]}]}}'
wait_until 20 n_ready na1 || fail "na1 not Ready"
nreq POST "$NS/pods/na1:49983/proxy/spawn?tag=3$TAG"
expect_status 200 "spawn in na1"
for n in 1 2; do
  pod=na1
  [ "$n" = 2 ] && pod=np1
  LAST_CMD="kubectl exec $pod -- setsid sleep (no namespaces)"
  # sleep 3000.41TAG in na1, 3000.42TAG in np1
  KUBECONFIG="$T/nons/kubeconfig" timeout 60 kubectl exec "$pod" -- sh -c "setsid sleep 3000.4$n$TAG </dev/null >/dev/null 2>&1 &" \
    >"$OUT" 2>"$ERR" || fail "kubectl exec $pod failed"
done
wait_until 10 pgrep -f "sleep 3000.3$TAG" >/dev/null || fail "the grandchild did not start"
wait_until 10 pgrep -f "sleep 3000.41$TAG" >/dev/null || fail "na1's exec child did not start"
wait_until 10 pgrep -f "sleep 3000.42$TAG" >/dev/null || fail "np1's exec child did not start"
nreq DELETE "$NS/pods/na1"
nreq DELETE "$NS/pods/np1"
wait_until 10 proc_gone "sleep 3000.3$TAG" || fail "na1's setsid'd grandchild survived (no namespaces)"
wait_until 10 proc_gone "sleep 3000.41$TAG" || fail "na1's exec child survived (no namespaces)"
wait_until 10 proc_gone "sleep 3000.42$TAG" || fail "np1's exec child survived (no namespaces)"
kill -TERM "$NPID" 2>/dev/null
wait "$NPID" 2>/dev/null || fail "no-namespaces kubesim exit status $?"
grep -Eq "$SAN_RE" "$T/nons.log" && fail "sanitizer report in the no-namespaces kubesim log"

# ------------------------------------------------------------------ the end
finish_proxy() {
  local dir="$T/work"
  finish_hook_done=1
  stop_kubesim_step
  step "nothing a pod started outlives kubesim (supervisors, agents, sleeps)"
  LAST_CMD="pgrep -af $dir"
  wait_until 10 proc_gone "$dir" || fail "left running: $(pgrep -af "$dir")"
  wait_until 10 proc_gone "sleep 3000.[0-9]*$TAG" || fail "left running: $(pgrep -af "sleep 3000")"
}
finish_proxy
finish
