"""Queue routing: which queue serves a device class (design.md: ``gpu.<class>``, ``cpu``).

A run whose suites need k > 1 GPUs of one host (``[suite] gpus = k``,
``kernels/catalog.py:run_gpus``) goes to ``gpu.<class>.x<k>``, served by workers
pinned to k cards (``kernelwatch worker --per-gpu --multi-gpu k``).

The class of this machine comes from :mod:`kernelwatch.kernels.devclass`, which asks
``nvidia-smi`` and never imports torch: the API process plans runs through here.
"""

from __future__ import annotations

from kernelwatch.kernels.devclass import local_device_class, local_gpu_names

# Builds ahead of a bisection's steps (``build_ahead.py``): CPU work only, consumed by
# ``kernelwatch worker --queues build`` on machines sharing the GPU workers' data dir.
# No GPU worker consumes it unless told to: a GPU's worker keeps to its ``gpu.<class>``.
BUILD_QUEUE = "build"


def queue_for(device_cls: str, gpus: int = 1) -> str:
    """design.md: one queue per GPU class, ``gpu.<class>``; ``cpu`` without a GPU.

    ``gpus`` > 1: the queue of workers that own that many cards of one host,
    ``gpu.<class>.x<gpus>``. The CPU has one queue whatever ``gpus`` says.
    """
    if gpus < 1:
        raise ValueError(f"a run needs at least one GPU, not {gpus}")
    if device_cls == "cpu":
        return "cpu"
    return f"gpu.{device_cls}" if gpus == 1 else f"gpu.{device_cls}.x{gpus}"


__all__ = ["BUILD_QUEUE", "local_device_class", "local_gpu_names", "queue_for"]
