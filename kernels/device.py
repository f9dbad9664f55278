"""Where a measurement ran: device identity and software environment.

These fields go into every result record; comparisons happen only between
records of the same device class. The class (``"h200"`` from ``"NVIDIA H200"``,
``"cpu"`` without a GPU) comes from the torch-free rule in ``kernels/devclass.py``,
the one the API, the planner and the worker use too.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import sys
from typing import Any

import torch

from kernelwatch.kernels.devclass import device_class
from kernelwatch.kernels.telemetry import Telemetry


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


# Variables that size a CPU suite's thread pools (OpenMP, MKL, OpenBLAS).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# Threads of a CPU run unless ``KW_CPU_THREADS`` (or ``OMP_NUM_THREADS``) says otherwise.
DEFAULT_CPU_THREADS = 1


def cpu_threads(environ: dict[str, str] | None = None) -> int:
    """How many threads a CPU run may use: ``KW_CPU_THREADS``, else ``OMP_NUM_THREADS``, else 1.

    One by default because torch's default (one thread per core) on a shared, loaded
    machine makes samples bimodal (0.03 ms vs 6 ms when a thread is descheduled):
    untouched kernels then look 100x slower (issue 18). An explicit value is kept.
    """
    env = os.environ if environ is None else environ
    for name in ("KW_CPU_THREADS", "OMP_NUM_THREADS"):
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return DEFAULT_CPU_THREADS


def pin_cpu_threads(device: torch.device) -> int | None:
    """Limit a CPU run's thread pools; the thread count (None on a GPU, left alone).

    The variables are set too, for anything started from this process (the paired
    mode's side processes import torch after this and read them at start).
    """
    if device.type != "cpu":
        return None
    threads = cpu_threads()
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    torch.set_num_threads(threads)
    # settable only before the first inter-op work; the intra-op pool is the one that matters
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(threads)
    return threads


def describe_environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        # what torch will use: the pinned count on a CPU run (``pin_cpu_threads``)
        "threads": torch.get_num_threads(),
    }
    triton = triton_version()
    if triton is not None:
        env["triton"] = triton
    return env


def triton_version() -> str | None:
    """Triton's version as installed, whether or not a kernel imported it yet: the runner
    describes its environment before the first case imports the library's kernels (the
    records of Triton kernels said no ``triton``: an audit, 2026-12-05)."""
    for dist in ("triton", "pytorch-triton", "triton-nightly"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    loaded = sys.modules.get("triton")  # a source checkout on the path, no distribution
    return None if loaded is None else str(getattr(loaded, "__version__", "unknown"))


__all__ = [
    "cpu_threads",
    "describe_device",
    "describe_environment",
    "device_class",
    "pin_cpu_threads",
    "triton_version",
]
