"""A regression judged after its job ended is confirmed by a run of its own.

The worker re-measures an unpaired run's would-be regressions before its job ends, but
a run whose baseline was still measuring then is judged later, where no worker
re-measure can come; one comparison used to decide, and a slow process failed a push.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Result, Run
from kernelwatch.db.outbox import PendingSend
from kernelwatch.jobs.judging.analysis import analyze, analyze_ready
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import class_verdict
from kernelwatch.kernels.verdict import NOTE_UNCONFIRMED
from tests.jobs.judging.test_remeasure_rule import (
    BASE,
    HEAD,
    SETTINGS,
    _samples,
    _timing,
    measured,
)


def _late(session: Session, median: float) -> Run:
    """HEAD measured at ``median`` while BASE was still measuring, then BASE ended
    (1.0e-4) and judged HEAD as it waited: what a worker ending BASE does."""
    base = measured(session, BASE, 1.0e-4)
    base.status = "running"
    head = measured(session, HEAD, median)
    assert not analyze(session, head, SETTINGS)  # the job's end: its baseline measures
    assert head.options.judged_late
    base.status = "succeeded"
    session.flush()
    analyze_ready(session, base, SETTINGS)
    session.flush()
    return head


def _confirmed(session: Session, head: Run, median: float | None) -> Run:
    """HEAD's confirmation run ended: measured at ``median``, or failed (None)."""
    confirming = session.get(Run, head.options.confirmation)
    assert confirming is not None
    if median is None:
        confirming.status, confirming.error = "failed", "install failed: no space left"
    else:
        confirming.status = "succeeded"
        record = {"suite": "basic", "kernel": "softmax", "status": "pass",
                  "timing": _timing(median)}  # fmt: skip
        samples = _samples(median, 5)
        session.add(Result(run_id=confirming.id, case_id="c-soft", status="pass",
                           median_s=median, samples=samples, record=record))  # fmt: skip
    session.flush()
    session.expire(confirming)
    analyze_ready(session, confirming, SETTINGS)
    session.flush()
    return confirming


def test_a_late_regression_waits_for_its_confirmation_run(session: Session) -> None:
    head = _late(session, 1.5e-4)
    confirming = session.get(Run, head.options.confirmation)
    assert head.verdict is None and confirming is not None  # not failed on one comparison
    assert (confirming.trigger, confirming.status, confirming.baseline_sha) == (
        "manual", "queued", None
    )  # fmt: skip
    assert confirming.commit_id == head.commit_id and confirming.options.confirms == head.id
    assert confirming.options.bench_args[-1] == "--case=c-soft"  # exactly the would-be one
    assert session.scalars(select(PendingSend.run_id)).all() == [confirming.id]
    view = class_verdict(session, head)
    assert view.state == "pending"
    assert f"confirming its regressions in run {confirming.id}" in view.description
    _confirmed(session, head, 1.5e-4)
    (result,) = head.results
    assert (result.verdict, head.verdict) == ("regression", "fail")


@pytest.mark.parametrize("again", [1.0e-4, None])
def test_a_late_regression_its_confirmation_does_not_repeat_is_not_a_fail(
    session: Session, again: float | None
) -> None:
    head = _late(session, 1.5e-4)
    confirming = _confirmed(session, head, again)
    (result,) = head.results
    assert (result.verdict, head.verdict) == ("inconclusive", "neutral")
    shown = format_run(run_summary(session, head))
    assert NOTE_UNCONFIRMED in shown
    if again is None:  # why it could not confirm is said
        assert f"confirmation run {confirming.id} ended failed" in shown
    assert session.get(Run, head.options.confirmation) is confirming  # asked once


def test_an_unchanged_late_run_asks_for_nothing(session: Session) -> None:
    head = _late(session, 1.0e-4)
    assert head.verdict == "pass" and head.options.confirmation is None
    assert session.scalars(select(PendingSend.run_id)).all() == []


def test_an_import_judged_late_is_judged_on_its_one_comparison(session: Session) -> None:
    base = measured(session, BASE, 1.0e-4)
    base.status = "running"
    head = measured(session, HEAD, 1.5e-4)
    head.options = head.options.with_(imported_from="h200.jsonl")
    assert not analyze(session, head, SETTINGS)
    base.status = "succeeded"
    session.flush()
    analyze_ready(session, base, SETTINGS)
    assert head.verdict == "fail" and head.options.confirmation is None
