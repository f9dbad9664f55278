"""The correctness rule: when is a kernel's output right?

One rule for every suite, modelled on flash-attention's tests: the kernel's error
against a high-precision reference (float64 on the CPU path, float32 on a GPU)
must stay within ``k`` times the error that PyTorch itself makes when it computes
the same function in the kernel's low-precision dtype, plus a rounding floor.
Both the relative L2 error and the mean absolute error are checked; any NaN or
Inf fails. Outputs are poisoned with NaN before the call, so an element the
kernel never wrote shows up as non-finite instead of as a stale correct value.

The constants live here and nowhere else:

- ``K_FACTOR``: how much worse than PyTorch's own low-precision computation a
  kernel may be (2 for plain outputs, 3 for KV-cache paths, 4 with FP8 inputs).
- ``ROUNDING_FLOOR``: one unit roundoff of the output dtype (the error of rounding
  the exact result once), so a kernel is not failed when PyTorch's low-precision
  result happens to be nearly exact. (An earlier 4-unit floor let a bf16 kernel
  with 1.5 % error pass: too loose.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    if "float8" in str(dtype):
        return FP8_FLOOR
    raise ValueError(f"no rounding floor for dtype {dtype}")


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
    """Error of ``out`` against ``ref``, both compared in float64 on the CPU."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
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
    """Apply the rule: ``err(out) <= k * err(lowp_ref) + floor`` for rel-L2 and mean abs.

    ``ref`` is the high-precision reference; ``lowp_ref`` the same function computed
    by PyTorch in ``dtype`` (None when the kernel works in float32/float64, then
    the bound is the floor alone, scaled by ``k``).
    """
    k = K_FACTOR[kind]
    floor = rounding_floor(dtype)
    got = error_stats(out, ref)
    if lowp_ref is not None:
        base = error_stats(lowp_ref, ref)
        bound = k * base.rel_l2 + floor
        mean_bound = k * base.mean_abs + floor * float(ref.abs().mean().item())
    else:
        bound = k * floor
        mean_bound = k * floor * float(ref.detach().abs().mean().item())
    errors = {
        "rel_l2": got.rel_l2,
        "max_abs": got.max_abs,
        "mean_abs": got.mean_abs,
        "nonfinite": float(got.nonfinite),
        "mean_abs_bound": mean_bound,
    }
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
    return Correctness(errors, bound, True, "", k)
