"""A directory walk that never follows a link, for trees that code under test writes.

The worker may be root, and it walks directories the sandboxed code can change while
it walks: a run's work directory (handed to the sandbox user), an environment's kept JIT
cache (copied into a paired run). ``os.fwalk(follow_symlinks=False)`` holds each
directory open, but on Python 3.11 it opens a subdirectory with a plain
``open(name, O_RDONLY | O_NONBLOCK, dir_fd=...)``: a directory swapped for a link to a
device between the listing and that open has root open the device (``/dev/watchdog``
reboots the host when closed so), and only then is the descent refused. Here every
directory is opened ``O_DIRECTORY | O_NOFOLLOW``, relative to its open parent: a link
fails with ``ELOOP`` and anything else that is not a directory with ``ENOTDIR``,
before a driver sees an open.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def walk_no_follow(
    top: Path, max_depth: int | None = None
) -> Iterator[tuple[Path, list[str], list[str], int]]:
    """``(path, dirnames, filenames, dirfd)`` for ``top`` and below, top-down, like
    ``os.fwalk``: ``dirnames`` are the real directories (by ``lstat``), ``filenames``
    everything else, links included; ``dirfd`` is the open directory, valid until the
    next step. Nothing is yielded if ``top`` itself is a link or not a directory; a
    subdirectory that is gone, or is a link by the time it is opened, is skipped; below
    ``max_depth`` levels nothing is entered. At most one descriptor per level is open.
    """
    try:
        fd = os.open(top, _DIR_FLAGS)
    except OSError:
        return
    yield from _walk_open(Path(top), fd, max_depth)


def _walk_open(
    path: Path, fd: int, depth_left: int | None
) -> Iterator[tuple[Path, list[str], list[str], int]]:
    try:
        dirs: list[str] = []
        files: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
                except OSError:
                    continue
        yield path, dirs, files, fd
        if depth_left is not None and depth_left <= 0:
            return
        for name in dirs:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            yield from _walk_open(path / name, sub, None if depth_left is None else depth_left - 1)
    finally:
        os.close(fd)


__all__ = ["walk_no_follow"]
