"""The correctness rule: when is a kernel's output right?

One rule for every suite, modelled on flash-attention's tests: the kernel's error
against a high-precision reference (float64 on the CPU path, float32 on a GPU)
must stay within ``k`` times the error that PyTorch itself makes when it computes
the same function in the kernel's low-precision dtype, plus a rounding floor.
The relative L2 error, the mean absolute error and (as flash-attention's tests
do: ``max|out - ref| <= k * max|out_lowp - ref| + eps``) the largest absolute
error are checked; any NaN or Inf fails. Outputs are poisoned with NaN before
the call, so an element the kernel never wrote shows up as non-finite instead
of as a stale correct value.

The floor belongs to the precision the kernel *computes* in, not to the dtype
it writes: an FP8 GEMM or an FP8-KV attention writes bf16 but rounds its inputs
(and, in FP8 attention, the probabilities P) to e4m3, so its floor is FP8's
(``compute_dtype``). Passing the output dtype made the FP8 floor dead code.

Besides pass or fail, the errors feed a second verdict in paired mode: a
candidate whose error grew beyond a margin over the baseline's, on identical
inputs, is ``less_accurate`` (``verdict.accuracy_verdict``). For that the
check records the scale it was judged at: ``ref_max_abs`` (the reference's
largest magnitude) and ``output_roundoff`` (the unit roundoff of the output
dtype, the resolution below which two errors are the same error).

The constants live here and nowhere else:

- ``K_FACTOR``: how much worse than PyTorch's own low-precision computation a
  kernel may be (2 for plain outputs, 3 for KV-cache paths, 4 with FP8 inputs).
- ``ROUNDING_FLOOR``: one unit roundoff of the compute dtype (the error of rounding
  the exact result once), so a kernel is not failed when PyTorch's low-precision
  result happens to be nearly exact. (An earlier 4-unit floor let a bf16 kernel
  with 1.5 % error pass: too loose.) The max-abs bound's floor is that roundoff
  times the reference's largest magnitude: rounding the largest output once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from kernelwatch.kernels.record import Correctness

K_FACTOR = {"default": 2.0, "kv_cache": 3.0, "fp8": 4.0}

# Unit roundoff of each dtype: the floor under which no error is judged.
ROUNDING_FLOOR: dict[torch.dtype, float] = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
FP8_FLOOR = 2.0**-4  # e4m3


def rounding_floor(dtype: torch.dtype) -> float:
    """Rounding floor of ``dtype`` (FP8 types share the e4m3 floor)."""
    if dtype in ROUNDING_FLOOR:
        return ROUNDING_FLOOR[dtype]
    if is_fp8(dtype):
        return FP8_FLOOR
    raise ValueError(f"no rounding floor for dtype {dtype}")


def is_fp8(dtype: torch.dtype) -> bool:
    return "float8" in str(dtype)


def compute_dtype(out_dtype: torch.dtype, inputs: Mapping[str, Any]) -> torch.dtype:
    """The precision a case computes in, for its rounding floor.

    The output dtype, unless an input tensor is FP8 (FP8 GEMMs, FP8 KV caches,
    FP8 attention write bf16 but compute from e4m3 values): then FP8.
    """
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and is_fp8(value.dtype):
            return value.dtype
    return out_dtype


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill an output buffer with NaN (or the integer maximum) before the call."""
    if t.is_floating_point():
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(t.dtype).max)
    return t


@dataclass(frozen=True)
class ErrorStats:
    rel_l2: float
    max_abs: float
    mean_abs: float
    nonfinite: int


def error_stats(out: torch.Tensor, ref: torch.Tensor) -> ErrorStats:
    """Error of ``out`` against ``ref``, both compared in float64 on the reference's device.

    On the GPU, not the CPU: the H200 (2026-12-02) spent 3-15 s per check copying a
    67 M-element output and its references to the host and reducing them there, with
    16 side processes setting up at once; float64 on the card takes milliseconds.
    """
    o = out.detach().to(ref.device, torch.float64)
    r = ref.detach().to(torch.float64)
    nonfinite = int((~torch.isfinite(o)).sum().item())
    diff = (o - r).nan_to_num(nan=math.inf)
    ref_norm = float(torch.linalg.vector_norm(r).item()) or 1.0
    return ErrorStats(
        rel_l2=float(torch.linalg.vector_norm(diff).item()) / ref_norm,
        max_abs=float(diff.abs().max().item()) if diff.numel() else 0.0,
        mean_abs=float(diff.abs().mean().item()) if diff.numel() else 0.0,
        nonfinite=nonfinite,
    )


def check(
    out: torch.Tensor,
    ref: torch.Tensor,
    lowp_ref: torch.Tensor | None,
    dtype: torch.dtype,
    kind: str = "default",
) -> Correctness:
    """Apply the rule: ``err(out) <= k * err(lowp_ref) + floor`` for rel-L2, mean and max abs.

    ``ref`` is the high-precision reference; ``lowp_ref`` the same function computed
    by PyTorch in the kernel's low precision (None when the kernel works in
    float32/float64, then the bound is the floor alone, scaled by ``k``, and the
    max-abs term is not applied: without PyTorch's own error there is no scale
    for the largest single error). ``dtype``: the compute dtype (``compute_dtype``),
    whose unit roundoff is the floor.
    """
    k = K_FACTOR[kind]
    floor = rounding_floor(dtype)
    got = error_stats(out, ref)
    ref_mean = float(ref.detach().abs().mean().item()) if ref.numel() else 0.0
    ref_max = float(ref.detach().abs().max().item()) if ref.numel() else 0.0
    max_bound = math.inf
    if lowp_ref is not None:
        base = error_stats(lowp_ref, ref)
        bound = k * base.rel_l2 + floor
        mean_bound = k * base.mean_abs + floor * ref_mean
        max_bound = k * base.max_abs + floor * ref_max
    else:
        bound = k * floor
        mean_bound = k * floor * ref_mean
    errors = {
        "rel_l2": got.rel_l2,
        "max_abs": got.max_abs,
        "mean_abs": got.mean_abs,
        "nonfinite": float(got.nonfinite),
        "mean_abs_bound": mean_bound,
        "ref_max_abs": ref_max,
        "output_roundoff": _roundoff(out.dtype, floor),
    }
    if math.isfinite(max_bound):
        errors["max_abs_bound"] = max_bound
    if got.nonfinite:
        return Correctness(
            errors, bound, False, f"{got.nonfinite} non-finite or unwritten outputs", k
        )
    if got.rel_l2 > bound:
        return Correctness(
            errors, bound, False, f"rel L2 error {got.rel_l2:.3g} > bound {bound:.3g}", k
        )
    if got.mean_abs > mean_bound:
        return Correctness(
            errors,
            bound,
            False,
            f"mean abs error {got.mean_abs:.3g} > bound {mean_bound:.3g}",
            k,
        )
    if got.max_abs > max_bound:
        return Correctness(
            errors, bound, False, f"max abs error {got.max_abs:.3g} > bound {max_bound:.3g}", k
        )
    return Correctness(errors, bound, True, "", k)


def _roundoff(dtype: torch.dtype, fallback: float) -> float:
    """Unit roundoff of the output dtype (integer outputs: the compute floor)."""
    try:
        return rounding_floor(dtype)
    except ValueError:
        return fallback
