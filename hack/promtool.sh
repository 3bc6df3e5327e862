#!/usr/bin/env bash
# Take promtool (Prometheus's rule checker and rule unit-test runner) out of Debian's
# `prometheus` package without installing the package or running its service: the .deb is
# downloaded with apt and unpacked into a cache outside the repository, keyed by its version:
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/promtool-<version>/promtool
#
#   hack/promtool.sh            fetch it if missing, print the binary's path last
#   hack/promtool.sh --print    print the binary's path of the cached version, if any (no fetch)
set -euo pipefail
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}

if [[ "${1:-}" == "--print" ]]; then
  found=$(ls -d "$tools"/promtool-*/promtool 2>/dev/null | sort -V | tail -n1 || true)
  echo "${found:-$tools/promtool-missing/promtool}"; exit 0
fi
version() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}'; }
ver=$(version)
if [[ -z $ver || $ver == "(none)" ]]; then
  echo "[promtool] no candidate for Debian's prometheus package: apt-get update" >&2
  apt-get update -qq >&2
  ver=$(version)
fi
[[ -n $ver && $ver != "(none)" ]] || { echo "[promtool] Debian's prometheus package is not available" >&2; exit 1; }
out="$tools/promtool-${ver//[^A-Za-z0-9.+-]/_}/promtool"
if [[ -x $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
chmod 0755 "$work"  # apt downloads as _apt when it can
trap 'rm -rf "$work"' EXIT
echo "[promtool] downloading prometheus $ver (Debian) for its promtool" >&2
(cd "$work" && apt-get download -qq "prometheus=$ver" >&2)
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
install -m 0755 "$work/root/usr/bin/promtool" "$out.tmp"
mv -f "$out.tmp" "$out"
"$out" --version >&2
echo "$out"
