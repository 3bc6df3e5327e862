#!/usr/bin/env bash
# Build hack/netpol-eval (NetworkPolicy verdicts with the code of SIG Network's reference
# implementation, sigs.k8s.io/kube-network-policies; tests/tenancy/test_network_policy.py) into a
# cache outside the repository, keyed by its sources, go.mod/go.sum and the Go version:
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/netpol-eval-<key>/netpol-eval
#
#   hack/netpol-eval.sh            build it if missing, print the binary's path last
#   hack/netpol-eval.sh --print    print the binary's path only (no build)
#
# The controller's per-connection verdict is unexported: the build vendors the modules into a
# scratch folder beside the binary (outside the repository) and adds one file of ours
# (sparkrun_verdict.go.txt) to that package, which exposes it and changes nothing else. The
# modules come from the Go module proxy (GOPROXY) into the Go command's own caches.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/netpol-eval"
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}
key=$( (go env GOVERSION; cat "$src/go.mod" "$src/go.sum" "$src/main.go" "$src/sparkrun_verdict.go.txt") \
  | sha256sum | cut -c1-16)
out="$tools/netpol-eval-$key/netpol-eval"

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi
if [[ -x $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
t0=$SECONDS
echo "[netpol-eval] building $out (kube-network-policies $(grep -m1 'kube-network-policies ' "$src/go.mod" | awk '{print $2}'))" >&2
work=$(mktemp -d "$(dirname "$out")/.build.XXXX")
trap 'rm -rf "$work"' EXIT
cp "$src/go.mod" "$src/go.sum" "$src/main.go" "$work/"
(cd "$work" && go mod vendor)
cp "$src/sparkrun_verdict.go.txt" "$work/vendor/sigs.k8s.io/kube-network-policies/pkg/networkpolicy/zz_sparkrun_verdict.go"
(cd "$work" && CGO_ENABLED=0 go build -mod=vendor -buildvcs=false -trimpath -ldflags="-s -w" -o "$work/netpol-eval" .)
mv -f "$work/netpol-eval" "$out"
echo "[netpol-eval] built in $((SECONDS - t0)) s" >&2
echo "$out"
