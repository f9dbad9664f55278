"""Running untrusted subprocesses: own process group, time limits, whole-group kill.

Every child starts a new session, so a timeout or a crash kills the process and
everything it spawned (compilers, Triton's build workers), never the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when its parent dies.

    A worker killed with ``kill -9`` cannot kill its children's process groups; without
    this the suite runner would go on holding the GPU (Linux ``PR_SET_PDEATHSIG``).
    """

    def preexec() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG

    return preexec


def run_logged(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, log_limit: int = 200_000
) -> tuple[int, str, bool]:
    """Run to completion; return (exit code, combined output tail, timed out)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        log.seek(0)
        text = log.read()
    return proc.returncode if proc.returncode is not None else -9, text[-log_limit:], timed_out


def kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after 3 s."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return
            time.sleep(0.05)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"
