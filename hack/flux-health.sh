#!/usr/bin/env bash
# Build hack/flux-health (kstatus's default and Flux's CEL health checks, github.com/fluxcd/pkg/runtime/cel,
# side by side; tests/health/test_flux_health.py) into a cache outside the repository, keyed by its
# go.mod/go.sum/main.go and the Go version:
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/flux-health-<key>/flux-health
#
#   hack/flux-health.sh            build it if missing, print the binary's path last
#   hack/flux-health.sh --print    print the binary's path only (no build)
#
# The Go module and build caches are the Go command's own (GOMODCACHE, GOCACHE), outside the
# repository; the k8s and cli-utils versions are ssa-check's, so a warm build cache serves both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/flux-health"
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}
key=$( (go env GOVERSION; cat "$src/go.mod" "$src/go.sum" "$src/main.go") | sha256sum | cut -c1-16)
out="$tools/flux-health-$key/flux-health"

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi
if [[ -x $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
t0=$SECONDS
echo "[flux-health] building $out (fluxcd/pkg/runtime $(grep -m1 'fluxcd/pkg/runtime ' "$src/go.mod" | awk '{print $2}'))" >&2
tmp=$(mktemp "$(dirname "$out")/.build.XXXX")
(cd "$src" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags="-s -w" -o "$tmp" .)
mv -f "$tmp" "$out"
echo "[flux-health] built in $((SECONDS - t0)) s" >&2
echo "$out"
