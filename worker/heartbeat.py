"""Worker heartbeats, the run lease and cooperative cancellation, wired to Celery signals.

Every worker process keeps one row in ``worker_heartbeats`` (``db/fleet.py``):

- ``worker_ready`` (main process): identity (host, queues, GPU name and UUID,
  driver, CUDA, torch/triton/celery versions), state ``idle``, a first health
  check; then a thread refreshes ``last_seen`` and the SM clock every
  ``heartbeat_s``, and re-checks an unhealthy GPU every ``health_recheck_s``;
- ``task_prerun`` (pool child): state ``busy`` with ``current_run_id``; a thread
  in the child beats while the task runs and watches the run's status;
- ``task_postrun`` (pool child): the health check between tasks, then ``idle``
  or ``unhealthy`` (``unhealthy`` also cancels this node's consumers, so the GPU
  takes no more work until a re-check passes);
- ``worker_shutdown``: ``gone`` with ``stopped`` set.

The *run lease*: a run is held by the worker named in ``runs.worker`` while that
worker's heartbeat is fresh and names the run. A second delivery of the same run
(Redis hands an unacknowledged message out again after ``visibility_timeout``)
finds the lease held and retries later instead of measuring twice; once the holder
is silent for ``lease_stale_s`` (killed, machine gone), the next delivery takes the
run over and measures only the cases without a result.

*Cancellation*: when the child's beat finds its run ``cancelled`` (superseded, see
``jobs/planning/cancel.py``), it signals its own process; the handler kills the suite
subprocess group and raises ``RunCancelled`` in the task. A plain SIGTERM (cold
shutdown, a revoke with terminate) also kills the suite group before the child
exits, so no measurement is left running on the GPU without its worker.

Heartbeat writes never fail a task: with the database unreachable they are logged
and skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import logging
import os
import platform
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from celery import Celery, signals
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.fleet import WorkerHeartbeat, beat
from kernelwatch.db.models import Run
from kernelwatch.db.session import engine_for, session_factory
from kernelwatch.jobs.errors import KernelwatchError
from kernelwatch.jobs.lifetime import bind_to_parent
from kernelwatch.jobs.planning.broker import EXECUTE_RUN
from kernelwatch.worker import gpus, health
from kernelwatch.worker.fleetconfig import FleetConfig

log = logging.getLogger(__name__)


class RunLeased(KernelwatchError):
    """Another live worker is measuring this run: try again later."""


class RunCancelled(KernelwatchError):
    """The run was cancelled while this worker measured it."""


# ----------------------------------------------------------------------------- the lease


def lease_holder(session: Session, run: Run, me: str, stale_s: float) -> str | None:
    """The name of a live worker other than ``me`` that is measuring ``run``, else None."""
    if run.status != "running" or not run.worker or run.worker == me:
        return None
    hb = session.scalars(select(WorkerHeartbeat).where(WorkerHeartbeat.name == run.worker)).first()
    if hb is None or hb.stopped is not None or hb.current_run_id != run.id:
        return None
    seen = hb.last_seen if hb.last_seen.tzinfo else hb.last_seen.replace(tzinfo=UTC)
    if seen < datetime.now(UTC) - timedelta(seconds=stale_s):
        return None
    return hb.name


# ----------------------------------------------------------------------------- identity


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("torch", "triton", "celery", "kernelwatch"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    try:
        import torch  # already imported by the worker; reading the version creates no context

        out["cuda"] = torch.version.cuda
    except ImportError:
        out["cuda"] = None
    return out


def identity(queues: str) -> dict[str, Any]:
    found = gpus.query()
    gpu = found[0] if found else None
    fields: dict[str, Any] = {
        "host": socket.gethostname(),
        "queues": queues[:255],
        "device_class": gpu.device_class if gpu else "cpu",
        "gpu_name": gpu.name if gpu else "",
        "gpu_uuid": gpu.uuid if gpu else "",
        "sm_mhz": gpu.sm_mhz if gpu else None,
        "versions": {**versions(), "driver": gpu.driver if gpu else None, "gpus": len(found)},
    }
    return fields


# ----------------------------------------------------------------------------- helpers


class Ticker:
    """Call ``fn`` every ``interval`` seconds on a daemon thread until ``stop()``."""

    def __init__(self, name: str, interval: float, fn: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._interval = interval
        self._fn = fn
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        failing = 0
        while not self._stop.wait(self._interval):
            try:
                self._fn()
                failing = 0
            except Exception as exc:  # a heartbeat must never take the worker down
                failing += 1
                if failing == 1 or failing % 60 == 0:  # once per outage, then every 60 ticks
                    log.warning("heartbeat failing (%d ticks): %s", failing, str(exc)[:300])


def child_pids(parent: int | None = None) -> list[int]:
    """Direct children of ``parent`` (default: this process), read from /proc."""
    parent = os.getpid() if parent is None else parent
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(parent):
            out.append(int(entry))
    return out


def kill_children(grace_s: float = 3.0) -> list[int]:
    """SIGTERM then SIGKILL every child of this process with its process group.

    The suite runner starts its own session, so its group holds the compilers and
    helpers it spawned; a child sharing our group is signalled alone.
    """
    own = os.getpgid(0)
    targets: list[tuple[int, bool]] = []
    for pid in child_pids():
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        targets.append((pgid, True) if pgid != own else (pid, False))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for ident, group in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                (os.killpg if group else os.kill)(ident, sig)
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            if not [p for p in child_pids() if _alive(p)]:
                break
            time.sleep(0.05)
    return [ident for ident, _ in targets]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def no_dumps() -> None:
    """Make this process non-dumpable: same-uid code under test cannot read its
    ``/proc/<pid>/environ`` (secrets) or ptrace it. No effect for root."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


