"""Adapters: the public APIs of the libraries kernelwatch watches, behind one calling convention.

Each module here is an *implementation module* for ``kernelwatch bench --impl``
(the runner looks a suite's kernel up by name on it): it exposes functions such
as ``prefill(case)`` or ``decode_paged(case)`` that call the library's real
public API on the inputs of ``kernels/suites/common.py`` and return its output.
An adapter adds nothing to what is timed except what any user of the API pays
(Python dispatch, the library's own checks); setup such as FlashInfer's
``plan()`` happens once, in the checked first call.

Libraries are imported inside the functions, so this package imports with
torch alone. When a library is missing, there is no CUDA device, or the library
does not support a case (a head dim its build leaves out, an FP8 format it does
not take), the adapter raises ``Unavailable`` with a sentence saying which; the
runner records that as a ``skip`` with the sentence as its reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import torch

from kernelwatch.kernels.stubbed import LEFT_OUT

PACKAGE = "kernelwatch.kernels.adapters"


class Unavailable(Exception):
    """This case cannot run here; the message is the reason shown in the skip record."""


@contextmanager
def build_profile_skips() -> Iterator[None]:
    """Turn a stubbed kernel's ``RuntimeError`` (``kernels/stubbed.py``) into ``Unavailable``:
    a case outside the build profile is a skip, not the library's error."""
    try:
        yield
    except RuntimeError as exc:
        if LEFT_OUT in str(exc):
            raise Unavailable(str(exc)) from None
        raise


@dataclass(frozen=True)
class AdapterInfo:
    """One implementation module: which library it calls and which kernels it offers."""

    module: str
    library: str
    kernels: tuple[str, ...]
    description: str


def _info(name: str, library: str, kernels: str, description: str) -> AdapterInfo:
    return AdapterInfo(f"{PACKAGE}.{name}", library, tuple(kernels.split()), description)


ATTENTION = "prefill prefill_varlen prefill_paged prefill_fp8 decode_paged decode_mla"
ADAPTERS: dict[str, AdapterInfo] = {
    "sdpa": _info("sdpa", "torch", ATTENTION, "torch SDPA, PyTorch's own backend choice"),
    "sdpa-flash": _info(
        "sdpa_flash", "torch", ATTENTION, "SDPA FLASH_ATTENTION (FlashAttention-2 in PyTorch)"
    ),
    "sdpa-cudnn": _info("sdpa_cudnn", "torch", ATTENTION, "SDPA CUDNN_ATTENTION"),
    "sdpa-efficient": _info(
        "sdpa_efficient", "torch", ATTENTION, "SDPA EFFICIENT_ATTENTION (xFormers kernels)"
    ),
    "sdpa-math": _info("sdpa_math", "torch", ATTENTION, "SDPA MATH (runs on the CPU too)"),
    "flash-attn": _info("flash_attn", "flash-attn", ATTENTION, "FlashAttention-2 package"),
    "fa3": _info("fa3", "flash-attn-3", ATTENTION, "FlashAttention-3 (hopper/ build)"),
    "flashinfer": _info("flashinfer", "flashinfer-python", ATTENTION, "FlashInfer"),
    "triton": _info(
        "triton", "kernelwatch", "prefill gemm", "kernelwatch's own Triton attention and matmul"
    ),
    "liger": _info(
        "liger",
        "liger-kernel",
        "softmax rmsnorm layernorm swiglu geglu",
        "Liger-Kernel's Triton kernels (liger_kernel.ops, forward; basic and layers suites)",
    ),
    "torch-gemm": _info(
        "gemm",
        "torch",
        "gemm gemm_fp8_rowwise gemm_fp8_tensorwise gemm_grouped gemm_grouped_fp8_rowwise",
        "torch.mm (cuBLAS); torch._scaled_mm row-wise / per-tensor (cuBLASLt on torch 2.11); "
        "torch._grouped_mm / _scaled_grouped_mm (CUTLASS grouped GEMMs on sm90 per ATen's "
        "source; not yet confirmed on a GPU)",
    ),
    "cutlass-dsl": _info(
        "cutlass_dsl",
        "nvidia-cutlass-dsl",
        "gemm gemm_fp8_rowwise gemm_fp8_tensorwise gemm_grouped gemm_grouped_fp8_rowwise",
        "CUTLASS's Hopper dense GEMM in the CuTe DSL (examples/python/CuTeDSL/hopper/"
        "dense_gemm.py, sm90, bf16/fp16); scaled FP8 and grouped GEMMs skip",
    ),
}


def require_module(import_name: str, package: str) -> ModuleType:
    """Import a library under test, or raise ``Unavailable`` naming the package to install."""
    try:
        return importlib.import_module(import_name)
    except ImportError as exc:
        raise Unavailable(f"{package} is not installed here ({exc})") from exc


def require_cuda(tensor: Any, library: str) -> None:
    """GPU-only libraries: raise ``Unavailable`` when the case's tensors are not on CUDA."""
    device = getattr(tensor, "device", None)
    if getattr(device, "type", None) != "cuda":
        raise Unavailable(f"{library} needs a CUDA device; this case runs on {device}")


def first(result: Any) -> torch.Tensor:
    """The output of an API that returns ``out`` or ``(out, lse, ...)`` depending on version."""
    return cast(torch.Tensor, result[0] if isinstance(result, (tuple, list)) else result)


__all__ = ["ADAPTERS", "AdapterInfo", "Unavailable", "first", "require_cuda", "require_module"]
