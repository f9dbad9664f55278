"""Where a new side process's first set-up of a case goes, and whether a second pays it again.

On an H100 (2026-12-07, docs/measurement.md §32) every confirmation of a Liger
LayerNorm +1 % trial set its 16 new processes up in 11.8-18.0 s, where stage 1's
warm processes took 0.5 s: the check's first call of the kernel alone took 11-14 s
in each new pool (``check_call_s``), trial after trial, with Triton's cache on disk
shared by every side (``paired_suite.side_home``). A cache hit loads a compiled
kernel in milliseconds, so either the cache is missed or the first call pays for
something else. This measures it the way the pool meets it: ``--procs`` processes
started together with a side's environment (its ``$HOME`` and ``TRITON_CACHE_DIR``),
each setting every selected case up twice (``paired_suite.case``, the check on), for
``--generations`` generations of new processes one after another. Per case and
generation it prints the first and the second set-up's seconds (median and slowest
process), the check's first call, and the entries the run added to Triton's cache
directory. A first call that stays slow in generation 2, with no entry added, is not
a compile.

    python -m benchmarks.first_call --suite layers --impl kernelwatch.kernels.adapters.liger \\
        --backend liger --path .src/liger/src --procs 8 --generations 2
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def _entries(cache: str) -> int:
    """Entries in Triton's cache directory (one folder per compiled kernel)."""
    try:
        return len(os.listdir(cache))
    except OSError:
        return 0


def _top(profiler: cProfile.Profile, n: int = 14) -> list[str]:
    """The calls that held the first set-up longest (cumulative seconds), one line each."""
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(n)
    return [x.strip() for x in text.getvalue().splitlines() if x.strip()][-n:]


def child(args: argparse.Namespace) -> int:
    """One process: imports, CUDA context, then each case set up twice; a JSON line each."""
    began = time.perf_counter()
    import torch

    imported = time.perf_counter()
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
    context = time.perf_counter()
    from kernelwatch.kernels.paired_suite import case
    from kernelwatch.kernels.runner import selected_cases

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cache = os.environ.get("TRITON_CACHE_DIR", "")
    # whether this process may write the bytecode it compiles into torch's folder (as
    # prelude's _compile_site asks; §33a: torch's lazily imported modules were compiled
    # from source in every process)
    site = os.path.dirname(torch.__file__)
    print(json.dumps({"proc": args.proc, "import_s": imported - began,
                      "context_s": context - imported,
                      "kernelwatch_s": time.perf_counter() - context,
                      "dont_write_bytecode": sys.flags.dont_write_bytecode,
                      "site_writable": os.access(site, os.W_OK)}), flush=True)  # fmt: skip
    chosen = list(selected_cases(
        [args.suite], args.size, device, args.backend, args.kernel or None, [], announce=False
    ))  # fmt: skip
    for suite, spec, cid in chosen[: args.cases or None]:
        row: dict[str, Any] = {"proc": args.proc, "case": cid, "kernel": spec.kernel}
        for turn in ("first", "second"):
            before = _entries(cache)
            profiler = cProfile.Profile() if args.proc == 0 and turn == "first" else None
            t = time.perf_counter()
            try:
                if profiler is not None:
                    profiler.enable()
                _, _, info = case(suite, args.size, cid, args.impl, args.backend, seed=1)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            except Exception as exc:  # a broken case is a row, not the end of the run
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                break
            finally:
                if profiler is not None:
                    profiler.disable()
                    row["profile"] = _top(profiler)
            row[f"{turn}_s"] = time.perf_counter() - t
            row[f"{turn}_call_s"] = float(info.get("check_parts", {}).get("check_call_s", 0.0))
            row[f"{turn}_new_cache"] = _entries(cache) - before
        print(json.dumps(row), flush=True)
    return 0


