"""``kernelwatch bisect``: the first bad commit between a good and a bad one, paired timing.

Starts a bisection (or joins the running one of the same range), and with ``--wait``
takes its steps from this process too while it polls, so a machine without the API
process still gets an answer (``jobs/planning/bisect_driver.py``). ``--json`` prints
exactly ``{"culprit": {...} | null, "steps": [...], "gpu_seconds"}`` (design.md).

Exit codes (:mod:`.exit_codes`): without ``--wait`` 0 once started; with it 1 when a
culprit is named (something regressed, lost accuracy or broke), 3 when none could be
named (the range did not differ, a skipped commit hides it, or the budget ran out),
2 on an error, a cancellation or a timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, TextIO

from kernelwatch.jobs.cli.exit_codes import Exit, fail, for_bisection

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from kernelwatch.db.bisect import Bisection

NAME = "bisect"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser(
        NAME,
        help="find the commit that made a kernel slower, less accurate or broken",
        description="Bisect the first-parent commits between --good and --bad with paired "
        "runs against the good build. Exit codes with --wait: 1 culprit found, 3 none "
        "found, 2 error, cancelled or timeout.",
    )
    b.add_argument("source", nargs="?", help="repository URL or local path")
    b.add_argument("--good", help="a commit without the change")
    b.add_argument("--bad", help="a commit with the change")
    b.add_argument(
        "--case",
        default="",
        help="only these cases judge a step: fnmatch patterns over kernel, 'kernel label' "
        "or case id, comma-separated (default: every case)",
    )
    b.add_argument("--suite", action="append", help="suite (repeatable); default from the repo")
    b.add_argument("--kernel", action="append", help="run only this kernel (repeatable)")
    b.add_argument("--pairs", type=int, help="process pairs per step (bench-paired --pairs)")
    b.add_argument("--block-budget", type=float, help="seconds of timed blocks per attempt")
    b.add_argument("--device-class", help="GPU class to run on (default: this machine's)")
    b.add_argument(
        "--budget", type=float, default=None, help="device seconds the steps may spend in all"
    )
    b.add_argument("--cancel", type=int, metavar="ID", help="cancel bisection ID")
    b.add_argument("--wait", action="store_true", help="block until the bisection ends")
    b.add_argument("--timeout", type=float, default=3 * 3600, help="seconds --wait waits")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument("--quiet", action="store_true", help="no progress lines while waiting")
    b.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.db.bisect import DEFAULT_BUDGET_S, Bisection
    from kernelwatch.jobs.cli.common import factory, settings, warn_without_worker
    from kernelwatch.jobs.planning import bisect_driver as driver
    from kernelwatch.jobs.planning.broker import make_celery
    from kernelwatch.jobs.planning.queues import local_device_class
    from kernelwatch.kernels.catalog import unknown_kernels
    from kernelwatch.kernels.suite import unknown_suites

    sessions = factory()
    if args.cancel is not None:
        if not driver.cancel(sessions, args.cancel):
            return fail(NAME, f"bisection {args.cancel} is not running")
        print(f"bisection {args.cancel} cancelled")
        return Exit.PASS
    if not (args.source and args.good and args.bad):
        return fail(NAME, "give SOURCE --good A --bad B (or --cancel ID)")
    if args.suite:  # without --suite the repository's .kernelwatch.toml names them
        unknown = unknown_suites(args.suite) or unknown_kernels(args.suite, args.kernel or [])
        if unknown:
            return fail(NAME, unknown)
    bench_args = [a for k in args.kernel or [] for a in ("--kernel", k)]
    if args.pairs:
        bench_args += ["--pairs", str(args.pairs)]
    if args.block_budget:
        bench_args += ["--budget", str(args.block_budget)]
    s = settings()
    req = driver.BisectRequest(
        source=args.source,
        good=args.good,
        bad=args.bad,
        case_pattern=args.case,
        suites=list(args.suite or []),
        device_class=args.device_class or local_device_class(),
        bench_args=bench_args,
        budget_s=args.budget if args.budget is not None else DEFAULT_BUDGET_S,
    )
    bid = driver.start(sessions, s, req)
    print(f"bisection {bid}", file=sys.stderr)
    app = make_celery(s)
    status = driver.advance(sessions, s, app, bid)
    queue = _step_queue(sessions, bid)
    if queue is not None:  # its steps are ordinary runs: without a worker they only wait
        warn_without_worker(sessions, queue, NAME)
    if args.wait:
        progress = BisectProgress(None if args.json or args.quiet else sys.stderr)
        progress.update(sessions, bid)
        status = driver.wait(
            sessions, s, app, bid, args.timeout, on_poll=lambda _: progress.update(sessions, bid)
        )
    with sessions() as session:
        summary = driver.summary(session, bid)
        row = session.get(Bisection, bid)
        assert summary is not None and row is not None
        reason = row.reason
        case = _culprit_case(session, row)
    if args.json:
        print(json.dumps(summary))
    else:
        print(_text(bid, status, reason, summary, case))
    if not args.wait:
        return Exit.PASS
    code = for_bisection(status)
    if code in (Exit.ERROR, Exit.NEUTRAL):
        why = reason or ("timed out" if status == "running" else status)
        return fail(NAME, f"bisection {bid} {status}: {why}", code)
    return code


def _step_queue(sessions: sessionmaker[Session], bid: int) -> str | None:
    """The queue of the bisection's newest step run (None before its first step)."""
    from kernelwatch.db.bisect import Bisection
    from kernelwatch.db.models import Run

    with sessions() as session:
        row = session.get(Bisection, bid)
        if row is None or not row.steps:
            return None
        run = session.get(Run, row.steps[-1].run_id)
        return run.queue if run is not None else None


