"""A ``less_accurate`` case is shown by what its check lost, not by its time.

A user's softmax lost accuracy and ran 500 times faster (a kernel that skipped its
work): every surface printed "less_accurate softmax 0.002x (-99.8 %)", which reads like
a big speed-up, while the reason (``paired.accuracy_detail``: "error grew beyond 1.25x:
rel_l2 0.000377 vs 0.000287 (1.32x)") was only in the problem's finding. The run report,
``show`` (text and ``--json``), the gate's table and ``--json`` and the PR comment now
read it through one home (``verdicts.moved_text`` / ``moved_cells``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings, get_settings
from kernelwatch.jobs.api.schemas import VerdictOut
from kernelwatch.jobs.cli import show
from kernelwatch.jobs.cli.gate import gate
from kernelwatch.jobs.github.render import format_gate, render_comment
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_briefs, format_run, run_brief, run_summary
from kernelwatch.jobs.judging.verdicts import CommitVerdict, class_verdict, moved_text
from kernelwatch.kernels.verdict import CaseVerdict
from tests.jobs.judging.test_cpu_plumbing import _record, stored_run

DETAIL = "error grew beyond 1.25x: rel_l2 0.000377 vs 0.000287 (1.32x)"
RATIO = 0.002  # the timing ratio a less_accurate softmax read: "0.002x (-99.8 %)"


def _less_accurate() -> dict[str, Any]:
    record = _record("softmax", "pass", "less_accurate", RATIO)
    record["paired"].update(
        timing_verdict="improvement",
        accuracy_verdict="less_accurate",
        accuracy_detail=DETAIL,
        stage1={
            "verdict": "less_accurate",
            "timing_verdict": "improvement",
            "accuracy_verdict": "less_accurate",
            "accuracy_growth": {"rel_l2": 1.3203, "max_abs": 1.02},
        },
    )
    return record


def _judged(session: Session) -> Any:
    run = stored_run(
        session, "h100", _less_accurate(), _record("rmsnorm", "pass", "regression", 1.5)
    )
    assert analyze(session, run, Settings(cpu_timing_gates=True))
    (softmax,) = [r for r in run.results if r.case is not None and r.case.kernel == "softmax"]
    assert softmax.verdict == CaseVerdict.LESS_ACCURATE
    assert run.verdict == "fail"
    return run


def _rows(text: str, word: str = "softmax") -> list[str]:
    return [line for line in text.splitlines() if word in line]


def _reads_accuracy(line: str) -> None:
    """A row (or its note) that says the accuracy first; the time, if at all, named."""
    assert "error" in line, line
    assert "-99.8 %" not in line.split("time")[0], line  # never a bare speed-up


def test_one_home_words_a_less_accurate_row_by_its_accuracy() -> None:
    text = moved_text("less_accurate", RATIO, 0.00196, 0.00204, DETAIL)
    assert text.startswith(DETAIL) and "; time 0.002×" in text
    # other verdicts, or no detail recorded: the time ratio as before
    assert moved_text("regression", 1.5, 1.47, 1.53, DETAIL).startswith("1.500×")
    assert moved_text("less_accurate", RATIO, None, None, "") == "0.002× (-99.8 %)"
    assert moved_text("less_accurate", None, None, None, DETAIL) == DETAIL
    assert moved_text("broken", None, None, None, "") == ""


def test_the_run_report_says_what_the_check_lost(session: Session) -> None:
    run = _judged(session)
    brief = run_brief(session, run)
    (moved,) = [m for m in brief["moved"] if m["kernel"] == "softmax"]
    assert moved["accuracy"] == DETAIL and moved["accuracy_growth"] == pytest.approx(1.3203)
    assert moved["ratio"] == pytest.approx(RATIO)  # the existing fields stay
    (row,) = _rows(format_briefs([brief]))
    assert "less_accurate" in row and DETAIL in row
    assert row.index(DETAIL) < row.index("time 0.002×")
    # a regression's row is unchanged
    (slow,) = _rows(format_briefs([brief]), "rmsnorm")
    assert "1.500×" in slow and "error" not in slow


def test_show_says_what_the_check_lost(
    session: Session,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = _judged(session)
    session.commit()
    (row,) = _rows(format_run(run_summary(session, run)))
    _reads_accuracy(row)
    assert DETAIL in row
    monkeypatch.setenv("KW_DATABASE_URL", db_url)
    get_settings.cache_clear()
    try:
        assert show.handle(argparse.Namespace(run=run.id, json=False)) == 1
        (row,) = _rows(capsys.readouterr().out)
        assert DETAIL in row
        _reads_accuracy(row)
        assert show.handle(argparse.Namespace(run=run.id, json=True)) == 1
    finally:
        get_settings.cache_clear()
    cases = json.loads(capsys.readouterr().out)["cases"]
    (case,) = [c for c in cases if c["kernel"] == "softmax"]
    assert case["accuracy"] == DETAIL and case["accuracy_growth"] == pytest.approx(1.3203)
    assert case["ratio"] == pytest.approx(RATIO) and case["ratio_ci"] is not None  # kept
    (other,) = [c for c in cases if c["kernel"] == "rmsnorm"]
    assert other["accuracy"] == "" and other["accuracy_growth"] is None


def test_the_gate_table_and_its_json_say_what_the_check_lost(session: Session) -> None:
    run = _judged(session)
    session.commit()
    verdict = CommitVerdict("o/lib", "c" * 40, (class_verdict(session, run),))
    table = format_gate(verdict)
    (row,) = _rows(table)
    assert "error 1.32×" in row and "0.002×" not in row, table
    assert DETAIL in table  # beside its case, wrapped under it when long
    assert all(len(line) <= 110 for line in table.splitlines())
    out: list[str] = []
    factory = sessionmaker(bind=session.get_bind(), expire_on_commit=False)
    assert gate(factory, "lib", "c" * 40, as_json=True, out=out.append) == 1
    view = json.loads(out[0])
    VerdictOut.model_validate(view)  # the API's shape, with the fields added
    moved = {m["kernel"]: m for m in view["classes"][0]["moved"]}
    assert moved["softmax"]["accuracy"] == DETAIL
    assert moved["softmax"]["accuracy_growth"] == pytest.approx(1.3203)
    assert moved["softmax"]["ratio"] == pytest.approx(RATIO)  # existing fields kept
    assert {"ci_low", "ci_high", "baseline_median_s", "median_s", "error"} <= set(moved["softmax"])
    assert moved["rmsnorm"]["accuracy"] == "" and moved["rmsnorm"]["accuracy_growth"] is None
    assert "error 1.32×" in view["table"] and DETAIL in view["markdown"]


def test_the_pr_comment_says_what_the_check_lost(session: Session) -> None:
    run = _judged(session)
    comment = render_comment(
        CommitVerdict("o/lib", "c" * 40, (class_verdict(session, run),)),
        dashboard_url="http://x",
    )
    (row,) = [line for line in comment.splitlines() if line.startswith("| `softmax`")]
    assert "less_accurate" in row and DETAIL in row and "error 1.32×" in row, row
    assert "0.002×" not in row and "-99.8 %" not in row, row
    (slow,) = [line for line in comment.splitlines() if line.startswith("| `rmsnorm`")]
    assert "1.500×" in slow