def _generation(args: argparse.Namespace, gen: int) -> list[dict[str, Any]]:
    """One generation of ``--procs`` new processes, started together; a hung one is
    killed at ``--timeout`` with the rest, and its rows are what it printed before."""
    from kernelwatch.kernels.paired_suite import side_env

    env = {**os.environ, **side_env(sys.executable, args.path)}
    argv = [sys.executable, "-m", "benchmarks.first_call", "--child", "--suite", args.suite,
            "--size", args.size, "--impl", args.impl, "--backend", args.backend]  # fmt: skip
    for k in args.kernel:
        argv += ["--kernel", k]
    argv += ["--cases", str(args.cases)]
    procs = [
        subprocess.Popen([*argv, "--proc", str(i)], env=env, stdout=subprocess.PIPE, text=True)
        for i in range(args.procs)
    ]
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + args.timeout
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            rows.append({"proc": -1, "gen": gen, "error": f"timed out after {args.timeout:g}s"})
        rows += [
            {**json.loads(x), "gen": gen} for x in out.splitlines() if x.startswith("{")
        ]  # fmt: skip
    return rows


def _summary(
    rows: Sequence[dict[str, Any]],
    key: str,
    how: Callable[[list[float]], float] = statistics.median,
) -> float:
    """``how`` (the median, or ``max``) of ``key`` over the rows that have it; NaN for none."""
    values = [float(r[key]) for r in rows if key in r]
    return float(how(values)) if values else float("nan")


def _bytecode_written(starts: Sequence[dict[str, Any]]) -> str:
    """'yes', or why a process's compiled bytecode is lost: the flag or a read-only site."""
    if not starts:
        return "?"
    if any(r.get("dont_write_bytecode") for r in starts):
        return "no (PYTHONDONTWRITEBYTECODE)"
    if not all(r.get("site_writable", True) for r in starts):
        return "no (torch's folder read-only)"
    return "yes"


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per generation and case: the set-ups' seconds and the cache entries added."""
    lines = [f"{'gen':>3} {'case':<18} {'first s med/max':>16} {'call s med':>10} "
             f"{'second s med':>12} {'new cache':>9}  errors"]  # fmt: skip
    for gen in sorted({r["gen"] for r in rows}):
        starts = [r for r in rows if r["gen"] == gen and "import_s" in r]
        lines.append(f"{gen:>3} {'(start)':<18} import {_summary(starts, 'import_s'):.2f}  "
                     f"context {_summary(starts, 'context_s'):.2f}  "
                     f"kernelwatch {_summary(starts, 'kernelwatch_s'):.2f}  "
                     f"bytecode written: {_bytecode_written(starts)}")  # fmt: skip
        hung = [r for r in rows if r["gen"] == gen and "case" not in r and "error" in r]
        if hung:
            lines.append(f"{gen:>3} (hung)             {len(hung)} process(es): {hung[0]['error']}")
        cases = [r for r in rows if r["gen"] == gen and "case" in r]
        for cid in dict.fromkeys(r["case"] for r in cases):
            mine = [r for r in cases if r["case"] == cid]
            added = sum(int(r.get("first_new_cache", 0)) for r in mine)
            errors = sum(1 for r in mine if "error" in r)
            lines.append(
                f"{gen:>3} {mine[0]['kernel'][:18]:<18} "
                f"{_summary(mine, 'first_s'):>7.2f}/{_summary(mine, 'first_s', max):<7.2f} "
                f"{_summary(mine, 'first_call_s'):>10.2f} {_summary(mine, 'second_s'):>12.2f} "
                f"{added:>9}  {errors or ''}"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="layers")
    p.add_argument("--size", default="quick")
    p.add_argument("--impl", default="kernelwatch.kernels.adapters.liger")
    p.add_argument("--backend", default="liger")
    p.add_argument("--path", default="", help="the library's folder, first on the sides' path")
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--cases", type=int, default=0, help="the first N selected cases (0: all)")
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--generations", type=int, default=2)
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--proc", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    rows: list[dict[str, Any]] = []
    for gen in range(1, args.generations + 1):
        rows += _generation(args, gen)
    for r in rows:
        print(json.dumps(r))
    print("\n".join(table(rows)))
    for r in rows:
        if r.get("profile") and r.get("gen") == args.generations:
            print(f"profile, generation {r['gen']}, {r['kernel']} {r['case']}:")
            print("\n".join(f"  {x[:150]}" for x in r["profile"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
