"""A run's work directory is removed when the run ends, unless ``KW_KEEP_WORK`` keeps it.

Issue 24: work directories were never deleted (1.5 GB stayed after one run, and each
of up to 50 runner passes kept a 64 MB log). The executor calls :func:`release` when
a run it measured ends, however it ends; ``KW_KEEP_WORK`` (``Settings.keep_work``)
says what stays for a person to look at:

- ``none`` (the default): nothing; the run's logs live on in the database
  (build log, runner log tails, each case's log tail);
- ``failed``: the directories of runs that did not succeed (``failed``, ``error``,
  or an exception the task retries);
- ``all``: every run's.

A kept directory is removed by a later :func:`release` once it is older than
``KEEP_HOURS``, so retention never becomes a disk leak. What this does not remove:
the environment cache (``worker/venvs.py`` evicts it by size) and mirrors.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

KEEP = ("none", "failed", "all")
KEEP_HOURS = 24.0


def release(workdir: Path, status: str, keep: str = "none") -> bool:
    """Remove ``workdir`` unless ``keep`` keeps a run that ended ``status`` (""
    when it ended by an exception); sweep kept siblings past ``KEEP_HOURS``.
    Returns whether the directory was kept."""
    kept = keep == "all" or (keep == "failed" and status != "succeeded")
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    sweep(workdir.parent, exclude=workdir)
    return kept


def sweep(root: Path, exclude: Path | None = None, max_age_s: float = KEEP_HOURS * 3600) -> None:
    """Remove ``run-*`` directories under ``root`` untouched for ``max_age_s``."""
    if not root.is_dir():
        return
    old = time.time() - max_age_s
    for path in root.glob("run-*"):
        if path == exclude or not path.is_dir() or path.is_symlink():
            continue
        try:
            if path.stat().st_mtime < old:
                shutil.rmtree(path, ignore_errors=True)
                log.info(
                    "removed the work directory %s (older than %.0f h)", path, max_age_s / 3600
                )
        except OSError:
            continue


__all__ = ["KEEP", "KEEP_HOURS", "release", "sweep"]
