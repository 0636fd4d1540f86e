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
# shellcheck source-path=SCRIPTDIR source=npm_pin.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/npm_pin.sh"
npm_pin e2b_sdk.sh e2b "$version" "$cache"
