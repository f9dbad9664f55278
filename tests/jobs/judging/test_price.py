"""A pull request's price (issue 25): coverage and GPU seconds, and a spent GPU budget.

A paired record carries the GPU seconds its case held the card (``paired.gpu_s``); a case
the run's GPU budget left unmeasured is ``skip`` with an ``inconclusive`` verdict. Its
class must then be neutral, never a pass that skipped what it could not afford, and the
gate table, the PR comment and ``show`` say how many cases were decided and what the run
cost.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Commit, Repository, Result, Run
from kernelwatch.jobs.github.render import format_gate, render_comment
from kernelwatch.jobs.github.reporter import status_text
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import commit_verdict, runs_of_commit
from kernelwatch.kernels.record import Price, price_of
from kernelwatch.kernels.verdict import NOTE_UNMEASURED, NOTE_UNREACHED, CaseVerdict, judge_case

SHA = "d" * 40


def _record(verdict: str | None, gpu_s: float | None, status: str = "pass") -> dict[str, Any]:
    paired: dict[str, Any] = {"verdict": verdict}
    if gpu_s is not None:
        paired["gpu_s"] = gpu_s
    return {"status": status, "paired": paired}


def test_the_price_counts_decided_and_neutral_cases_and_their_gpu_seconds() -> None:
    records = [
        _record("unchanged", 1.5),
        _record("regression", 9.0),
        _record("inconclusive", 30.0),
        _record("inconclusive", 0.0, status="skip"),  # left by the GPU budget
        _record(None, None, status="skip"),  # a case the library lacks: not counted
        {"status": "pass", "timing": {}},  # unpaired: not counted
    ]
    price = price_of(records)
    assert price == Price(cases=4, undecided=2, unmeasured=1, gpu_s=40.5)
    assert price.decided == 2
    assert price.text() == (
        "2 of 4 cases decided, 2 neutral (1 not measured: GPU budget spent); "
        "GPU time 40.5 s (10.1 s a case)"
    )
    assert Price().text() == ""
    # on the CPU class no GPU was held: the time is the CPU's (a first-hour review)
    assert price.text("cpu").endswith("CPU time 40.5 s (10.1 s a case)")


def _unpaired(status: str, wall_s: float | None) -> dict[str, Any]:
    """An unpaired record as the runner writes it: its case's seconds in ``cost``."""
    cost = {"check_call_s": 0.25, "wall_s": wall_s} if wall_s is not None else {}
    return {"status": status, "cost": cost}


def test_an_unpaired_runs_price_counts_its_measured_cases_and_their_wall_seconds() -> None:
    """An unpaired record has no ``paired.gpu_s``; the runner's ``cost.wall_s`` prices it."""
    records = [
        _unpaired("pass", 1.5),
        _unpaired("fail", 0.5),  # checked, wrong, never timed: it held the card all the same
        _unpaired("error", 2.0),
        _unpaired("skip", 0.1),  # the library cannot run it: not counted (as a paired skip)
        _unpaired("pass", None),  # an older record: nothing to count
        {"status": "error"},  # the worker's crash record
        None,
    ]
    price = price_of(records)
    assert price == Price(measured=3, measured_s=4.0)
    assert price.cases == 0 and price.counted == 3
    assert price.text() == "3 cases measured; GPU time 4.0 s (1.3 s a case)"
    assert price.text("cpu") == "3 cases measured; CPU time 4.0 s (1.3 s a case)"
    minutes = price_of([_unpaired("pass", 1.25)] * 204)
    assert minutes.text("h100") == "204 cases measured; GPU time 4.2 min (1.2 s a case)"
    assert (
        price_of([_unpaired("pass", 0.5)]).text()
        == "1 case measured; GPU time 0.5 s (0.5 s a case)"
    )
    # a class whose answer drew on a paired and an unpaired run: both, each its own part
    both = price_of([_record("unchanged", 3.0), _unpaired("pass", 1.0), _unpaired("pass", 2.0)])
    assert both == Price(cases=1, gpu_s=3.0, measured=2, measured_s=3.0)
    assert both.text() == (
        "1 of 1 cases decided; GPU time 3.0 s (3.0 s a case); "
        "2 unpaired cases measured; GPU time 3.0 s (1.5 s a case)"
    )


def test_the_cases_a_suite_timeout_left_are_counted_apart() -> None:
    """FlashInfer 0.6.0's suite on the H200 (2026-12-05) ran 156 of 204 cases before its
    timeout: the price says how many were not reached, beside what was measured."""
    left = {"status": "skip", "error": f"{NOTE_UNREACHED} after 422s", "cost": {"wall_s": 9}}
    price = price_of([_unpaired("pass", 1.0), _unpaired("error", 2.0), left, left])
    assert price == Price(measured=2, measured_s=3.0, unreached=2)
    assert price.counted == 4
    assert price.text() == (
        "2 cases measured; GPU time 3.0 s (1.5 s a case); 2 not reached: suite timed out"
    )
    # a skip for any other reason stays uncounted, and nothing but a skip is unreached
    other = {"status": "skip", "error": "the library has no such kernel"}
    said = {"status": "pass", "error": NOTE_UNREACHED, "cost": {"wall_s": 1.0}}
    assert price_of([other, said]) == Price(measured=1, measured_s=1.0)
    assert price_of([left]).text() == "1 not reached: suite timed out"


