"""The demo's library: one history per checkout and content, never two in one series.

Issue 23: a second ``make demo`` rewrote ``tinykern`` at the same path with new commits
(new timestamps), so one repository row held two histories and the Trends page
interleaved them. Now a second demo finds the same four commits, and the directory
(so the source, so the repository) is named after this checkout and the library's files.
"""

from __future__ import annotations

from pathlib import Path

from kernelwatch.db.config import Settings
from kernelwatch.jobs.demo.pipeline import (
    create_demo_repository,
    demo_repository_dir,
    demo_tag,
)
from kernelwatch.kernels.verdict import MIN_EFFECT
from tests.helpers import make_repo


def test_a_second_demo_measures_the_same_history_again(tmp_path: Path) -> None:
    dest = demo_repository_dir(Settings(data_dir=tmp_path / "data"))
    assert dest.name == f"tinykern-{demo_tag()}" and dest.parent == tmp_path / "data" / "demo"
    first = create_demo_repository(dest)
    again = create_demo_repository(dest)
    assert [c.sha for c in again] == [c.sha for c in first]  # main: four new shas
    assert [c.role for c in first] == ["baseline", "harmless", "slow", "broken"]


def test_a_demo_repository_someone_changed_is_made_anew(tmp_path: Path) -> None:
    dest = tmp_path / "demo" / "tinykern-x"
    first = create_demo_repository(dest)
    make_repo(dest, {"EXTRA.md": "x\n"}, "a fifth commit")
    commits = create_demo_repository(dest)
    assert [c.message for c in commits] == [c.message for c in first]
    assert "EXTRA.md" not in {p.name for p in dest.iterdir()}


def test_the_demo_config_names_the_service_default_threshold(tmp_path: Path) -> None:
    # the demo's .kernelwatch.toml said "On a GPU the service default (5 %) applies";
    # the default is 1 % everywhere (design.md, README; an audit, 2026-12-05)
    create_demo_repository(tmp_path / "demo")
    text = (tmp_path / "demo" / ".kernelwatch.toml").read_text()
    assert f"service default ({MIN_EFFECT * 100:g} %)" in text
