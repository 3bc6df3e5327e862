#!/usr/bin/env bash
# Build the Gateway API Inference Extension's endpoint picker (cmd/epp, the metrics-aware
# reference picker) from the pinned wrapper module hack/epp/ into the testbed cache, keyed by
# the pin, and copy the CRDs the testbed installs beside it.
#
#   hack/epp-bin.sh            build it if missing, print the bin dir last
#   hack/epp-bin.sh --print    print the bin dir only (no build)
#
# <cache>/epp-<key>/bin/epp                            the picker
# <cache>/epp-<key>/share/inferencepool/*.yaml         InferencePool CRD (same module, v1.5.0)
# <cache>/epp-<key>/share/gateway-api/*.yaml           Gateway API standard CRDs: GatewayClass,
#                                                      Gateway, HTTPRoute, TLSRoute (for linting
#                                                      examples and the chart's routes)
# v1.5.0 is the last release whose module carries the full picker (v1.6 ships a round-robin
# conformance picker only). Gateway API is not in the picker's module graph; its version is the
# one the extension's v1.5.0 conformance module requires, and it is part of the key.
set -euo pipefail

GATEWAY_API_VERSION=v1.5.1
here=$(cd "$(dirname "$0")" && pwd)
mod="$here/epp"
cache_root=${SPARKRUN_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-testbed}
key=$( (go env GOVERSION; echo "$GATEWAY_API_VERSION"; cat "$mod/go.mod" "$mod/go.sum") | sha256sum | cut -c1-16)
bin="$cache_root/epp-$key/bin"
share="$cache_root/epp-$key/share"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
log() { printf '[epp-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x "$bin/epp" ]]; then
  log "cached ($bin/epp)"
else
  mkdir -p "$bin"
  log "building epp (gateway-api-inference-extension) ..."
  t0=$SECONDS
  tmp=$(mktemp -d "$bin/.build.XXXX")
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/epp" \
    sigs.k8s.io/gateway-api-inference-extension/cmd/epp)
  mv -f "$tmp/epp" "$bin/epp"
  rmdir "$tmp"
  log "done in $((SECONDS - t0)) s"
fi

if [[ ! -f "$share/gateway-api/gateway.networking.k8s.io_tlsroutes.yaml" ]]; then
  gie_dir=$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api-inference-extension)
  # Outside the module graph on purpose (adding it would move the picker's own dependencies);
  # `go mod download` checks it against the checksum database.
  gw_dir=$(cd "$mod" && go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n "$gw_dir" ]] || { log "could not download sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION"; exit 1; }
  mkdir -p "$share/inferencepool" "$share/gateway-api"
  cp -f "$gie_dir/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$share/inferencepool/"
  for kind in gatewayclasses gateways httproutes tlsroutes; do
    cp -f "$gw_dir/config/crd/standard/gateway.networking.k8s.io_$kind.yaml" "$share/gateway-api/"
  done
  chmod -R u+w "$share"
fi
echo "$bin"
