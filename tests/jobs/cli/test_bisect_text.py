"""``kernelwatch bisect`` without --json names the case the culprit moved, as ``show`` does.

The JSON shape is design.md's and stays exactly as it is; the text said the culprit's
ratio but not which of the suite's cases it was the ratio of.
"""

from __future__ import annotations

from pathlib import Path

from kernelwatch.db.bisect import Bisection
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Case
from kernelwatch.db.session import engine_for, session_factory
from kernelwatch.db.store import get_or_create_repository
from kernelwatch.jobs.cli.bisect import _culprit_case, _text

GOOD, BAD, CULPRIT, PARENT = "a" * 40, "b" * 40, "c" * 40, "d" * 40


def test_the_text_names_the_culprits_case(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    upgrade(url)
    with session_factory(engine_for(url))() as s, s.begin():
        repo = get_or_create_repository(s, "slowkern", "/src/slowkern")
        s.add(Case(id="sm1", suite="basic", kernel="softmax", backend="lib", params={},
                   label="rows=4096"))  # fmt: skip
        row = Bisection(repository_id=repo.id, good_sha=GOOD, bad_sha=BAD,
                        commits=[GOOD, PARENT, CULPRIT, BAD], status="found",
                        culprit_sha=CULPRIT, culprit_parent=PARENT, culprit_ratio=3.04,
                        culprit_ci_low=2.81, culprit_ci_high=3.3, culprit_verdict="regression",
                        culprits=[{"sha": CULPRIT, "case_id": "sm1"}])  # fmt: skip
        s.add(row)
        s.flush()
        case = _culprit_case(s, row)
        summary = {"culprit": row.culprit(), "steps": [], "gpu_seconds": 4.0}
        nothing = Bisection(repository_id=repo.id, good_sha=GOOD, bad_sha=BAD, commits=[])
        assert _culprit_case(s, nothing) == ""  # no culprit: no case, no error
    assert case == "softmax rows=4096"
    text = _text(1, "found", "", summary, case)
    culprit_line = next(ln for ln in text.splitlines() if ln.startswith("culprit"))
    assert culprit_line.startswith(f"culprit {CULPRIT[:12]} (parent {PARENT[:12]}): regression")
    assert culprit_line.endswith(", case softmax rows=4096")
