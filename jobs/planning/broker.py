"""The Celery application both sides share: the planner sends, workers consume.

The broker is Redis when ``KW_BROKER_URL`` says so; otherwise kombu's
filesystem transport in the data directory (``fsbroker``: whole messages only), which
needs no server yet is still consumed by a real worker process (never
``task_always_eager``). Delivery is at-least-once: late acks, re-delivery when a worker
dies, prefetch 1; result writes are idempotent, so a second delivery cannot duplicate
anything.
"""

from __future__ import annotations

import sys

from celery import Celery

from kernelwatch.db.config import Settings, get_settings
from kernelwatch.jobs.planning import fsbroker

EXECUTE_RUN = "kernelwatch.execute_run"
BUILD_AHEAD = "kernelwatch.build_ahead"
PRIORITY = {
    "pull_request": 9,
    "gate": 9,
    "push": 6,
    "manual": 5,
    "demo": 5,
    "nightly": 2,
    "release": 2,
    "backfill": 1,
}


def broker_url(settings: Settings) -> str:
    return settings.broker_url or "filesystem://"


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    url = broker_url(settings)
    app = Celery("kernelwatch", broker=url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue="cpu",
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
        task_queue_max_priority=10,
        task_default_priority=5,
        # each worker also consumes its own queue (``<node>.dq2``): the nightly timer
        # self-test reaches every card through it (jobs/planning/scheduled.py)
        worker_direct=True,
    )
    if url.startswith("filesystem"):
        app.conf.broker_transport = fsbroker.TRANSPORT
        app.conf.broker_transport_options = fsbroker.transport_options(settings.broker_dir)
    elif url.startswith("redis"):
        app.conf.broker_transport_options = {
            # Re-deliver an unacked message this long after its worker vanished.
            "visibility_timeout": int(
                settings.visibility_timeout_s
                or settings.install_timeout_s + settings.suite_timeout_s + 1500
            ),
            "queue_order_strategy": "priority",
        }
    return app


def worker_argv(
    queues: str,
    *,
    concurrency: int = 1,
    name: str | None = None,
    loglevel: str = "INFO",
    quiet: bool = False,
) -> list[str]:
    """The command line of one real Celery worker process serving ``queues``.

    ``quiet`` drops gossip, mingle and heartbeats: for a single short-lived worker
    (the demo, tests) they only add start-up time and broker chatter.
    """
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "kernelwatch.worker.app",
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "--prefetch-multiplier",
        "1",
        "--loglevel",
        loglevel,
    ]
    if name:
        argv += ["-n", name]
    if quiet:
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return argv


def queue_depth(app: Celery, queue: str) -> int:
    """Messages waiting in ``queue`` (every priority level); raises if the broker is down.

    Connects at most twice, so a reconcile pass during a broker outage fails fast
    instead of blocking on kombu's reconnect-forever default.
    """
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1)
        # kombu has no public size call; both transports kernelwatch uses implement this.
        return int(conn.default_channel._size(queue))


def enqueue_run(app: Celery, run_id: int, queue: str, trigger: str = "manual") -> None:
    """Send a run to its device-class queue; call only after the run row is committed."""
    app.send_task(
        EXECUTE_RUN,
        args=[run_id],
        queue=queue,
        priority=PRIORITY.get(trigger, 5),
        task_id=f"kw-run-{run_id}",  # addressable by revoke and Flower (jobs/planning/cancel.py)
    )


def enqueue_build(app: Celery, queue: str, bisection_id: int, sha: str, depth: int) -> None:
    """Send one build-ahead of a bisection's commit (``jobs/planning/build_ahead.py``).

    No publish retries: a broker that is down fails this at once, and the bisection
    goes on without the build (the step's own run builds it then).
    """
    app.send_task(
        BUILD_AHEAD,
        args=[bisection_id, sha, depth],
        queue=queue,
        retry=False,
        task_id=f"kw-build-{bisection_id}-{sha[:12]}",
    )
