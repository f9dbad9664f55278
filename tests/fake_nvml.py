"""A stand-in ``pynvml`` for hosts without a GPU: the import seam of NVML, nothing deeper.

NVML needs an NVIDIA driver, which development and CI machines do not have. The code
that reads it (``kernels/devclass.py``, ``kernels/telemetry.py``) imports ``pynvml`` by
name, so a test puts this module in ``sys.modules["pynvml"]`` (or ``None`` there, for
"nvidia-ml-py is not installed") and the real code runs against it. Its calls answer
as nvidia-ml-py 12/13 does (bytes or str, values in its units: bytes, mW, MHz), and a
device can refuse a call with ``NVMLError_NotSupported`` as older boards do. What it
cannot show is whether the real NVML on an H200 answers the same: the GPU driver's
``service`` sub-command compares NVML's rows with nvidia-smi's there.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


@dataclass
class FakeDevice:
    uuid: str
    name: str
    sm_mhz: int = 1980
    max_sm_mhz: int = 1980
    used_bytes: int = 1 << 20
    total_bytes: int = 143771 << 20
    temp_c: int = 34
    power_mw: int = 83490
    reasons: int | None = 0  # None: the device does not support the call
    mem_mhz: int = 3201


@dataclass
class _Memory:
    used: int
    total: int
    free: int = 0


@dataclass
class FakeNvml:
    devices: list[FakeDevice] = field(default_factory=list)
    driver: str = "580.159.04"
    init_error: type[NVMLError] | None = None  # nvmlInit raises it (no driver library)
    inits: int = 0
    shutdowns: int = 0

    def module(self) -> types.ModuleType:
        """The fake as an importable ``pynvml`` module."""
        mod = types.ModuleType("pynvml")
        n = self

        def init() -> None:
            if n.init_error is not None:
                raise n.init_error()
            n.inits += 1

        def shutdown() -> None:
            n.shutdowns += 1

        def reasons(h: FakeDevice) -> int:
            if h.reasons is None:
                raise NVMLError_NotSupported()
            return h.reasons

        calls: dict[str, Any] = {
            "NVMLError": NVMLError,
            "NVMLError_NotSupported": NVMLError_NotSupported,
            "NVMLError_LibraryNotFound": NVMLError_LibraryNotFound,
            "NVML_CLOCK_SM": 1,
            "NVML_CLOCK_MEM": 2,
            "NVML_TEMPERATURE_GPU": 0,
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": lambda: len(n.devices),
            "nvmlDeviceGetHandleByIndex": lambda i: n.devices[i],
            "nvmlDeviceGetHandleByUUID": lambda u: next(d for d in n.devices if d.uuid == u),
            "nvmlDeviceGetUUID": lambda h: h.uuid,
            "nvmlDeviceGetName": lambda h: h.name.encode(),  # older bindings answer bytes
            "nvmlSystemGetDriverVersion": lambda: n.driver,
            "nvmlDeviceGetClockInfo": lambda h, c: h.sm_mhz if c == 1 else h.mem_mhz,
            "nvmlDeviceGetMaxClockInfo": lambda h, c: h.max_sm_mhz if c == 1 else h.mem_mhz,
            "nvmlDeviceGetMemoryInfo": lambda h: _Memory(h.used_bytes, h.total_bytes),
            "nvmlDeviceGetTemperature": lambda h, s: h.temp_c,
            "nvmlDeviceGetPowerUsage": lambda h: h.power_mw,
            "nvmlDeviceGetPowerManagementLimit": lambda h: 700_000,
            "nvmlDeviceGetCurrentClocksEventReasons": reasons,
        }
        for name, value in calls.items():
            setattr(mod, name, value)
        return mod
