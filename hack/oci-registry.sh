#!/usr/bin/env bash
# Build hack/oci-registry (an OCI distribution registry on loopback: go-containerregistry's
# pkg/registry, seeded with random images; tests/unit/test_pin_digests.py) into a cache outside
# the repository (hack/go-tool.sh: keyed by its go.mod/go.sum/main.go and the Go version):
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/oci-registry-<key>/oci-registry
#
#   hack/oci-registry.sh            build it if missing, print the binary's path last
#   hack/oci-registry.sh --print    print the binary's path only (no build)
GO_TOOL_PIN=github.com/google/go-containerregistry exec "$(dirname "$0")/go-tool.sh" oci-registry "$@"
