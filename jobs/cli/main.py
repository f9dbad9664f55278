"""The ``kernelwatch`` command line. Command names and exit codes are contracts (design.md).

Heavy imports (torch, Celery, Streamlit) happen inside each command, so
``kernelwatch --help`` and small commands start fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from kernelwatch.db.config import Settings

Handler = Callable[[argparse.Namespace], int]


def _settings() -> Settings:
    from kernelwatch.db.config import get_settings

    s = get_settings()
    s.ensure_dirs()
    return s


def _factory() -> sessionmaker[Session]:
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.db.session import session_factory

    upgrade()
    return session_factory()


# --------------------------------------------------------------------------- commands


def cmd_db(args: argparse.Namespace) -> int:
    from kernelwatch.db.migrate import upgrade

    upgrade(revision=args.revision)
    print(f"database at {args.revision}: {_settings().resolved_database_url.split('@')[-1]}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from kernelwatch.kernels.runner import main as bench_main

    return bench_main(args.rest)


def cmd_run(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.demo.pipeline import wait_for_runs
    from kernelwatch.jobs.errors import KernelwatchError
    from kernelwatch.jobs.planning.broker import make_celery
    from kernelwatch.jobs.planning.plan import RunRequest, plan, plan_versions
    from kernelwatch.jobs.planning.queues import local_device_class

    if not args.commit and not args.range and not args.version:
        print(
            "kernelwatch run: give --commit REV (repeatable), --range A..B or --version SPEC",
            file=sys.stderr,
        )
        return 2
    settings = _settings()
    factory = _factory()
    options: dict[str, object] = {}
    if args.suite:
        options["suites_explicit"] = True
    for key in ("impl", "index_url", "find_links"):
        if getattr(args, key):
            options[key] = getattr(args, key)
    if args.paired:
        if args.version:
            print(
                "kernelwatch run: --paired compares commits (versions: bench-paired)",
                file=sys.stderr,
            )
            return 2
        options["paired"] = True
    req = RunRequest(
        source=args.source,
        commits=args.commit or [],
        range=args.range,
        baseline=args.baseline,
        suites=args.suite or ["basic"],
        device_class=args.device_class or local_device_class(),
        trigger="manual",
        measure_baseline=not (args.no_baseline_run or args.paired),
        options=options,
        versions=args.version or [],
    )
    try:
        planner = plan_versions if req.versions else plan
        planned = planner(factory, settings, make_celery(settings), req)
    except KernelwatchError as exc:
        if args.json:
            print(json.dumps({"runs": [], "error": str(exc)}))
        else:
            print(f"kernelwatch run: {exc}", file=sys.stderr)
        return 2
    ids = [p.id for p in planned]
    done = wait_for_runs(factory, ids, args.timeout) if args.wait else True
    from sqlalchemy import select

    from kernelwatch.db.models import Run

    with factory() as session:
        runs = session.scalars(select(Run).where(Run.id.in_(ids)).order_by(Run.id)).all()
        out = [
            {
                "id": r.id,
                "commit": r.commit.sha if r.commit else None,
                "status": r.status,
                "verdict": r.verdict,
            }
            for r in runs
        ]
    if args.json:
        print(json.dumps({"runs": out}))
    else:
        for r in out:
            print(
                f"run {r['id']:>5}  {str(r['commit'] or '')[:12]}  {r['status']:<10} "
                f"{r['verdict'] or ''}"
            )
    if args.wait and not done:
        return 2
    if args.wait and any(r["verdict"] == "fail" for r in out):
        return 1
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.judging.report import run_summary
    from kernelwatch.jobs.planning.importer import ImportRequest, import_records

    req = ImportRequest(
        path=Path(args.records),
        repository=args.repo,
        commit=args.commit,
        device_class=args.device_class,
        parent=args.parent,
        message=args.message or "",
    )
    from kernelwatch.db.models import Run

    factory = _factory()
    run_id = import_records(factory, _settings(), req)
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        summary = run_summary(session, run)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(f"imported {req.path} as run {run_id} ({run.verdict or 'not judged'})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from kernelwatch.db.models import Run
    from kernelwatch.jobs.judging.report import format_run, run_summary

    factory = _factory()
    with factory() as session:
        run = session.get(Run, args.run)
        if run is None:
            print(f"kernelwatch show: no run {args.run}", file=sys.stderr)
            return 2
        summary = run_summary(session, run)
    print(json.dumps(summary, indent=2, default=str) if args.json else format_run(summary))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.demo.pipeline import dumps, format_report, run_demo

    settings = _settings()
    factory = _factory()
    workdir = Path(args.workdir) if args.workdir else None
    report = run_demo(
        factory,
        settings,
        workdir=workdir,
        start_own_worker=not args.no_worker,
        timeout_s=args.timeout,
    )
    print(dumps(report) if args.json else format_report(report))
    return 0 if report["finished"] else 1


def cmd_worker(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.planning.broker import worker_argv
    from kernelwatch.jobs.planning.queues import local_device_class, queue_for

    if args.per_gpu:  # one pinned worker process per visible GPU, supervised
        sup = [sys.executable, "-m", "kernelwatch.worker.fleet_cli", "--loglevel", args.loglevel]
        sup += ["--queues", args.queues] if args.queues else []
        sup += ["--name", args.name] if args.name else []
        os.execv(sys.executable, sup)
    queues = args.queues or queue_for(local_device_class())
    argv = worker_argv(queues, concurrency=args.concurrency, name=args.name, loglevel=args.loglevel)
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover


def cmd_dashboard(args: argparse.Namespace) -> int:
    import kernelwatch.dashboard as dash

    app = Path(dash.__file__).resolve().parent / "app.py"
    argv = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.headless",
        "true",
        "--server.port",
        str(args.port),
        "--server.address",
        args.address,
        "--browser.gatherUsageStats",
        "false",
    ]
    os.execv(sys.executable, argv)  # the server becomes this process: signals reach it
    return 0  # pragma: no cover


def cmd_doctor(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.doctor import run_checks

    return run_checks(json_out=args.json)


def cmd_api(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.api.server import serve

    serve(
        _settings(),
        args.host,
        args.port,
        max_body_bytes=args.max_body_bytes,
        reporter_interval_s=None if args.no_reporter else args.reporter_interval,
        log_level=args.log_level,
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.jobs.cli.serve import part_argvs, supervise

    upgrade()
    return supervise(part_argvs(args.port, args.dashboard_port, args.host, args.queues))


def cmd_gate(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.gate import gate

    if args.timeout <= 0:
        print("kernelwatch gate: --timeout must be positive", file=sys.stderr)
        return 2
    if not all(c in "0123456789abcdef" for c in args.sha.lower()) or not 7 <= len(args.sha) <= 40:
        print("kernelwatch gate: --sha must be 7 to 40 hex digits", file=sys.stderr)
        return 2
    settings = _settings()
    return gate(
        _factory(),
        args.repo,
        args.sha.lower(),
        wait=args.wait,
        timeout_s=args.timeout,
        poll_s=args.poll,
        dashboard_url=settings.dashboard_url,
        as_json=args.json,
    )


def cmd_detect(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.judging.detect import detect_json

    try:
        payload = json.loads(sys.stdin.read())
        if args.batch and not (isinstance(payload, dict) and "series" in payload):
            raise ValueError('--batch expects {"series": [{"id", "values"}, ...]}')
        result = detect_json(payload)
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        print(f"kernelwatch detect: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelwatch", description="CI for GPU kernel libraries.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="full pipeline on a throwaway kernel library")
    d.add_argument("--json", action="store_true")
    d.add_argument("--workdir", help="where to create the demo repository")
    d.add_argument("--no-worker", action="store_true", help="use already running workers")
    d.add_argument("--timeout", type=float, default=900)
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="measure commits of a library")
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
    r.add_argument("--wait", action="store_true", help="block until the runs are judged")
    r.add_argument("--timeout", type=float, default=3600)
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_run)

    im = sub.add_parser(
        "import", help="store result records measured elsewhere (kernelwatch bench output)"
    )
    im.add_argument("records", help="JSON-lines file of result records")
    im.add_argument("--repo", required=True, help="repository (or library) name")
    im.add_argument("--commit", required=True, help="commit sha or a label for this run")
    im.add_argument("--device-class", required=True, help="e.g. h200")
    im.add_argument("--parent", help="an earlier imported commit to compare with")
    im.add_argument("--message")
    im.add_argument("--json", action="store_true")
    im.set_defaults(func=cmd_import)

    s = sub.add_parser("show", help="one run with its per-case results")
    s.add_argument("run", type=int)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)

    b = sub.add_parser(
        "bench", help="suite runner in this environment (no database)", add_help=False
    )
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=cmd_bench)
    bp = sub.add_parser(
        "bench-paired",
        help="a suite in paired mode: baseline and candidate interleaved (no database)",
        add_help=False,
    )
    bp.add_argument("rest", nargs=argparse.REMAINDER)
    bp.set_defaults(func=cmd_bench)

    w = sub.add_parser("worker", help="Celery worker(s)")
    w.add_argument("--queues", help="comma-separated queues (default: this machine's class)")
    w.add_argument("--concurrency", type=int, default=1)
    w.add_argument(
        "--per-gpu",
        action="store_true",
        help="one worker process per visible GPU (CUDA_VISIBLE_DEVICES pinned)",
    )
    w.add_argument("--name")
    w.add_argument("--loglevel", default="INFO")
    w.set_defaults(func=cmd_worker)

    ds = sub.add_parser("dashboard", help="Streamlit dashboard")
    ds.add_argument("--port", type=int, default=8501)
    ds.add_argument("--address", default="127.0.0.1")
    ds.set_defaults(func=cmd_dashboard)

    db = sub.add_parser("db", help="database maintenance")
    dbs = db.add_subparsers(dest="db_command", required=True)
    up = dbs.add_parser("upgrade", help="Alembic migrations to head")
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(func=cmd_db)

    doc = sub.add_parser("doctor", help="check database, broker, GPU, compiler, versions")
    doc.add_argument("--json", action="store_true")
    doc.set_defaults(func=cmd_doctor)

    api = sub.add_parser("api", help="webhook + REST API (OpenAPI at /openapi.json)")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.add_argument("--max-body-bytes", type=int, default=5 * 1024 * 1024)
    api.add_argument(
        "--reporter-interval", type=float, default=2.0, help="seconds between status passes"
    )
    api.add_argument(
        "--no-reporter", action="store_true", help="do not send statuses from this process"
    )
    api.add_argument("--log-level", default="info")
    api.set_defaults(func=cmd_api)

    sv = sub.add_parser("serve", help="api + worker + dashboard on one machine")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000, help="API port")
    sv.add_argument("--dashboard-port", type=int, default=8501)
    sv.add_argument("--queues", help="worker queues (default: this machine's class)")
    sv.set_defaults(func=cmd_serve)

    g = sub.add_parser("gate", help="exit 0 pass, 1 regression or broken, 2 error or timeout")
    g.add_argument("--repo", required=True, help="owner/name, repository name or source")
    g.add_argument("--sha", required=True, help="commit (full sha or a 7+ character prefix)")
    g.add_argument("--wait", action="store_true", help="block until every run is judged")
    g.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
    g.add_argument("--poll", type=float, default=5.0, help=argparse.SUPPRESS)
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_gate)

    det = sub.add_parser("detect", help="change points of a series (stdin JSON -> stdout JSON)")
    det.add_argument(
        "--batch", action="store_true", help='stdin is {"series": [{"id", "values"}, ...]}'
    )
    det.set_defaults(func=cmd_detect)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # pass everything through to the suite runner untouched
        from kernelwatch.kernels.runner import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["bench-paired"]:
        from kernelwatch.kernels.paired_suite import main as paired_main

        return paired_main(argv[1:])
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    from kernelwatch.jobs.errors import KernelwatchError

    try:
        return handler(args)
    except KernelwatchError as exc:
        print(f"kernelwatch {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
