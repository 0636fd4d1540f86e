#!/usr/bin/env bash
# kube_js_client.sh — the official Kubernetes JavaScript client
# (@kubernetes/client-node, pinned and installed by
# scripts/lib/kube_js_client.sh) drives kubesim: kube_js_client.mjs loads the
# kubeconfig kubesim writes and goes through CoreV1Api, AppsV1Api, Watch,
# makeInformer, Exec, Log and KubernetesObjectApi (docs/kubesim.md lists what
# it checks).
#
# Usage: kube_js_client.sh PATH/TO/kubesim
#
# The client comes from $FR_KUBE_JS_NODE_MODULES (set by scripts/test; empty
# when it could not install it), else from scripts/lib/kube_js_client.sh.
# When it cannot be installed or run (no node or npm, the registry
# unreachable) the test is SKIPPED, loudly: exit 77, as the E2B suite does.
# Env: KEEP_TMP=1 keeps the temp dir (kubeconfig, kubesim.log).
set -uo pipefail

HERE="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
lib_require "${1:-}"

SKIP=77
# Unset: install it now (a cached copy needs no network). Set but empty:
# scripts/test already tried and failed, so skip at once.
if ! command -v node >/dev/null 2>&1; then
  MODS=""
elif [ -z "${FR_KUBE_JS_NODE_MODULES+set}" ]; then
  MODS="$(timeout --kill-after=5 90 bash "$ROOT/scripts/lib/kube_js_client.sh" | tail -n 1)"
else
  MODS="$FR_KUBE_JS_NODE_MODULES"
fi
if [ -z "$MODS" ] || [ ! -d "$MODS/@kubernetes/client-node" ]; then
  echo "SKIPPED: the official Kubernetes JS client (@kubernetes/client-node) could not be installed" \
    "(node or npm missing, or the npm registry unreachable); kubesim was NOT tested with it"
  exit "$SKIP"
fi
echo "client: $MODS/@kubernetes/client-node ($(sed -n 's/^ *"version": "\(.*\)",$/\1/p' \
  "$MODS/@kubernetes/client-node/package.json" | head -n 1))"

# Two nodes; agent pods run the stand-in agent (pods/log needs a process);
# watches without timeoutSeconds end after 1-2 s so the informer's resume
# is seen within the run.
start_kubesim "$KUBESIM" --tls --token "js-token-$$" --name js --nodes 2 \
  --agent-binary "$HERE/fedrouter-agent" --min-request-timeout 1

step "the official JS client drives kubesim (kube_js_client.mjs)"
LAST_CMD="node kube_js_client.mjs"
timeout --kill-after=5 90 env FR_KUBE_JS_NODE_MODULES="$MODS" KUBESIM_KUBECONFIG="$KCFG" \
  node "$HERE/kube_js_client.mjs" </dev/null >"$OUT" 2>"$ERR"
RC=$?
sed 's/^/  | /' "$OUT"
if [ "$RC" -ne 0 ] || ! grep -q '^kube js client: [0-9]* checks, 0 failed$' "$OUT"; then
  fail "the client run failed (exit $RC)"
fi

finish
