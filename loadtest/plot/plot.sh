#!/usr/bin/env bash
# loadtest/plot/plot.sh — PNG plots from loadgen's JSON reports (the scale
# and soak scenarios of loadtest/bench.sh).
#
#   loadtest/plot/plot.sh [--out DIR] REPORT.json...
#
#   --out DIR   where the PNGs go (default: the current directory)
#
# Draws, from whichever reports are given (several of one scenario share
# the axes: e.g. scale runs with SCALE_CLUSTERS=1, 5 and 20):
#   soak-rss-fds.png       soak: router RSS (MiB) and open fds vs time, with
#                          loadgen's pass bounds
#   scale-rss.png          scale: router RSS vs live sandboxes while they
#                          are created, bytes per sandbox in the key, the
#                          512 MiB target line, RSS after terminating all
#   scale-create-rate.png  scale: aggregate creates/s vs clusters (each
#                          report's curve and full create); only when at
#                          least two cluster counts are known
# Reports of other scenarios are skipped. The data is extracted with
# python3 (extract.py); gnuplot comes from Debian's gnuplot-nox, installed
# when missing (apt-get, through scripts/lib/packages.sh).
#
# Exit: 0 plots written, 1 failure, 2 usage.
set -uo pipefail

HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="."
REPORTS=()

usage() { sed -n '2,/^# Exit/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "plot.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) REPORTS+=("$1") ;;
  esac
  shift
done
[ "${#REPORTS[@]}" -gt 0 ] || { usage >&2; exit 2; }
command -v python3 >/dev/null 2>&1 || { echo "plot.sh: python3 is needed (apt-get install python3)" >&2; exit 1; }

if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot.sh: gnuplot is missing; installing gnuplot-nox"
  # shellcheck source-path=SCRIPTDIR source=../../scripts/lib/packages.sh
  . "$ROOT/scripts/lib/packages.sh"
  FR_PACKAGES=(gnuplot-nox)
  fr_install_packages || exit 1
  command -v gnuplot >/dev/null 2>&1 || { echo "plot.sh: still no gnuplot after installing gnuplot-nox" >&2; exit 1; }
fi
# pngcairo (antialiased) where gnuplot has it, else libgd's png.
TERM_NAME=png
gnuplot -e 'set terminal' 2>&1 | grep -q '^ *pngcairo ' && TERM_NAME=pngcairo

if ! mkdir -p "$OUT" || ! OUT="$(cd "$OUT" && pwd)"; then
  echo "plot.sh: cannot make $OUT" >&2
  exit 1
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fr-plot.XXXXXX")" || exit 1
trap 'rm -rf -- "$WORK"' EXIT

plots="$(python3 "$HERE/extract.py" "$WORK" "$OUT" "${REPORTS[@]}")" || exit 1
rc=0
for p in $plots; do
  if gnuplot -c "$HERE/$p.gp" "$WORK/$p.vars.gp" "$TERM_NAME" && [ -s "$OUT/$p.png" ]; then
    echo "plot: $OUT/$p.png"
  else
    echo "plot.sh: gnuplot failed for $p" >&2
    rc=1
  fi
done
exit "$rc"
