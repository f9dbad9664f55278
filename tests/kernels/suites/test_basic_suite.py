"""The first suite as a pytest module: correctness by the shared rule, then timing.

Run it like any pytest suite; with ``--benchmark-json F`` the timings land in a
pytest-benchmark file.
"""

from __future__ import annotations

import os

import pytest
import torch

from kernelwatch.kernels.correctness import check, poison_
from kernelwatch.kernels.suite import CaseSpec, load_impl
from kernelwatch.kernels.suites.basic import build
from kernelwatch.kernels.timing import TimerConfig

# pytest-benchmark measures nothing under pytest-xdist: make test runs these in one process
pytestmark = pytest.mark.serial

pytest_plugins = ["kernelwatch.kernels.pytest_plugin"]

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
CASES = build("smoke" if DEVICE.type == "cpu" else "full", DEVICE)
IMPL = os.environ.get("KW_SUITE_IMPL", "kernelwatch.kernels.triton_kernels")


@pytest.mark.parametrize("spec", CASES, ids=lambda s: f"{s.kernel}-{s.params['dtype']}")
def test_kernel(spec: CaseSpec, kernel_timer) -> None:  # type: ignore[no-untyped-def]
    fn = load_impl(IMPL, spec.kernel)
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    inputs = spec.make_inputs(gen, DEVICE)
    poison_(inputs["out"])
    spec.invoke(fn, inputs)
    hi = torch.float64 if DEVICE.type == "cpu" else torch.float32
    result = check(
        inputs["out"],
        spec.reference(inputs, hi),
        spec.reference(inputs, spec.dtype),
        spec.dtype,
        spec.tolerance_kind,
    )
    assert result.passed, result.detail
    budget = 0.2 if DEVICE.type == "cpu" else 2.0
    m = kernel_timer(lambda i: spec.invoke(fn, i), inputs, TimerConfig(budget_s=budget))
    assert m.timing.n == len(m.timing.samples) > 0


@pytest.mark.parametrize("size", ["smoke", "quick", "full"])
def test_every_builtin_suite_builds_at_every_size_a_runner_defaults_to(size: str) -> None:
    """The paired suite defaults to ``quick`` on a GPU, the runner to ``full``: a paired
    Liger run on the H200 (2026-12-02) ended in ``KeyError: 'quick'`` from this suite."""
    from kernelwatch.kernels.suite import load_suite, suite_names

    for name in suite_names():
        assert isinstance(load_suite(name, size, torch.device("cpu")), list), name
    assert load_suite("basic", size, torch.device("cpu"))  # a grid with cases, not an empty one
