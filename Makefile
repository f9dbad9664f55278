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

# Two test processes (CI has 2 cores; most end-to-end tests wait on workers and
# subprocesses); a file's tests stay together (--dist loadfile). Tests marked serial
# (pytest-benchmark fixtures, the new-user browser session, the bisection end-to-end
# files with their several workers) run after, in one process. --durations names the
# slowest tests, so a CI run that grows says where. PYTEST_ARGS adds more options to both.
test: install check
	$(BIN)/pytest -n 2 --dist loadfile -m "not serial" --durations=15 $(PYTEST_ARGS)
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
