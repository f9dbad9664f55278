# kernelwatch: two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# make demo installs what the service needs; make test and make check add the dev tools
STAMP     := $(VENV)/.installed-stamp
DEV_STAMP := $(VENV)/.dev-stamp
# CPU-only machines take the CPU build of torch first (it lies on disk for Python 3.11),
# so the open range in pyproject never pulls a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0
# bash for pipefail: pip's exit status survives the progress filter below
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PIP := $(BIN)/python -m pip
# setuptools' "Editable installation ... same name as your package" notice is a wall of
# asterisks that reads like an error (issue 27); it concerns package-dir layouts like ours.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(PIP) install \
  --progress-bar off --disable-pip-version-check
# One line per package pip fetches or builds, so a first install (minutes) shows where it
# is; pip's errors go to stderr and pass unfiltered.
PROGRESS := awk '/^(Collecting|Installing collected|Successfully installed)|^ *Building editable.*started/ \
  { sub(/^ +/, ""); print "    " $$0; fflush() }'

.PHONY: install install-dev demo test check lint typecheck importroot fix clean

$(STAMP): pyproject.toml Makefile
	@echo "kernelwatch: [1/3] virtual environment $(VENV) ($$($(PYTHON) --version 2>&1))"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --disable-pip-version-check --upgrade pip
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "kernelwatch: [2/3] torch, CPU build (no nvidia-smi on this machine)"; \
	  $(PIP_INSTALL) $(TORCH_CPU) | $(PROGRESS); \
	else echo "kernelwatch: [2/3] torch comes with the next step (a GPU machine)"; fi
	@echo "kernelwatch: [3/3] kernelwatch and its dependencies (the first time takes minutes)"
	@$(PIP_INSTALL) -e . | $(PROGRESS)
	@touch $(STAMP)
	@echo "kernelwatch: installed in $(VENV) ($(BIN)/kernelwatch)"

$(DEV_STAMP): $(STAMP)
	@echo "kernelwatch: dev tools for make test and make check (pytest, ruff, mypy, ...)"
	@$(PIP_INSTALL) -e ".[dev]" | $(PROGRESS)
	@touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

demo: install
	$(BIN)/kernelwatch demo

# Two test processes at once (CI has 2 cores; most end-to-end tests wait on workers and
# subprocesses): one runs the files marked crowd (many worker and side processes each:
# fleet, paired pipeline, demo, bisections) one after another, so no two of them share
# the machine; the other runs the rest. Each has a Redis database of its own; the crowd
# half's output follows the other's. Tests marked serial (pytest-benchmark fixtures, the
# new-user browser session) run after, alone. --durations names the slowest tests, so
# a CI run that grows says where. PYTEST_ARGS adds more options to all three.
test: install-dev check
	mkdir -p test-artifacts
	KW_TEST_REDIS_DB=13 $(BIN)/pytest -m "crowd and not serial" --durations=15 $(PYTEST_ARGS) \
	  >test-artifacts/crowd.log 2>&1 & crowd=$$!; \
	KW_TEST_REDIS_DB=12 $(BIN)/pytest -m "not crowd and not serial" --durations=15 $(PYTEST_ARGS); \
	rest=$$?; wait $$crowd; crowded=$$?; \
	echo "== the crowd half (test-artifacts/crowd.log)"; cat test-artifacts/crowd.log; \
	test $$rest -eq 0 && test $$crowded -eq 0
	$(BIN)/pytest -m serial --durations=10 $(PYTEST_ARGS)

check: lint typecheck

lint: install-dev importroot
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONPATH=build/typecheck $(BIN)/lint-imports

typecheck: install-dev importroot
	$(BIN)/mypy

# mypy and import-linter cannot follow setuptools' editable finder for our
# package-dir mapping; this tree of links shows them kernelwatch.<part> on disk.
importroot:
	mkdir -p build/typecheck/kernelwatch
	for part in kernels db jobs worker dashboard; do ln -sfn ../../../$$part build/typecheck/kernelwatch/$$part; done

fix: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info test-artifacts
