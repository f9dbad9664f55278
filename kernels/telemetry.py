"""GPU telemetry through NVML: clocks, temperature, power and throttle reasons.

The timer reads these alongside its samples: a sample taken while the SM clock
was below 75 % of its steady level is discarded (as nvbench does), and a case
measured while the GPU reported hardware slowdown or thermal throttling is
marked unreliable. Without NVML (no GPU, or nvidia-ml-py missing) every reading
is ``None`` and nothing is discarded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelwatch.kernels import stats

# NVML throttle-reason bits (nvml.h: nvmlClocksEventReasons).
REASONS = {
    0x1: "gpu_idle",
    0x2: "app_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# Reasons that mean the measurement is not of the kernel but of a sick or hot GPU.
UNRELIABLE_REASONS = {"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"}
# A block (or batch) whose SM clock fell below this share of the measurement's
# sustained clock ran throttled (nvbench: 75 %).
CLOCK_FLOOR = 0.75


@dataclass(frozen=True)
class Reading:
    sm_mhz: int
    mem_mhz: int
    temp_c: int
    power_w: float
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Reliability:
    """Whether a set of blocks was measured on a healthy GPU, and why not.

    throttled: indices of the blocks that ran below the clock floor or under an
    unreliable throttle reason; reasons: the unreliable reasons seen.
    """

    reliable: bool
    throttled: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    reference_mhz: int | None = None


def blocks_reliable(
    clocks: Sequence[int | None],
    reasons: Sequence[Iterable[str]] = (),
    floor: float = CLOCK_FLOOR,
) -> Reliability:
    """The paired mode's throttle guard: every block must have run at a sane clock.

    ``clocks``: the SM clock read after each block (None: not read); ``reasons``:
    the throttle reasons read with it. The reference is the median clock of the
    blocks (the sustained level of this measurement, as the timer uses: a
    power-capped GEMM runs below its warm-up clock all its life). One throttled
    block makes the whole comparison unreliable: in paired mode a slow block on one
    side is a ratio, so it could fake a regression, and a throttled comparison
    can never be one (it is measured again instead). Without NVML (no clocks at
    all) nothing is known to be wrong: reliable.
    """
    seen = [c for c in clocks if c]
    reference = int(stats.median(seen)) if seen else None
    throttled: list[int] = []
    bad: set[str] = set()
    for i, clock in enumerate(clocks):
        why = set(reasons[i]) & UNRELIABLE_REASONS if i < len(reasons) else set()
        low = bool(clock and reference and clock < floor * reference)
        if why or low:
            throttled.append(i)
            bad |= why
    return Reliability(not throttled, throttled, sorted(bad), reference)


class Telemetry:
    """NVML handle for one device, or a null reader when NVML is unavailable."""

    def __init__(self, device_index: int = 0) -> None:
        self._handle: Any = None
        self._nvml: Any = None
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = device_handle(pynvml, device_index)
        except Exception:  # no driver, no GPU, or no nvidia-ml-py: telemetry is optional
            self._handle = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def read(self) -> Reading | None:
        if self._handle is None:
            return None
        n, h = self._nvml, self._handle
        try:
            mask = int(n.nvmlDeviceGetCurrentClocksEventReasons(h))
        except Exception:
            mask = int(n.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        return Reading(
            sm_mhz=int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            mem_mhz=int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            temp_c=int(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            power_w=float(n.nvmlDeviceGetPowerUsage(h)) / 1000.0,
            reasons=tuple(name for bit, name in REASONS.items() if mask & bit),
        )

    def static_info(self) -> dict[str, Any]:
        """Identity of the device: name, UUID, driver, max clocks."""
        if self._handle is None:
            return {}
        n, h = self._nvml, self._handle
        info: dict[str, Any] = {}
        for key, call in (
            ("uuid", lambda: n.nvmlDeviceGetUUID(h)),
            ("driver", lambda: n.nvmlSystemGetDriverVersion()),
            ("max_sm_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
            ("max_mem_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)),
            ("power_limit_w", lambda: n.nvmlDeviceGetPowerManagementLimit(h) / 1000.0),
        ):
            try:
                value = call()
                info[key] = value.decode() if isinstance(value, bytes) else value
            except Exception:
                continue
        return info


def device_handle(nvml: Any, logical: int) -> Any:
    """NVML's handle for CUDA device ``logical``, through ``CUDA_VISIBLE_DEVICES``.

    NVML ignores that variable, so CUDA's device 0 of a worker pinned to a GPU is
    not NVML's device 0. The per-GPU supervisor pins by UUID (``GPU-...``), which
    NVML looks up directly; plain indices map by position; otherwise index = index.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    entry = parts[logical] if logical < len(parts) else ""
    if entry.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    if parts and all(p.isdigit() for p in parts) and entry:
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    return nvml.nvmlDeviceGetHandleByIndex(logical)
