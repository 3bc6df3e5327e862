#!/usr/bin/env bash
# Build hack/flux-health (kstatus's default and Flux's CEL health checks, github.com/fluxcd/pkg/runtime/cel,
# side by side; tests/health/test_flux_health.py) into a cache outside the repository
# (hack/go-tool.sh: keyed by its go.mod/go.sum/main.go and the Go version):
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/flux-health-<key>/flux-health
#
#   hack/flux-health.sh            build it if missing, print the binary's path last
#   hack/flux-health.sh --print    print the binary's path only (no build)
#
# The k8s and cli-utils versions are ssa-check's, so a warm build cache serves both.
GO_TOOL_PIN=github.com/fluxcd/pkg/runtime exec "$(dirname "$0")/go-tool.sh" flux-health "$@"
