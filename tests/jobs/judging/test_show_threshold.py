"""``show`` says the minimum effect a run was judged at: ``unchanged`` at 1.22x is right
at a library's 100 % threshold and looks wrong without it (a first-hour review: the
demo's library sets 100 %, the README says 1 %, and nothing printed which applied)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from tests.jobs.judging.test_remeasure_rule import BASE, HEAD, SETTINGS, measured


def test_show_names_the_threshold_and_a_cases_own(session: Session) -> None:
    assert analyze(session, measured(session, BASE, 1.0e-4), SETTINGS)
    head = measured(session, HEAD, 1.22e-4)
    head.options = head.options.with_(regression_threshold=1.0)
    assert analyze(session, head, SETTINGS)
    shown = format_run(run_summary(session, head))
    assert "judged at a minimum effect of 100 %" in shown
    assert head.results[0].verdict == "unchanged"
    # a per-case threshold (``[[thresholds.case]]``) is said on its row
    rule = {"kernel": "softmax", "regression": 0.05}
    head.options = head.options.with_(thresholds={"cases": [rule]})
    assert analyze(session, head, SETTINGS)
    summary = run_summary(session, head)
    assert summary["min_effect"] == 1.0 and summary["cases"][0]["min_effect"] == 0.05
    shown = format_run(summary)
    assert "(some cases at 5 %)" in shown and "(at 5 %)" in shown
