"""Where a measurement ran: device identity and software environment.

These fields go into every result record; comparisons happen only between
records of the same device class, so the class is derived here, once
(``"h200"`` from ``"NVIDIA H200"``, ``"cpu"`` without a GPU).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any

import torch

from kernelwatch.kernels.telemetry import Telemetry


def device_class(name: str) -> str:
    """Queue/series class of a device name.

    'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100' (SXM), 'NVIDIA H100 PCIe'
    -> 'h100-pcie', 'NVIDIA H100 NVL' -> 'h100-nvl': form factors with other clocks and
    power limits are other classes, so their numbers never share a series.
    """
    if not name or name == "cpu":
        return "cpu"
    upper = name.upper().replace("NVIDIA", "")
    m = re.search(r"\b([A-Z]{1,3}\d{2,4}[A-Z]?)\b", upper)
    token = m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    for marker, suffix in (("PCIE", "-pcie"), ("NVL", "-nvl")):
        if m and re.search(rf"\b{marker}\b", upper):
            token += suffix
    return token


def describe_device(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        return {
            "name": "cpu",
            "class": "cpu",
            "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
        }
    idx = device.index or 0
    props = torch.cuda.get_device_properties(idx)
    info: dict[str, Any] = {
        "name": props.name,
        "class": device_class(props.name),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gb": round(props.total_memory / 1e9, 1),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "cuda": torch.version.cuda,
    }
    info.update(Telemetry(idx).static_info())
    return info


def describe_environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
    }
    triton = sys.modules.get("triton")
    if triton is not None:
        env["triton"] = getattr(triton, "__version__", "unknown")
    return env
