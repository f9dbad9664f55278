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
from kernelwatch.kernels.verdict import NOTE_UNMEASURED, CaseVerdict, judge_case

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


def test_a_case_the_budget_left_unmeasured_is_inconclusive_not_skipped() -> None:
    j = judge_case("skip", None, paired=True, measured=CaseVerdict.INCONCLUSIVE)
    assert j.verdict == CaseVerdict.INCONCLUSIVE and j.detail == NOTE_UNMEASURED
    # a case the library cannot run stays a skip without a verdict
    assert judge_case("skip", None, paired=True, measured=None).verdict is None


@pytest.fixture
def priced_run(session: Session) -> Run:
    repo = Repository(name="acme/priced", source="https://example.com/acme/priced.git")
    session.add(repo)
    session.flush()
    commit = Commit(repository_id=repo.id, sha=SHA, message="head")
    session.add(commit)
    session.flush()
    run = Run(repository_id=repo.id, commit_id=commit.id, status="succeeded", verdict="pass",
              device_class="h200", suites=["basic"], trigger="pull_request",
              options={"paired": True})  # fmt: skip
    session.add(run)
    session.flush()
    for i, (verdict, status, gpu_s) in enumerate(
        [("unchanged", "pass", 1.6), ("unchanged", "pass", 1.4), ("inconclusive", "skip", 0.0)]
    ):
        case = Case(id=f"c{i}", suite="basic", kernel="softmax", backend="kern",
                    params={"rows": i}, label=f"rows={i}")  # fmt: skip
        session.add(case)
        session.flush()
        session.add(Result(run_id=run.id, case_id=case.id, status=status, verdict=verdict,
                           record=_record(verdict, gpu_s, status)))  # fmt: skip
    session.commit()
    return run


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
