"""``kernelwatch run SOURCE``: measure commits or released versions of a library.

Plans the runs (``jobs/planning``: each commit's ``.kernelwatch.toml`` is read and
resolved there, so a bad file is refused with exit 2 before anything is queued),
enqueues them for a worker and, with ``--wait``, follows them to their verdicts and ends
with what they found: per run, the cases that moved or broke with ratio and interval
(the demo's summary, ``jobs/judging/report.py``); ``--json`` carries the same per run.
Exit codes as in :mod:`.exit_codes`: with ``--wait``, 0 only when every run passed;
without it, 0 once the runs are queued.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from kernelwatch.jobs.cli.exit_codes import Exit, fail, for_run, worst

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker


NAME = "run"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser(
        NAME,
        help="measure commits of a library",
        description="Measure commits (--commit, --range) or released versions (--version) "
        "of a library on a worker. Exit codes with --wait: 0 pass, 1 fail, 2 error or "
        "timeout, 3 neutral.",
    )
    r.add_argument("source", help="repository URL or local path")
    r.add_argument("--commit", action="append", help="revision to measure (repeatable)")
    r.add_argument("--range", help="A..B: every commit after A up to B (A measured as baseline)")
    r.add_argument("--baseline", help="compare against this revision (or version) instead")
    r.add_argument(
        "--version",
        action="append",
        help="released version name==x.y (repeatable; compared in order)",
    )
    r.add_argument("--index-url", help="package index for --version (http(s):// or file://)")
    r.add_argument("--find-links", help="local wheelhouse directory for --version")
    r.add_argument("--impl", help="module with the kernels under test (for --version runs)")
    r.add_argument("--suite", action="append", help="suite (repeatable); default from the repo")
    r.add_argument(
        "--kernel",
        action="append",
        help="only this kernel of the suites (repeatable; default: every kernel)",
    )
    r.add_argument(
        "--case",
        help="only the cases matching this pattern (globs over kernel, label and case id, "
        "as in `kernelwatch bench --case`)",
    )
    r.add_argument(
        "--budget",
        type=float,
        help="sampling seconds per case (the runner's --budget; default 2 on a GPU)",
    )
    r.add_argument(
        "--gpu-budget",
        type=float,
        metavar="S",
        help="GPU wall seconds a paired run may spend (default: [gate] gpu_budget of "
        ".kernelwatch.toml, else unbounded); cases left unmeasured end inconclusive",
    )
    r.add_argument("--profile", help="build profile of the repository's install recipe")
    r.add_argument("--device-class", help="GPU class to run on (default: this machine's)")
    r.add_argument(
        "--no-baseline-run", action="store_true", help="do not add runs for unmeasured baselines"
    )
    r.add_argument(
        "--paired",
        action="store_true",
        help="measure each commit interleaved with its baseline on one GPU, in one run "
        "(the merge gate's mode)",
    )
    r.add_argument(
        "--gate",
        action="store_true",
        help="rank these runs above other manual runs in the commits' gate answer (a "
        "commit's answer is composed per case: push and pull-request runs first, then "
        "manual runs with --gate, then other manual runs; newest within a kind)",
    )
    r.add_argument("--wait", action="store_true", help="block until the runs are judged")
    r.add_argument(
        "--timeout", type=float, default=3600, help="seconds --wait waits at most (default 3600)"
    )
    r.add_argument(
        "--json",
        action="store_true",
        help='print {"runs": [{"id", "commit", "status", "verdict", "moved", "cases"}]}',
    )
    r.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    r.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.common import factory, settings, warn_without_worker
    from kernelwatch.jobs.demo.pipeline import wait_for_runs
    from kernelwatch.jobs.errors import KernelwatchError
    from kernelwatch.jobs.planning.broker import make_celery
    from kernelwatch.jobs.planning.plan import RunRequest, plan, plan_versions
    from kernelwatch.jobs.planning.queues import local_device_class, queue_for
    from kernelwatch.kernels.catalog import run_gpus, unknown_kernels
    from kernelwatch.kernels.suite import unknown_suites

    if not args.commit and not args.range and not args.version:
        return fail(NAME, "give --commit REV (repeatable), --range A..B or --version SPEC")
    if args.paired and args.version:
        return fail(NAME, "--paired compares commits (versions: bench-paired)")
    unknown = unknown_suites(args.suite or []) or unknown_kernels(
        args.suite or ["basic"], args.kernel or []
    )
    if unknown:
        return fail(NAME, unknown)
    options: dict[str, object] = {}
    if args.suite:
        options["suites_explicit"] = True
    bench_args = [a for k in args.kernel or [] for a in ("--kernel", k)]
    if args.case:
        bench_args += ["--case", args.case]
    if args.budget is not None:
        if args.budget <= 0:
            return fail(NAME, "--budget must be positive seconds")
        bench_args += ["--budget", str(args.budget)]
    if args.gpu_budget is not None:
        if args.gpu_budget <= 0:
            return fail(NAME, "--gpu-budget must be positive seconds")
        if not args.paired:
            return fail(NAME, "--gpu-budget bounds a paired run (--paired)")
        bench_args += ["--gpu-budget", str(args.gpu_budget)]
    if bench_args:
        options["bench_args"] = bench_args
    for key in ("impl", "index_url", "find_links", "profile"):
        if getattr(args, key):
            options[key] = getattr(args, key)
    if args.paired:
        options["paired"] = True
    if args.gate:
        options["gate"] = True
    device_class = args.device_class or local_device_class()
    req = RunRequest(
        source=args.source,
        commits=args.commit or [],
        range=args.range,
        baseline=args.baseline,
        suites=args.suite or ["basic"],
        device_class=device_class,
        trigger="manual",
        measure_baseline=not (args.no_baseline_run or args.paired),
        options=options,
        versions=args.version or [],
        # one commit with a bad .kernelwatch.toml is refused with its message; in a range
        # (or several commits) it is that commit's error run, and the others are measured
        config_errors="record" if args.range or len(args.commit or []) > 1 else "raise",
    )
    s = settings()
    sessions = factory()
    try:
        planner = plan_versions if req.versions else plan
        planned = planner(sessions, s, make_celery(s), req)
    except KernelwatchError as exc:
        if args.json:
            print(json.dumps({"runs": [], "error": str(exc)}))
        return fail(NAME, str(exc))
    ids = [p.id for p in planned]
    if not ids:
        return fail(NAME, "nothing to measure")
    progress = not (args.quiet or args.json)
    warn_without_worker(sessions, queue_for(device_class, run_gpus(req.suites)), NAME)
    done = True
    if args.wait:
        from kernelwatch.jobs.cli.progress import RunProgress

        tracker = RunProgress(sys.stderr if progress else None)
        try:
            done = wait_for_runs(sessions, ids, args.timeout, on_poll=tracker.update)
        finally:
            tracker.close()
    out = _rows(sessions, ids)
    if args.json:
        print(json.dumps({"runs": out}, default=str))
    elif args.wait:
        from kernelwatch.jobs.judging.report import format_briefs

        print(format_briefs(out))
    else:
        for r in out:
            print(
                f"run {r['id']:>5}  {str(r['commit'] or '')[:12]}  {r['status']:<10} "
                f"{r['verdict'] or ''}"
            )
    if not args.wait:
        return Exit.PASS
    if not done:
        return fail(NAME, f"timed out after {args.timeout:.0f} s waiting for the runs")
    code = worst(for_run(r["status"], r["verdict"]) for r in out)
    if code != Exit.PASS:
        bad = [r for r in out if for_run(r["status"], r["verdict"]) != Exit.PASS]
        what = ", ".join(f"run {r['id']} {r['status']}/{r['verdict'] or '-'}" for r in bad)
        return fail(NAME, f"{code.name.lower()}: {what} (kernelwatch show RUN for details)", code)
    return code


def _rows(sessions: sessionmaker[Session], ids: list[int]) -> list[dict[str, Any]]:
    """Each run's brief: id, commit, status, verdict, and its moved and broken cases."""
    from sqlalchemy import select

    from kernelwatch.db.models import Run
    from kernelwatch.jobs.judging.report import run_brief

    with sessions() as session:
        runs = session.scalars(select(Run).where(Run.id.in_(ids)).order_by(Run.id)).all()
        return [run_brief(session, r) for r in runs]


__all__ = ["NAME", "add_parser", "handle"]
