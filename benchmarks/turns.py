"""One process at a time on the GPU, among processes started together.

The GPU probes set several processes up at once, as a paired pool does, and then time
them one block at a time, as a pool's pairs take the GPU in turn: ``first_call``'s
block probe and ``states --live``. Each holds an exclusive ``flock`` on a shared file
while it times.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator


@contextlib.contextmanager
def gpu_turn(lock: str) -> Iterator[None]:
    """The GPU to this process alone while inside; no lock file (``""``): no turns."""
    if not lock:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


__all__ = ["gpu_turn"]
