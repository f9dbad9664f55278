"""The Celery app with kernelwatch's tasks registered: ``celery -A kernelwatch.worker.app``.

Tasks are thin: they take a run id and call the executor. Infrastructure errors
(database or broker unreachable) are retried with backoff; kernel failures are
results and never retried. A run another live worker holds (a redelivered
message) is retried after the lease would have gone stale; a cancelled run ends
quietly; a run past the task's soft time limit is recorded as ``error``.
Heartbeats, health checks and the run lease live in ``worker/heartbeat.py``. The main
process also runs the reconciler (``jobs/planning/reconcile.py``), as the API does.

``selftest`` (a worker's direct queue, sent by ``kernelwatch beat``) runs the nightly timer
self-test of the worker's card (``worker/selftest.py``).

``build_ahead`` (queue ``build``) builds a bisection's next commits into the
environment cache (``worker/prebuild.py``); it is an optimisation, so it never
retries and never fails: whatever goes wrong is logged and the step builds itself.
"""

from __future__ import annotations

import atexit
import logging
import socket

from celery import Task, signals
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import OperationalError

from kernelwatch.db.config import get_settings
from kernelwatch.db.session import session_factory
from kernelwatch.jobs.errors import InfrastructureError
from kernelwatch.jobs.lifetime import stop_group_members
from kernelwatch.jobs.planning.broker import BUILD_AHEAD, EXECUTE_RUN, make_celery
from kernelwatch.jobs.planning.reconcile import ReconcilerThread
from kernelwatch.jobs.planning.scheduled import SELFTEST_TASK
from kernelwatch.worker import fleetconfig
from kernelwatch.worker.executor import abandon, execute
from kernelwatch.worker.heartbeat import Heartbeats, RunCancelled, RunLeased, kill_children
from kernelwatch.worker.prebuild import build_ahead_of
from kernelwatch.worker.sandbox import Sandbox
from kernelwatch.worker.selftest import run_selftest

log = logging.getLogger(__name__)

settings = get_settings()
Sandbox.check_env_at_start()
fleet = fleetconfig.FleetConfig.from_settings(settings)
app = make_celery(settings)
fleetconfig.configure(app, fleet)
heartbeats = Heartbeats(app, settings, fleet).install()
# the scheduler's budget comes with each message; this is for one sent by hand
SELFTEST_BUDGET_S = 20.0

_duties: list[ReconcilerThread] = []


def _start_fleet_duties(**_: object) -> None:
    """Main process: the reconciler runs here too (issue 24: a deployment of workers
    without the API healed nothing), one pass per interval fleet-wide; and whatever is
    left of our process group goes when we exit."""
    atexit.register(stop_group_members)
    thread = ReconcilerThread.for_settings(session_factory(), app, settings)
    thread.start()
    _duties.append(thread)


def _stop_fleet_duties(**_: object) -> None:
    while _duties:
        _duties.pop().stop()


signals.worker_ready.connect(_start_fleet_duties, weak=False)
signals.worker_shutdown.connect(_stop_fleet_duties, weak=False)


@app.task(  # type: ignore[untyped-decorator]
    name=EXECUTE_RUN,
    bind=True,
    autoretry_for=(OperationalError, InfrastructureError),
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=20,
)
def execute_run(self: Task, run_id: int) -> str:
    hostname = getattr(self.request, "hostname", None) or socket.gethostname()
    try:
        return execute(session_factory(), settings, run_id, worker=hostname, fleet=fleet)
    except RunLeased as exc:
        # Not a failure: check again once the holder's lease would have gone stale.
        raise self.retry(exc=exc, countdown=fleet.lease_stale_s, max_retries=100_000) from exc
    except RunCancelled:
        return "cancelled"
    except SoftTimeLimitExceeded:
        kill_children()
        return abandon(
            session_factory(),
            settings,
            run_id,
            f"task exceeded its time limit of {fleet.soft_time_limit_s:.0f} s",
        )
    except (OperationalError, InfrastructureError):
        raise  # retried (autoretry_for)
    except Exception as exc:
        # A defect of ours, not the run's: end it now with what happened, instead of
        # leaving it "running" until the reconciler calls the worker dead three times.
        log.exception("run %s failed with an unexpected error", run_id)
        return abandon(
            session_factory(), settings, run_id, f"internal error: {type(exc).__name__}: {exc}"
        )


@app.task(name=BUILD_AHEAD)  # type: ignore[untyped-decorator]
def build_ahead(bisection_id: int, sha: str, depth: int) -> str:
    try:
        return build_ahead_of(session_factory(), settings, bisection_id, sha, depth)
    except SoftTimeLimitExceeded:
        kill_children()
        log.warning("build-ahead of %s exceeded the task's time limit", sha[:12])
        return "error"
    except Exception:  # the database or the sandbox: the step run meets it on its own
        log.exception("build-ahead of %s for bisection %s failed", sha[:12], bisection_id)
        return "error"


@app.task(name=SELFTEST_TASK, bind=True)  # type: ignore[untyped-decorator]
def selftest(self: Task, card: str, budget_s: float | None = None) -> str:
    """The nightly timer self-test of this worker's card (``worker/selftest.py``)."""
    hostname = getattr(self.request, "hostname", None) or socket.gethostname()
    budget = budget_s if budget_s is not None else SELFTEST_BUDGET_S
    try:
        row = run_selftest(session_factory(), settings, card, hostname, budget)
    except SoftTimeLimitExceeded:
        kill_children()
        return "error"
    return "error" if row.error else "flagged" if row.flagged else "ok"
