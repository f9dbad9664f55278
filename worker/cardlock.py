"""Card locks: one measurement per GPU card at a time, across the workers of a host.

A worker pinned to k cards (``kernelwatch worker --per-gpu --multi-gpu k``) shares
those cards with their per-GPU workers. Each measurement holds an exclusive
``flock`` on ``<root>/<uuid>.lock`` for every card it sees, so the k-card worker
waits until the per-GPU workers of its cards are between runs, and they wait for
it. Locks are taken in sorted order, so two workers never hold one card each while
waiting for the other's (no deadlock), and they block: the waiting worker simply
starts later. The kernel releases an ``flock`` when its process dies, so a crashed
worker never leaves a card locked.

Only UUIDs in ``CUDA_VISIBLE_DEVICES`` name a card (how ``worker/fleet_cli.py`` and
the deploy units pin workers); an index or an unset variable takes no lock, and
the worker runs as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


def visible_uuids(env: Mapping[str, str] = os.environ) -> list[str]:
    """The card UUIDs (``GPU-...``) ``CUDA_VISIBLE_DEVICES`` pins; [] for indices or unset."""
    entries = [e.strip() for e in env.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    entries = [e for e in entries if e]
    if not entries or not all(e.startswith("GPU-") for e in entries):
        return []
    return list(dict.fromkeys(entries))


@contextlib.contextmanager
def hold(uuids: Sequence[str], root: Path) -> Iterator[list[Path]]:
    """Hold exclusive locks on ``<root>/<uuid>.lock`` for each card, blocking until free.

    Taken in sorted order, released in reverse; yields the lock files. No UUIDs: no lock.
    """
    paths = [root / f"{u}.lock" for u in sorted(set(uuids))]
    if paths:
        root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for path in paths:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            stack.callback(os.close, fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
            stack.callback(fcntl.flock, fd, fcntl.LOCK_UN)
        yield paths
