"""Queue routing: which queue serves a device class (design.md: ``gpu.<class>``, ``cpu``).

The class of this machine comes from :mod:`kernelwatch.kernels.devclass`, which asks
``nvidia-smi`` and never imports torch: the API process plans runs through here.
"""

from __future__ import annotations

from kernelwatch.kernels.devclass import local_device_class, local_gpu_names


def queue_for(device_cls: str) -> str:
    """design.md: one queue per GPU class, ``gpu.<class>``; ``cpu`` without a GPU."""
    return "cpu" if device_cls == "cpu" else f"gpu.{device_cls}"


__all__ = ["local_device_class", "local_gpu_names", "queue_for"]
