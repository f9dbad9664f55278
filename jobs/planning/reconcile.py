"""No run stuck, ever: the periodic pass that finds runs nothing will move and moves them.

Delivery through Redis is at-least-once, but several gaps leave a run that the
database says is ``queued`` or ``running`` with nothing that will ever change it:

- the broker refused the message at planning (down, restarting), or the planner
  died between the commit and the send: the run has an outbox note
  (``db/outbox.py``) and no message;
- Redis lost messages (restarted without persistence, a host crash inside the
  AOF fsync second, a flushed or replaced instance);
- a worker died mid-run (main process, process group or host): its message comes
  back only after the Redis ``visibility_timeout``, which must exceed the longest
  run (1.4 h by default);
- a run kills its worker every time (out of memory, a crash in the driver):
  ``task_reject_on_worker_lost`` hands the message out again and again.

One pass (:func:`reconcile_once`) handles each, in this order (the last needs the
deployment's settings, which the reconciler of every process has):

1. outbox notes older than ``unsent_after_s`` are sent (the planner clears its own
   within milliseconds, so an older note is a failed send); a send that fails
   again stops the pass, the broker is still down;
2. ``running`` runs tried ``max_attempts`` times whose worker is gone, or tried
   more than ``max_attempts`` times at all, end as ``error`` with the reason;
3. ``running`` runs whose worker's heartbeat is older than ``stale_s`` (or
   missing, or naming another run), and ``queued`` runs older than
   ``queued_after_s`` on a queue holding fewer messages than it has queued runs
   (so some message is missing), are sent again, each at most once per
   ``stale_s`` (``options.requeued_at``).

4. ``succeeded`` runs still unjudged ``unsent_after_s`` after they ended are judged
   again (``analysis.analyze_ready``; one that must still wait waits): two runs of a
   baseline commit ending at once on two cards each saw the other still measuring and
   left the runs waiting for it unjudged, and a run ended by step 2 never judged
   those waiting for it.

A second message is harmless: the executor skips final runs, and a run still
leased to a live worker is retried later, never measured twice.
:class:`ReconcilerThread` runs the pass every ``interval_s`` wherever the service
runs: in the API process (``jobs/api/app.py``) and in every worker's main process
(``worker/app.py``), so a deployment of workers without the API heals too (issue
24). A fleet-wide lock (``passlock.py``: in Redis for a Redis broker, in the data
directory for the embedded one) lets one pass through per interval, never two at
once. With the defaults a dead worker's run moves after at most ``stale_s +
interval_s`` (95 + 30 s) and a lost message after ``queued_after_s + interval_s``
(60 + 30 s).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from celery import Celery
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db import outbox
from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import WorkerHeartbeat
from kernelwatch.db.models import Run
from kernelwatch.jobs.judging.analysis import analyze_ready
from kernelwatch.jobs.planning.broker import enqueue_run, queue_depth
from kernelwatch.jobs.planning.passlock import PassLock, pass_lock

log = logging.getLogger(__name__)

Send = Callable[[int, str, str], None]  # run id, queue, trigger
QueueDepth = Callable[[str], int]


@dataclass(frozen=True)
class ReconcileConfig:
    """How often the pass runs and when a run counts as stuck (``KW_RECONCILE_*``)."""

    interval_s: float = 30.0
    # A worker silent this long no longer holds its run: the worker's own lease rule
    # (worker/fleetconfig.py: 3 heartbeats + 5 s), read from the same settings.
    stale_s: float = 95.0
    queued_after_s: float = 60.0
    unsent_after_s: float = 10.0
    max_attempts: int = 3

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] | None = None
    ) -> ReconcileConfig:
        env = os.environ if environ is None else environ

        def num(name: str, default: float) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{name}: not a number: {raw!r}") from None
            if not value > 0:
                raise ValueError(f"{name}: must be > 0, got {value}")
            return value

        heartbeat = settings.heartbeat_s or 30.0
        stale = settings.lease_stale_s or 3 * heartbeat + 5.0
        return cls(
            interval_s=num("KW_RECONCILE_INTERVAL_S", 30.0),
            stale_s=stale,
            queued_after_s=num("KW_RECONCILE_QUEUED_AFTER_S", 60.0),
            unsent_after_s=num("KW_RECONCILE_UNSENT_AFTER_S", 10.0),
            max_attempts=int(num("KW_MAX_ATTEMPTS", 3)),
        )


@dataclass
class PassReport:
    """What one pass did: ids of runs sent from the outbox, re-sent, ended, and judged."""

    sent: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    errored: list[int] = field(default_factory=list)
    judged: list[int] = field(default_factory=list)


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _alive(hb: WorkerHeartbeat | None, run: Run, stale: datetime) -> bool:
    return (
        hb is not None
        and hb.stopped is None
        and hb.current_run_id == run.id
        and _aware(hb.last_seen) >= stale
    )


def _beats(session: Session, runs: list[Run]) -> dict[str, WorkerHeartbeat]:
    names = {r.worker for r in runs if r.worker}
    q = select(WorkerHeartbeat).where(WorkerHeartbeat.name.in_(names))
    return {hb.name: hb for hb in session.scalars(q)}


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
    beats = _beats(session, running)
    for run in running:
        alive = _alive(beats.get(run.worker or ""), run, stale)
        if not alive and _aware(run.started or run.created) < stale:
            found.append(run)
    pending = set(session.scalars(select(outbox.PendingSend.run_id)))  # step 1 sends those
    queued_per_queue = dict(
        session.execute(
            select(Run.queue, func.count()).where(Run.status == "queued").group_by(Run.queue)
        ).all()
    )
    old = now - timedelta(seconds=queued_after_s)
    queued = session.scalars(
        select(Run).where(Run.status == "queued", Run.created < old).order_by(Run.id)
    )
    depth: dict[str, int] = {}
    for run in queued:
        if run.id in pending:
            continue
        if run.queue not in depth:
            depth[run.queue] = queue_depth(run.queue) if queue_depth is not None else 0
        # Fewer messages than queued runs: some message is missing, and which one
        # cannot be told from outside, so every old run of that queue is sent again.
        if depth[run.queue] < queued_per_queue.get(run.queue, 0):
            found.append(run)
    return [r for r in found if not _recently_requeued(r, stale, now)]


def _recently_requeued(run: Run, stale: datetime, now: datetime) -> bool:
    at = run.options.requeued_at
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
            run.options = run.options.with_(
                requeued_at=now.isoformat(), requeues=run.options.requeues + 1
            )
    for run_id, queue, trigger in todo:
        send(run_id, queue, trigger)
    return [t[0] for t in todo]


def send_pending(
    factory: sessionmaker[Session], send: Send, older_than_s: float, now: datetime | None = None
) -> list[int]:
    """Send the outbox notes older than ``older_than_s``; stop at the first failure."""
    now = now or datetime.now(UTC)
    with factory() as session:
        notes = outbox.due(session, now - timedelta(seconds=older_than_s))
        due = [(p.run_id, p.queue, p.trigger) for p in notes]
    done: list[int] = []
    try:
        for run_id, queue, trigger in due:
            send(run_id, queue, trigger)
            done.append(run_id)
    except Exception as exc:  # the broker is still down: the next pass tries again
        log.warning("reconcile: %d planned runs not sent yet: %s", len(due) - len(done), exc)
    finally:
        with factory() as session, session.begin():
            outbox.sent(session, done)
    return done


def end_crash_loops(
    factory: sessionmaker[Session], stale_s: float, max_attempts: int, now: datetime | None = None
) -> list[int]:
    """End as ``error`` the runs that took their worker down ``max_attempts`` times."""
    now = now or datetime.now(UTC)
    stale = now - timedelta(seconds=stale_s)
    ended: list[int] = []
    with factory() as session, session.begin():
        running = list(
            session.scalars(
                select(Run).where(Run.status == "running", Run.attempts >= max_attempts)
            )
        )
        beats = _beats(session, running)
        for run in running:
            alive = _alive(beats.get(run.worker or ""), run, stale)
            if alive and run.attempts <= max_attempts:
                continue  # its last allowed attempt is still going
            if not alive and _aware(run.started or run.created) >= stale:
                continue  # just claimed: its worker's beat may not name it yet
            crashes = run.attempts if not alive else run.attempts - 1
            run.status = "error"
            run.verdict = "error"
            run.finished = now
            run.error = (
                f"the worker died {crashes} times while running this run (last: "
                f"{run.worker or 'unknown'}); not retried after {max_attempts} attempts "
                "(out of memory, a crash in the driver, or the host going away)"
            )
            ended.append(run.id)
    for run_id in ended:
        log.warning("reconcile: run %d ended as error after repeated worker deaths", run_id)
    return ended


def judge_stranded(
    factory: sessionmaker[Session],
    settings: Settings,
    after_s: float,
    now: datetime | None = None,
) -> list[int]:
    """Judge the succeeded runs left unjudged ``after_s`` after they ended (step 4);
    return those judged now. Each in a transaction of its own, its row locked (a run a
    worker is judging right now is skipped, not waited for)."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=after_s)
    with factory() as session:
        ids = list(
            session.scalars(
                select(Run.id)
                .where(Run.status == "succeeded", Run.verdict.is_(None), Run.finished < cutoff)
                .order_by(Run.id)
            )
        )
    judged: list[int] = []
    for run_id in ids:
        try:
            with factory() as session, session.begin():
                run = session.scalars(
                    select(Run)
                    .where(Run.id == run_id, Run.verdict.is_(None))
                    .with_for_update(skip_locked=True)
                ).one_or_none()
                if run is None:
                    continue  # judged meanwhile, or being judged
                judged.extend(r.id for r in analyze_ready(session, run, settings))
        except Exception:  # one run that cannot be judged must not strand the others
            log.exception("reconcile: judging run %d failed", run_id)
    if judged:
        log.warning("reconcile: judged runs left unjudged: %s", judged)
    return judged


