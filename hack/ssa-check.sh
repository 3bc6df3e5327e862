#!/usr/bin/env bash
# Build hack/ssa-check (a small Go program on Flux's server-side-apply library,
# github.com/fluxcd/pkg/ssa; tests/deploy/test_gitops.py) into a cache outside the repository
# (hack/go-tool.sh: keyed by its go.mod/go.sum/main.go and the Go version):
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/ssa-check-<key>/ssa-check
#
#   hack/ssa-check.sh            build it if missing, print the binary's path last
#   hack/ssa-check.sh --print    print the binary's path only (no build)
GO_TOOL_PIN=github.com/fluxcd/pkg/ssa exec "$(dirname "$0")/go-tool.sh" ssa-check "$@"
