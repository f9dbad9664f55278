"""A run without a baseline commit says it was not compared, not that it came first.

The first commit of ``kernelwatch run --range A..B`` is measured as the others'
baseline and compared with nothing; its series may hold many earlier measurements, so
"first measurement" (what it read) was wrong.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import class_verdict
from tests.jobs.judging.test_remeasure_rule import BASE, SETTINGS, measured


def test_a_run_without_a_baseline_commit_reads_not_compared(session: Session) -> None:
    earlier = measured(session, BASE, 1.0e-4)
    assert analyze(session, earlier, SETTINGS)
    again = measured(session, BASE, 1.0e-4)  # the same commit, a range's first again
    assert analyze(session, again, SETTINGS)
    session.flush()
    view = class_verdict(session, again)
    assert view.description.startswith("1 case measured, not compared: no baseline commit")
    assert "first measurement" not in view.description
    shown = format_run(run_summary(session, again))
    assert "not compared: its run had no baseline commit" in shown
    assert "first measurement" not in shown
