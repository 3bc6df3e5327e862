#!/usr/bin/env bash
# Policy lint with checkov (PyPI) over the Dockerfiles, the Helm chart and the generated
# manifests; configuration and every waiver (with its reason) in .checkov.yaml and inline
# `checkov:skip=` comments. checkov lives in its own venv outside the repository (its pins
# clash with ours), installed on first use:
#   ${SPARKRUN_TOOLS:-~/.cache/sparkrun-tools}/checkov-<version>
# It renders the chart itself with `helm template`: the pinned helm of the testbed cache is put
# first on PATH (`make testbed-bin`).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=3.3.30
tools=${SPARKRUN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkrun-tools}
venv=$tools/checkov-$VERSION
if [[ ! -e $venv/.installed ]]; then
  echo "checkov: installing checkov==$VERSION into $venv (once; a few minutes)" >&2
  t0=$SECONDS
  rm -rf "$venv" && mkdir -p "$tools"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "checkov==$VERSION" || { rm -rf "$venv"; exit 1; }
  touch "$venv/.installed"
  echo "checkov: installed in $((SECONDS - t0)) s" >&2
fi
bin=$(hack/testbed-bin.sh --print)
[[ -x $bin/helm ]] || { echo "checkov: no helm in $bin; run 'make testbed-bin'" >&2; exit 1; }
export PATH="$bin:$PATH"
t0=$SECONDS
"$venv/bin/checkov" --config-file .checkov.yaml "$@"
# Second pass: the chart with every optional feature on (hack/checkov-values.yaml), rendered
# here because checkov renders charts with their defaults only. The CRDs are left out of this
# render (checkov's Kubernetes parser drops a file that holds them; the first pass has them).
# Run from the render's directory so that checkov does not also pick up ./.checkov.yaml's
# directories; the same repository-wide waivers apply.
# The multi-tenant example (watched namespaces, Kubernetes auth, the tenancy admission policies)
# is rendered beside it, so the namespaced RBAC and the policies of that profile are scanned too.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin/helm" template sparkrun helm/sparkrun-operator --namespace sparkrun-system \
  --values hack/checkov-values.yaml --set crds.install=false > "$tmp/all-features.yaml"
"$bin/helm" template sparkrun helm/sparkrun-operator --namespace sparkrun-system \
  --values examples/helm/values-multitenant.yaml --set crds.install=false \
  --set podSecurity.createNamespaces=true > "$tmp/multitenant.yaml"
skips=$("$venv/bin/python" -c 'import sys, yaml; print(",".join(yaml.safe_load(open(sys.argv[1]))["skip-check"]))' .checkov.yaml)
(cd "$tmp" && "$venv/bin/checkov" -d . --framework kubernetes --skip-download --compact --quiet --skip-check "$skips")
echo "checkov: done in $((SECONDS - t0)) s" >&2
