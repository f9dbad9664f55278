# kernelwatch: two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# CPU-only machines take the CPU build of torch first (it lies on disk for Python 3.11),
# so the open range in pyproject never pulls a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0

.PHONY: install demo test check lint typecheck importroot fix clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q $(TORCH_CPU); fi
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/kernelwatch demo

# Two test processes at once (CI has 2 cores; most end-to-end tests wait on workers and
# subprocesses): one runs the files marked crowd (many worker and side processes each:
# fleet, paired pipeline, demo, bisections) one after another, so no two of them share
# the machine; the other runs the rest. Each has a Redis database of its own; the crowd
# half's output follows the other's. Tests marked serial (pytest-benchmark fixtures, the
# new-user browser session) run after, alone. --durations names the slowest tests, so
# a CI run that grows says where. PYTEST_ARGS adds more options to all three.
test: install check
	mkdir -p test-artifacts
	KW_TEST_REDIS_DB=13 $(BIN)/pytest -m "crowd and not serial" --durations=15 $(PYTEST_ARGS) \
	  >test-artifacts/crowd.log 2>&1 & crowd=$$!; \
	KW_TEST_REDIS_DB=12 $(BIN)/pytest -m "not crowd and not serial" --durations=15 $(PYTEST_ARGS); \
	rest=$$?; wait $$crowd; crowded=$$?; \
	echo "== the crowd half (test-artifacts/crowd.log)"; cat test-artifacts/crowd.log; \
	test $$rest -eq 0 && test $$crowded -eq 0
	$(BIN)/pytest -m serial --durations=10 $(PYTEST_ARGS)

check: lint typecheck

lint: install importroot
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONPATH=build/typecheck $(BIN)/lint-imports

typecheck: install importroot
	$(BIN)/mypy

# mypy and import-linter cannot follow setuptools' editable finder for our
# package-dir mapping; this tree of links shows them kernelwatch.<part> on disk.
importroot:
	mkdir -p build/typecheck/kernelwatch
	for part in kernels db jobs worker dashboard; do ln -sfn ../../../$$part build/typecheck/kernelwatch/$$part; done

fix: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info test-artifacts
