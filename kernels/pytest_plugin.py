"""pytest integration: time kernels with kernelwatch's timer inside ordinary pytest suites.

Enable with ``pytest_plugins = ["kernelwatch.kernels.pytest_plugin"]`` in a
``conftest.py``. The ``kernel_timer`` fixture measures ``call(inputs)`` exactly
like the suite runner (clock warm-up, cold L2, CUDA graphs for short kernels,
median-interval stopping rule, NVML telemetry) and, when pytest-benchmark is
installed and enabled, also fills the ``benchmark`` fixture's statistics with
the raw per-call samples. ``--benchmark-json`` output is then a normal
pytest-benchmark file (``pytest-benchmark compare`` works on it), with our
timing metadata in ``extra_info``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernelwatch.kernels.timing import Measurement, TimerConfig, measure

TimerFn = Callable[..., Measurement]


@pytest.fixture
def kernel_timer(request: pytest.FixtureRequest) -> TimerFn:
    """``kernel_timer(call, inputs, config=None) -> Measurement``; usable once per test."""
    bench = _benchmark_fixture(request)

    def run(
        call: Callable[[Any], Any], inputs: Any, config: TimerConfig | None = None
    ) -> Measurement:
        m = measure(call, inputs, config)
        if bench is not None:
            _fill_benchmark(bench, m)
        return m

    return run


def _benchmark_fixture(request: pytest.FixtureRequest) -> Any:
    try:
        bench = request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:  # pytest-benchmark not installed
        return None
    return None if getattr(bench, "disabled", False) else bench


def _fill_benchmark(bench: Any, m: Measurement) -> None:
    """Hand our samples to pytest-benchmark as rounds of one iteration each."""
    t = m.timing
    bench._mode = "kernelwatch.kernel_timer(...)"  # mark the fixture as used
    stats = bench._make_stats(1)
    for sample in t.samples:
        stats.update(sample)
    bench.extra_info.update(
        {
            "kernelwatch_timer": t.timer,
            "kernelwatch_median_s": t.median,
            "kernelwatch_ci_s": [t.ci_low, t.ci_high],
            "kernelwatch_stop_reason": t.stop_reason,
            "kernelwatch_cold_l2": t.cold_l2,
            "kernelwatch_cuda_graph": t.cuda_graph,
            "kernelwatch_calls_per_sample": t.calls_per_sample,
            "kernelwatch_discarded": t.discarded,
            "kernelwatch_reliable": m.reliable,
        }
    )
