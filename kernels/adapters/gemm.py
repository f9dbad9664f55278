"""Implementation module ``gemm`` (short name ``torch-gemm``): the GEMMs PyTorch dispatches.

- ``gemm``: ``torch.mm(a, w.t(), out=...)``: cuBLAS on a GPU (the TN product of
  ``nn.Linear``), the CPU BLAS elsewhere.
- ``gemm_fp8_rowwise``: ``torch._scaled_mm`` with a float32 scale per row of A
  and per row of W. On Hopper PyTorch runs this through its CUTLASS kernel
  (``f8f8bf16_rowwise`` in ATen), which makes it the CUTLASS-backed GEMM that is
  usable from Python on an H100/H200; ``benchmarks/gpu_issue4.sh`` records the
  kernel names the profiler sees, so the claim is checked on each run.
- ``gemm_fp8_tensorwise``: ``torch._scaled_mm`` with one scale per tensor
  (cuBLASLt).

``_scaled_mm`` wants the second operand column-major: ``w.t()`` of a row-major
``[n, k]`` weight is exactly that, with no copy.
"""

from __future__ import annotations

from typing import Any

import torch

Case = dict[str, Any]


def gemm(case: Case) -> torch.Tensor:
    out: torch.Tensor = torch.mm(case["a"], case["w"].t(), out=case["out"])
    return out


def gemm_fp8_rowwise(case: Case) -> torch.Tensor:
    out: torch.Tensor = torch._scaled_mm(
        case["a"],
        case["w"].t(),
        scale_a=case["scale_a"],  # [m, 1]
        scale_b=case["scale_w"].t(),  # [1, n]
        out_dtype=case["out"].dtype,
    )
    return out


def gemm_fp8_tensorwise(case: Case) -> torch.Tensor:
    out: torch.Tensor = torch._scaled_mm(
        case["a"],
        case["w"].t(),
        scale_a=case["scale_a"],
        scale_b=case["scale_w"],
        out_dtype=case["out"].dtype,
    )
    return out
