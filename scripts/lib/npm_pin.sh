# scripts/lib/npm_pin.sh — sourced by the scripts that install a pinned npm
# package for a test suite (e2b_sdk.sh, kube_js_client.sh).
# shellcheck shell=bash

# npm_pin WHO PACKAGE VERSION CACHE — installs PACKAGE@VERSION with npm
# (no package.json, no audit) into CACHE, a folder outside the tree, unless
# CACHE/node_modules already holds that version: then no network at all.
# Prints CACHE/node_modules; returns 1, saying why on stderr as WHO, when
# npm is missing or the install fails (registry unreachable).
npm_pin() {
  local who="$1" pkg="$2" version="$3" cache="$4"
  local mods="$cache/node_modules"

  if [ -f "$mods/$pkg/package.json" ] && grep -q "\"version\": \"$version\"" "$mods/$pkg/package.json"; then
    echo "$mods"
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "$who: npm not found (apt-get install npm)" >&2
    return 1
  fi
  mkdir -p "$cache" || return 1
  if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund --silent --no-save "$pkg@$version" >&2); then
    echo "$who: npm install $pkg@$version failed (registry unreachable?)" >&2
    return 1
  fi
  echo "$mods"
}
