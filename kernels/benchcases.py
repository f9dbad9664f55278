"""Synthetic cases with injectable extra work, for measuring the measurement.

A benchmark of a regression detector needs slowdowns of known size. Resizing
the inputs does not give that (a 1 % larger add can be 10 % slower through
alignment, see gpu.md); adding *extra work* does:

- ``gemm`` / ``add``: the kernel, then ``torch.cuda._sleep(BASE + extra)``, a spin
  of a known number of SM cycles; the baseline spins ``BASE`` (``extra=0``) so the
  extra launch is common to both sides and only the cycles differ (extra < 0: no
  spin kernel at all, the plain kernel);
- ``add_launch``: a launch-bound Triton add whose every element also runs
  ``extra_fma`` dependent fused multiply-adds, unrolled (a second launch would
  cost more than the whole kernel); the time an FMA adds is not linear at this
  granularity, so benchmarks report the size they measured, not a nominal one;
- ``cpu_matmul``: the CPU path, for tests of the protocol without a GPU.

Each factory returns ``(call, inputs)`` as ``kernelwatch.kernels.paired`` expects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Case = tuple[Callable[[Any], Any], Any]


# Both sides of an injection experiment launch the spin kernel, the baseline with
# BASE_CYCLES and the candidate with BASE_CYCLES + extra: the launch gap of the extra
# kernel is then common to both and only the extra cycles differ.
# Short spins are not linear in cycles (seen on the H200: sleep(2400) - sleep(500)
# took ~3.4 us, not ~1 us), so the common base spin is long: ~10 us at 1980 MHz.
BASE_CYCLES = 20000


def gemm(m: int, n: int, k: int, dtype: str = "bfloat16", extra_cycles: int = -1) -> Case:
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    out = torch.empty(m, n, device="cuda", dtype=dt)

    def call(i: Any) -> Any:
        torch.matmul(i[0], i[1], out=out)
        if extra_cycles >= 0:
            torch.cuda._sleep(BASE_CYCLES + extra_cycles)

    return call, (a, b)


def add(numel: int, extra_cycles: int = -1) -> Case:
    x = torch.randn(numel, device="cuda")
    y = torch.randn(numel, device="cuda")
    out = torch.empty_like(x)

    def call(i: Any) -> Any:
        torch.add(i[0], i[1], out=out)
        if extra_cycles >= 0:
            torch.cuda._sleep(BASE_CYCLES + extra_cycles)

    return call, (x, y)


def add_launch(numel: int = 65536, extra_fma: int = 0) -> Case:
    import triton

    from kernelwatch.kernels.triton_kernels.busy_add import busy_add

    x = torch.randn(numel, device="cuda")
    y = torch.randn(numel, device="cuda")
    out = torch.empty_like(x)
    block = 1024
    grid = (triton.cdiv(numel, block),)

    def call(i: Any) -> Any:
        busy_add[grid](i[0], i[1], out, numel, BLOCK=block, EXTRA=extra_fma)

    return call, (x, y)


def cpu_matmul(n: int = 128, extra_rows: int = 0) -> Case:
    torch.set_num_threads(1)  # CPU time of idle OpenMP spinners would be noise
    a = torch.randn(n, n)
    b = torch.randn(n, n)

    def call(i: Any) -> Any:
        r = i[0] @ i[1]
        if extra_rows:
            r = i[0][:extra_rows] @ i[1]
        return r

    return call, (a, b)


def cycles_per_second() -> float:
    """SM cycles per second of ``torch.cuda._sleep`` at the current clock (measured)."""
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 2_000_000
    torch.cuda._sleep(n)
    a.record()
    torch.cuda._sleep(n)
    b.record()
    b.synchronize()
    return n / (float(a.elapsed_time(b)) / 1e3)