class BisectProgress:
    """One line on stderr whenever the bisection moves (``bisect --wait``): the steps done
    and their words, and the step measuring now with its run's state. Issue 27: a silent
    minute and a half read as a hang."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.last = ""

    def update(self, sessions: sessionmaker[Session], bid: int) -> None:
        if self.stream is None:
            return
        with sessions() as session:
            line = progress_line(session, bid)
        if line and line != self.last:
            print(f"[{time.monotonic() - self.started:6.0f}s] {line}", file=self.stream, flush=True)
            self.last = line


def progress_line(session: Session, bid: int) -> str:
    """``bisection 3: 6 commits · 2 steps done (last 1a2b3c4d5e6f bad: regression) · now
    measuring 9f8e7d6c5b4a against 0c1d2e3f4a5b (search): run 18 building``."""
    from sqlalchemy import func, select

    from kernelwatch.db.bisect import Bisection
    from kernelwatch.db.models import Result, Run

    row = session.get(Bisection, bid)
    if row is None:
        return ""
    done = [st for st in row.steps if st.outcome is not None]
    parts = [f"bisection {bid}: {len(row.commits)} commits", f"{len(done)} steps done"]
    if done:
        last = done[-1]
        parts[-1] += f" (last {last.sha[:12]} {last.outcome}: {last.verdict or '-'})"
    for step in (st for st in row.steps if st.outcome is None):
        run = session.get(Run, step.run_id) if step.run_id else None
        state = "planned"
        if run is not None:
            cases = session.scalar(select(func.count()).where(Result.run_id == run.id)) or 0
            state = {"queued": "queued", "running": "measuring" if cases else "building"}.get(
                run.status, run.status
            )
            state = f"run {run.id} {state}"
        parts.append(
            f"now {step.sha[:12]} against {step.against_sha[:12]} ({step.purpose}): {state}"
        )
    return " · ".join(parts)


def _culprit_case(session: Session, row: Bisection) -> str:
    """The case the culprit moved, as ``show`` names it (``softmax rows=4096``), or ""."""
    from kernelwatch.db.models import Case

    first = (row.culprits or [{}])[0]
    case = session.get(Case, first.get("case_id")) if first.get("case_id") else None
    return f"{case.kernel} {case.label}".strip() if case is not None else ""


def _text(bid: int, status: str, reason: str, summary: dict[str, object], case: str = "") -> str:
    from kernelwatch.kernels.units import ratio_text

    lines = [f"bisection {bid}: {status}" + (f" ({reason})" if reason else "")]
    steps = summary["steps"]
    assert isinstance(steps, list)
    for step in steps:
        mark = "skipped" if step["skipped"] else step["verdict"] or "-"
        lines.append(f"  {str(step['sha'])[:12]}  {mark}")
    culprit = summary["culprit"]
    if isinstance(culprit, dict):
        interval = culprit.get("interval") or [None, None]
        lines.append(
            f"culprit {str(culprit['sha'])[:12]} (parent {str(culprit['parent'])[:12]}): "
            f"{culprit['verdict'] or '-'}, ratio {ratio_text(culprit['ratio'], *interval)}"
            + (f", case {case}" if case else "")
        )
    else:
        lines.append("culprit: none named")
    lines.append(f"device seconds: {float(str(summary['gpu_seconds'])):.1f}")
    return "\n".join(lines)


__all__ = ["NAME", "add_parser", "handle"]
