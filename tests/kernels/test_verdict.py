"""The verdict vocabulary and the rule (``kernels/verdict.py``)."""

from __future__ import annotations

import math

import pytest

from kernelwatch.kernels.verdict import (
    BLOCKING,
    COMPARED,
    MIN_EFFECT,
    MOVED,
    CaseVerdict,
    InconclusivePolicy,
    RunVerdict,
    decide,
    judge_case,
    run_verdict,
)


def test_the_words_are_the_designs() -> None:
    assert {v.value for v in CaseVerdict} == {
        "regression",
        "less_accurate",
        "broken",
        "error",
        "inconclusive",
        "improvement",
        "unchanged",
    }
    assert {v.value for v in RunVerdict} == {"pass", "fail", "neutral", "error"}
    assert {v.value for v in BLOCKING} == {"regression", "less_accurate", "broken"}
    assert "inconclusive" in MOVED and "unchanged" not in MOVED
    assert "broken" not in COMPARED and "error" not in COMPARED
    assert MIN_EFFECT == 0.01


def test_a_change_at_the_threshold_is_flagged_when_the_interval_is_tight() -> None:
    # the old rule asked ratio >= 1.01: a true +1 % measured 1.009 was "unchanged"
    assert decide(1.009, 1.006, 1.012).verdict == "regression"
    assert decide(1.0 / 1.009, 1.0 / 1.012, 1.0 / 1.006).verdict == "improvement"


def test_a_significant_change_below_the_threshold_is_unchanged_with_its_size() -> None:
    d = decide(1.004, 1.002, 1.006)
    assert d.verdict == "unchanged" and not d.blocking
    assert d.shift == pytest.approx(0.004)
    assert "+0.4 %" in d.detail and "below the 1 % minimum effect" in d.detail
    assert decide(1.0, 0.996, 1.004).shift is None


def test_unchanged_needs_the_whole_interval_inside_the_threshold() -> None:
    assert decide(1.0, 0.991, 1.009).verdict == "unchanged"
    assert decide(1.0, 0.985, 1.015).verdict == "inconclusive"
    assert "±1.5 % is excluded" in decide(1.0, 0.985, 1.015).detail


def test_the_lower_bound_must_clear_the_margin_and_the_point_half_the_threshold() -> None:
    assert decide(1.006, 1.002, 1.010).verdict == "inconclusive"  # lo under 1 + d/4
    assert decide(1.0045, 1.003, 1.012).verdict == "inconclusive"  # point under 1 + d/2
    assert decide(1.006, 1.003, 1.012).verdict == "regression"


def test_a_throttled_measurement_never_makes_a_regression() -> None:
    d = decide(1.2, 1.1, 1.3, reliable=False)
    assert d.verdict == "inconclusive" and "throttled" in d.detail
    assert decide(0.8, 0.7, 0.9, reliable=False).verdict == "inconclusive"
    assert decide(1.0, 0.999, 1.001, reliable=False).verdict == "unchanged"


def test_no_interval_is_inconclusive() -> None:
    for args in ((math.nan, 1.0, 1.1), (1.1, 0.0, math.inf), (1.1, 1.2, 1.0)):
        assert decide(*args).verdict == "inconclusive"
    with pytest.raises(ValueError):
        decide(1.0, 0.9, 1.1, 0.0)


def test_run_verdict_and_the_inconclusive_policy() -> None:
    assert run_verdict(["unchanged", None, "improvement"]) == "pass"
    assert run_verdict([]) == "pass"
    assert run_verdict(["unchanged", "inconclusive"]) == "neutral"
    assert run_verdict(["inconclusive"], InconclusivePolicy.FAIL) == "fail"
    assert run_verdict(["inconclusive"], "pass") == "pass"
    for blocking in ("regression", "less_accurate", "broken"):
        assert run_verdict(["unchanged", "inconclusive", blocking]) == "fail"
    assert run_verdict(["regression", "error"]) == "error"
    with pytest.raises(ValueError):
        run_verdict(["skip"])


def test_the_change_an_interval_excludes() -> None:
    from kernelwatch.kernels.verdict import excluded_effect

    assert excluded_effect(0.963, 1.066) == pytest.approx(0.066)
    assert excluded_effect(0.95, 1.01) == pytest.approx(1 / 0.95 - 1)
    assert excluded_effect(1.01, 1.02) == pytest.approx(0.02)
    assert excluded_effect(math.nan, 1.0) is None


@pytest.mark.parametrize("measured", ["inconclusive", "unchanged", "improvement"])
def test_a_paired_case_judged_at_its_own_threshold_never_makes_an_unconfirmed_change(
    measured: str,
) -> None:
    # a run is measured at its smallest threshold; a case whose own threshold is looser
    # is judged again from the first stage's interval. A stage-1 regression that the
    # confirmation did not repeat (measured inconclusive) read a regression at 2 %:
    # a block on one stage (an audit, 2026-12-05)
    j = judge_case("pass", None, 1.03, 1.008, 1.05, 0.02, paired=True, measured=measured,
                   measured_at=0.01)  # fmt: skip
    assert j.verdict == CaseVerdict.INCONCLUSIVE and not j.blocking
    assert "not confirmed by the measurement's second stage" in j.detail
    # what both stages found stands where the looser threshold still sees it
    held = judge_case("pass", None, 1.03, 1.025, 1.035, 0.02, paired=True,
                      measured="regression", measured_at=0.01)  # fmt: skip
    assert held.verdict == CaseVerdict.REGRESSION
    # and a looser threshold can still call a confirmed small change unchanged
    small = judge_case("pass", None, 1.012, 1.006, 1.018, 0.02, paired=True,
                       measured="regression", measured_at=0.01)  # fmt: skip
    assert small.verdict == CaseVerdict.UNCHANGED
