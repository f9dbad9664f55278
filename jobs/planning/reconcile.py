"""Re-sending runs whose message is gone or stuck: the safety net under at-least-once delivery.

Delivery through Redis leaves three gaps that the database can see:

- the planner committed a run and died (or the publish failed) before enqueueing:
  the run stays ``queued`` with no message anywhere;
- Redis lost messages (a host crash inside the AOF fsync second, a flushed or
  replaced instance);
- a worker died mid-run: its message comes back only after the Redis
  ``visibility_timeout``, which must exceed the longest run (1.4 h by default).

``orphans`` finds ``running`` runs whose worker's heartbeat is older than
``stale_s`` (or missing), and ``queued`` runs older than ``queued_after_s`` on a
queue that is empty (so their message is not waiting behind a backlog).
``requeue_orphans`` sends each of them again, at most once per ``stale_s``
(``options["requeued_at"]``). A second message is harmless: the executor skips
final runs, and a run still leased to a live worker is retried later, never
measured twice. Call it every minute from anything that runs periodically (cron,
a Celery beat, the API's background loop): a dead worker's run is then picked up
after about ``stale_s`` instead of the visibility timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.fleet import WorkerHeartbeat
from kernelwatch.db.models import Run

Send = Callable[[int, str, str], None]  # run id, queue, trigger
QueueDepth = Callable[[str], int]


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def orphans(
    session: Session,
    stale_s: float,
    queued_after_s: float,
    queue_depth: QueueDepth | None = None,
    now: datetime | None = None,
) -> list[Run]:
    """Runs that no live worker holds and no message may reach; see the module docstring."""
    now = now or datetime.now(UTC)
    stale = now - timedelta(seconds=stale_s)
    found: list[Run] = []
    running = list(session.scalars(select(Run).where(Run.status == "running")))
    names = {r.worker for r in running if r.worker}
    beats = {
        hb.name: hb
        for hb in session.scalars(select(WorkerHeartbeat).where(WorkerHeartbeat.name.in_(names)))
    }
    for run in running:
        hb = beats.get(run.worker or "")
        alive = (
            hb is not None
            and hb.stopped is None
            and hb.current_run_id == run.id
            and _aware(hb.last_seen) >= stale
        )
        if not alive and _aware(run.started or run.created) < stale:
            found.append(run)
    old = now - timedelta(seconds=queued_after_s)
    queued = session.scalars(
        select(Run).where(Run.status == "queued", Run.created < old).order_by(Run.id)
    )
    depth: dict[str, int] = {}
    for run in queued:
        if queue_depth is not None and run.queue not in depth:
            depth[run.queue] = queue_depth(run.queue)
        if depth.get(run.queue, 0) == 0:
            found.append(run)
    return [r for r in found if not _recently_requeued(r, stale, now)]


def _recently_requeued(run: Run, stale: datetime, now: datetime) -> bool:
    at = run.options.get("requeued_at")
    if not at:
        return False
    try:
        return _aware(datetime.fromisoformat(str(at))) >= stale
    except ValueError:
        return False


def requeue_orphans(
    factory: sessionmaker[Session],
    send: Send,
    stale_s: float,
    queued_after_s: float = 600.0,
    queue_depth: QueueDepth | None = None,
) -> list[int]:
    """Send every orphaned run again; return their ids."""
    now = datetime.now(UTC)
    with factory() as session, session.begin():
        runs = orphans(session, stale_s, queued_after_s, queue_depth, now)
        todo = [(r.id, r.queue, r.trigger) for r in runs]
        for run in runs:
            run.options = {
                **run.options,
                "requeued_at": now.isoformat(),
                "requeues": int(run.options.get("requeues", 0)) + 1,
            }
    for run_id, queue, trigger in todo:
        send(run_id, queue, trigger)
    return [t[0] for t in todo]
