#!/usr/bin/env bash
# Build Kueue's controller manager (sigs.k8s.io/kueue/cmd/kueue) from the pinned wrapper module
# hack/kueue/ into the testbed cache, keyed by the pin, and copy beside it the manifests the
# testbed installs from the same module (testbed/sparkrun_testbed/kueue.py).
#
#   hack/kueue-bin.sh            build it if missing, print the bin dir last
#   hack/kueue-bin.sh --print    print the bin dir only (no build)
#
# <cache>/kueue-<key>/bin/kueue                         the controller manager
# <cache>/kueue-<key>/share/crd/*.yaml                  config/components/crd/bases
# <cache>/kueue-<key>/share/webhook/manifests.yaml      config/components/webhook (rewritten to
#                                                       loopback URLs by the testbed)
# <cache>/kueue-<key>/share/visibility/apiservice_*.yaml the visibility API's APIServices
#
# Optional: only tests that ask for Kueue start it, so a testbed without it stays as quick as it
# was; `make test` builds it once (a Makefile prerequisite), and tests under CI=true fail when the
# binary is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mod="$here/kueue"
cache_root=${SPARKRUN_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-testbed}
key=$( (go env GOVERSION; cat "$mod/go.mod" "$mod/go.sum") | sha256sum | cut -c1-16)
bin="$cache_root/kueue-$key/bin"
share="$cache_root/kueue-$key/share"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
log() { printf '[kueue-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -x "$bin/kueue" ]]; then
  log "cached ($bin/kueue)"
else
  mkdir -p "$bin"
  log "building kueue (sigs.k8s.io/kueue/cmd/kueue) ..."
  t0=$SECONDS
  tmp=$(mktemp -d "$bin/.build.XXXX")
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/kueue" \
    sigs.k8s.io/kueue/cmd/kueue)
  mv -f "$tmp/kueue" "$bin/kueue"
  rmdir "$tmp"
  log "done in $((SECONDS - t0)) s"
fi

if [[ ! -f "$share/visibility/apiservice_v1beta2.yaml" ]]; then
  src=$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$share/crd" "$share/webhook" "$share/visibility"
  cp -f "$src"/config/components/crd/bases/*.yaml "$share/crd/"
  cp -f "$src/config/components/webhook/manifests.yaml" "$share/webhook/"
  cp -f "$src"/config/components/visibility/apiservice_*.yaml "$share/visibility/"
  chmod -R u+w "$share"
fi
echo "$bin"
