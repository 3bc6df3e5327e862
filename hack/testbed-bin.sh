#!/usr/bin/env bash
# Build the testbed's Kubernetes binaries from the pinned Go wrapper modules in
# hack/testbed/<tool>/ into a cache outside the repository, keyed by the pins.
#
#   hack/testbed-bin.sh            build whatever is missing, print the bin dir last
#   hack/testbed-bin.sh --print    print the bin dir only (no build)
#
# The cache key is a digest of every wrapper go.mod/go.sum and the Go version, so a
# pin change builds into a fresh directory and never mixes versions.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mods="$here/testbed"
K8S_VERSION=v1.36.3
cache_root=${SPARKRUN_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-testbed}

key=$( (go env GOVERSION; cat "$mods"/*/go.mod "$mods"/*/go.sum) | sha256sum | cut -c1-16)
bin="$cache_root/$key/bin"
share="$cache_root/$key/share"

if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$bin"

export CGO_ENABLED=0
log() { printf '[testbed-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

build() { # build <module-dir> <output-names...> -- <packages...> [ldflags]
  local dir=$1; shift
  local outs=() pkgs=()
  while [[ $1 != -- ]]; do outs+=("$1"); shift; done; shift
  local ldflags="-s -w ${LDFLAGS_EXTRA:-}"
  pkgs=("$@")
  local missing=0
  for o in "${outs[@]}"; do [[ -x "$bin/$o" ]] || missing=1; done
  if (( ! missing )); then log "$dir: cached (${outs[*]})"; return; fi
  log "$dir: building ${outs[*]} ..."
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$bin/.build.XXXX")
  if (( ${#pkgs[@]} == 1 )); then
    (cd "$mods/$dir" && go build -trimpath -ldflags="$ldflags" -o "$tmp/${outs[0]}" "${pkgs[0]}")
  else
    (cd "$mods/$dir" && go build -trimpath -ldflags="$ldflags" -o "$tmp/" "${pkgs[@]}")
  fi
  for o in "${outs[@]}"; do mv -f "$tmp/$o" "$bin/$o"; done
  rmdir "$tmp"
  log "$dir: done in $((SECONDS - t0)) s"
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
stamp=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

t_all=$SECONDS
build etcd etcd -- go.etcd.io/etcd/server/v3
LDFLAGS_EXTRA="$stamp" build k8s kube-apiserver kube-controller-manager kube-scheduler -- \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
build jobset jobset -- sigs.k8s.io/jobset
# The JobSet CRD and webhook manifests come from the same pinned module.
js_dir=$(cd "$mods/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
mkdir -p "$share/jobset"
cp -f "$js_dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$share/jobset/"
cp -f "$js_dir/config/components/webhook/manifests.yaml" "$share/jobset/webhook-manifests.yaml"
build kwok kwok -- sigs.k8s.io/kwok/cmd/kwok
# kwokctl's default stages minus pod-complete (pods of Jobs stay Running instead of finishing).
kwok_dir=$(cd "$mods/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
mkdir -p "$share/kwok-stages"
rm -f "$share/kwok-stages/kustomization.yaml"  # copied by an earlier version of this script
stages=$kwok_dir/kustomize/stage
cp -f "$stages/node/fast/node-initialize.yaml" "$stages/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
      "$stages/pod/fast/pod-ready.yaml" "$stages/pod/fast/pod-delete.yaml" "$share/kwok-stages/"
chmod -R u+w "$share"
build helm helm -- helm.sh/helm/v3/cmd/helm
# llm-d-inference-sim, the gateway tests' second upstream: its own wrapper and key (hack/llmd-sim/).
"$here/llmd-sim-bin.sh" >/dev/null
# The Inference Extension's endpoint picker (v1.5.0) and the InferencePool/Gateway API CRDs (hack/epp/).
"$here/epp-bin.sh" >/dev/null
log "all binaries present in $bin (this run: $((SECONDS - t_all)) s)"
"$bin/kube-apiserver" --version >&2
echo "$bin"
