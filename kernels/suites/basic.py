"""The first suite: softmax, RMSNorm, matmul and attention.

Shapes come in two sizes: ``smoke`` (small enough for Triton's interpreter on a
CPU, a few seconds a kernel) and ``full`` (GPU sizes from LLM layers). Row
lengths in the smoke grid are deliberately not powers of two, so a kernel that
mishandles its padding lanes fails.

Calling convention: inputs, then ``out`` (``softmax(x, out)``, ``rmsnorm(x, w,
eps, out)``). An implementation fills ``out``, or returns a tensor of its own:
a returned tensor that is not ``out`` is the output checked (``common.kept``). Why:
library APIs such as Liger-Kernel's allocate their output, and copying it into
``out`` inside the adapter would add a full pass over memory to what is timed.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites.common import kept

# Few rows: Triton's interpreter costs about 2-5 ms a row-program, and the CPU tests run
# these cases hundreds of times (every paired block, every side's check); the row
# length, where the padding bugs live, is what the smoke shapes keep.
SMOKE = {
    "softmax": [{"rows": 8, "cols": 1000}],
    "rmsnorm": [{"rows": 4, "cols": 2000}],
    "matmul": [{"m": 96, "n": 96, "k": 96}],
    "attention": [
        {"batch": 1, "heads": 2, "kv_heads": 1, "seq": 64, "head_dim": 32, "causal": True}
    ],
}
FULL = {
    "softmax": [{"rows": 8192, "cols": 4096}, {"rows": 32768, "cols": 1000}],
    "rmsnorm": [{"rows": 16384, "cols": 4096}, {"rows": 4096, "cols": 8192}],
    "matmul": [{"m": 4096, "n": 4096, "k": 4096}, {"m": 8192, "n": 8192, "k": 8192}],
    "attention": [
        {"batch": 4, "heads": 32, "kv_heads": 8, "seq": 4096, "head_dim": 128, "causal": True},
        {"batch": 4, "heads": 32, "kv_heads": 8, "seq": 2048, "head_dim": 128, "causal": False},
    ],
}


def build(size: str, device: torch.device) -> list[CaseSpec]:
    # quick (the paired gate's GPU default) is the full grid: two shapes a kernel
    grid = {"smoke": SMOKE, "quick": FULL, "full": FULL}[size]
    dtypes = [torch.float16] if device.type == "cpu" else [torch.bfloat16, torch.float16]
    cases: list[CaseSpec] = []
    for dtype in dtypes:
        for p in grid["softmax"]:
            cases.append(_softmax(p, dtype))
        for p in grid["rmsnorm"]:
            cases.append(_rmsnorm(p, dtype))
        for p in grid["matmul"]:
            cases.append(_matmul(p, dtype))
        for p in grid["attention"]:
            cases.append(_attention(p, dtype))
    return cases


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _hi(device: torch.device) -> torch.dtype:
    """Reference precision: float64 on the CPU, float32 on a GPU (float64 is slow there)."""
    return torch.float64 if device.type == "cpu" else torch.float32


def _randn(shape: tuple[int, ...], g: torch.Generator, dev: torch.device, dt: torch.dtype) -> Any:
    return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(dt)


def _softmax(p: dict[str, Any], dtype: torch.dtype) -> CaseSpec:
    rows, cols = p["rows"], p["cols"]

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        x = _randn((rows, cols), g, dev, dtype) * 4
        return {"x": x, "out": torch.empty_like(x)}

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        return torch.softmax(i["x"].to(dt), dim=-1)

    n = rows * cols
    return CaseSpec(
        "softmax",
        {**p, "dtype": _name(dtype)},
        make,
        lambda fn, i: kept(i, fn(i["x"], i["out"])),
        ref,
        dtype,
        flops=5.0 * n,
        bytes=2.0 * n * _size(dtype),
    )


def _rmsnorm(p: dict[str, Any], dtype: torch.dtype) -> CaseSpec:
    rows, cols, eps = p["rows"], p["cols"], 1e-6

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        x = _randn((rows, cols), g, dev, dtype)
        w = _randn((cols,), g, dev, dtype)
        return {"x": x, "w": w, "out": torch.empty_like(x)}

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        x, w = i["x"].to(dt), i["w"].to(dt)
        out: torch.Tensor = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        return out

    n = rows * cols
    return CaseSpec(
        "rmsnorm",
        {**p, "dtype": _name(dtype)},
        make,
        lambda fn, i: kept(i, fn(i["x"], i["w"], eps, i["out"])),
        ref,
        dtype,
        flops=4.0 * n,
        bytes=(2.0 * n + cols) * _size(dtype),
    )


def _matmul(p: dict[str, Any], dtype: torch.dtype) -> CaseSpec:
    m, n, k = p["m"], p["n"], p["k"]

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        a = _randn((m, k), g, dev, dtype)
        b = _randn((k, n), g, dev, dtype)
        return {"a": a, "b": b, "out": torch.empty((m, n), device=dev, dtype=dtype)}

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        out: torch.Tensor = i["a"].to(dt) @ i["b"].to(dt)
        return out

    return CaseSpec(
        "matmul",
        {**p, "dtype": _name(dtype)},
        make,
        lambda fn, i: kept(i, fn(i["a"], i["b"], i["out"])),
        ref,
        dtype,
        flops=2.0 * m * n * k,
        bytes=(m * k + k * n + m * n) * float(_size(dtype)),
    )


def _attention(p: dict[str, Any], dtype: torch.dtype) -> CaseSpec:
    b, h, hk, s, d, causal = (
        p["batch"],
        p["heads"],
        p["kv_heads"],
        p["seq"],
        p["head_dim"],
        p["causal"],
    )
    scale = 1.0 / math.sqrt(d)

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        q = _randn((b, h, s, d), g, dev, dtype)
        k = _randn((b, hk, s, d), g, dev, dtype)
        v = _randn((b, hk, s, d), g, dev, dtype)
        return {"q": q, "k": k, "v": v, "out": torch.empty_like(q)}

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        q, k, v = (i[n].to(dt) for n in "qkv")
        rep = h // hk
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) * scale
        if causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out: torch.Tensor = torch.softmax(scores.float(), dim=-1).to(dt) @ v
        return out

    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    nbytes = (2 * b * h * s * d + 2 * b * hk * s * d) * float(_size(dtype))
    return CaseSpec(
        "attention",
        {**p, "dtype": _name(dtype)},
        make,
        lambda fn, i: kept(i, fn(i["q"], i["k"], i["v"], causal, scale, i["out"])),
        ref,
        dtype,
        flops=flops,
        bytes=nbytes,
    )


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
