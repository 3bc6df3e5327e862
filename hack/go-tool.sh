#!/usr/bin/env bash
# Build one of the test tools written in Go, hack/<name>/ (main.go on a pinned go.mod/go.sum), into
# a cache outside the repository, keyed by the Go version and its go.mod, go.sum and main.go (and
# the patch file below, if any):
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/<name>-<key>/<name>
#
#   hack/go-tool.sh NAME            build it if missing, print the binary's path last
#   hack/go-tool.sh NAME --print    print the binary's path only (no build)
#
# Each tool keeps its own script (hack/<name>.sh: the Makefile and the tests call it), which says
# what the tool is and sets, for this one:
#   GO_TOOL_PIN    the module whose pinned version the build's log line names
#   GO_TOOL_PATCH  FILE=VENDORED: a file of ours in hack/<name>/ added to a vendored package, for
#                  an unexported function (hack/netpol-eval.sh); the build then vendors the
#                  modules into a scratch folder beside the binary (outside the repository)
# The modules come from the Go module proxy (GOPROXY) into the Go command's own caches
# (GOMODCACHE, GOCACHE).
set -euo pipefail
name=${1:?usage: hack/go-tool.sh NAME [--print]}
here=$(cd "$(dirname "$0")" && pwd)
src="$here/$name"
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}
patch=${GO_TOOL_PATCH:-}
keyed=("$src/go.mod" "$src/go.sum" "$src/main.go")
[[ -z $patch ]] || keyed+=("$src/${patch%%=*}")
key=$( (go env GOVERSION; cat "${keyed[@]}") | sha256sum | cut -c1-16)
out="$tools/$name-$key/$name"

if [[ "${2:-}" == "--print" ]]; then echo "$out"; exit 0; fi
if [[ -x $out ]]; then echo "$out"; exit 0; fi
mkdir -p "$(dirname "$out")"
t0=$SECONDS
pin=${GO_TOOL_PIN:?hack/$name.sh sets GO_TOOL_PIN}
version=$(awk -v m="$pin" '{for (i = 1; i < NF; i++) if ($i == m) {print $(i + 1); exit}}' "$src/go.mod")
echo "[$name] building $out ($pin $version)" >&2
flags=(-buildvcs=false -trimpath -ldflags="-s -w")
if [[ -z $patch ]]; then
  tmp=$(mktemp "$(dirname "$out")/.build.XXXX")
  (cd "$src" && CGO_ENABLED=0 go build -mod=readonly "${flags[@]}" -o "$tmp" .)
  mv -f "$tmp" "$out"
else
  work=$(mktemp -d "$(dirname "$out")/.build.XXXX")
  trap 'rm -rf "$work"' EXIT
  cp "$src/go.mod" "$src/go.sum" "$src/main.go" "$work/"
  (cd "$work" && go mod vendor)
  cp "$src/${patch%%=*}" "$work/vendor/${patch#*=}"
  (cd "$work" && CGO_ENABLED=0 go build -mod=vendor "${flags[@]}" -o "$work/$name" .)
  mv -f "$work/$name" "$out"
fi
echo "[$name] built in $((SECONDS - t0)) s" >&2
echo "$out"