def test_forged_seconds_are_not_counted() -> None:
    """Records are written inside the sandbox: a kernel could write any number there."""
    forged = [_unpaired("pass", s) for s in (-3.0, float("nan"), float("inf"), True)]
    assert price_of([*forged, _unpaired("pass", 2.0)]) == Price(measured=1, measured_s=2.0)
    paired = [_record("unchanged", s) for s in (-1.0, float("inf"))]
    assert price_of(paired) == Price(cases=2, gpu_s=0.0)


def test_a_case_the_budget_left_unmeasured_is_inconclusive_not_skipped() -> None:
    j = judge_case("skip", None, paired=True, measured=CaseVerdict.INCONCLUSIVE)
    assert j.verdict == CaseVerdict.INCONCLUSIVE and j.detail == NOTE_UNMEASURED
    # a case the library cannot run stays a skip without a verdict
    assert judge_case("skip", None, paired=True, measured=None).verdict is None


def _stored_run(
    session: Session, name: str, device_class: str, paired: bool,
    results: list[tuple[str, str | None, dict[str, Any]]],
) -> Run:  # fmt: skip
    """A succeeded run of ``SHA`` in a repository of its own, a softmax case a result
    (status, verdict, record)."""
    repo = Repository(name=name, source=f"https://example.com/{name}.git")
    session.add(repo)
    session.flush()
    commit = Commit(repository_id=repo.id, sha=SHA, message="head")
    session.add(commit)
    session.flush()
    run = Run(repository_id=repo.id, commit_id=commit.id, status="succeeded", verdict="pass",
              device_class=device_class, suites=["basic"], trigger="pull_request",
              options={"paired": paired})  # fmt: skip
    session.add(run)
    session.flush()
    for i, (status, verdict, record) in enumerate(results):
        case = Case(id=f"{name}-{i}", suite="basic", kernel="softmax", backend="kern",
                    params={"rows": i}, label=f"rows={i}")  # fmt: skip
        session.add(case)
        session.flush()
        session.add(Result(run_id=run.id, case_id=case.id, status=status, verdict=verdict,
                           record=record))  # fmt: skip
    session.commit()
    return run


@pytest.fixture
def priced_run(session: Session) -> Run:
    cases = [("unchanged", "pass", 1.6), ("unchanged", "pass", 1.4), ("inconclusive", "skip", 0.0)]
    results = [(status, v, _record(v, gpu_s, status)) for v, status, gpu_s in cases]
    return _stored_run(session, "acme/priced", "h200", True, results)


def test_an_unmeasured_case_makes_the_class_neutral_and_the_price_is_shown(
    session: Session, priced_run: Run
) -> None:
    verdict = commit_verdict(
        session, "acme/priced", SHA, runs_of_commit(session, [priced_run.repository_id], SHA)
    )
    (cls,) = verdict.classes
    assert cls.state == "neutral", cls.description
    assert cls.price == Price(cases=3, undecided=1, unmeasured=1, gpu_s=3.0)
    text = cls.price.text()
    assert "2 of 3 cases decided, 1 neutral (1 not measured: GPU budget spent)" in text
    assert text in format_gate(verdict)
    assert text in render_comment(verdict, dashboard_url="https://kw.example.com")
    shown = format_run(run_summary(session, priced_run))
    assert f"paired: {text}" in shown
    # the state is said once ("neutral: 1 inconclusive", not "neutral: neutral: ...")
    assert f"the commit's answer on h200: neutral: {cls.description} (from this run)" in shown
    assert "neutral: neutral" not in shown
    assert not cls.description.startswith("neutral")  # the state is beside it everywhere
    assert "neutral | neutral" not in render_comment(verdict, dashboard_url="https://x")
    assert status_text(cls).startswith("neutral: ")  # ... but in a commit status


@pytest.fixture
def measured_run(session: Session) -> Run:
    """An unpaired run of a commit with no baseline: three cases, each with its wall time."""
    cases = [("pass", 1.2), ("pass", 1.3), ("fail", 0.5)]
    results = [(status, None, _unpaired(status, wall_s)) for status, wall_s in cases]
    return _stored_run(session, "acme/measured", "h100", False, results)


def test_an_unpaired_runs_gpu_time_is_shown_where_a_paired_runs_is(
    session: Session, measured_run: Run
) -> None:
    """``show``, the gate table and the PR comment print an unpaired run's price too: the
    cases it measured and the GPU seconds they held the card (``ResultRecord.cost``)."""
    verdict = commit_verdict(
        session, "acme/measured", SHA, runs_of_commit(session, [measured_run.repository_id], SHA)
    )
    (cls,) = verdict.classes
    assert not cls.paired
    assert cls.price == Price(measured=3, measured_s=3.0)
    text = cls.price.text(cls.device_class)
    assert text == "3 cases measured; GPU time 3.0 s (1.0 s a case)"
    assert f"  h100: {text}" in format_gate(verdict).splitlines()
    assert f"`h100`: {text}." in render_comment(verdict, dashboard_url="https://kw.example.com")
    summary = run_summary(session, measured_run)
    assert summary["price"]["measured"] == 3 and summary["price"]["text"] == text
    assert f"  unpaired: {text}" in format_run(summary).splitlines()
