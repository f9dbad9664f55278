"""``first-call``: a new side process's first set-up of a case, generation after generation.

Runs ``python -m benchmarks.first_call`` (``benchmarks/first_call.py``): ``--procs``
processes started together with a side's environment set every case up twice, for
``--generations`` generations of new processes. On a GPU it does Liger-Kernel's layers
(from ``--liger DIR``, ``.src/liger/src`` by default), SDPA's varlen prefill and, with
``--flashinfer VERSION``, FlashInfer decode's first ``--cases`` cases: their new
processes set up in 7-18 s where warm ones take 0.3-0.5 s. On the CPU it does the
smoke GEMM, to check the plumbing.

    python -m benchmarks.gpu first-call --procs 8 --generations 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "first-call"
HELP = "a new side process's first set-up of a case: compile or not, generation after generation"
ADAPTERS = "kernelwatch.kernels.adapters"
LIGER = host.SOURCES / "liger" / "src"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--procs", type=int, default=8, help="processes started together")
    p.add_argument("--generations", type=int, default=2)
    p.add_argument("--liger", type=Path, default=LIGER, help="folder holding liger_kernel")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per step")
    p.add_argument(
        "--flashinfer",
        metavar="VERSION",
        default=None,
        help="carried FlashInfer for the decode suite's first --cases cases",
    )
    p.add_argument("--cases", type=int, default=2, help="decode cases (FlashInfer compiles each)")
    p.add_argument(
        "--blocks",
        type=int,
        default=0,
        help="then time N blocks per process and count the synchronising calls, new "
        "device segments and late samples in them (docs/measurement.md §34c)",
    )
    p.add_argument(
        "--gc-ab",
        action="store_true",
        help="with --blocks: every second block with Python's garbage collector off",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="STEP",
        help="run only these steps (layers, prefill-varlen, decode); default all",
    )


def _plans(ctx: host.Context, args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(name, arguments of benchmarks.first_call) for each step."""
    liger: Path = args.liger
    if ctx.cpu:
        return [("gemm", ["--suite", "gemm", "--size", "smoke", "--impl", f"{ADAPTERS}.gemm",
                          "--backend", "torch", "--kernel", "gemm"])]  # fmt: skip
    plans = [("prefill-varlen", ["--suite", "prefill", "--impl", f"{ADAPTERS}.sdpa",
                                 "--backend", "sdpa", "--kernel", "prefill_varlen"])]  # fmt: skip
    if (liger / "liger_kernel").is_dir():
        plans.insert(0, ("layers", ["--suite", "layers", "--impl", f"{ADAPTERS}.liger",
                                    "--backend", "liger", "--path", str(liger)]))  # fmt: skip
    if args.flashinfer:
        path, _ = host.flashinfer(ctx, args.flashinfer)
        if path is not None:
            plans.append(("decode", ["--suite", "decode", "--impl", f"{ADAPTERS}.flashinfer",
                                     "--backend", "flashinfer", "--path", path,
                                     "--cases", str(args.cases)]))  # fmt: skip
    return [(n, plan) for n, plan in plans if not args.only or n in args.only or ctx.cpu]


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    results: dict[str, Any] = {}
    lines: list[str] = []
    for name, plan in _plans(ctx, args):
        argv = [sys.executable, "-m", "benchmarks.first_call", *plan,
                "--procs", str(1 if ctx.cpu else args.procs),
                "--generations", str(args.generations), "--timeout", str(args.timeout),
                "--blocks", str(args.blocks), *(["--gc-ab"] if args.gc_ab else [])]  # fmt: skip
        step = ctx.run(f"first-call-{name}", argv, args.timeout * args.generations + 30,
                       env={"PYTHONPATH": str(host.ROOT)})  # fmt: skip
        text = Path(step.log).read_text(errors="replace").splitlines()
        rows = [json.loads(x) for x in text if x.startswith("{")]
        results[name] = {"rc": step.rc, "timed_out": step.timed_out, "rows": rows}
        table = [x for x in text if not x.startswith("{")]
        lines += [f"-- {name} (rc {step.rc})", *(table[-60:] if table else step.tail)]
    return results, lines


__all__ = ["run"]
