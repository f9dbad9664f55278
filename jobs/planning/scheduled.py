"""What the scheduled tasks of ``kernelwatch beat`` do (the schedule: ``schedule.py``).

- :func:`plan_main`: a watched repository's branch head, measured as a ``nightly`` run
  on each of its GPU classes (its baseline the first parent, as a push's), whether or
  not a push measured that commit already: a scheduled run is a fresh point of the
  branch's history (a new driver, a slower card, a dependency that moved show up
  there), and the change-point detector and the bisection trigger read it as such.
  Runs still queued for the same commit are joined, not doubled (``dedup.py``).
- :func:`send_selftests`: one ``kernelwatch.selftest`` message to each live card, on the
  direct queue of a worker that holds it (Celery's ``worker_direct``), so every card is
  tested once, by the worker pinned to it (``worker/selftest.py``).

Release watches are :func:`kernelwatch.jobs.planning.releases.plan_new_releases`.
"""

from __future__ import annotations

import logging

from celery import Celery
from celery.utils.nodenames import worker_direct
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import live_workers
from kernelwatch.db.store import get_or_create_repository
from kernelwatch.jobs.github.watched import WatchedRepo
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.planning.plan import PlannedRun, RunRequest, plan
from kernelwatch.jobs.planning.queues import BUILD_QUEUE

log = logging.getLogger(__name__)

TRIGGER = "nightly"  # a scheduled run of a branch (history; broker priority 2)
SELFTEST_TASK = "kernelwatch.selftest"


def plan_main(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None, repo: WatchedRepo
) -> list[PlannedRun]:
    """Runs of ``repo``'s scheduled branch head on each of its GPU classes."""
    mirror = Mirror(settings.data_dir / "mirrors", repo.source)
    mirror.sync()
    head = mirror.resolve(repo.scheduled_branch)
    config = repoconfig.read_configured(mirror, head, settings.repo_configs)
    suites = list(repo.suites or config.suites.names)
    with factory() as session, session.begin():  # filed under its GitHub name, as pushes are
        get_or_create_repository(session, repo.full_name, mirror.source)
    planned: list[PlannedRun] = []
    for device_class in config.gpus.pick(repo.device_classes):
        req = RunRequest(
            source=repo.source,
            commits=[head],
            suites=suites,
            device_class=device_class,
            trigger=TRIGGER,
            options=repo.run_options(),
        )
        planned += plan(factory, settings, app, req)
    log.info(
        "scheduled %s@%s (%s): runs %s", repo.full_name, head[:12], repo.scheduled_branch,
        [p.id for p in planned],
    )  # fmt: skip
    return planned


def card_of(gpu_uuid: str, host: str) -> str:
    """A card's identity: its GPU UUID, or ``cpu:<host>`` for a machine without one."""
    return gpu_uuid or f"cpu:{host}"


def send_selftests(
    factory: sessionmaker[Session], app: Celery, budget_s: float = 20.0
) -> dict[str, str]:
    """One self-test per live card, sent to a worker holding it: ``{card: worker}``."""
    chosen: dict[str, str] = {}
    with factory() as session:
        for w in live_workers(session):
            if w.state == "unhealthy":  # its own health check keeps it off work
                continue
            card = card_of(w.gpu_uuid, w.host)
            if card not in chosen and set(w.queues.split(",")) != {BUILD_QUEUE}:
                chosen[card] = w.name
    for card, node in chosen.items():
        app.send_task(SELFTEST_TASK, args=[card, budget_s], queue=worker_direct(node), priority=1)
    log.info("timer self-test sent to %d cards: %s", len(chosen), chosen)
    return chosen


__all__ = ["SELFTEST_TASK", "TRIGGER", "card_of", "plan_main", "send_selftests"]
