"""A change that leaves a broken kernel as broken as it was is not blocked for it.

A docs-only pull request (or push) on a main whose softmax is broken read ``broken``
and failed its gate: every change failed until someone fixed the kernel, which is
"blocking an unchanged pull request". The candidate is judged against what its baseline
did on the same check: as wrong as before is ``unchanged`` (its record still says
``fail``); wrong in a new way, or worse beyond the accuracy margin, is ``broken``.
"""

from __future__ import annotations

import math

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.models import Run
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.kernels.verdict import (
    FAIL_STATUS,
    NOTE_STILL_BROKEN,
    PASS_STATUS,
    CaseVerdict,
    judge_case,
    still_broken,
)
from tests.jobs.judging.test_remeasure_rule import BASE, HEAD, SETTINGS, measured

ERRORS = {"rel_l2": 0.437, "max_abs": 3.1, "output_roundoff": 0.0078, "ref_max_abs": 7.0}


def test_the_rule() -> None:
    same = judge_case(FAIL_STATUS, FAIL_STATUS, errors=(ERRORS, dict(ERRORS)))
    assert (same.verdict, same.detail) == (CaseVerdict.UNCHANGED, NOTE_STILL_BROKEN)
    worse = {**ERRORS, "rel_l2": 0.437 * 1.6}
    assert judge_case(FAIL_STATUS, FAIL_STATUS, errors=(ERRORS, worse)).verdict == "broken"
    # a baseline that passed, or errors nobody recorded: the candidate broke it
    assert judge_case(FAIL_STATUS, PASS_STATUS, errors=(ERRORS, ERRORS)).verdict == "broken"
    assert judge_case(FAIL_STATUS, FAIL_STATUS).verdict == "broken"
    assert not still_broken({}, {})
    # not finite where the baseline was: broken in a new way
    assert not still_broken(ERRORS, {**ERRORS, "rel_l2": math.nan})
    assert still_broken({**ERRORS, "rel_l2": math.nan}, {**ERRORS, "rel_l2": math.nan})


def _failed(session: Session, run: Run, errors: dict[str, float | None]) -> None:
    """``run``'s softmax fails its check with ``errors`` (stored: NaN as null)."""
    (result,) = run.results
    result.status = FAIL_STATUS
    result.median_s = None
    result.record = {**result.record, "status": FAIL_STATUS,
                     "correctness": {"errors": errors, "bound": 0.02, "passed": False}}  # fmt: skip
    session.flush()


@pytest.mark.parametrize(
    ("candidate", "verdict", "run_verdict"),
    [
        (ERRORS, "unchanged", "pass"),  # as broken as its baseline: not this push's doing
        ({**ERRORS, "rel_l2": 0.9}, "broken", "fail"),  # the same bug, twice as wrong
        ({**ERRORS, "rel_l2": None}, "broken", "fail"),  # NaN now (stored as null)
    ],
)
def test_a_push_on_a_broken_main(
    session: Session, candidate: dict[str, float | None], verdict: str, run_verdict: str
) -> None:
    base = measured(session, BASE, 1.0e-4)
    _failed(session, base, dict(ERRORS))
    assert analyze(session, base, SETTINGS)
    head = measured(session, HEAD, 1.0e-4)
    _failed(session, head, candidate)
    assert analyze(session, head, SETTINGS)
    (result,) = head.results
    assert (result.verdict, head.verdict) == (verdict, run_verdict)
    if verdict == "unchanged":  # ``show`` says why a failed check is not a block
        assert NOTE_STILL_BROKEN in format_run(run_summary(session, head))
