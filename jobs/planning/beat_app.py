"""The Celery app of ``kernelwatch beat``: Celery beat and the one worker of its tasks.

``kernelwatch beat`` runs ``celery -A kernelwatch.jobs.planning.beat_app worker -B -Q
schedule``: beat sends the entries of :func:`kernelwatch.jobs.planning.schedule.
beat_entries` to the ``schedule`` queue, and the same process's worker runs them (they
plan runs: git, the database, the broker; no GPU and no code under test). The
measurement workers never consume ``schedule``; they get the runs these tasks plan, and
the cards' self-tests on their direct queues.

Run exactly one ``kernelwatch beat`` per fleet (two would send each entry twice; the
planner joins runs still queued, but a release seen by two polls at once could be
planned twice). The tasks are thin: each calls a function of ``scheduled.py`` or
``releases.py`` and logs what it planned; a failure is logged and retried at the next
tick, never raised into beat.
"""

from __future__ import annotations

import logging

from kernelwatch.db.config import get_settings
from kernelwatch.db.session import session_factory
from kernelwatch.jobs.planning import releases, scheduled
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.schedule import (
    MAIN_TASK,
    RELEASES_TASK,
    SELFTEST_ROUND_TASK,
    beat_entries,
    load_schedule,
)

log = logging.getLogger(__name__)

settings = get_settings()
config = load_schedule()
app = make_celery(settings)
app.conf.beat_schedule = beat_entries(config)
app.conf.timezone = "UTC"
app.conf.beat_schedule_filename = str(settings.data_dir / "beat-schedule")


@app.task(name=MAIN_TASK)  # type: ignore[untyped-decorator]
def main_branch(full_name: str) -> list[int]:
    repo = config.repos.get(full_name)
    if repo is None:
        log.warning("scheduled repository %s is no longer watched", full_name)
        return []
    try:
        return [p.id for p in scheduled.plan_main(session_factory(), settings, app, repo)]
    except Exception:  # the next tick tries again; beat itself must not stop
        log.exception("scheduled run of %s not planned", full_name)
        return []


@app.task(name=RELEASES_TASK)  # type: ignore[untyped-decorator]
def new_releases() -> list[int]:
    ids: list[int] = []
    for watch in config.watch.releases:
        try:
            ids += [
                p.id for p in releases.plan_new_releases(session_factory(), settings, app, watch)
            ]
        except Exception:  # one index down must not hide the others' releases
            log.exception("release watch of %s (%s) failed", watch.package, watch.where)
    return ids


@app.task(name=SELFTEST_ROUND_TASK)  # type: ignore[untyped-decorator]
def selftest_round() -> dict[str, str]:
    return scheduled.send_selftests(session_factory(), app, config.watch.selftest_budget_s)
