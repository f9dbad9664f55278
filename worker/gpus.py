"""The GPUs of this host: identity, clocks, memory, throttling (NVML, else ``nvidia-smi``).

One query (:func:`kernelwatch.kernels.devclass.gpu_rows`, shared with the planner's
device class) serves three callers: the per-GPU launcher (which GPUs, which class
each), heartbeats (GPU name, UUID, driver, current SM clock) and the health check
(memory in use, temperature, throttle reasons). It asks NVML where ``pynvml`` is
importable (the ``gpu`` extra) and parses ``nvidia-smi``'s CSV only where it is not.
Never torch: no CUDA context is ever created in a worker process, measurements
happen in the suite subprocess, never here.

``CUDA_VISIBLE_DEVICES`` is honoured (indices or UUIDs, in its order), so a worker
pinned to one GPU sees exactly that GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kernelwatch.kernels.devclass import device_class, gpu_rows, visible_rows

FIELDS = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.max.sm",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "clocks_throttle_reasons.active",
)

# nvmlClocksThrottleReasons bits that mean the GPU is not in a state to measure.
THROTTLE_BITS = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


@dataclass(frozen=True)
class Gpu:
    """One GPU. Numbers are None where the driver reports ``[N/A]``."""

    index: str
    uuid: str
    name: str
    driver: str = ""
    sm_mhz: int | None = None
    max_sm_mhz: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    temperature_c: int | None = None
    throttle_mask: int = 0

    @property
    def device_class(self) -> str:
        return device_class(self.name)

    @property
    def throttle_reasons(self) -> list[str]:
        return [name for bit, name in THROTTLE_BITS.items() if self.throttle_mask & bit]


def parse(csv_text: str) -> list[Gpu]:
    """Rows of ``nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits``."""
    return from_rows([[p.strip() for p in line.split(",")] for line in csv_text.splitlines()])


def from_rows(rows: list[list[str]]) -> list[Gpu]:
    """GPUs from rows of :data:`FIELDS` (or a prefix of them), as strings: NVML's or the CSV's."""
    gpus = []
    for row in rows:
        if len(row) < 3 or not row[0].isdigit():
            continue
        parts = [*row, *[""] * (len(FIELDS) - len(row))]
        gpus.append(
            Gpu(
                index=parts[0],
                uuid=parts[1],
                name=parts[2],
                driver=parts[3],
                sm_mhz=_int(parts[4]),
                max_sm_mhz=_int(parts[5]),
                memory_used_mib=_int(parts[6]),
                memory_total_mib=_int(parts[7]),
                temperature_c=_int(parts[8]),
                throttle_mask=_int(parts[9], base=16) or 0,
            )
        )
    return gpus


def query(visible: str | None = None, timeout_s: float = 20) -> list[Gpu]:
    """The GPUs this process may use; [] on a host without NVML and ``nvidia-smi``.

    ``visible`` defaults to this process's ``CUDA_VISIBLE_DEVICES``.
    """
    # A driver that does not know an optional field fails nvidia-smi's whole query: fall
    # back to the identity fields, so a GPU host is never taken for a CPU host.
    rows = gpu_rows(FIELDS, timeout_s)
    if rows is None:
        rows = gpu_rows(FIELDS[:4], timeout_s)  # identity and driver
    if rows is None:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    return select_visible(from_rows(rows), visible)


def select_visible(found: list[Gpu], visible: str | None) -> list[Gpu]:
    """The GPUs ``CUDA_VISIBLE_DEVICES=visible`` selects, in its order (None: all)."""
    if visible is None:
        return found
    by_index = {g.index: g for g in found}
    rows = visible_rows([[g.index, g.uuid, g.name] for g in found], visible)
    return [by_index[r[0]] for r in rows]


def _int(text: str, base: int = 10) -> int | None:
    try:
        return int(float(text)) if base == 10 else int(text, base)
    except ValueError:
        return None
