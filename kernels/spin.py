"""GPU time of a known size: the timer's keep-busy and the injected slowdowns.

Two jobs need "the GPU is busy for exactly this long and touches no memory":

- the timer's warm-L2 and graph paths queue a spin before the start event, so the
  event does not fire on an idle GPU and time the host's launch latency instead of
  the kernel (seen on the H200: an 8 MB op read 23 us "warm" against 7 us cold);
- the measurement benchmark injects slowdowns of known size into a kernel.

``spin(iters)`` launches one warp that runs ``iters`` dependent FMAs
(``triton_kernels/spin.py``); ``seconds_per_iter()`` measures its slope once per
device, from the difference of two long spins, so the launch cost cancels out.
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def _sink(device_index: int) -> torch.Tensor:
    return torch.empty(32, dtype=torch.float32, device=f"cuda:{device_index}")


def spin(iters: int, device: torch.device | None = None) -> None:
    """Queue a compute-only kernel of ``iters`` dependent FMAs on the current stream."""
    try:
        from kernelwatch.kernels.triton_kernels.spin import spin_kernel
    except ImportError:  # no triton: PyTorch's clock spin, calibrated the same way
        torch.cuda._sleep(4 * max(0, int(iters)))
        return
    index = (device.index if device is not None else None) or torch.cuda.current_device()
    spin_kernel[(1,)](_sink(index), max(0, int(iters)), 1.0000001, 1e-7)


def _time_spin(iters: int, device: torch.device | None, reps: int) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spin(iters, device)  # compile and queue work so the start event is not early
    a.record()
    for _ in range(reps):
        spin(iters, device)
    b.record()
    b.synchronize()
    return float(a.elapsed_time(b)) / 1e3 / reps


@functools.cache
def seconds_per_iter(device_index: int = 0) -> float:
    """Slope of the spin's duration, measured: (t(long) - t(short)) / (long - short)."""
    dev = torch.device(f"cuda:{device_index}")
    short, long = 1_000, 201_000
    _time_spin(long, dev, 3)  # warm the clock a little
    slopes = []
    for _ in range(3):
        slopes.append((_time_spin(long, dev, 5) - _time_spin(short, dev, 5)) / (long - short))
    slopes.sort()
    return slopes[1]


def iters_for(seconds: float, device_index: int = 0) -> int:
    """Spin iterations that take ``seconds`` at the clock of the calibration."""
    return max(1, round(seconds / seconds_per_iter(device_index)))
