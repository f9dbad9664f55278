"""``paired``: paired trials with A/A and injected extra work of known size.

The gate's paired protocol (``kernels/paired.py``: two side processes, blocks
alternated ABBA/BAAB, ratio of block medians with an interval) on named kernels
of ``benchmarks/measurement.py``: ``bf16 GEMM 4096^3``, the decode-shaped ``bf16 GEMM
64x4096x4096`` (~12 us) and ``fp32 add 64M`` with a calibrated spin after the kernel
(``kernels/spin.py``), ``add 64K launch-bound``
with extra dependent FMAs in the kernel. Each trial runs every condition (A/A,
+0.5 %, +1 %, +2 %); per condition: how often it was flagged, mean ratio and its
SD, seconds of blocks and wall seconds per trial. ``--pairs m`` gives each trial m
fresh process pairs (the process is the unit of the interval). New trials stop at
the deadline; what ran is reported. ``--cpu``: a 128^3 CPU matmul with extra
rows as the injected work.

    python -m benchmarks.gpu paired --kernel "fp32 add 64M" --pairs 8 \\
        --condition A/A --condition +1% --trials 20
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from benchmarks.gpu import host

NAME = "paired"
HELP = "paired trials: A/A and injected +x %% work on named kernels"
CONDITIONS = ("A/A", "+0.5%", "+1%", "+2%")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", action="append", help="kernels whose name contains this")
    p.add_argument("--condition", action="append", choices=CONDITIONS)
    p.add_argument("--trials", type=int, default=None, help="default 20 (CPU: 2)")
    p.add_argument("--pairs", type=int, default=1, help="fresh process pairs per trial")
    p.add_argument("--budget", type=float, default=None, help="s of blocks (2.5; CPU 0.4)")
    p.add_argument("--swap-roles", action="store_true", help="baseline in B on odd trials")
    p.add_argument(
        "--no-prestart",
        dest="prestart",
        action="store_false",
        help="start a trial's processes when it begins, not during the previous trial",
    )


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    from benchmarks import measurement

    specs = measurement.CPU_PAIRED_KERNELS if ctx.cpu else measurement.PAIRED_KERNELS
    trials = args.trials if args.trials is not None else (2 if ctx.cpu else 20)
    budget = args.budget if args.budget is not None else (0.4 if ctx.cpu else 2.5)
    partial = ctx.out / f"{NAME}.partial.json"

    def save(rows: list[dict[str, Any]]) -> None:  # the trials done survive a kill
        partial.write_text(json.dumps(rows, default=str))

    # a trial of all conditions takes ~4 comparisons: stop new ones in time to finish
    margin = 4 * (budget + (3 if ctx.cpu else 8)) * max(1, args.pairs // 4)
    rows = measurement.part_paired(
        trials,
        budget,
        args.kernel,
        save,
        args.swap_roles,
        args.pairs,
        args.condition,
        time.perf_counter() + ctx.left() - margin,
        specs,
        args.prestart,
    )
    partial.unlink(missing_ok=True)
    result = {
        "trials_asked": trials,
        "budget_s": budget,
        "pairs": args.pairs,
        "prestart": args.prestart,
        "benchcases": measurement.BENCHCASES,
        "rows": rows,
    }
    table = [f"{'kernel':<24}{'cond':<7}{'nominal':>8}{'flagged':>9}{'ratio':>9}{'sd':>8}"
             f"{'blocks s':>9}{'wall s':>8}"]  # fmt: skip
    for r in rows:
        nominal = "" if r["nominal_pct"] is None else f"{r['nominal_pct']:.2f}%"
        sd = r["sd_ratio"] * 100
        table.append(
            f"{r['kernel'][:23]:<24}{r['condition']:<7}{nominal:>8}"
            f"{r['flagged']:>5}/{r['trials']:<3}{r['mean_ratio']:>9.4f}"
            f"{'' if math.isnan(sd) else f'{sd:.3f}%':>8}"
            f"{r['mean_blocks_s']:>9.2f}{r['mean_wall_s']:>8.2f}"
        )
    return result, table
