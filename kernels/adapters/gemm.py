"""Implementation module ``gemm`` (short name ``torch-gemm``): the GEMMs PyTorch dispatches.

- ``gemm``: ``torch.mm(a, w.t(), out=...)``: cuBLAS on a GPU (the TN product of
  ``nn.Linear``), the CPU BLAS elsewhere.
- ``gemm_fp8_rowwise``: ``torch._scaled_mm`` with a float32 scale per row of A
  and per row of W. Older PyTorch builds ran this through ATen's CUTLASS kernel
  (``f8f8bf16_rowwise``); on the H200 with torch 2.11+cu130 the profiler showed
  cuBLASLt's ``nvjet_sm90_*`` kernel instead (2026-11-29,
  ``docs/data/gemm-kernel-names.json``), so this is **not** a CUTLASS GEMM there.
  ``python -m benchmarks.gpu libraries --part gemm-kernels`` records the kernel names; a CUTLASS
  GEMM on Hopper is the CuTe DSL adapter's (``cutlass_dsl.py``, ``docs/cutlass-dsl.md``).
- ``gemm_fp8_tensorwise``: ``torch._scaled_mm`` with one scale per tensor
  (cuBLASLt).
- ``gemm_grouped``: ``torch._grouped_mm`` over the experts of an MoE layer. ATen's
  source implements it on sm90 with a CUTLASS grouped GEMM
  (``bf16bf16_grouped_gemm_impl_sm90_sm100`` in ``GroupMM.cu``), which would make
  it this adapter's CUTLASS GEMM. **Not yet confirmed on the H200**: after
  ``_scaled_mm`` turned out to be cuBLASLt there, the claim waits for
  ``test_grouped_gemm_runs_a_cutlass_kernel_on_hopper`` (kernel names). The CPU has
  a reference fallback.
- ``gemm_grouped_fp8_rowwise``: ``torch._scaled_grouped_mm`` (row-wise scales per
  token and per expert output channel): per ATen's source a CUTLASS FP8 grouped
  GEMM on sm90 (same caveat); CUDA only.

``_scaled_mm`` wants the second operand column-major: ``w.t()`` of a row-major
``[n, k]`` weight is exactly that, with no copy.
"""

from __future__ import annotations

import torch

from kernelwatch.kernels.adapters import require_cuda
from kernelwatch.kernels.suite import Inputs


def gemm(case: Inputs) -> torch.Tensor:
    out: torch.Tensor = torch.mm(case["a"], case["w"].t(), out=case["out"])
    return out


def gemm_fp8_rowwise(case: Inputs) -> torch.Tensor:
    out: torch.Tensor = torch._scaled_mm(
        case["a"],
        case["w"].t(),
        scale_a=case["scale_a"],  # [m, 1]
        scale_b=case["scale_w"].t(),  # [1, n]
        out_dtype=case["out"].dtype,
    )
    return out


def gemm_fp8_tensorwise(case: Inputs) -> torch.Tensor:
    out: torch.Tensor = torch._scaled_mm(
        case["a"],
        case["w"].t(),
        scale_a=case["scale_a"],
        scale_b=case["scale_w"],
        out_dtype=case["out"].dtype,
    )
    return out


def gemm_grouped(case: Inputs) -> torch.Tensor:
    out: torch.Tensor = torch._grouped_mm(
        case["a"],
        case["w"].transpose(-2, -1),  # [E, k, n] view of the [E, n, k] expert weights
        offs=case["offs"],
        out_dtype=case["out"].dtype,
    )
    return out


def gemm_grouped_fp8_rowwise(case: Inputs) -> torch.Tensor:
    require_cuda(case["a"], "torch._scaled_grouped_mm")
    out: torch.Tensor = torch._scaled_grouped_mm(
        case["a"],
        case["w"].transpose(-2, -1),
        case["scale_a"],  # [M]
        case["scale_w"],  # [E, n]
        offs=case["offs"],
        out_dtype=case["out"].dtype,
    )
    return out
