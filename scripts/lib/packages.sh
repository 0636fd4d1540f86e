# scripts/lib/packages.sh — the Debian 12 packages fedrouter needs, and the
# function that installs the missing ones. Sourced (bash) by scripts/test and
# scripts/demo, so both install exactly the same set the same way.
# clang and libclang-rt-dev (libFuzzer and clang's sanitizer runtimes) are
# for the fuzz build only (scripts/fuzz, tests/fuzz). haproxy runs the
# replicas_haproxy test and the `replicas` benchmark (three routers behind it).
# wrk drives the `gateway` benchmark's request rates (loadtest/gateway_bench.py).
# python3-kubernetes is the official Kubernetes Python client the
# kube_python_client test drives kubesim with (it runs under /usr/bin/python3,
# whose dist-packages Debian installs it into). python3-pip is the `pip` of
# kubesim's python images (python3 -m pip; the kubesim_isolation test runs it).
# nftables is the `nft` kubesim runs in its pods' network namespaces to
# enforce NetworkPolicy egress (docs/kubesim.md, "NetworkPolicy"; the
# kubesim_netpol and egress_blackbox tests).
# python3-jupyter-client, python3-ipykernel and python3-matplotlib are what
# the code interpreter (deploy/code-interpreter/server.py, the
# code-interpreter image) runs on; tests/codeint starts it under
# /usr/bin/python3.
#
#   FR_PACKAGES           the package names
#   fr_install_packages   installs whichever of them are not installed yet:
#                         nothing at all (not even apt-get update) when all are
#                         present, so it works offline; apt-get as root, else
#                         through sudo; returns non-zero with a message on
#                         failure.
# shellcheck shell=bash

FR_PACKAGES=(
  build-essential cmake pkg-config
  libuv1-dev libcurl4-openssl-dev libjansson-dev libconfig-dev libssl-dev zlib1g-dev
  check libsubunit-dev libhttp-parser-dev libyaml-dev libbsd-dev
  openssl ca-certificates procps python3 curl
  prometheus chromium
  haproxy wrk
  python3-yaml python3-kubernetes python3-pip
  clang libclang-rt-dev
  python3-jupyter-client python3-ipykernel python3-matplotlib
  nftables
)

fr_install_packages() {
  local missing=() p st
  for p in "${FR_PACKAGES[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$st" = "installed" ] || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "all ${#FR_PACKAGES[@]} packages present; skipping apt"
    return 0
  fi
  echo "missing: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "error: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
      return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update </dev/null || { echo "error: apt-get update failed" >&2; return 1; }
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${missing[@]}" </dev/null \
    || { echo "error: apt-get install failed for: ${missing[*]}" >&2; return 1; }
}
