"""``measure``: how repeatable is the timer? Run-to-run CV of the median.

On a GPU: ``benchmarks/measurement.py``'s part 1, kernelwatch's timer against
``triton.testing.do_bench`` on the same kernels in the same run (bf16 GEMMs,
fp32 adds, FlashInfer decode when importable, SDPA prefill), ``--repeats``
independent measurements each, interleaved, with the GPU seconds each method
spent. ``--cpu``: kernelwatch's timer alone on a CPU matmul (no do_bench there).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

from benchmarks.gpu import host

NAME = "measure"
HELP = "timer CV: kernelwatch's timer against do_bench"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", action="append", help="kernels whose name contains this")
    p.add_argument("--repeats", type=int, default=None, help="default 10 (CPU: 3)")
    p.add_argument("--budget", type=float, default=None, help="timer seconds (1.7; CPU 0.2)")
    p.add_argument("--flashinfer", metavar="VERSION", help="carried FlashInfer for its case")


def _cpu(repeats: int, budget: float, deadline: float) -> list[dict[str, Any]]:
    from benchmarks import benchcases
    from kernelwatch.kernels.timing import TimerConfig, measure

    call, inputs = benchcases.cpu_matmul(128)
    medians, seconds = [], []
    for _ in range(repeats):
        if time.monotonic() > deadline:
            break
        t = time.perf_counter()
        m = measure(call, inputs, TimerConfig(budget_s=budget))
        seconds.append(time.perf_counter() - t)
        medians.append(m.timing.median)
    cv = statistics.stdev(medians) / statistics.mean(medians) if len(medians) > 1 else math.nan
    return [
        {
            "kernel": "cpu matmul 128",
            "kw_median_us": statistics.median(medians) * 1e6,
            "kw_cv": cv,
            "kw_gpu_s": statistics.mean(seconds),
            "db_median_us": None,
            "db_cv": None,
            "db_gpu_s": None,
            "kw_all": medians,
        }
    ]


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    repeats = args.repeats if args.repeats is not None else (3 if ctx.cpu else 10)
    budget = args.budget if args.budget is not None else (0.2 if ctx.cpu else 1.7)
    if ctx.cpu:
        rows = _cpu(repeats, budget, ctx.deadline)
    else:
        if args.flashinfer:
            path, _ = host.flashinfer(ctx, args.flashinfer)
            if path:
                import sys

                sys.path.append(path)
        from benchmarks import measurement

        # a repeat of all kernels takes ~2 x budget per kernel: stop new ones in time
        margin = 2 * budget * len(measurement.CV_KERNELS) + 10
        rows = measurement.part_cv(
            repeats, budget, args.kernel, time.perf_counter() + ctx.left() - margin
        )
    table = [f"{'kernel':<32}{'kw median':>11}{'kw CV':>8}{'kw s':>7}{'do_bench':>10}{'db CV':>8}"]

    def pct(x: float | None) -> str:
        return "" if x is None or math.isnan(x) else f"{x * 100:.2f}%"

    for r in rows:
        db = r["db_median_us"]
        table.append(
            f"{r['kernel'][:31]:<32}{r['kw_median_us']:>9.1f}us{pct(r['kw_cv']):>8}"
            f"{r['kw_gpu_s']:>7.2f}{'' if db is None else f'{db:.1f}us':>10}{pct(r['db_cv']):>8}"
        )
    return {"repeats": repeats, "budget_s": budget, "rows": rows}, table
