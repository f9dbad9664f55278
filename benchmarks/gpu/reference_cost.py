"""``reference-cost``: the decode check's reference, one sequence at a time and batched.

Runs ``python -m benchmarks.reference_cost`` over the decode suite (quick on a GPU,
smoke on the CPU), alone and beside busy GPU processes, as a paired set-up's
check runs beside the pool's other sides. Its JSON lines and table come back in
the sub-command's result.

    python -m benchmarks.gpu reference-cost --beside 0 --beside 15
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "reference-cost"
HELP = "the decode check's reference, one sequence at a time against batched, beside busy GPUs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beside", type=int, action="append", help="busy GPU processes (repeatable)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--size", default=None, help="decode suite size (quick on a GPU)")
    p.add_argument("--timeout", type=float, default=240.0)


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    argv = [sys.executable, "-m", "benchmarks.reference_cost", "--reps", str(args.reps),
            "--size", args.size or ("smoke" if ctx.cpu else "quick")]  # fmt: skip
    for n in args.beside or [0]:
        argv += ["--beside", str(n)]
    step = ctx.run("reference-cost", argv, args.timeout, env={"PYTHONPATH": str(host.ROOT)})
    text = Path(step.log).read_text(errors="replace").splitlines()
    rows = [json.loads(x) for x in text if x.startswith("{")]
    lines = [x for x in text if not x.startswith("{")][-len(rows) - 1 :] if rows else text[-5:]
    return {"rc": step.rc, "timed_out": step.timed_out, "rows": rows}, lines


__all__ = ["run"]
