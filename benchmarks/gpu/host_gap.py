"""``host-gap``: does the timer time the host's launch instead of the kernel?

On the cold path the timer flushed the L2 and recorded the start event; only the
flush (about 30 us on the H200) covered the host's launch of the timed call. A
Python-wrapped kernel whose launch takes longer (Liger's LayerNorm, SDPA's varlen
loop over sequences) then read the host's time too, and more of it in a busy
process: the suspect for LayerNorm's slow sides of up to 2.75x that came in bursts
(docs/measurement.md §11) and SDPA varlen's unsteady sides (§14d). The host guard
(``kernels/timing.py``, ``HostGuard``) spins before every start event and takes a
sample again when its start event fired before the call was queued.

Per target, one process times the case with the guard off and on, alternating,
idle and beside ``--burners`` CPU-bound processes; the table shows the medians, the
host's own launch time, and what the guard retook. A target whose medians agree
off/on and idle/loaded never timed the host.

    python -m benchmarks.gpu host-gap --target layernorm --target varlen
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu import host, power

NAME = "host-gap"
HELP = "does the timer time the host's launch? each case with the host guard off and on"

# Beside the injection targets: the prefill case that was unsteady across processes
# (§13b, §14d: SDPA varlen, llama2-7b MHA, 16 sequences, 4.7 ms)
EXTRA_TARGETS = (
    power.Target(
        "prefill varlen MHA (SDPA)", "prefill", f"{power.ADAPTERS}.sdpa", "sdpa", "a78c7a08a9d821ee"
    ),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", action="append", help="targets whose name contains this")
    p.add_argument("--flashinfer", metavar="VERSION", help="carried FlashInfer for decode")
    p.add_argument("--liger", type=Path, default=host.SOURCES / "liger" / "src")
    p.add_argument("--burners", type=int, default=None, help="CPU-bound processes (CPU count)")
    p.add_argument("--rounds", type=int, default=2, help="off/on alternations per load")
    p.add_argument("--budget-s", type=float, default=1.0, help="timer budget per timing")
    p.add_argument("--target-timeout", type=float, default=120.0, help="seconds per target")


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    pool = power.CPU_TARGETS if ctx.cpu else (*power.TARGETS, *EXTRA_TARGETS)
    targets = [t for t in pool if not args.target or any(w in t.name for w in args.target)]
    burn = args.burners if args.burners is not None else (os.cpu_count() or 2)
    results: list[dict[str, Any]] = []
    for t in targets:
        label = "host-gap-" + t.name.split(" (")[0].replace(" ", "-").replace("^", "")
        lib, why = power._library(ctx, t, args)
        if why:
            results.append({"target": t.name, "skipped": why})
            continue
        spec = {"suite": t.suite, "size": "smoke" if ctx.cpu else "quick", "case": t.case,
                "impl": t.impl, "backend": t.backend, "loads": [0, burn],
                "rounds": args.rounds, "budget_s": 0.2 if ctx.cpu else args.budget_s}  # fmt: skip
        argv = [sys.executable, "-m", "benchmarks.host_gap", json.dumps(spec)]
        env = {"PYTHONPATH": os.pathsep.join(p for p in [lib, str(host.ROOT)] if p)}
        step = ctx.run(label, argv, args.target_timeout, env=env)
        rows = [json.loads(x) for x in Path(step.log).read_text().splitlines() if x.startswith("{")]
        results.append({"target": t.name, "case": t.case, "rc": step.rc,
                        "timed_out": step.timed_out, "rows": rows})  # fmt: skip
    return {"burners": burn, "targets": results}, table(results)


def table(results: list[dict[str, Any]]) -> list[str]:
    """Per target and load: median off and on, their spread, host launch, retaken."""
    lines = [
        f"{'target':<30}{'load':>5}{'off us':>9}{'on us':>9}{'off/on':>8}{'off spread':>11}"
        f"{'host us':>9}{'busy us':>9}{'retaken':>8}{'kept late':>10}"
    ]
    for r in results:
        if "rows" not in r:
            lines.append(f"{r['target']:<30}  skipped: {r['skipped']}")
            continue
        if not r["rows"]:
            lines.append(f"{r['target']:<30}  no timing (rc {r['rc']}, timed out {r['timed_out']})")
        for load in sorted({row["load"] for row in r["rows"]}):
            rows = [row for row in r["rows"] if row["load"] == load]
            off = [row["median_s"] for row in rows if not row["guard"]]
            on = [row for row in rows if row["guard"]]
            if not off or not on:
                continue
            on_med = statistics.median(row["median_s"] for row in on)
            off_med = statistics.median(off)
            spread = (max(off) - min(off)) / off_med if off_med else 0.0
            lines.append(
                f"{r['target']:<30}{load:>5}{1e6 * off_med:>9.1f}{1e6 * on_med:>9.1f}"
                f"{off_med / on_med:>8.3f}{100 * spread:>10.1f}%"
                f"{1e6 * statistics.median(row['host_launch_s'] for row in rows):>9.1f}"
                f"{1e6 * max(row['keep_busy_s'] or 0 for row in on):>9.1f}"
                f"{sum(row['host_late_retaken'] or 0 for row in on):>8}"
                f"{sum(row['host_late_kept'] or 0 for row in on):>10}"
            )
    return lines


__all__ = ["run"]
