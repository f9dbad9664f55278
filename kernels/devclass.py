"""Device classes and the ``nvidia-smi`` query, standard library only.

A device class (``"h200"`` from ``"NVIDIA H200"``) names a queue (``gpu.h200``) and a
series. The API process, the planner and the worker launcher all need it, and none of
them may pay for torch (about 1 s and hundreds of MB) to build a string: so the naming
rule and the one ``nvidia-smi`` query live here, apart from ``kernels/device.py``
(which describes a device through torch inside the suite runner).

``nvidia-smi`` rather than torch or NVML: no CUDA context is ever created by asking.
``CUDA_VISIBLE_DEVICES`` is honoured (indices or UUIDs, in its order).

What it does not do: parse the query's numbers (``worker/gpus.py`` does, for health
and heartbeats) or describe clocks and peaks (``kernels/device.py``, ``peaks.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence

IDENTITY_FIELDS = ("index", "uuid", "name")


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


def smi_query(fields: Sequence[str], timeout_s: float = 20) -> str | None:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``; None if it fails.

    None also without ``nvidia-smi`` (a CPU host). A driver that does not know one of
    ``fields`` fails the whole query, so callers asking for optional fields retry with
    :data:`IDENTITY_FIELDS`.
    """
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def visible_rows(rows: list[list[str]], visible: str | None) -> list[list[str]]:
    """Rows (index, uuid, ...) of the GPUs that CUDA_VISIBLE_DEVICES selects, in its order."""
    if visible is None:
        return rows
    picked = []
    for token in (t.strip() for t in visible.split(",") if t.strip()):
        match = [r for r in rows if token == r[0] or r[1].startswith(token)]
        if not match:
            break  # CUDA stops at the first invalid entry
        picked.append(match[0])
    return picked


def local_gpu_names() -> list[str]:
    """Names of the GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), in order."""
    out = smi_query(IDENTITY_FIELDS)
    if out is None:
        return []
    rows = [[p.strip() for p in line.split(",", 2)] for line in out.splitlines() if line.strip()]
    rows = [r for r in rows if len(r) == 3]
    return [row[2] for row in visible_rows(rows, os.environ.get("CUDA_VISIBLE_DEVICES"))]


def local_device_class() -> str:
    """This machine's class: its first visible GPU's, or ``cpu``."""
    names = local_gpu_names()
    return device_class(names[0]) if names else "cpu"


__all__ = [
    "IDENTITY_FIELDS",
    "device_class",
    "local_device_class",
    "local_gpu_names",
    "smi_query",
    "visible_rows",
]
