#!/usr/bin/env bash
# Build hack/ssa-check (a small Go program on Flux's server-side-apply library,
# github.com/fluxcd/pkg/ssa; tests/deploy/test_gitops.py) into a cache outside the repository,
# keyed by its go.mod/go.sum and the Go version:
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/ssa-check-<key>/ssa-check
#
#   hack/ssa-check.sh            build it if missing, print the binary's path last
#   hack/ssa-check.sh --print    print the binary's path only (no build)
#
# The Go module and build caches are the Go command's own (GOMODCACHE, GOCACHE), outside the
# repository. The modules come from the Go module proxy (GOPROXY).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/ssa-check"
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}
key=$( (go env GOVERSION; cat "$src/go.mod" "$src/go.sum" "$src/main.go") | sha256sum | cut -c1-16)
out="$tools/ssa-check-$key/ssa-check"

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi
if [[ -x $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
t0=$SECONDS
echo "[ssa-check] building $out (fluxcd/pkg/ssa $(grep -m1 'fluxcd/pkg/ssa ' "$src/go.mod" | awk '{print $2}'))" >&2
tmp=$(mktemp "$(dirname "$out")/.build.XXXX")
(cd "$src" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags="-s -w" -o "$tmp" .)
mv -f "$tmp" "$out"
echo "[ssa-check] built in $((SECONDS - t0)) s" >&2
echo "$out"
