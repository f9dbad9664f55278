"""Synthetic cases with injectable extra work, for measuring the measurement.

A benchmark of a regression detector needs slowdowns of known size. Resizing
the inputs does not give that (a 1 % larger add can be 10 % slower through
alignment, see gpu.md); adding *extra work* does:

- ``gemm`` / ``add``: the kernel, then ``spin(BASE + extra)`` (``kernels/spin.py``,
  dependent FMAs on one warp, linear in its argument, no memory traffic); the
  baseline spins ``BASE`` (``extra_iters=0``) so the extra launch is common to both
  sides and only the iterations differ (``extra_iters < 0``: no spin kernel at
  all, the plain kernel). Both sides of a comparison must pass ``extra_iters``:
  a baseline without the spin kernel makes the candidate pay its launch too
  (that mistake made the H200's "+0.5 %" injections measure +7 %);
- ``add_launch``: a launch-bound Triton add whose every element also runs
  ``extra_fma`` dependent fused multiply-adds, unrolled (a second launch would
  cost more than the whole kernel); the time an FMA adds is not linear at this
  granularity, so benchmarks report the size they measured, not a nominal one;
- ``cpu_matmul``: the CPU path, for tests of the protocol without a GPU.

Each factory returns ``(call, inputs)`` as ``kernelwatch.kernels.paired`` expects.
This module is not part of the installed package (``kernels/`` ships only what a
library's environment needs): side processes import it as ``benchmarks.benchcases``
from the repository root, as the benchmarks and the paired-mode tests do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from kernelwatch.kernels.spin import spin

SideCase = tuple[Callable[[Any], Any], Any]


# The common base spin of both sides of an injection experiment, in iterations.
BASE_ITERS = 1000


def gemm(
    m: int,
    n: int,
    k: int,
    dtype: str = "bfloat16",
    extra_iters: int = -1,
    host_delay_us: float = 0.0,
) -> SideCase:
    """``host_delay_us``: the host busy-waits this long before each launch (a slow
    Python wrapper: the GPU time stays, the launch note should name it)."""
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    out = torch.empty(m, n, device="cuda", dtype=dt)

    def call(i: Any) -> Any:
        if host_delay_us:
            end = time.perf_counter() + host_delay_us * 1e-6
            while time.perf_counter() < end:
                pass
        torch.matmul(i[0], i[1], out=out)
        if extra_iters >= 0:
            spin(BASE_ITERS + extra_iters)

    return call, (a, b)


def add(numel: int, extra_iters: int = -1) -> SideCase:
    x = torch.randn(numel, device="cuda")
    y = torch.randn(numel, device="cuda")
    out = torch.empty_like(x)

    def call(i: Any) -> Any:
        torch.add(i[0], i[1], out=out)
        if extra_iters >= 0:
            spin(BASE_ITERS + extra_iters)

    return call, (x, y)


def add_launch(numel: int = 65536, extra_fma: int = 0) -> SideCase:
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


def cpu_matmul(n: int = 128, extra_rows: int = 0) -> SideCase:
    torch.set_num_threads(1)  # CPU time of idle OpenMP spinners would be noise
    a = torch.randn(n, n)
    b = torch.randn(n, n)

    def call(i: Any) -> Any:
        r = i[0] @ i[1]
        if extra_rows:
            r = i[0][:extra_rows] @ i[1]
        return r

    return call, (a, b)
