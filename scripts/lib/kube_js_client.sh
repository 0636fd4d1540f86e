#!/usr/bin/env bash
# scripts/lib/kube_js_client.sh — installs the official Kubernetes JavaScript
# client (npm @kubernetes/client-node, pinned) into a cache outside the tree,
# for the kube_js_client black-box test of kubesim (tests/kubesim).
# Idempotent: a cache that holds the pinned version is used as it is, with no
# network at all.
#
#   bash scripts/lib/kube_js_client.sh   installs if needed; prints the
#                                        node_modules path; exit 1 when npm or
#                                        the registry is not reachable
#
# The pin is the newest release that runs on Node 20: 1.4.0 (ESM, fetch
# through node-fetch, WebSockets through ws). 2.x moved to undici 8, which
# requires Node >= 22.19, and the package declares no `engines` of its own.
# FR_KUBE_JS_CLIENT_VERSION overrides the pin (docs/kubesim.md says which one
# is tested); FR_KUBE_JS_CLIENT_CACHE the cache folder.
set -uo pipefail

version="${FR_KUBE_JS_CLIENT_VERSION:-1.4.0}"
cache="${FR_KUBE_JS_CLIENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fedrouter/kube-js-client-$version}"
# shellcheck source-path=SCRIPTDIR source=npm_pin.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/npm_pin.sh"
npm_pin kube_js_client.sh @kubernetes/client-node "$version" "$cache"
