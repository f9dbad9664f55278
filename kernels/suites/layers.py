"""The layers suite: LayerNorm and the gated MLP activations (SwiGLU, GeGLU).

Why a suite of its own: these are the memory-bound layers of a transformer block
that Triton kernel libraries (Liger-Kernel, Unsloth, flash-attention's ``ops``)
ship besides softmax and RMSNorm, and ``basic`` is a fixed series that libraries
without them (the demo's tinykern) must keep matching. Shapes come from
``layers.toml``.

Calling convention (that of ``common.py``, not ``basic``'s): an implementation is
``fn(case) -> Tensor`` and may return its own output tensor, as these libraries'
APIs allocate theirs. Keys: ``layernorm``: ``x [rows, cols]``, ``w``/``b [cols]``,
``eps``; ``swiglu``/``geglu``: ``a``, ``b [rows, cols]``; all: ``out`` like ``x``
or ``a``.

References, in the precision asked: LayerNorm written out (mean, biased variance,
``rsqrt``); SwiGLU ``silu(a) * b``; GeGLU ``gelu(a, approximate="tanh") * b``,
the tanh form Gemma and Liger-Kernel use (the erf form is within ~5e-4 of it, inside
the half-precision bounds, so either passes). Forward only: what a training library
changes in its backward kernels is outside this suite.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kernelwatch.kernels import grid
from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites.common import dtype_of, invoke, randn

EPS = 1e-5  # torch.nn.LayerNorm's default


def build(size: str, device: torch.device) -> list[CaseSpec]:
    del device  # the grid's dtypes are the same on every device
    return [make_case(p) for p in grid.builtin("layers").cases(size)]


def make_case(raw: dict[str, Any]) -> CaseSpec:
    p = dict(raw)
    kernel = str(p.pop("kernel"))
    if kernel == "layernorm":
        return _layernorm(p)
    if kernel in GATES:
        return _gated(kernel, p)
    raise ValueError(f"layers suite has no kernel {kernel!r}")


def _layernorm(p: dict[str, Any]) -> CaseSpec:
    rows, cols, dtype = int(p["rows"]), int(p["cols"]), dtype_of(str(p["dtype"]))

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        # an offset and a scale of its own per row: a kernel that skips the mean fails
        x = randn((rows, cols), g, dev, torch.float32) * 2 + randn((rows, 1), g, dev, torch.float32)
        return {
            "x": x.to(dtype),
            "w": randn((cols,), g, dev, dtype),
            "b": randn((cols,), g, dev, dtype),
            "eps": EPS,
            "out": torch.empty((rows, cols), device=dev, dtype=dtype),
        }

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        x = i["x"].to(dt)
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        out: torch.Tensor = (x - mean) * torch.rsqrt(var + EPS) * i["w"].to(dt) + i["b"].to(dt)
        return out

    n, size = rows * cols, _size(dtype)
    return CaseSpec(
        "layernorm",
        p,
        make,
        invoke,
        ref,
        dtype,
        flops=8.0 * n,
        bytes=(2.0 * n + 2.0 * cols) * size,
    )


def _silu(a: torch.Tensor) -> torch.Tensor:
    return F.silu(a)


def _gelu_tanh(a: torch.Tensor) -> torch.Tensor:
    return F.gelu(a, approximate="tanh")


# kernel -> (activation of the gate, FLOPs per element: activation, then the product)
GATES = {"swiglu": (_silu, 5.0), "geglu": (_gelu_tanh, 10.0)}


def _gated(kernel: str, p: dict[str, Any]) -> CaseSpec:
    rows, cols, dtype = int(p["rows"]), int(p["cols"]), dtype_of(str(p["dtype"]))
    act, flops_per = GATES[kernel]

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        return {
            "a": randn((rows, cols), g, dev, dtype),
            "b": randn((rows, cols), g, dev, dtype),
            "out": torch.empty((rows, cols), device=dev, dtype=dtype),
        }

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        out: torch.Tensor = act(i["a"].to(dt)) * i["b"].to(dt)
        return out

    n = rows * cols
    return CaseSpec(
        kernel, p, make, invoke, ref, dtype, flops=flops_per * n, bytes=3.0 * n * _size(dtype)
    )


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
