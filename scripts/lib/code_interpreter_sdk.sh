#!/usr/bin/env bash
# scripts/lib/code_interpreter_sdk.sh — installs the official E2B Code
# Interpreter JS SDK (npm @e2b/code-interpreter, pinned) into a cache outside
# the tree: the wire format deploy/code-interpreter/server.py serves is that
# SDK's, and the suites that drive the SDK against it take it from here.
# Idempotent: a cache that holds the pinned version is used as it is, with no
# network at all.
#
#   bash scripts/lib/code_interpreter_sdk.sh   installs if needed; prints the
#                                              node_modules path; exit 1 when
#                                              npm or the registry is not
#                                              reachable
#
# FR_CODE_INTERPRETER_SDK_VERSION overrides the pin (docs/e2b.md says which
# one is served); FR_CODE_INTERPRETER_SDK_CACHE the cache folder.
set -uo pipefail

version="${FR_CODE_INTERPRETER_SDK_VERSION:-2.8.0}"
cache="${FR_CODE_INTERPRETER_SDK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fedrouter/code-interpreter-sdk-$version}"
# shellcheck source-path=SCRIPTDIR source=npm_pin.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/npm_pin.sh"
npm_pin code_interpreter_sdk.sh @e2b/code-interpreter "$version" "$cache"
