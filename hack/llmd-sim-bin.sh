#!/usr/bin/env bash
# Build llm-d-inference-sim (the gateway's second, independent upstream: a Go vLLM simulator)
# from the pinned wrapper module hack/llmd-sim/ into the testbed cache, keyed by the pin.
#
#   hack/llmd-sim-bin.sh            build it if missing, print the bin dir last
#   hack/llmd-sim-bin.sh --print    print the bin dir only (no build)
#
# The module proxy serves v0.10.2 only when asked for that exact version; the wrapper's go.mod
# names it (`go get -tool github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim@v0.10.2`).
# Its own key (not the Kubernetes binaries'), so a pin change here rebuilds only this binary.
# Run it with --force-dummy-tokenizer: without it the simulator asks the Hugging Face hub whether
# the model exists (docs/testbed.md).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mod="$here/llmd-sim"
cache_root=${SPARKRUN_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-testbed}
key=$( (go env GOVERSION; cat "$mod/go.mod" "$mod/go.sum") | sha256sum | cut -c1-16)
bin="$cache_root/llmd-sim-$key/bin"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
log() { printf '[llmd-sim-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x "$bin/llm-d-inference-sim" ]]; then
  log "cached ($bin/llm-d-inference-sim)"
else
  mkdir -p "$bin"
  log "building llm-d-inference-sim ..."
  t0=$SECONDS
  tmp=$(mktemp -d "$bin/.build.XXXX")
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/llm-d-inference-sim" \
    github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim)
  mv -f "$tmp/llm-d-inference-sim" "$bin/llm-d-inference-sim"
  rmdir "$tmp"
  log "done in $((SECONDS - t0)) s"
fi
echo "$bin"
