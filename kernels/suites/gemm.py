"""The GEMM suite: ``C = A · Wᵀ`` in bf16/fp16 and in FP8 with row-wise or per-tensor scales,
and the grouped GEMMs of a mixture-of-experts layer.

Shapes come from ``gemm.toml``: squares and the four linear layers of real
models (``grid.gemm_shape``). W is stored ``[n, k]`` row-major like an
``nn.Linear`` weight, so every backend computes the same "TN" product that LLM
inference runs; ``Wᵀ`` is a free view for the libraries that want ``[k, n]``.

FP8 inputs are quantized once in ``make_inputs``; the reference multiplies the
dequantized values, so the check measures the kernel's accumulation and output
rounding, not the quantization both sides share.

Grouped (MoE) cases: the tokens routed to E experts, sorted by expert, are one
``A[M, k]``; expert e multiplies rows ``offs[e-1]:offs[e]`` by its own ``W[e]``
(``[E, n, k]``). ``group_lens`` gives the tokens per expert (a skewed mix, as a
router produces); each is rounded up to ``GROUP_ALIGN`` rows, as MoE stacks pad
token groups for these kernels. Whether PyTorch's grouped GEMMs also accept
unpadded groups was not tried.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from kernelwatch.kernels import flops, grid
from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites.common import (
    dtype_name,
    dtype_of,
    invoke,
    quantize_fp8,
    quantize_fp8_rows,
    randn,
)

Params = dict[str, Any]
FP8_KERNELS = ("gemm_fp8_rowwise", "gemm_fp8_tensorwise")
GROUPED_KERNELS = ("gemm_grouped", "gemm_grouped_fp8_rowwise")
GROUP_ALIGN = 32


def build(size: str, device: torch.device) -> list[CaseSpec]:
    return [make_case(p) for p in grid.builtin("gemm").cases(size)]


def make_case(raw: Params) -> CaseSpec:
    p = dict(raw)
    kernel = str(p.pop("kernel"))
    if kernel in GROUPED_KERNELS:
        return _grouped(kernel, p)
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    if kernel == "gemm":
        return _plain(p, m, n, k)
    if kernel in FP8_KERNELS:
        return _fp8(kernel, p, m, n, k)
    raise ValueError(f"gemm suite has no kernel {kernel!r}")


def _plain(p: Params, m: int, n: int, k: int) -> CaseSpec:
    dtype = dtype_of(str(p["dtype"]))

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        return {
            "a": randn((m, k), g, dev, dtype),
            "w": randn((n, k), g, dev, dtype),
            "out": torch.empty((m, n), device=dev, dtype=dtype),
        }

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        out: torch.Tensor = i["a"].to(dt) @ i["w"].to(dt).t()
        return out

    name = str(p["dtype"])
    return CaseSpec(
        "gemm",
        p,
        make,
        invoke,
        ref,
        dtype,
        flops=flops.gemm_flops(m, n, k),
        bytes=flops.gemm_bytes(m, n, k, name, name),
    )


def _fp8(kernel: str, p: Params, m: int, n: int, k: int) -> CaseSpec:
    rowwise = kernel == "gemm_fp8_rowwise"
    out_dtype = torch.bfloat16

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        a = randn((m, k), g, dev, torch.float32)
        w = randn((n, k), g, dev, torch.float32)
        case: Inputs = {"out": torch.empty((m, n), device=dev, dtype=out_dtype)}
        if rowwise:
            case["a"], case["scale_a"] = quantize_fp8_rows(a)  # [m, 1]
            case["w"], case["scale_w"] = quantize_fp8_rows(w)  # [n, 1]
        else:
            a8, sa = quantize_fp8(a)
            w8, sw = quantize_fp8(w)
            case["a"], case["w"] = a8, w8
            case["scale_a"] = torch.tensor(sa, dtype=torch.float32, device=dev)
            case["scale_w"] = torch.tensor(sw, dtype=torch.float32, device=dev)
        return case

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        a = (i["a"].to(torch.float32) * i["scale_a"]).to(dt)
        w = (i["w"].to(torch.float32) * i["scale_w"]).to(dt)
        out: torch.Tensor = a @ w.t()
        return out

    scales = flops.rowwise_scale_bytes(m, n) if rowwise else 8.0
    return CaseSpec(
        kernel,
        p,
        make,
        invoke,
        ref,
        out_dtype,
        flops=flops.gemm_flops(m, n, k),
        bytes=flops.gemm_bytes(m, n, k, "float8_e4m3fn", "bfloat16", scale_bytes=scales),
        tolerance_kind="fp8",
    )


def group_sizes(lens: list[int]) -> list[int]:
    """Tokens per expert, each rounded up to ``GROUP_ALIGN`` rows."""
    return [-(-int(x) // GROUP_ALIGN) * GROUP_ALIGN for x in lens]


def _grouped(kernel: str, p: Params) -> CaseSpec:
    fp8 = kernel == "gemm_grouped_fp8_rowwise"
    n, k = int(p["n"]), int(p["k"])
    sizes = group_sizes(list(p["group_lens"]))
    experts, m = len(sizes), sum(sizes)
    in_dtype = torch.float32 if fp8 else dtype_of(str(p["dtype"]))
    out_dtype = torch.bfloat16 if fp8 else in_dtype
    ends = list(itertools.accumulate(sizes))

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        a = randn((m, k), g, dev, in_dtype)
        w = randn((experts, n, k), g, dev, in_dtype)
        case: Inputs = {
            "offs": torch.tensor(ends, dtype=torch.int32, device=dev),
            "out": torch.empty((m, n), device=dev, dtype=out_dtype),
        }
        if fp8:
            case["a"], scale_a = quantize_fp8_rows(a)  # [m, 1]
            w8, scale_w = quantize_fp8_rows(w.reshape(experts * n, k))  # [E·n, 1]
            case["w"] = w8.view(experts, n, k)
            case["scale_a"] = scale_a.reshape(m)
            case["scale_w"] = scale_w.reshape(experts, n)
        else:
            case["a"], case["w"] = a, w
        return case

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        a, w = i["a"].to(torch.float32), i["w"].to(torch.float32)
        if fp8:
            a = a * i["scale_a"][:, None]
            w = w * i["scale_w"][:, :, None]
        a, w = a.to(dt), w.to(dt)
        out = torch.empty((m, n), device=a.device, dtype=dt)
        start = 0
        for e, end in enumerate(ends):
            out[start:end] = a[start:end] @ w[e].t()
            start = end
        return out

    name = "float8_e4m3fn" if fp8 else str(p["dtype"])
    scales = flops.rowwise_scale_bytes(m, experts * n) if fp8 else 0.0
    return CaseSpec(
        kernel,
        p,
        make,
        invoke,
        ref,
        out_dtype,
        flops=flops.gemm_flops(m, n, k),
        bytes=flops.grouped_gemm_bytes(m, n, k, experts, name, dtype_name(out_dtype), scales),
        tolerance_kind="fp8" if fp8 else "default",
    )
