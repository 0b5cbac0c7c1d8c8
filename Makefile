# One entry point for humans and CI. `make demo` and `make test` set up the
# virtual environment themselves (from pyproject.toml, the only place Python
# versions are pinned).
#
# Offline mirrors: set MIRROR_DIR to a folder laid out like ../shared
# (tfds/, upstream/, kube-schemas/). Unset, everything is fetched online.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOTSTRAP ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
WORK_DIR ?= work

MIRROR_DIR ?=
ifneq ($(strip $(MIRROR_DIR)),)
ifeq ($(wildcard $(MIRROR_DIR)/.),)
$(error MIRROR_DIR=$(MIRROR_DIR) is not a folder: give the offline mirrors' folder, absolute or relative to this clone)
endif
export TFDS_DATA_DIR ?= $(abspath $(MIRROR_DIR))/tfds
export UPSTREAM_MIRROR_DIR ?= $(abspath $(MIRROR_DIR))/upstream
export KUBE_SCHEMA_DIR ?= $(abspath $(MIRROR_DIR))/kube-schemas
endif
export TF_CPP_MIN_LOG_LEVEL ?= 2
export PYTHONUNBUFFERED := 1

# Training budget of make demo: quick (default), smoke, or full = the cluster's (docs/training.md)
BUDGET ?= quick
PYTEST_ARGS ?=
# `make test`'s pytest processes (pytest-xdist; a test file stays in one: its fixtures are
# made once); 0 runs it in one process, as before
TEST_JOBS ?= 2
PYTEST_JOBS = -n $(TEST_JOBS) --dist loadfile

# Pinned upstream Go programs (versions in versions.env or their kustomization URL, recipes in
# hack/tools/), built into a cache outside the clone; see docs/e2e.md. KUBECONFORM is the binary
# `make validate` runs: given, else the cache's or PATH's of the pinned version
# (scripts/kubeconform.sh), else built (the only step of `make test` that needs Go).
TOOLS := scripts/tools.sh
KUBECONFORM_BIN = $(shell scripts/kubeconform.sh --find 2>/dev/null)

.PHONY: help venv demo test test-fast lint validate tools kubeconform e2e e2e-images loadtest-local bench bench-train bench-serve clean

help: ## list targets and variables
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'
	@echo "variables: MIRROR_DIR=DIR (offline mirrors, e.g. ../shared; unset: online), BUDGET=quick|smoke|full (demo, bench-train),"
	@echo "           PYTEST_ARGS (test, test-fast, e2e), WORK_DIR (demo output, default work), BENCH_ARGS (bench-train: --resume, --overwrite, --precision float32)"
	@echo "           TEST_JOBS (test, test-fast: pytest processes, default 2; 0: one, for --pdb or -s)"
	@echo "           E2E_SKIP_TIERS (e2e: tiers left out, e.g. pulumi; serving takes gitops with it; docs/e2e.md \"Tiers\"), FMNIST_E2E_REAL_NODE=0 (e2e: kwok nodes only)"
	@echo "           KUBECONFORM=PATH (validate, test: a kubeconform of versions.env's KUBECONFORM_VERSION; unset: the cache's or PATH's, else built with Go)"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -e '.[dev,loadtest,torch,pulumi]'
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP) ## create/refresh .venv from pyproject.toml

demo: $(STAMP) ## run the whole pipeline locally: ingest -> train x4 (3 TFJobs + 1 PyTorchJob, 2 replicas each) -> select -> serve -> predict
	$(PY) -m fmnist_pipeline --work-dir $(WORK_DIR) --budget $(BUDGET)

test: $(STAMP) lint kubeconform ## lint, then the whole test suite (offline with MIRROR_DIR; not tests/e2e)
	$(PY) -m pytest --ignore=tests/e2e $(PYTEST_JOBS) $(PYTEST_ARGS)

test-fast: $(STAMP) kubeconform ## tests without the slow multi-process ones
	$(PY) -m pytest -m 'not slow' --ignore=tests/e2e $(PYTEST_JOBS) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff + yamllint
	$(VENV)/bin/ruff check src tests loadtest bench pulumi
	$(VENV)/bin/ruff format --check src tests loadtest bench pulumi
	$(VENV)/bin/yamllint --strict .

test test-fast validate: export KUBECONFORM ?= $(KUBECONFORM_BIN)

tools: ## build every pinned Go tool missing from the cache (kube-apiserver, etcd, kwok, controllers, ...)
	$(TOOLS)

kubeconform: ## kubeconform for `make validate`: KUBECONFORM, else the cache's or PATH's of the pinned version, else built (Go)
	@scripts/kubeconform.sh >/dev/null

e2e-images: $(STAMP) tools ## build the real node's images (pause, Python base, project images, argoexec, agent, busybox, event_display, the platform's controllers) if missing
	@if [ "$${FMNIST_E2E_REAL_NODE:-1}" = 0 ]; then echo "FMNIST_E2E_REAL_NODE=0: no images"; else scripts/e2e-images.sh; fi

# E2E_SKIP_TIERS="TIER...": tiers of the e2e left out, their tools and images not built
# (scripts/e2e-tiers.sh; a cold .ci/run sets it for the tiers its budget cannot build)
e2e: export E2E_SKIP_TIERS ?=
e2e: $(STAMP) ## start the real control plane and real node, run tests/e2e, always tear down (E2E_SKIP_TIERS: tiers left out)
	scripts/e2e-tiers.sh report
	$(TOOLS) $$(scripts/e2e-tiers.sh tools)
	@if [ "$${FMNIST_E2E_REAL_NODE:-1}" = 0 ]; then echo "FMNIST_E2E_REAL_NODE=0: no images"; \
	else scripts/e2e-images.sh $$(scripts/e2e-tiers.sh images); fi
	rc=0; scripts/e2e-cluster.sh run -- $(PY) -m pytest tests/e2e --durations=15 \
	  $$(scripts/e2e-tiers.sh pytest-args) $(PYTEST_ARGS) || rc=$$?; scripts/e2e-tiers.sh report; exit $$rc

validate: $(STAMP) kubeconform ## render every kustomization and validate the manifests (no ML tests)
	$(PY) -m validation

loadtest-local: $(STAMP) ## headless Locust run against the local model server (needs `make demo` first)
	$(PY) -m loadtest.local --work-dir $(WORK_DIR)

bench-train: $(STAMP) ## training throughput/accuracy benchmark (2 workers on loopback)
	$(PY) bench/train_bench.py --budget $(BUDGET) $(BENCH_ARGS)

bench-serve: $(STAMP) ## model server benchmark (req/s, p50/p99 at concurrency 1/5/16; needs `make demo` first)
	$(PY) bench/serve_bench.py

bench: bench-train bench-serve ## all benchmarks

clean: ## remove the work dir (models, checkpoints, reports)
	rm -rf $(WORK_DIR)
