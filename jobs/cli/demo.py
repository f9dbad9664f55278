"""``kernelwatch demo``: the whole pipeline on a throwaway kernel library, with a worker.

The scenario lives in :mod:`kernelwatch.jobs.demo.pipeline`; this command starts the
worker it needs (unless ``--no-worker``), since only the command line starts processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from contextlib import nullcontext
from pathlib import Path

from kernelwatch.jobs.cli.exit_codes import Exit, fail

NAME = "demo"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser(
        NAME,
        help="full pipeline on a throwaway kernel library",
        description="Create a small Triton kernel library with four commits (one slower, one "
        "wrong), measure them through a real worker on this machine (SQLite and a filesystem "
        "broker in the data directory unless KW_* says otherwise), and report which commits "
        "moved. Exit 0 when it ran.",
    )
    d.add_argument("--json", action="store_true", help="the report as JSON")
    d.add_argument(
        "--workdir",
        help="where to create the demo repository (default: demo/ in the "
        "data directory, KW_DATA_DIR)",
    )
    d.add_argument("--no-worker", action="store_true", help="use already running workers")
    d.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    d.add_argument(
        "--timeout", type=float, default=900, help="seconds to wait for the runs (default 900)"
    )
    d.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.common import factory, settings
    from kernelwatch.jobs.cli.processes import worker_running
    from kernelwatch.jobs.demo.pipeline import dumps, format_report, run_demo

    s = settings()
    sessions = factory()
    workdir = Path(args.workdir) if args.workdir else None
    if not args.json:
        print("kernelwatch demo: measuring 4 commits of a tiny Triton library ...", file=sys.stderr)
    from kernelwatch.jobs.cli.progress import RunProgress

    tracker = RunProgress(None if args.json or args.quiet else sys.stderr, "demo runs")
    with nullcontext() if args.no_worker else worker_running(s, name="demo", extra_env=_sandbox()):
        try:
            report = run_demo(
                sessions, s, workdir=workdir, timeout_s=args.timeout, on_poll=tracker.update
            )
        finally:
            tracker.close()
    print(dumps(report) if args.json else format_report(report))
    if not report["finished"]:
        return fail(NAME, f"not every run finished within {args.timeout:.0f} s", Exit.ERROR)
    return Exit.PASS


__all__ = ["NAME", "add_parser", "handle"]


def _sandbox() -> dict[str, str]:
    """The demo worker's sandbox: bubblewrap where it is installed, else none, said aloud.

    A fleet worker fails closed without bubblewrap (``worker/sandbox.py``); the demo's
    own worker measures only the throwaway library the demo itself wrote, so on a fresh
    machine without bubblewrap it runs unconfined rather than not at all.
    """
    if "KW_SANDBOX" in os.environ or shutil.which("bwrap"):
        return {}
    print(
        "kernelwatch demo: bubblewrap not found; the demo's own library runs unsandboxed "
        "(install bubblewrap before measuring anyone else's code)",
        file=sys.stderr,
    )
    return {"KW_SANDBOX": "none"}
