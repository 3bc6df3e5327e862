#!/usr/bin/env bash
# Build hack/oci-registry (an OCI distribution registry on loopback: go-containerregistry's
# pkg/registry, seeded with random images; tests/unit/test_pin_digests.py) into a cache outside
# the repository, keyed by its go.mod/go.sum and the Go version:
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/oci-registry-<key>/oci-registry
#
#   hack/oci-registry.sh            build it if missing, print the binary's path last
#   hack/oci-registry.sh --print    print the binary's path only (no build)
#
# The Go module and build caches are the Go command's own (GOMODCACHE, GOCACHE), outside the
# repository. The modules come from the Go module proxy (GOPROXY).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/oci-registry"
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}
key=$( (go env GOVERSION; cat "$src/go.mod" "$src/go.sum" "$src/main.go") | sha256sum | cut -c1-16)
out="$tools/oci-registry-$key/oci-registry"

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi
if [[ -x $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
t0=$SECONDS
echo "[oci-registry] building $out (go-containerregistry $(grep -m1 'go-containerregistry ' "$src/go.mod" | awk '{print $NF}'))" >&2
tmp=$(mktemp "$(dirname "$out")/.build.XXXX")
(cd "$src" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags="-s -w" -o "$tmp" .)
mv -f "$tmp" "$out"
echo "[oci-registry] built in $((SECONDS - t0)) s" >&2
echo "$out"
