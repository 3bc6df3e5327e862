# The verbs a newcomer needs. Every target installs what it needs by itself.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# make test runs the suite on this many pytest-xdist workers, each with its own session testbed
# (a module, and all of e2e/, stays on one worker: tests/conftest.py); 0 runs it in one process.
TEST_WORKERS ?= 2
BENCH_ARGS ?=

.PHONY: sizes help venv demo test unit verify crds generate lint fmt typecheck importlint chart-lint policy test-vllm-args testbed-bin ssa-check flux-health netpol-eval promtool oci-registry kueue-bin lock lock-check testbed-up testbed-down bench bench-gateway bench-reconcile bench-scale bench-registry clean refclient

help: ## list the verbs
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# NB: the tools image's lock (hashes dropped) constrains the dev venv: the tests run the versions the
# images ship (ADR 0017); the dev-only packages resolve freely around them.
$(STAMP): pyproject.toml testbed/pyproject.toml runtime-images/tools/requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	grep -E '^[A-Za-z0-9]' runtime-images/tools/requirements.lock | sed 's/ *\\$$//' > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e '.[dev]' -e ./testbed
	@touch $(STAMP)

venv: $(STAMP) ## create .venv: the package with its dev tools, and the testbed (testbed/)

demo: $(STAMP) testbed-bin ## bring up the local testbed and run the main flow end to end
	$(BIN)/sparkrun-k8s demo

test: verify testbed-bin ssa-check flux-health netpol-eval promtool oci-registry kueue-bin refclient ## install everything, run every check and the whole test suite
	SPARKRUN_TESTBED_BIN="$$(hack/testbed-bin.sh --print)" $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

unit: $(STAMP) ## only the tests that need no testbed
	$(BIN)/pytest -m 'not testbed' $(PYTEST_ARGS)

HELM = "$$(hack/testbed-bin.sh --print)/helm"

crds generate: $(STAMP) testbed-bin ## regenerate every generated file (CRDs, chart CRDs, values table and schema, RBAC table, manifests/, ops catalog)
	$(PY) -m sparkrun_operator.api.generate
	$(PY) hack/gen-ops-catalog.py
	$(PY) hack/chart-values-table.py
	$(PY) hack/chart-values-schema.py
	$(PY) hack/rbac-table.py
	$(PY) hack/argocd-health.py
	$(PY) hack/render-manifests.py --helm $(HELM)

verify: generate lint typecheck importlint sizes chart-lint policy lock-check ## regenerate, run all static checks, fail on any diff
	@hack/verify-clean.sh

sizes: $(STAMP) ## product modules <= 600 lines, functions <= 80, or a written reason (hack/size-exceptions.txt)
	$(PY) hack/check-sizes.py

chart-lint: testbed-bin ## helm lint --strict of the chart (defaults, the values of manifests/ and of the testbed)
	$(HELM) lint --strict helm/sparkrun-operator
	$(HELM) lint --strict helm/sparkrun-operator --values hack/manifests-values.yaml
	$(HELM) lint --strict helm/sparkrun-operator --values hack/testbed-values.yaml

policy: testbed-bin ## checkov over Dockerfiles, the chart and manifests/ (installed once outside the repo)
	hack/checkov.sh

lint: $(STAMP) ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP) ## apply ruff fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(STAMP) ## mypy --strict on the package
	$(BIN)/mypy

importlint: $(STAMP) ## enforce the layer contracts
	$(BIN)/lint-imports

VLLM_VERSION := $(shell $(PYTHON) -c "import re;print(re.search(r':v([0-9.]+)\x22', open('operator/sparkrun_operator/api/workload.py').read())[1])")
VLLM_VENV := $(HOME)/.cache/sparkrun-tools/vllm-$(VLLM_VERSION)

test-vllm-args: $(STAMP) ## the real vLLM parser accepts every rendered engine command (installs vLLM, several GiB, once)
	@test -e $(VLLM_VENV)/.installed || { rm -rf $(VLLM_VENV); $(PYTHON) -m venv $(VLLM_VENV) && $(VLLM_VENV)/bin/pip install -q 'vllm==$(VLLM_VERSION)' && touch $(VLLM_VENV)/.installed; }
	SPARKRUN_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(BIN)/pytest -q tests/vllm_args $(PYTEST_ARGS)

testbed-bin: ## build the pinned Kubernetes binaries into ~/.cache/sparkrun-testbed (once)
	hack/testbed-bin.sh

ssa-check: ## build hack/ssa-check (Flux's server-side-apply library; the GitOps tests) into ~/.cache/sparkrun-tools (once)
	hack/ssa-check.sh

oci-registry: ## build hack/oci-registry (go-containerregistry's registry on loopback; hack/pin-digests.py's tests) into ~/.cache/sparkrun-tools (once)
	hack/oci-registry.sh