# ----------------------------------------------------------------------------- the signals


class Heartbeats:
    """State of one worker process; ``install`` connects it to Celery's signals."""

    def __init__(self, app: Celery, settings: Settings, fleet: FleetConfig) -> None:
        self.app = app
        self.settings = settings
        self.fleet = fleet
        self.node = ""
        self.queues: list[str] = []
        self.unhealthy_since: float | None = None
        self.last_check = 0.0
        self._main: Ticker | None = None
        self._task: Ticker | None = None
        self.current_run: int | None = None
        self.cancel_requested = False
        self._prev_sigterm: Any = None

    def factory(self) -> sessionmaker[Session]:
        return session_factory(engine_for(self.settings.resolved_database_url))

    def write(self, **fields: Any) -> None:
        try:
            with self.factory()() as session, session.begin():
                beat(session, self.node, **fields)
        except Exception as exc:
            log.warning("heartbeat of %s not written: %s", self.node, str(exc)[:300])

    # main process ---------------------------------------------------------------------

    def on_ready(self, sender: Any = None, **_: Any) -> None:
        self.node = str(getattr(sender, "hostname", "") or f"worker@{socket.gethostname()}")
        self.queues = sorted(self.app.amqp.queues.consume_from or {})
        report = health.check(self.settings, self.fleet)
        self.last_check = time.monotonic()
        self.write(
            **identity(",".join(self.queues)),
            state="idle" if report.healthy else "unhealthy",
            current_run_id=None,
            started=datetime.now(UTC),
            stopped=None,
        )
        if not report.healthy:
            log.error("GPU unhealthy at start, not consuming: %s", report.summary)
            self.unhealthy_since = time.monotonic()
            for queue in self.queues:
                with contextlib.suppress(Exception):
                    sender.cancel_task_queue(queue)
        no_dumps()
        self._main = Ticker("kw-heartbeat", self.fleet.heartbeat_s, self.main_tick).start()

    def main_tick(self) -> None:
        found = gpus.query()
        with self.factory()() as session, session.begin():
            row = beat(session, self.node, sm_mhz=found[0].sm_mhz if found else None)
            state = row.state
        if state != "unhealthy":
            self.unhealthy_since = None
            return
        if time.monotonic() - self.last_check < self.fleet.health_recheck_s:
            return
        self.last_check = time.monotonic()
        report = health.check(self.settings, self.fleet)
        if report.healthy:
            log.warning("GPU healthy again: consuming %s", ",".join(self.queues))
            for queue in self.queues:
                self.app.control.add_consumer(queue, destination=[self.node], reply=False)
            self.write(state="idle")

    def on_shutdown(self, **_: Any) -> None:
        if self._main is not None:
            self._main.stop()
        if self.node:
            self.write(state="gone", current_run_id=None, stopped=datetime.now(UTC))

    # pool child -----------------------------------------------------------------------

    def on_process_init(self, sender: Any = None, **_: Any) -> None:
        self.node = str(sender or f"worker@{socket.gethostname()}")
        self.queues = sorted(self.app.amqp.queues.consume_from or {})
        # Connections inherited from the parent must not be shared across the fork.
        engine_for(self.settings.resolved_database_url).dispose(close=False)
        no_dumps()
        bind_to_parent()  # a killed main process takes its pool child along (issue 24)

    def on_prerun(self, task: Any = None, args: Any = None, **_: Any) -> None:
        if getattr(task, "name", None) != EXECUTE_RUN or not args:
            return
        self.current_run = int(args[0])
        self.cancel_requested = False
        # Installed per task: billiard sets its own SIGTERM handler after the child's
        # init signal; ours runs first and then hands over to it.
        self._prev_sigterm = signal.signal(signal.SIGTERM, self.on_sigterm)
        self.write(state="busy", current_run_id=self.current_run)
        self._task = Ticker("kw-task-heartbeat", self.fleet.heartbeat_s, self.task_tick).start()

    def task_tick(self) -> None:
        run_id = self.current_run
        if run_id is None:
            return
        with self.factory()() as session, session.begin():
            beat(session, self.node, state="busy", current_run_id=run_id)
            status = session.scalar(select(Run.status).where(Run.id == run_id))
        if status == "cancelled" and not self.cancel_requested and self.current_run == run_id:
            log.warning("run %s was cancelled: stopping its measurement", run_id)
            self.cancel_requested = True
            os.kill(os.getpid(), signal.SIGTERM)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        killed = kill_children(grace_s=0)  # billiard SIGKILLs us 0.1 s after its SIGTERM
        if self.cancel_requested and self.current_run is not None:
            raise RunCancelled(f"run {self.current_run} cancelled; killed {killed}")
        prev = self._prev_sigterm
        if callable(prev):
            prev(signum, frame)  # billiard: mark the job lost and exit
        raise SystemExit(128 + signum)

    def on_postrun(self, task: Any = None, **_: Any) -> None:
        if getattr(task, "name", None) != EXECUTE_RUN:
            return
        if self._task is not None:
            self._task.stop()
            self._task = None
        if self._prev_sigterm is not None:
            signal.signal(signal.SIGTERM, self._prev_sigterm)
            self._prev_sigterm = None
        self.current_run = None
        self.cancel_requested = False
        report = health.check(self.settings, self.fleet)
        self.write(state="idle" if report.healthy else "unhealthy", current_run_id=None)
        if not report.healthy:
            log.error("GPU unhealthy after a task, leaving the queues: %s", report.summary)
            for queue in self.queues:
                try:
                    self.app.control.cancel_consumer(
                        queue, destination=[self.node], reply=True, timeout=10
                    )
                except Exception:
                    log.error("could not cancel consumer %s", queue, exc_info=True)

    def install(self) -> Heartbeats:
        signals.worker_ready.connect(self.on_ready, weak=False)
        signals.worker_shutdown.connect(self.on_shutdown, weak=False)
        signals.worker_process_init.connect(self.on_process_init, weak=False)
        signals.task_prerun.connect(self.on_prerun, weak=False)
        signals.task_postrun.connect(self.on_postrun, weak=False)
        return self
