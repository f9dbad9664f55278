"""Device classes and the GPU list (NVML, else ``nvidia-smi``), standard library only.

A device class (``"h200"`` from ``"NVIDIA H200"``) names a queue (``gpu.h200``) and a
series. The API process, the planner and the worker launcher all need it, and none of
them may pay for torch (about 1 s and hundreds of MB) to build a string: so the naming
rule and the one GPU query live here, apart from ``kernels/device.py`` (which
describes a device through torch inside the suite runner).

The query asks NVML (``pynvml``, from ``nvidia-ml-py``: the ``gpu`` extra every GPU
install path installs) where it is importable and starts, and parses ``nvidia-smi``'s
CSV only where it is not. Neither creates a CUDA context. ``pynvml`` is an optional
import: this module stays free of any service dependency (it runs inside the library
under test's environment too). ``CUDA_VISIBLE_DEVICES`` is honoured (indices or UUIDs,
in its order).

What it does not do: turn the rows into numbers (``worker/gpus.py`` does, for health
and heartbeats) or describe clocks and peaks (``kernels/device.py``, ``peaks.py``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from typing import Any

IDENTITY_FIELDS = ("index", "uuid", "name")
# the class of a machine without a GPU (its runs time the CPU: plumbing only)
CPU_CLASS = "cpu"


def processor(device_class: str) -> str:
    """``CPU`` for the CPU class, ``GPU`` for any other: what a run's seconds held, in
    texts ("GPU time 1.2 min", "on the same GPU")."""
    return "CPU" if device_class.lower() == CPU_CLASS else "GPU"


def device_class(name: str) -> str:
    """Queue/series class of a device name.

    'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100' (SXM), 'NVIDIA H100 PCIe'
    -> 'h100-pcie', 'NVIDIA H100 NVL' -> 'h100-nvl': form factors with other clocks and
    power limits are other classes, so their numbers never share a series.
    """
    if not name or name == CPU_CLASS:
        return CPU_CLASS
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


# How NVML answers each ``nvidia-smi --query-gpu`` field, as nvidia-smi prints it with
# ``nounits`` (MiB, MHz, C, W; throttle reasons as a hex mask). A field NVML cannot
# answer on a device (NVMLError_NotSupported) is empty, not a failed query.
_MIB = 1024 * 1024
_NVML_FIELDS: dict[str, Callable[[Any, Any, int], object]] = {
    "index": lambda n, h, i: i,
    "uuid": lambda n, h, i: n.nvmlDeviceGetUUID(h),
    "name": lambda n, h, i: n.nvmlDeviceGetName(h),
    "driver_version": lambda n, h, i: n.nvmlSystemGetDriverVersion(),
    "clocks.sm": lambda n, h, i: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
    "clocks.max.sm": lambda n, h, i: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
    "memory.used": lambda n, h, i: n.nvmlDeviceGetMemoryInfo(h).used // _MIB,
    "memory.total": lambda n, h, i: n.nvmlDeviceGetMemoryInfo(h).total // _MIB,
    "temperature.gpu": lambda n, h, i: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
    "power.draw": lambda n, h, i: n.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "clocks_throttle_reasons.active": lambda n, h, i: f"0x{_reasons_mask(n, h):016x}",
}


def _reasons_mask(nvml: Any, handle: Any) -> int:
    """The clock event (throttle) reasons bitmask; the newer call where the binding has it."""
    call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if call is None:
        call = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(call(handle))


@contextlib.contextmanager
def nvml() -> Iterator[Any]:
    """``pynvml``, initialised for the block, or None where it is not importable or NVML
    does not start (no driver library, no GPU): callers fall back to ``nvidia-smi``."""
    try:
        import pynvml  # nvidia-ml-py: optional, the ``gpu`` extra
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # pynvml.NVMLError and its subclasses: NVML is not usable here
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_rows(nvml_module: Any, fields: Sequence[str]) -> list[list[str]]:
    """One row of ``fields`` per GPU NVML lists, as nvidia-smi would print them."""
    rows = []
    for i in range(int(nvml_module.nvmlDeviceGetCount())):
        handle = nvml_module.nvmlDeviceGetHandleByIndex(i)
        row = []
        for name in fields:
            read = _NVML_FIELDS.get(name)
            try:
                row.append(_text(read(nvml_module, handle, i)) if read else "")
            except Exception:  # NotSupported on this device or driver: empty, as [N/A]
                row.append("")
        rows.append(row)
    return rows


def gpu_rows(fields: Sequence[str], timeout_s: float = 20) -> list[list[str]] | None:
    """``fields`` of every GPU of this host, one list of strings per GPU; None if unknown.

    From NVML where it is available, else from ``nvidia-smi`` (None without it or when
    it fails: a driver that does not know one of ``fields`` fails its whole query, so
    callers asking for optional fields retry with :data:`IDENTITY_FIELDS`).
    """
    with nvml() as n:
        if n is not None:
            try:
                return nvml_rows(n, fields)
            except Exception:  # pynvml.NVMLError: NVML started but lost its GPUs; ask smi
                pass
    out = smi_query(fields, timeout_s)
    if out is None:
        return None
    rows = [[p.strip() for p in line.split(",")] for line in out.splitlines() if line.strip()]
    return [r for r in rows if len(r) >= min(len(fields), 3)]


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
    rows = gpu_rows(IDENTITY_FIELDS)
    if rows is None:
        return []
    return [row[2] for row in visible_rows(rows, os.environ.get("CUDA_VISIBLE_DEVICES"))]


def local_device_class() -> str:
    """This machine's class: its first visible GPU's, or ``cpu``."""
    names = local_gpu_names()
    return device_class(names[0]) if names else "cpu"


__all__ = [
    "IDENTITY_FIELDS",
    "device_class",
    "gpu_rows",
    "local_device_class",
    "local_gpu_names",
    "nvml",
    "nvml_rows",
    "smi_query",
    "visible_rows",
]
