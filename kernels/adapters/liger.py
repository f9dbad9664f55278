"""Implementation module ``liger``: Liger-Kernel's Triton kernels (``liger_kernel.ops``).

Liger-Kernel (linkedin/Liger-Kernel) is a training library: each op is a
``torch.autograd.Function`` whose forward launches a Triton kernel. The suites
time the forward, through the classes its own modules call (the public API of
``liger_kernel.ops``), imported from the op's submodule so that the default
Triton implementation runs, not a backend Liger may swap in for a device:

- basic ``softmax(x, out)``: ``LigerSoftmaxFunction.apply(x)``
- basic ``rmsnorm(x, w, eps, out)``: ``LigerRMSNormFunction.apply(x, w, eps)``
  (Liger's defaults: offset 0, casting mode ``llama``)
- layers ``layernorm``: ``LigerLayerNormFunction.apply(x, w, b, eps)``
- layers ``swiglu``: ``LigerSiLUMulFunction.apply(a, b)``
- layers ``geglu``: ``LigerGELUMulFunction.apply(a, b)`` (tanh GELU)

Liger allocates its outputs; the adapters return them (both suites take a
returned tensor as the output), so nothing is copied inside the timed call.
Positional arguments only: keyword arguments were added across versions
(``elementwise_affine``, ``gate_multiplier``) and these stay valid in all of them.

Skips, each with its reason: Liger not installed, or a commit that predates an
op; and on the CPU a kernel that Triton's interpreter (``TRITON_INTERPRET=1``)
cannot run — Liger's RMSNorm, LayerNorm and GeGLU fail there inside the
interpreter (a scalar argument arrives as a Python float, libdevice ``tanh`` is
missing), where a GPU compiles them; its softmax runs. An error raised anywhere
else (a bad import inside Liger, a wrong launch) stays an error.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import torch

from kernelwatch.kernels.adapters import Unavailable, first
from kernelwatch.kernels.suite import Inputs

LIB = "liger-kernel"
PACKAGE = "liger_kernel.ops"


def op_module(name: str) -> ModuleType:
    """``liger_kernel.ops.<name>``; ``Unavailable`` when Liger or that op is not there.

    Only a missing *Liger* module is a skip: an ``ImportError`` raised from inside
    Liger (a dependency it imports and lacks) is the library's error and is raised.
    """
    module = f"{PACKAGE}.{name}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name in ("liger_kernel", PACKAGE, module):
            raise Unavailable(f"{LIB} has no {module} here ({exc})") from exc
        raise


@contextmanager
def interpreter_skips(kernel: str, tensor: torch.Tensor) -> Iterator[None]:
    """On the CPU, a failure inside Triton's interpreter is a skip that says so."""
    try:
        yield
    except Exception as exc:
        # triton.runtime.errors.InterpreterError, matched by name: its module moved
        # between Triton releases, and importing triton here is not needed otherwise
        if tensor.device.type == "cpu" and type(exc).__name__ == "InterpreterError":
            raise Unavailable(
                f"{LIB} {kernel} does not run under Triton's CPU interpreter "
                f"(TRITON_INTERPRET=1): {exc}"
            ) from exc
        raise


def softmax(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    fn = op_module("softmax").LigerSoftmaxFunction
    with interpreter_skips("softmax", x):
        return first(fn.apply(x))


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor) -> torch.Tensor:
    fn = op_module("rms_norm").LigerRMSNormFunction
    with interpreter_skips("rmsnorm", x):
        return first(fn.apply(x, w, eps))


def layernorm(case: Inputs) -> torch.Tensor:
    fn = op_module("layer_norm").LigerLayerNormFunction
    x = case["x"]
    with interpreter_skips("layernorm", x):
        return first(fn.apply(x, case["w"], case["b"], case["eps"]))


def swiglu(case: Inputs) -> torch.Tensor:
    fn = op_module("swiglu").LigerSiLUMulFunction
    with interpreter_skips("swiglu", case["a"]):
        return first(fn.apply(case["a"], case["b"]))


def geglu(case: Inputs) -> torch.Tensor:
    fn = op_module("geglu").LigerGELUMulFunction
    with interpreter_skips("geglu", case["a"]):
        return first(fn.apply(case["a"], case["b"]))


KERNELS = ("softmax", "rmsnorm", "layernorm", "swiglu", "geglu")
__all__ = ["KERNELS", "LIB", "interpreter_skips", "op_module", *KERNELS]
