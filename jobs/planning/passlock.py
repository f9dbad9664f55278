"""One periodic pass at a time, fleet-wide, however many processes run the loop.

The reconciler (``reconcile.py``) runs in the API and in every worker (issue 24: a
deployment of workers without the API never re-sent a lost message), so each of
them wakes every interval. :meth:`PassLock.acquire` lets one through: it takes a
lock for the pass, and :meth:`PassLock.done` keeps it until the interval since
the pass began is over, so the fleet makes one pass per interval, not one per
process, and never two at once.

- :class:`RedisPassLock` where the broker is Redis (the fleet): ``SET key token NX
  PX`` with a long hold while the pass runs (a process killed mid-pass frees it after
  ``HOLD_S``) and the rest of the interval after it (``PEXPIRE``, only while the
  token is still ours).
- :class:`FilePassLock` for the filesystem broker (one machine, one data
  directory): an ``flock`` held during the pass and the pass's start time in a file.

What this module does not do: decide what a pass does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from pathlib import Path
from typing import IO, Protocol

HOLD_S = 300.0  # the longest a pass may hold the lock before another process may start
KEY = "kernelwatch:pass:{name}"
_RELEASE_LATER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""


class PassLock(Protocol):
    def acquire(self) -> bool:
        """True: this process runs the pass now (and must call :meth:`done` after)."""
        ...

    def done(self) -> None:
        """The pass is over: hold the slot until its interval has passed."""
        ...


class RedisPassLock:
    """The lock in the broker's Redis (what every process of a fleet reaches)."""

    def __init__(self, url: str, name: str, interval_s: float) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.key = KEY.format(name=name)
        self.interval_s = interval_s
        self.token = ""
        self.started = 0.0

    def acquire(self) -> bool:
        token = f"{os.getpid()}-{uuid.uuid4().hex}"
        hold_ms = int(max(self.interval_s, HOLD_S) * 1000)
        if not self.client.set(self.key, token, nx=True, px=hold_ms):
            return False
        self.token, self.started = token, time.monotonic()
        return True

    def done(self) -> None:
        left = self.interval_s - (time.monotonic() - self.started)
        self.client.eval(_RELEASE_LATER, 1, self.key, self.token, max(1, int(left * 1000)))
        self.token = ""


class FilePassLock:
    """The lock in the data directory (the filesystem broker: one machine)."""

    def __init__(self, directory: Path, name: str, interval_s: float) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.lock_path = directory / f"{name}.lock"
        self.stamp_path = directory / f"{name}.last"
        self.interval_s = interval_s
        self._held: IO[str] | None = None

    def acquire(self) -> bool:
        fh = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held past return)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        try:
            last = float(self.stamp_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            last = 0.0
        if 0 <= time.time() - last < self.interval_s:
            fh.close()  # another process's pass began less than an interval ago
            return False
        self.stamp_path.write_text(str(time.time()), encoding="utf-8")
        self._held = fh
        return True

    def done(self) -> None:
        if self._held is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._held, fcntl.LOCK_UN)
            self._held.close()
            self._held = None


def pass_lock(broker_url: str | None, data_dir: Path, name: str, interval_s: float) -> PassLock:
    """The lock every process of this deployment shares: Redis for a Redis broker,
    the data directory otherwise (the embedded broker serves one machine)."""
    if broker_url and broker_url.split(":", 1)[0] in ("redis", "rediss"):
        return RedisPassLock(broker_url, name, interval_s)
    return FilePassLock(data_dir / "locks", name, interval_s)


__all__ = ["HOLD_S", "FilePassLock", "PassLock", "RedisPassLock", "pass_lock"]
