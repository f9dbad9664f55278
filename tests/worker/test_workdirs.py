"""Work directories go when their run ends; KW_KEEP_WORK keeps some for a day (issue 24)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelwatch.worker import workdirs


def _workdir(root: Path, name: str) -> Path:
    path = root / name
    (path / "suite").mkdir(parents=True)
    (path / "suite" / "runner-0.log").write_bytes(b"x" * 1000)
    return path


@pytest.mark.parametrize(
    ("keep", "status", "kept"),
    [
        ("none", "succeeded", False),
        ("none", "error", False),
        ("none", "", False),  # ended by an exception
        ("failed", "succeeded", False),
        ("failed", "failed", True),
        ("failed", "", True),
        ("all", "succeeded", True),
    ],
)
def test_a_run_leaves_its_work_directory_only_when_asked(
    tmp_path: Path, keep: str, status: str, kept: bool
) -> None:
    run = _workdir(tmp_path, "run-7")
    assert workdirs.release(run, status, keep) is kept
    assert run.exists() is kept


def test_kept_directories_go_after_a_day(tmp_path: Path) -> None:
    old = _workdir(tmp_path, "run-1")
    recent = _workdir(tmp_path, "run-2")
    day_ago = time.time() - 25 * 3600
    os.utime(old, (day_ago, day_ago))
    (tmp_path / "run-3").symlink_to(old)  # never followed
    current = _workdir(tmp_path, "run-4")
    workdirs.release(current, "error", "failed")
    assert not old.exists() and recent.exists() and current.exists()
