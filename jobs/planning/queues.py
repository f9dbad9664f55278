"""Which device class this machine has, without importing torch (fast, for the CLI)."""

from __future__ import annotations

import os
import shutil
import subprocess

from kernelwatch.kernels.device import device_class


def local_gpu_names() -> list[str]:
    """Names of the GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), in order."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    rows = [[p.strip() for p in line.split(",", 2)] for line in out.splitlines() if line.strip()]
    return [row[2] for row in visible_rows(rows, os.environ.get("CUDA_VISIBLE_DEVICES"))]


def visible_rows(rows: list[list[str]], visible: str | None) -> list[list[str]]:
    """Rows (index, uuid, name) of the GPUs that CUDA_VISIBLE_DEVICES selects, in its order."""
    if visible is None:
        return rows
    picked = []
    for token in (t.strip() for t in visible.split(",") if t.strip()):
        match = [r for r in rows if token == r[0] or r[1].startswith(token)]
        if not match:
            break  # CUDA stops at the first invalid entry
        picked.append(match[0])
    return picked


def local_device_class() -> str:
    names = local_gpu_names()
    return device_class(names[0]) if names else "cpu"


def queue_for(device_cls: str) -> str:
    """design.md: one queue per GPU class, ``gpu.<class>``; ``cpu`` without a GPU."""
    return "cpu" if device_cls == "cpu" else f"gpu.{device_cls}"
