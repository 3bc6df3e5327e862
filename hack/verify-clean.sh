#!/usr/bin/env bash
# Fail when regenerating produced a diff, or a generated file that git does not track.
# Every generated path of the repository is listed here (and written by `make generate`).
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(crds operator/sparkrun_operator/ops/data helm manifests docs/security.md)
existing=(); for p in "${paths[@]}"; do [[ -e $p ]] && existing+=("$p"); done
status=0
if ! git diff --exit-code --stat -- "${existing[@]}"; then
  echo "verify: generated files differ from what is committed; run 'make generate' and commit" >&2; status=1
fi
untracked=$(git ls-files --others --exclude-standard -- "${existing[@]}")
if [[ -n $untracked ]]; then
  echo "verify: untracked generated files:" >&2; echo "$untracked" >&2; status=1
fi
exit $status