lock: $(STAMP) ## re-resolve the images' lock files (runtime-images/*/*.lock; needs the package index)
	$(PY) hack/lock.py

lock-check: $(STAMP) ## the images' lock files match their inputs (offline, no resolution)
	$(PY) hack/lock.py --check

flux-health: ## build hack/flux-health (kstatus's default and Flux's CEL health checks; tests/health) into ~/.cache/sparkrun-tools (once)
	hack/flux-health.sh

netpol-eval: ## build hack/netpol-eval (kube-network-policies' verdicts; the NetworkPolicy matrix) into ~/.cache/sparkrun-tools (once)
	hack/netpol-eval.sh

kueue-bin: ## build Kueue's controller (sigs.k8s.io/kueue, pinned in hack/kueue/; optional on the testbed, tests/kueue) into ~/.cache/sparkrun-testbed (once)
	hack/kueue-bin.sh

refclient: ## sparkrun's own CLI (PyPI sparkrun 0.4.2, needs Python >= 3.12) into ~/.cache/sparkrun-tools (once)
	hack/refclient.sh

promtool: ## promtool from Debian's prometheus package (rule checks and rule unit tests) into ~/.cache/sparkrun-tools (once)
	hack/promtool.sh

testbed-up: $(STAMP) testbed-bin ## start a local testbed and print how to reach it
	$(BIN)/sparkrun-k8s testbed up

testbed-down: $(STAMP) ## stop the local testbed
	$(BIN)/sparkrun-k8s testbed down

bench: $(STAMP) testbed-bin ## run every benchmark in bench/
	@for b in bench/*.py; do n=$$(basename $$b .py); [[ $$n == _* ]] && continue; echo "== $$n"; $(PY) -m bench.$$n; done

# LiteLLM is pinned: 1.82.7 and 1.82.8 on PyPI were compromised in March 2026 (a credential
# stealer published with a maintainer's stolen token; both were pulled), and 1.82.6 is the last
# release before them that the LiteLLM maintainers confirmed clean. Raise the pin only to a release
# with no advisory against it (1.107.x is gone from PyPI too); bench.gateway refuses 1.82.7/1.82.8.
LITELLM_VERSION := 1.82.6
LITELLM_VENV := $(HOME)/.cache/sparkrun-tools/litellm-$(LITELLM_VERSION)

bench-gateway: $(STAMP) ## gateway vs direct vs LiteLLM proxy (pinned LiteLLM in ~/.cache/sparkrun-tools, installed if missing)
	@test -e $(LITELLM_VENV)/.installed || { rm -rf $(LITELLM_VENV); $(PYTHON) -m venv $(LITELLM_VENV) && $(LITELLM_VENV)/bin/pip install -q 'litellm[proxy]==$(LITELLM_VERSION)' && touch $(LITELLM_VENV)/.installed; } || echo "LiteLLM could not be installed; benchmarking without it"
	$(PY) -m bench.gateway --litellm $(LITELLM_VENV)/bin/litellm $(BENCH_ARGS)

bench-reconcile: $(STAMP) testbed-bin ## operator: create -> JobSet + status, vs the same API calls made directly
	$(PY) -m bench.reconcile

bench-scale: $(STAMP) testbed-bin ## operator: 1000 workloads on 250 KWOK GPU nodes (converge, RSS, writes), then the direct-call limit
	$(PY) -m bench.scale
	$(PY) -m bench.scale --direct

# The peer of bench.registry: the reference sparkrun CLI (PyPI, needs Python >= 3.12), pinned.
SPARKRUN_PEER_VERSION := 0.4.2
SPARKRUN_PEER_VENV := $(HOME)/.cache/sparkrun-tools/sparkrun-$(SPARKRUN_PEER_VERSION)
SPARKRUN_PEER_PYTHON ?= $(shell command -v python3.13 || command -v python3.12)

bench-registry: $(STAMP) testbed-bin ## RecipeRegistry sync of 200/1000 recipes vs git clone + direct creates vs sparkrun 0.4.2 (installed if missing)
	@test -e $(SPARKRUN_PEER_VENV)/.installed || { rm -rf $(SPARKRUN_PEER_VENV); test -n "$(SPARKRUN_PEER_PYTHON)" && $(SPARKRUN_PEER_PYTHON) -m venv $(SPARKRUN_PEER_VENV) && $(SPARKRUN_PEER_VENV)/bin/pip install -q 'sparkrun==$(SPARKRUN_PEER_VERSION)' && touch $(SPARKRUN_PEER_VENV)/.installed; } || echo "sparkrun $(SPARKRUN_PEER_VERSION) could not be installed (no Python >= 3.12?); benchmarking without the peer"
	$(PY) -m bench.registry --sparkrun $(SPARKRUN_PEER_VENV)/bin/sparkrun $(BENCH_ARGS)

clean: ## remove the venv and caches (the testbed binary cache stays)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