def reconcile_once(
    factory: sessionmaker[Session],
    send: Send,
    config: ReconcileConfig,
    queue_depth: QueueDepth | None = None,
    settings: Settings | None = None,
) -> PassReport:
    """One pass of the steps in the module docstring (the fourth with ``settings``)."""
    report = PassReport()
    report.sent = send_pending(factory, send, config.unsent_after_s)
    report.errored = end_crash_loops(factory, config.stale_s, config.max_attempts)
    report.requeued = requeue_orphans(
        factory, send, config.stale_s, config.queued_after_s, queue_depth
    )
    if settings is not None:
        report.judged = judge_stranded(factory, settings, config.unsent_after_s)
    return report


class ReconcilerThread(threading.Thread):
    """Runs :func:`reconcile_once` every ``config.interval_s`` until stopped, when
    ``lock`` (shared by every process of the deployment) lets it: one pass per
    interval fleet-wide. ``passes`` counts the wake-ups, ``ran`` the passes made."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        app: Celery,
        config: ReconcileConfig,
        lock: PassLock | None = None,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(name="kernelwatch-reconciler", daemon=True)
        self.factory = factory
        self.app = app
        self.config = config
        self.lock = lock
        self.settings = settings
        self.passes = 0
        self.ran = 0
        self._stop_event = threading.Event()

    @classmethod
    def for_settings(
        cls, factory: sessionmaker[Session], app: Celery, settings: Settings
    ) -> ReconcilerThread:
        """The reconciler of a process of this deployment (API or worker)."""
        config = ReconcileConfig.from_settings(settings)
        lock = pass_lock(settings.broker_url, settings.data_dir, "reconcile", config.interval_s)
        return cls(factory, app, config, lock, settings)

    def send(self, run_id: int, queue: str, trigger: str) -> None:
        enqueue_run(self.app, run_id, queue, trigger)

    def depth(self, queue: str) -> int:
        return queue_depth(self.app, queue)

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                if self.lock is None or self.lock.acquire():
                    try:
                        self._pass()
                    finally:
                        if self.lock is not None:
                            self.lock.done()
            except Exception:  # the loop must survive a database or broker outage
                log.exception("reconcile pass failed")
            self.passes += 1
            self._stop_event.wait(self.config.interval_s)

    def _pass(self) -> None:
        done = reconcile_once(self.factory, self.send, self.config, self.depth, self.settings)
        self.ran += 1
        if done.sent or done.requeued or done.errored or done.judged:
            log.info(
                "reconcile: sent %s, re-sent %s, ended %s, judged %s",
                done.sent, done.requeued, done.errored, done.judged,
            )  # fmt: skip

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)


__all__ = [
    "PassReport",
    "ReconcileConfig",
    "ReconcilerThread",
    "end_crash_loops",
    "judge_stranded",
    "orphans",
    "reconcile_once",
    "requeue_orphans",
    "send_pending",
]
