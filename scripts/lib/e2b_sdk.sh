#!/usr/bin/env bash
# scripts/lib/e2b_sdk.sh — installs the official E2B JS SDK (npm e2b, pinned)
# into a cache outside the tree, for the E2B black-box suite (tests/e2b) and
# the agent suite's SDK check (tests/agent). Idempotent: a cache that holds
# the pinned version is used as it is, with no network at all.
#
#   bash scripts/lib/e2b_sdk.sh        installs if needed; prints the
#                                      node_modules path; exit 1 when npm or
#                                      the registry is not reachable
#
# FR_E2B_SDK_VERSION overrides the pin (docs/e2b.md says which one is tested);
# FR_E2B_SDK_CACHE the cache folder.
set -uo pipefail

version="${FR_E2B_SDK_VERSION:-2.51.0}"
cache="${FR_E2B_SDK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fedrouter/e2b-sdk-$version}"
mods="$cache/node_modules"

if [ -f "$mods/e2b/package.json" ] && grep -q "\"version\": \"$version\"" "$mods/e2b/package.json"; then
  echo "$mods"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "e2b_sdk.sh: npm not found (apt-get install npm)" >&2
  exit 1
fi
mkdir -p "$cache" || exit 1
if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund --silent --no-save "e2b@$version" >&2); then
  echo "e2b_sdk.sh: npm install e2b@$version failed (registry unreachable?)" >&2
  exit 1
fi
echo "$mods"
