#!/usr/bin/env bash
# check_systemd.sh - deploy/systemd/fedrouter.service is a unit systemd
# accepts without a single warning, carries the hardening it promises, stops
# within the router's drain, and scores as well exposed as it does today.
#
# Usage: check_systemd.sh REPO_ROOT PATH/TO/fedrouter
# Exit 0 good, 1 problems, 77 skipped (no systemd-analyze on this machine).
set -uo pipefail
ROOT="$1"
FEDROUTER=$(readlink -f "$2")
UNIT="$ROOT/deploy/systemd/fedrouter.service"
ENVFILE="$ROOT/deploy/systemd/fedrouter.env"
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not installed (Debian package systemd)"
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

# The unit as installed, but pointing at this build's binary (verify checks
# that every Exec*= command exists and is executable).
sed "s#/usr/local/bin/fedrouter#$FEDROUTER#g" "$UNIT" >"$T/fedrouter.service"
out=$(cd "$T" && systemd-analyze verify --man=no ./fedrouter.service 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  fail "systemd-analyze verify (rc $rc): $out"
fi

for d in 'DynamicUser=yes' 'ProtectSystem=strict' 'NoNewPrivileges=yes' 'ProtectHome=yes' \
         'PrivateTmp=yes' 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
         'SystemCallFilter=@system-service' 'ExecReload=/bin/kill -HUP $MAINPID' \
         'KillSignal=SIGTERM' 'ConfigurationDirectory=fedrouter' 'StateDirectory=fedrouter'; do
  grep -qxF "$d" "$UNIT" || fail "missing: $d"
done
nofile=$(sed -n 's/^LimitNOFILE=//p' "$UNIT")
[ -n "$nofile" ] && [ "$nofile" -ge 65536 ] || fail "LimitNOFILE=$nofile: want >= 65536"

# Stop must outlast the drain (router/src/main.c DRAIN_MS).
drain_ms=$(sed -n 's/^#define DRAIN_MS \([0-9]*\).*/\1/p' "$ROOT/router/src/main.c")
stop_s=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$UNIT")
if [ -z "$drain_ms" ] || [ -z "$stop_s" ] || [ "$((stop_s * 1000))" -le "$drain_ms" ]; then
  fail "TimeoutStopSec=$stop_s s does not outlast the router's drain of ${drain_ms:-?} ms"
fi

# Every ${VAR} the unit uses is set by the sample environment file.
for v in $(grep -o '\${[A-Z_]*}' "$UNIT" | tr -d '${}' | sort -u); do
  grep -q "^$v=" "$ENVFILE" || fail "$v is used by the unit but not set in fedrouter.env"
done

# The exposure score systemd computes from the sandboxing (0 best, 10
# worst): 1.4 today; fail if hardening is lost.
if ! sec=$(cd "$T" && systemd-analyze security --offline=yes --threshold=20 ./fedrouter.service 2>&1); then
  fail "systemd-analyze security: exposure above 2.0: $(echo "$sec" | tail -1)"
fi

if [ "$FAILS" -ne 0 ]; then
  echo "check_systemd: $FAILS problem(s)"
  exit 1
fi
echo "check_systemd: OK ($(echo "$sec" | tail -1 | sed 's/^→ //'))"
