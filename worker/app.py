"""The Celery app with kernelwatch's tasks registered: ``celery -A kernelwatch.worker.app``.

Tasks are thin: they take a run id and call the executor. Infrastructure errors
(database or broker unreachable) are retried with backoff; kernel failures are
results and never retried.
"""

from __future__ import annotations

import socket

from celery import Task
from sqlalchemy.exc import OperationalError

from kernelwatch.db.config import get_settings
from kernelwatch.db.session import session_factory
from kernelwatch.jobs.celery_app import EXECUTE_RUN, make_celery
from kernelwatch.jobs.errors import InfrastructureError
from kernelwatch.worker.executor import execute

settings = get_settings()
app = make_celery(settings)


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
    return execute(session_factory(), settings, run_id, worker=hostname)
