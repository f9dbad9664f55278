"""No process outlives the one that started it.

Issue 24: after ``kill -9`` of the Celery main process its pool child lived on as an
orphan (PPID 1) and finished a run nobody would acknowledge. The pieces, used by
the worker (its pool children, suite runners, sandboxes) and by the commands that
start processes (``kernelwatch serve``, ``kernelwatch worker``):

- :func:`die_with_parent`: a ``preexec_fn`` for a child that is started;
- :func:`bind_to_parent`: the same for a process that was forked (a pool child);
- :func:`stop_group` / :func:`stop_group_members`: stop a whole process group, so
  grandchildren go with their parents.

Linux only (``PR_SET_PDEATHSIG``, ``/proc``), like the rest of the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when its parent dies.

    A worker killed with ``kill -9`` cannot kill its children's process groups; without
    this the suite runner would go on holding the GPU (Linux ``PR_SET_PDEATHSIG``).
    """

    def preexec() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)

    return preexec


def bind_to_parent(sig: int = signal.SIGKILL) -> None:
    """Make this (forked) process receive ``sig`` when its parent dies, and now if the
    parent died before this call. Linux ties the signal to the parent *thread* that
    forked us: a Celery pool is forked by the main thread or the pool's supervisor
    thread, both of which live as long as the pool."""
    parent = os.getppid()
    die_with_parent(sig)()
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


@dataclass(frozen=True)
class Proc:
    """One line of the process table, as ``/proc/<pid>/stat`` says it."""

    pid: int
    state: str  # "R", "S", ... "Z" for a zombie
    ppid: int
    pgid: int
    threads: int


def processes() -> Iterator[Proc]:
    """Every process of this PID namespace, read from ``/proc`` (gone ones skipped)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        yield Proc(int(entry), fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[17]))


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``, this process excluded."""
    me = os.getpid()
    return [p.pid for p in processes() if p.pgid == pgid and p.state != "Z" and p.pid != me]


def stop_group(pgid: int, grace_s: float = 30.0) -> None:
    """SIGTERM process group ``pgid``, SIGKILL what is left of it after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_members(pgid):
            return


def stop_group_members(grace_s: float = 5.0) -> list[int]:
    """At the end of a process that leads its group (``kernelwatch worker``: the Celery
    main process), stop what is left of the group besides itself. A process that
    does not lead its group stops nothing: its group is its supervisor's."""
    pgid = os.getpgrp()
    if pgid != os.getpid():
        return []
    members = group_members(pgid)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        for pid in group_members(pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
    return members


__all__ = [
    "Proc",
    "bind_to_parent",
    "die_with_parent",
    "group_members",
    "processes",
    "stop_group",
    "stop_group_members",
]
