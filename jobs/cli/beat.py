"""``kernelwatch beat``: scheduled runs (Celery beat) and the one worker of their tasks.

Validates the schedule in the repositories file first (``KW_REPOS_FILE``: each watched
repository's ``schedule``, ``[[watch.releases]]``, ``[watch] selftest``;
``jobs/planning/schedule.py``), prints it, then becomes ``celery -A
kernelwatch.jobs.planning.beat_app worker -B -Q schedule`` (its beat state file in the
data directory). One per fleet; ``kernelwatch serve`` starts it on one machine.
"""

from __future__ import annotations

import argparse
import os
import sys

NAME = "beat"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser(
        NAME,
        help="scheduled runs: main of watched repos, new package releases, timer self-test",
        description="Celery beat and the worker of its tasks: each watched repository's "
        "branch at its `schedule` time (trigger nightly), new releases of the packages in "
        "[[watch.releases]] measured against the previous release as they appear (trigger "
        "release), and the nightly timer self-test of every live card. Reads KW_REPOS_FILE; "
        "run exactly one per fleet.",
    )
    b.add_argument(
        "--check", action="store_true", help="print the schedule and exit (no beat started)"
    )
    b.add_argument("--loglevel", default="INFO", help="Celery log level (default INFO)")
    b.set_defaults(func=handle)


def argv(loglevel: str, schedule_file: str) -> list[str]:
    """The command line of the beat process: a one-task worker with embedded beat."""
    from kernelwatch.jobs.planning.schedule import SCHEDULE_QUEUE

    return [
        sys.executable, "-m", "celery", "-A", "kernelwatch.jobs.planning.beat_app", "worker",
        "-B", "-Q", SCHEDULE_QUEUE, "-c", "1", "--prefetch-multiplier", "1",
        "-s", schedule_file, "-n", f"beat-{os.getpid()}@%h", "--loglevel", loglevel,
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.common import settings
    from kernelwatch.jobs.planning.schedule import load_schedule

    s = settings()
    config = load_schedule()  # a bad file is one line (ConfigError), before anything starts
    for line in config.describe():
        print(f"kernelwatch beat: {line}", file=sys.stderr)
    if args.check:
        return 0
    from kernelwatch.db.migrate import upgrade

    upgrade()
    os.execv(sys.executable, argv(args.loglevel, str(s.data_dir / "beat-schedule")))
    return 0  # pragma: no cover


__all__ = ["NAME", "add_parser", "argv", "handle"]
