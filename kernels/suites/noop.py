"""A plumbing suite: kernels that do almost nothing, so a run costs only its overhead.

``noop`` exists for fleet tests and ``benchmarks/fleet.py``: it measures the
scheduler, broker and database path (dispatch, result writes, exactly-once), not a
GPU. Its two cases call the implementation module's ``noop(x, out)``, which must
copy ``x`` into ``out``; the reference is ``x`` itself. Its timings mean nothing.
"""

from __future__ import annotations

import torch

from kernelwatch.kernels.suite import CaseSpec, Inputs

SIZES = (16, 64)


def build(size: str, device: torch.device) -> list[CaseSpec]:
    """Two tiny copy cases; ``size`` is accepted and ignored (both grids are the same)."""
    del size
    return [_case(n) for n in SIZES]


def _case(n: int) -> CaseSpec:
    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        x = torch.randn((n,), generator=g, device=dev, dtype=torch.float32)
        return {"x": x, "out": torch.empty_like(x)}

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        out: torch.Tensor = i["x"].to(dt)
        return out

    return CaseSpec(
        "noop",
        {"n": n, "dtype": "float32"},
        make,
        lambda fn, i: fn(i["x"], i["out"]),
        ref,
        torch.float32,
        flops=0.0,
        bytes=8.0 * n,
    )
