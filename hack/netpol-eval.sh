#!/usr/bin/env bash
# Build hack/netpol-eval (NetworkPolicy verdicts with the code of SIG Network's reference
# implementation, sigs.k8s.io/kube-network-policies; tests/tenancy/test_network_policy.py) into a
# cache outside the repository (hack/go-tool.sh: keyed by its go.mod/go.sum/main.go, the patch
# file below and the Go version):
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/netpol-eval-<key>/netpol-eval
#
#   hack/netpol-eval.sh            build it if missing, print the binary's path last
#   hack/netpol-eval.sh --print    print the binary's path only (no build)
#
# The controller's per-connection verdict is unexported: the build vendors the modules into a
# scratch folder beside the binary (outside the repository) and adds one file of ours
# (sparkrun_verdict.go.txt) to that package, which exposes it and changes nothing else.
GO_TOOL_PIN=sigs.k8s.io/kube-network-policies \
GO_TOOL_PATCH=sparkrun_verdict.go.txt=sigs.k8s.io/kube-network-policies/pkg/networkpolicy/zz_sparkrun_verdict.go \
  exec "$(dirname "$0")/go-tool.sh" netpol-eval "$@"
