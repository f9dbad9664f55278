"""The device's measured ceilings for the roofline: copy bandwidth, bf16 and FP8 GEMM rates.

Datasheet peaks are leads, not ceilings: an H200 copies at ~4.2 TB/s (read + write),
not 4.8, and a bf16 GEMM reaches ~790 TFLOP/s on random data, not 990. A probe
measures them once per device (by UUID) and caches them in a JSON file, so every
``pct_of_peak`` is against what this very GPU can do.

Version 2 (2026-11-29, after the H200 showed cuBLAS GEMMs at 119 % "of peak"):
the GEMM ceiling is the best of two shapes after a clock warm-up, because the
power-capped 8192^3 GEMM alone read 661-708 TFLOP/s while 4096^3 GEMMs ran at
788; and FP8 kernels are held against an FP8 ceiling (``torch._scaled_mm``),
never against the bf16 one (they showed ~200 %). A dtype without a measured
ceiling gets no percentage rather than a wrong one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

PROBE_VERSION = 2
GEMM_SIZES = (4096, 8192)


def cache_path(uuid: str) -> Path:
    root = os.environ.get("KW_PEAKS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "kernelwatch"
    )
    safe = "".join(c for c in uuid if c.isalnum() or c in "-_") or "unknown"
    return Path(root) / f"peaks-{safe}.json"


def probe(device: torch.device, repeats: int = 20) -> dict[str, Any]:
    """Measure copy bandwidth (bytes read + written per second) and the GEMM rates."""
    torch.cuda.synchronize(device)
    n = 2 * 2**30 // 4  # 2 GiB source: far beyond L2
    copy_s = _time_copy(device, n, repeats)
    out: dict[str, Any] = {
        "probe_version": PROBE_VERSION,
        "copy_gbps": 2 * n * 4 / copy_s / 1e9,
        "copy_bytes": 2 * n * 4,
        "gemm_sizes": list(GEMM_SIZES),
    }
    out["bf16_tflops"] = max(_gemm_tflops(device, m, repeats, fp8=False) for m in GEMM_SIZES)
    if _has_fp8(device):
        out["fp8_tflops"] = max(_gemm_tflops(device, m, repeats, fp8=True) for m in GEMM_SIZES)
    return out


def _has_fp8(device: torch.device) -> bool:
    return hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(device) >= (8, 9)


def _gemm_tflops(device: torch.device, m: int, repeats: int, fp8: bool) -> float:
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    if fp8:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)

        def fn() -> Any:
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    else:

        def fn() -> Any:
            return a @ b

    return 2 * m**3 / _best(fn, repeats) / 1e12


def _time_copy(device: torch.device, n: int, repeats: int) -> float:
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    return _best(lambda: dst.copy_(src), repeats)


def _best(fn: Any, repeats: int, warm_s: float = 0.3) -> float:
    """Median of ``repeats`` event-timed calls after ``warm_s`` of warm-up (clocks up)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    return float(times[len(times) // 2])


def device_peaks(device: torch.device, uuid: str, refresh: bool = False) -> dict[str, Any]:
    """Cached peaks for this device, probing on first use (or when ``refresh``)."""
    path = cache_path(uuid)
    if path.exists() and not refresh:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            if data.get("probe_version") == PROBE_VERSION:
                return data
        except (OSError, json.JSONDecodeError):
            pass  # a corrupt cache entry is re-measured, not trusted
    data = probe(device)
    data["uuid"] = uuid
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return data


def compute_ceiling(peaks: dict[str, Any], dtype: str | None) -> float | None:
    """The measured matrix rate (TFLOP/s) a kernel of ``dtype`` is held against, if any."""
    if dtype and dtype.startswith("float8"):
        value = peaks.get("fp8_tflops")
    elif dtype in (None, "bfloat16", "float16"):
        value = peaks.get("bf16_tflops")
    else:  # float32/TF32 and others: no probe yet, so no percentage
        value = None
    return float(value) if value else None


def pct_of_peak(
    tflops: float,
    gbps: float,
    flops: float,
    nbytes: float,
    peaks: dict[str, Any],
    dtype: str | None = None,
) -> tuple[float | None, str]:
    """Percent of the binding ceiling, and which one binds (``compute`` or ``memory``).

    The ridge point uses the ceiling of the kernel's own dtype; when that ceiling
    was not measured, a compute-bound kernel gets ``None``, not a guess.
    """
    ceiling = compute_ceiling(peaks, dtype)
    ridge_tflops = ceiling if ceiling is not None else peaks["bf16_tflops"]
    ridge = ridge_tflops * 1e12 / (peaks["copy_gbps"] * 1e9)  # FLOP per byte
    intensity = flops / nbytes if nbytes else float("inf")
    if intensity >= ridge:
        return (100.0 * tflops / ceiling if ceiling is not None else None), "compute"
    return 100.0 * gbps / peaks["copy_gbps"], "memory"
