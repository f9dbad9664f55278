"""Starting and stopping worker processes: the one room of ``jobs`` that does it.

``kernelwatch demo``, the tests and one-machine setups need a real Celery worker next
to the command that plans runs. It is a separate process (design.md: never eager), with
the command's settings passed as ``KW_*`` variables so both see one database and broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from kernelwatch.db.config import Settings
from kernelwatch.jobs.lifetime import die_with_parent
from kernelwatch.jobs.planning.broker import worker_argv


def start_worker(
    settings: Settings,
    queue: str = "cpu",
    name: str = "demo",
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A real Celery worker process consuming ``queue``; its log in the data dir."""
    env = {**os.environ, **(extra_env or {})}
    for key, value in settings.model_dump().items():
        if value is not None:
            env[f"KW_{key.upper()}"] = str(value)
    argv = worker_argv(queue, name=f"{name}-{os.getpid()}@%h", loglevel="WARNING", quiet=True)
    with open(settings.data_dir / f"{name}-worker.log", "ab") as log:
        # its own group (a terminal's Ctrl-C reaches it through us), and it goes when we
        # go, however we go: a killed demo or test run left its worker consuming the
        # queue for good (issue 24)
        return subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """SIGTERM (a warm shutdown: the current task finishes), SIGKILL after ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def worker_running(
    settings: Settings,
    queue: str = "cpu",
    name: str = "demo",
    extra_env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker for the duration of the block, stopped however the block ends."""
    proc = start_worker(settings, queue, name, extra_env)
    try:
        yield proc
    finally:
        stop(proc)


__all__ = ["start_worker", "stop", "worker_running"]
