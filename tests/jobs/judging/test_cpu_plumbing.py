"""CPU timings prove the plumbing only (issue 18, item 1): a CPU run's regression is shown,
labelled, and does not fail its gate unless ``KW_CPU_TIMING_GATES`` asks; a wrong kernel
found on the CPU fails it as anywhere."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings, get_settings
from kernelwatch.db.models import Run
from kernelwatch.db.store import get_or_create_repository, store_record, upsert_commit
from kernelwatch.jobs.github.render import format_gate, render_comment
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import CommitVerdict, class_verdict
from kernelwatch.kernels.record import ResultRecord


def _record(kernel: str, status: str, verdict: str, ratio: float) -> dict[str, Any]:
    t = 1e-3 * ratio
    return {
        "schema": 1,
        "suite": "basic",
        "case_id": f"case-{kernel}",
        "kernel": kernel,
        "backend": "lib",
        "params": {},
        "status": status,
        "timing": {
            **{"unit": "s", "ci_low": t, "ci_high": t, "median": t, "n": 8, "samples": [t] * 8},
            **{"cold_l2": True, "cuda_graph": False, "stop_reason": "paired", "timer": "cpu"},
        },
        "device": {"reliable": True},
        "error": "" if status == "pass" else "max error 3.1e-02 > bound 1.0e-03 " + "x" * 120,
        "paired": {
            "verdict": verdict,
            "ratio": ratio,
            "ci_low": ratio * 0.98,
            "ci_high": ratio * 1.02,
            "min_effect": 0.01,
            "baseline_median": 1e-3,
            "groups": 16,
        },
    }


def stored_run(session: Session, device_class: str, *records: dict[str, Any]) -> Run:
    """A finished paired run of c…c (baseline b…b) on ``device_class``, its records stored."""
    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, "c" * 40, [])
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=["basic"],
        status="succeeded",
        baseline_sha="b" * 40,
        device_class=device_class,
        options={"paired": True},
    )
    session.add(run)
    session.flush()
    for rec in records:
        store_record(session, run, ResultRecord.from_dict(rec))
    session.flush()
    session.expire(run)
    return run


def _cpu_run(session: Session, *records: dict[str, Any]) -> Run:
    return stored_run(session, "cpu", *records)


@pytest.fixture
def new_user_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default a new user has: CPU timings do not gate (the suite's conftest sets it)."""
    monkeypatch.delenv("KW_CPU_TIMING_GATES", raising=False)
    get_settings.cache_clear()


@pytest.mark.usefixtures("new_user_settings")
def test_a_cpu_regression_is_shown_as_plumbing_only_and_does_not_fail(session: Session) -> None:
    run = _cpu_run(session, _record("softmax", "pass", "regression", 1.5))
    assert analyze(session, run, Settings(cpu_timing_gates=False))
    assert run.verdict == "pass"
    cv = class_verdict(session, run)
    assert cv.state == "success" and cv.counts["regression"] == 1
    assert cv.description == "1 slower on CPU (CPU timings: plumbing only)"
    verdict = CommitVerdict("o/lib", "c" * 40, (cv,))
    assert "slower on CPU (plumbing only)" in format_gate(verdict)
    comment = render_comment(verdict, dashboard_url="http://x")
    assert "slower on CPU (plumbing only)" in comment and "1.500×" in comment
    assert "on the same CPU (paired A/B)" in comment and "same GPU" not in comment
    assert "CPU: plumbing only" in format_run(run_summary(session, run))


def test_the_setting_lets_cpu_timings_gate(session: Session) -> None:
    run = _cpu_run(session, _record("softmax", "pass", "regression", 1.5))
    assert analyze(session, run, Settings(cpu_timing_gates=True))
    cv = class_verdict(session, run)
    assert run.verdict == "fail" and cv.state == "failure"
    # KW_CPU_TIMING_GATES=1 (the suite's conftest): reported with full authority
    assert cv.description == "1 regression"
    assert "plumbing only" not in format_gate(CommitVerdict("o/lib", "c" * 40, (cv,)))


@pytest.mark.parametrize("gates", [False, True])
def test_a_wrong_kernel_on_the_cpu_fails_whatever_the_setting(
    session: Session, gates: bool
) -> None:
    run = _cpu_run(
        session,
        _record("softmax", "pass", "regression", 1.5),
        _record("rmsnorm", "fail", "broken", 1.0),
    )
    assert analyze(session, run, Settings(cpu_timing_gates=gates))
    assert run.verdict == "fail"
    table = format_gate(CommitVerdict("o/lib", "c" * 40, (class_verdict(session, run),)))
    # the whole error, wrapped under its case, not cut at 60 characters
    assert "x" * 90 in table.replace("\n", "").replace(" ", "")
    assert all(len(line) <= 110 for line in table.splitlines())


@pytest.mark.parametrize("judged_gates", [False, True])
def test_the_labels_follow_the_setting_the_run_was_judged_with(
    session: Session, monkeypatch: pytest.MonkeyPatch, judged_gates: bool
) -> None:
    """A worker judged with one ``KW_CPU_TIMING_GATES``, ``gate`` and ``show`` read with the
    other: the label beside the verdict said the opposite of it ("FAIL" over a row
    "slower on CPU (plumbing only)", "PASS" over a bare "regression")."""
    run = _cpu_run(session, _record("softmax", "pass", "regression", 1.5))
    assert analyze(session, run, Settings(cpu_timing_gates=judged_gates))
    monkeypatch.setenv("KW_CPU_TIMING_GATES", "0" if judged_gates else "1")  # the reader's
    get_settings.cache_clear()
    cv = class_verdict(session, run)
    assert cv.state == ("failure" if judged_gates else "success")
    verdict = CommitVerdict("o/lib", "c" * 40, (cv,))
    shown = format_gate(verdict), render_comment(verdict, dashboard_url="http://x")
    run_text = format_run(run_summary(session, run))
    if judged_gates:
        assert not any("plumbing only" in text for text in (*shown, run_text))
    else:
        assert all("slower on CPU (plumbing only)" in text for text in shown)
        assert "CPU: plumbing only" in run_text
    get_settings.cache_clear()
