"""``kernelwatch worker``: Celery worker(s) on this machine's queue (design.md: ``gpu.<class>``).

The process becomes the worker (``exec``), so signals from a supervisor reach Celery.
"""

from __future__ import annotations

import argparse
import os
import sys

NAME = "worker"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = sub.add_parser(
        NAME,
        help="Celery worker(s) that measure queued runs",
        description="Start Celery worker processes that take runs from their queues "
        "(gpu.<class> of this machine's GPUs, cpu without one), build each library in its "
        "own environment and run the suites sandboxed, one task per GPU at a time.",
    )
    w.add_argument(
        "--queues",
        help="comma-separated queues (default: this machine's class; 'build' for a CPU "
        "worker that builds bisection steps ahead)",
    )
    w.add_argument(
        "--concurrency", type=int, default=1, help="tasks at a time (default 1: one per GPU)"
    )
    w.add_argument(
        "--per-gpu",
        action="store_true",
        help="one worker process per visible GPU (CUDA_VISIBLE_DEVICES pinned)",
    )
    w.add_argument(
        "--multi-gpu",
        type=int,
        action="append",
        default=[],
        metavar="K",
        help="with --per-gpu: also one worker per GPU class pinned to K of its cards, "
        "consuming gpu.<class>.xK (repeatable)",
    )
    w.add_argument("--name", help="Celery node name (default: Celery's, from the host)")
    w.add_argument("--loglevel", default="INFO", help="Celery log level (default INFO)")
    w.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.common import settings
    from kernelwatch.jobs.planning.broker import worker_argv
    from kernelwatch.jobs.planning.queues import local_device_class, queue_for

    # the settings fail fast here, in one line, before Celery is exec'd: a bad
    # KW_DATABASE_URL was Celery's 32-line "Unable to load celery application"
    settings()
    if args.multi_gpu and not args.per_gpu:
        print("kernelwatch worker: --multi-gpu needs --per-gpu", file=sys.stderr)
        return 2
    if args.per_gpu:  # one pinned worker process per visible GPU, supervised
        sup = [sys.executable, "-m", "kernelwatch.worker.fleet_cli", "--loglevel", args.loglevel]
        sup += ["--queues", args.queues] if args.queues else []
        sup += ["--name", args.name] if args.name else []
        sup += [a for k in args.multi_gpu for a in ("--multi-gpu", str(k))]
        os.execv(sys.executable, sup)
    queues = args.queues or queue_for(local_device_class())
    argv = worker_argv(queues, concurrency=args.concurrency, name=args.name, loglevel=args.loglevel)
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover


__all__ = ["NAME", "add_parser", "handle"]
