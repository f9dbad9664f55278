"""The device's measured ceilings for the roofline: copy bandwidth and bf16 matrix rate.

Datasheet peaks are leads, not ceilings: an H200 copies at ~4.3 TB/s (read + write),
not 4.8, and a bf16 GEMM reaches ~790 TFLOP/s on random data, not 990. A probe
measures both once per device (by UUID) and caches them in a JSON file, so every
``pct_of_peak`` is against what this very GPU can do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

PROBE_VERSION = 1


def cache_path(uuid: str) -> Path:
    root = os.environ.get("KW_PEAKS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "kernelwatch"
    )
    safe = "".join(c for c in uuid if c.isalnum() or c in "-_") or "unknown"
    return Path(root) / f"peaks-{safe}.json"


def probe(device: torch.device, repeats: int = 20) -> dict[str, Any]:
    """Measure copy bandwidth (bytes read + written per second) and the bf16 GEMM rate."""
    torch.cuda.synchronize(device)
    n = 2 * 2**30 // 4  # 2 GiB source: far beyond L2
    copy_s = _time_copy(device, n, repeats)
    m = 8192
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    gemm_s = _best(lambda: a @ b, repeats)
    return {
        "probe_version": PROBE_VERSION,
        "copy_gbps": 2 * n * 4 / copy_s / 1e9,
        "bf16_tflops": 2 * m**3 / gemm_s / 1e12,
        "copy_bytes": 2 * n * 4,
        "gemm_shape": [m, m, m],
    }


def _time_copy(device: torch.device, n: int, repeats: int) -> float:
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    return _best(lambda: dst.copy_(src), repeats)


def _best(fn: Any, repeats: int) -> float:
    """Median of ``repeats`` event-timed calls after a warm-up of the same length."""
    for _ in range(repeats):
        fn()
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


def pct_of_peak(
    tflops: float, gbps: float, flops: float, nbytes: float, peaks: dict[str, Any]
) -> tuple[float, str]:
    """Percent of the binding ceiling, and which one binds (``compute`` or ``memory``)."""
    ridge = peaks["bf16_tflops"] * 1e12 / (peaks["copy_gbps"] * 1e9)  # FLOP per byte
    intensity = flops / nbytes if nbytes else float("inf")
    if intensity >= ridge:
        return 100.0 * tflops / peaks["bf16_tflops"], "compute"
    return 100.0 * gbps / peaks["copy_gbps"], "memory"
