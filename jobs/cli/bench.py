"""``kernelwatch bench`` and ``bench-paired``: suites in this environment, no database.

The arguments go to the suite runner untouched (``kernels/runner.py``,
``kernels/paired_suite.py``), so ``kernelwatch bench --help`` shows the runner's own
options. ``bench`` and ``bench-paired`` add what a person at a terminal needs and the
worker must not get: a mistyped suite is one line with a did-you-mean before anything
runs, the runner's ``KW-CASE-START`` lines (its protocol with the worker) stay off the
terminal, a summary table follows the JSON lines, and the exit code comes from the
cases (``bench``: 0 all passed or skipped, 1 a wrong result, 2 an error;
``bench-paired``: from the paired verdicts, 3 for a case left inconclusive;
:mod:`.exit_codes`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kernelwatch.jobs.cli.exit_codes import MEANING, Exit, fail, for_answer, for_case_statuses

NAME = "bench"
PAIRED = "bench-paired"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Listed in ``kernelwatch --help``; :func:`main` dispatches before argparse runs."""
    for name, what in (
        (NAME, "suite runner in this environment (no database); --help for its options"),
        (PAIRED, "a suite in paired mode: baseline and candidate interleaved (no database)"),
    ):
        b = sub.add_parser(name, help=what, add_help=False)
        b.add_argument("rest", nargs=argparse.REMAINDER, help="the runner's arguments")


def out_problem(out: str | None) -> str:
    """Why ``--out`` cannot be written, before a case is measured (a missing folder was a
    ``FileNotFoundError`` traceback after the whole suite ran); "" when it can."""
    if not out or out == "-":
        return ""
    folder = Path(out).expanduser().parent
    if not folder.is_dir():
        return f"--out {out}: the folder {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"--out {out}: the folder {folder} is not writable"
    return ""


def main(argv: Sequence[str]) -> int:
    """``kernelwatch bench ARGS``: records to ``--out``, then the summary and the code."""
    from kernelwatch.kernels.catalog import unknown_kernels
    from kernelwatch.kernels.runner import (
        bench,
        device_problem,
        parse_args,
        quiet_case_markers,
        summary,
    )
    from kernelwatch.kernels.suite import suite_names, unknown_suites

    args = parse_args(argv)
    if args.list:
        print("\n".join(suite_names()))
        return Exit.PASS
    # a misspelt kernel selected nothing, and exit 0 read as a pass (as in ``run``)
    unknown = (
        unknown_suites(args.suite or [])
        or unknown_kernels(args.suite or ["basic"], args.kernel or [])
        or device_problem(args.device)
        or out_problem(args.out)
    )
    if unknown:
        return fail(NAME, unknown)
    quiet_case_markers()  # the worker's protocol, not output for a person
    records = bench(args)
    # With --out - the records are stdout: the table goes beside them, to stderr.
    print(summary(records), file=sys.stderr if args.out == "-" else sys.stdout)
    code = for_case_statuses(r.status for r in records)
    if code != Exit.PASS:
        bad = sum(r.status in ("fail", "error") for r in records)
        return fail(NAME, f"{bad} of {len(records)} cases failed or errored", code)
    return code


def main_paired(argv: Sequence[str]) -> int:
    """``kernelwatch bench-paired ARGS``: records, then a summary and the verdicts' code
    (0 pass, 1 a regression, ``less_accurate`` or broken case, 2 an error, 3 a case left
    inconclusive: the exit-code contract of ``run --wait`` and ``gate``)."""
    from kernelwatch.kernels.catalog import unknown_kernels
    from kernelwatch.kernels.paired_suite import parse_args, run, summary
    from kernelwatch.kernels.runner import quiet_case_markers
    from kernelwatch.kernels.suite import unknown_suites
    from kernelwatch.kernels.verdict import run_verdict

    args = parse_args(argv)
    unknown = (
        unknown_suites(args.suite)
        or unknown_kernels(args.suite, args.kernel or [])
        or out_problem(args.out)
    )
    if unknown:
        return fail(PAIRED, unknown)
    quiet_case_markers()
    records = run(args)
    print(summary(records), file=sys.stderr if args.out == "-" else sys.stdout)
    verdicts = [(r.get("paired") or {}).get("verdict") for r in records]
    code = for_answer(run_verdict(verdicts))
    if code != Exit.PASS:
        return fail(PAIRED, MEANING[code], code)
    return code


__all__ = ["NAME", "PAIRED", "add_parser", "main", "main_paired"]
