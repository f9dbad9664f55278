"""Cancelling runs nobody needs any more: commits of a PR superseded by a force-push.

A run is cancelled in the database first (``status = cancelled``, a final state,
with the reason in ``error``); that alone is the guarantee:

- a queued run's message is dropped by whichever worker receives it (the executor
  skips final runs); the Celery revoke sent afterwards only saves that delivery
  where the task id is known (``task_id_for``);
- a running run is stopped by its own worker: the worker's heartbeat sees the
  status, kills the suite's process group and ends the task (``worker/heartbeat.py``);
  results already stored stay, the state stays ``cancelled``.

Runs waiting for a cancelled run as their baseline are judged without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from celery import Celery
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Run
from kernelwatch.jobs.judging.analysis import analyze_ready
from kernelwatch.jobs.judging.compose import PR_TRIGGERS

ACTIVE_STATES = ("queued", "running")

Revoke = Callable[[list[str]], None]


def task_id_for(run_id: int) -> str:
    """The Celery task id of a run's message (pass it to ``send_task(task_id=...)``)."""
    return f"kw-run-{run_id}"


def superseded(
    session: Session,
    repository_id: int,
    pr: int,
    head_sha: str,
    keep: Iterable[str] = (),
) -> list[Run]:
    """Active runs of pull request ``pr`` for commits other than ``head_sha``.

    Runs of ``head_sha``'s baselines (and of ``keep``) are kept: the new head still
    needs them. Runs belong to a PR when planning stored ``options.pr``.
    """
    runs = list(
        session.scalars(
            select(Run).where(
                Run.repository_id == repository_id,
                Run.status.in_(ACTIVE_STATES),
                Run.trigger.in_(PR_TRIGGERS),
            )
        )
    )
    mine = [r for r in runs if _pr_of(r) == pr]
    kept = {head_sha, *keep}
    kept |= {
        r.baseline_sha for r in mine if r.commit and r.commit.sha == head_sha and r.baseline_sha
    }
    return [r for r in mine if r.commit is None or r.commit.sha not in kept]


def _pr_of(run: Run) -> int | None:
    return run.options.pr


def cancel_runs(
    factory: sessionmaker[Session],
    settings: Settings,
    run_ids: Iterable[int],
    reason: str,
    revoke: Revoke | None = None,
) -> list[int]:
    """Cancel the runs of ``run_ids`` that are not final yet; return those cancelled."""
    ids = sorted(set(run_ids))
    cancelled: list[int] = []
    if not ids:
        return cancelled
    with factory() as session, session.begin():
        rows = session.scalars(
            select(Run).where(Run.id.in_(ids)).order_by(Run.id).with_for_update()
        )
        for run in rows:
            if run.status in FINAL_STATES:
                continue
            run.status = "cancelled"
            run.finished = datetime.now(UTC)
            run.error = reason
            analyze_ready(session, run, settings)
            cancelled.append(run.id)
    if revoke is not None and cancelled:
        revoke([task_id_for(i) for i in cancelled])
    return cancelled


def celery_revoke(app: Celery) -> Revoke:
    """Revoke by task id on every worker (a queued message is discarded on arrival)."""

    def revoke(task_ids: list[str]) -> None:
        app.control.revoke(task_ids)

    return revoke


def cancel_superseded(
    factory: sessionmaker[Session],
    settings: Settings,
    app: Celery | None,
    repository_id: int,
    pr: int,
    head_sha: str,
    keep: Iterable[str] = (),
) -> list[int]:
    """Cancel every active run of PR ``pr`` that ``head_sha`` superseded (force-push)."""
    with factory() as session:
        ids = [r.id for r in superseded(session, repository_id, pr, head_sha, keep)]
    return cancel_runs(
        factory,
        settings,
        ids,
        f"superseded by {head_sha[:12]} on pull request #{pr}",
        celery_revoke(app) if app is not None else None,
    )
