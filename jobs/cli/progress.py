"""Progress of long commands (``run --wait``, ``gate --wait``, ``demo``) on stderr.

A minute of silence reads as a hang (issue 18). What a person wants to see: how many
runs were planned, which are building, how many cases are measured, and how long it
will take. On a terminal that is one live ``rich`` bar; anywhere else (logs, CI, a
pipe) one plain line whenever something changes, so a log reads as a history. Scripts
pass ``--quiet`` or ``--json`` and get nothing here: the constructor takes ``None``.

The ETA is the mean wall time of the finished runs times the runs left (shown once
one finished): runs of one request measure the same suites, so they cost alike.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from sqlalchemy import func, select
from sqlalchemy.orm import object_session

if TYPE_CHECKING:
    from kernelwatch.db.models import Run


class RunProgress:
    """Feed it the runs at every poll (``wait_for_runs(on_poll=...)``); ``close`` at the end."""

    def __init__(self, stream: TextIO | None, what: str = "runs") -> None:
        self.stream = stream
        self.what = what
        self.started = time.monotonic()
        self.last = ""
        self.finished_at: dict[int, float] = {}
        self._bar: Any = None
        self._task: Any = None
        if stream is not None and stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} runs"),
                TimeElapsedColumn(),
                console=Console(file=stream),
                transient=False,
            )
            self._bar.start()

    def update(self, runs: Sequence[Run]) -> None:
        if self.stream is None or not runs:
            return
        from kernelwatch.db.models import FINAL_STATES

        now = time.monotonic()
        for r in runs:
            if r.status in FINAL_STATES and r.id not in self.finished_at:
                self.finished_at[r.id] = now
        line = self.line(runs, now)
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task(line, total=len(runs))
            self._bar.update(self._task, description=line, completed=len(self.finished_at))
        elif line != self.last:
            print(f"[{now - self.started:6.0f}s] {line}", file=self.stream, flush=True)
        self.last = line

    def line(self, runs: Sequence[Run], now: float) -> str:
        """``3 runs: 1 done, 1 building, 1 queued · 12 cases measured · ETA 40 s``."""
        counts = {"done": 0, "building": 0, "measuring": 0, "queued": 0}
        for r in runs:
            if r.id in self.finished_at:
                counts["done"] += 1
            elif r.status == "running":
                counts["measuring" if _cases(r) else "building"] += 1
            else:
                counts["queued"] += 1
        parts = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        text = f"{len(runs)} {self.what}: {parts} · {sum(_cases(r) for r in runs)} cases measured"
        left = len(runs) - counts["done"]
        if self.finished_at and left:
            per_run = (max(self.finished_at.values()) - self.started) / len(self.finished_at)
            text += f" · ETA {per_run * left:.0f} s"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _cases(run: Run) -> int:
    """Results stored so far (a count query, not the rows)."""
    from kernelwatch.db.models import Result

    session = object_session(run)
    if session is None:
        return 0
    return int(session.scalar(select(func.count()).where(Result.run_id == run.id)) or 0)


__all__ = ["RunProgress"]
