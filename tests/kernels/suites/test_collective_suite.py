"""The collective suite on the CPU: it builds without a GPU, and its cases are skips.

NCCL needs CUDA tensors, so on a machine without a GPU the built-in ``all_reduce``
raises ``Unavailable`` and the runner records a skip with the reason, not an error.
"""

from __future__ import annotations

import torch

from kernelwatch.kernels import runner
from kernelwatch.kernels.suite import load_suite
from kernelwatch.kernels.timing import TimerConfig

CPU = torch.device("cpu")


def test_the_suite_builds_on_the_cpu_without_making_tensors() -> None:
    specs = load_suite("collective", "full", CPU)
    assert {s.kernel for s in specs} == {"all_reduce"}
    assert all(s.params["ranks"] == 1 and s.tags == {"cuda_graph": False} for s in specs)
    biggest = max(specs, key=lambda s: s.params["numel"])
    assert biggest.bytes == biggest.params["numel"] * (
        2 if biggest.params["dtype"] == "bfloat16" else 4
    )


def test_on_the_cpu_every_all_reduce_case_is_a_skip_with_its_reason() -> None:
    records = [
        runner.run_case(spec, suite, cid, "builtin", runner.BUILTIN_IMPL, CPU, TimerConfig())
        for suite, spec, cid in runner.selected_cases(
            ["collective"], "smoke", CPU, "builtin", None, []
        )
    ]
    assert len(records) == 4
    for r in records:
        assert (r.kernel, r.status) == ("all_reduce", "skip"), r.error
        assert "needs CUDA tensors for NCCL" in (r.error or "") and "cpu" in (r.error or "")
        assert r.timing is None
