"""One answer per commit (issue 23): partial runs, bisection steps and re-runs never rewrite it.

The scenario of the issue, on the judging path with real analysis: a 4-commit library
(c2 docs only, c3 rmsnorm 2x slower, c4 softmax wrong), measured by a manual range run,
then by a partial manual run, the dashboard's Reproduce command, and a bisection's steps.
Each numbered problem of the issue has its test here; each failed on main d9ce479.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.dashboard import compare_stats, queries
from kernelwatch.dashboard.page_regressions import kind_label
from kernelwatch.db.config import Settings, get_settings
from kernelwatch.db.models import (
    Case,
    Regression,
    RegressionEvidence,
    Repository,
    Result,
    Run,
)
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.github.render import format_gate, render_comment
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_briefs, format_run, run_brief, run_summary
from kernelwatch.jobs.judging.verdicts import commit_verdict, runs_of_commit
from kernelwatch.kernels.verdict import NOTE_BASELINE_BROKEN, CaseVerdict, judge_case

SHAS = {n: str(n) * 40 for n in (1, 2, 3, 4)}
CASES = {"softmax": "c-softmax", "rmsnorm": "c-rmsnorm", "layernorm": "c-layernorm",
         "swiglu": "c-swiglu"}  # fmt: skip
# medians per commit: c3 makes rmsnorm 2x slower, c4 makes softmax wrong
TIMES = {
    n: {"softmax": 1.0e-4, "rmsnorm": 2.0e-4 if n < 3 else 4.0e-4, "layernorm": 3.0e-4,
        "swiglu": 5.0e-4}
    for n in (1, 2, 3, 4)
}  # fmt: skip


def _samples(median: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, 0.002)) for _ in range(24)]


def _repo(session: Session) -> Repository:
    repo = get_or_create_repository(session, "tinykern", "/src/tinykern")
    for n, sha in SHAS.items():
        upsert_commit(session, repo, sha, [SHAS[n - 1]] if n > 1 else [], f"c{n}", generation=n)
    for kernel, cid in CASES.items():
        if session.get(Case, cid) is None:
            session.add(Case(id=cid, suite="basic", kernel=kernel, backend="lib", params={},
                             label="rows=4096"))  # fmt: skip
    session.flush()
    return repo


def _run(
    session: Session,
    n: int,
    kernels: tuple[str, ...] = ("softmax", "rmsnorm"),
    *,
    trigger: str = "manual",
    baseline: int | None = None,
    paired: dict[str, tuple[str, float, float, float]] | None = None,
    device_class: str = "h200",
    **options: Any,
) -> Run:
    """A finished run of commit ``n`` that measured ``kernels`` (unpaired, with samples), or
    with ``paired``: kernel → (verdict, ratio, low, high) as a paired record judged it."""
    repo = _repo(session)
    commit = upsert_commit(session, repo, SHAS[n], [])
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=["basic"],
        trigger=trigger,
        status="succeeded",
        device_class=device_class,
        baseline_sha=SHAS[baseline] if baseline else None,
        options={**options, **({"paired": True} if paired else {})},
    )
    session.add(run)
    session.flush()
    for kernel in paired or kernels:
        broken = kernel == "softmax" and n >= 4
        record: dict[str, Any] = {"suite": "basic", "kernel": kernel}
        if paired:
            verdict, ratio, low, high = paired[kernel]
            record["paired"] = {"verdict": verdict, "ratio": ratio, "ci_low": low,
                                "ci_high": high, "min_effect": 0.01, "groups": 8}  # fmt: skip
        median = TIMES[n][kernel]
        session.add(
            Result(
                run_id=run.id,
                case_id=CASES[kernel],
                status="fail" if broken else "pass",
                median_s=median,
                samples=_samples(median, run.id * 10 + len(kernel)),
                error="rel L2 0.406 > bound" if broken else "",
                record=record,
            )
        )
    session.flush()
    session.expire(run)
    assert analyze(session, run, Settings())
    session.flush()
    return run


def _gate(session: Session, n: int) -> Any:
    repo = _repo(session)
    return commit_verdict(session, "tinykern", SHAS[n], runs_of_commit(session, [repo.id], SHAS[n]))


# ------------------------------------------------------------------ 1. partial runs


def test_a_partial_manual_run_adds_its_cases_and_never_flips_the_gate(session: Session) -> None:
    _run(session, 3)
    full = _run(session, 4, baseline=3)  # softmax broken: FAIL
    assert _gate(session, 4).overall == "fail"
    partial = _run(session, 4, ("rmsnorm",), baseline=3)  # `run --commit c4 --kernel rmsnorm`
    assert partial.verdict == "pass"
    verdict = _gate(session, 4)
    assert verdict.overall == "fail"  # main d9ce479: PASS (the newest run won)
    (cls,) = verdict.classes
    assert set(cls.runs) == {full.id, partial.id}  # rmsnorm refreshed by the partial run
    moved = {m.kernel: m for m in cls.moved}
    assert moved["softmax"].run_id == full.id and moved["softmax"].verdict == "broken"
    text = format_gate(verdict)
    assert f"{full.id:>6}  softmax" in text  # the gate text names the source run of each case
    assert f"cases from runs {full.id}, {partial.id}" in text


def test_a_manual_run_never_overrides_a_push_run(session: Session) -> None:
    _run(session, 3)
    push = _run(session, 4, baseline=3, trigger="push")
    _run(session, 4, ("softmax",), baseline=3)  # a newer manual re-run of the broken case
    cls = _gate(session, 4).classes[0]
    assert {m.kernel: m.run_id for m in cls.moved}["softmax"] == push.id


def test_bisection_steps_and_confirmations_never_change_a_commits_gate(session: Session) -> None:
    _run(session, 2)
    _run(session, 3, baseline=2)  # rmsnorm 2x slower: FAIL
    step = {"rmsnorm": ("unchanged", 1.0, 0.99, 1.01), "softmax": ("unchanged", 1.0, 0.99, 1.01)}
    _run(session, 3, baseline=1, paired=step, bisection_id=7)  # newer, "unchanged"
    assert _gate(session, 3).overall == "fail"
    # a commit only a bisection measured has no gate answer
    _run(session, 1, baseline=2, paired=step, bisection_id=7)
    assert _gate(session, 1).overall == "none"


# ------------------------------------------------------------------ 2. Reproduce


def test_each_case_is_compared_with_a_baseline_run_that_measured_it(session: Session) -> None:
    full = _run(session, 2)
    # the newest run of c2 is a bisection step that measured softmax only
    _run(session, 2, baseline=1, paired={"softmax": ("unchanged", 1.0, 0.99, 1.01)},
         bisection_id=9)  # fmt: skip
    repro = _run(session, 3, ("rmsnorm",), baseline=2)  # the Reproduce command of c3
    (result,) = repro.results
    assert result.verdict == "regression" and result.ratio is not None  # main: "new", ratio -
    assert 1.9 < result.ratio < 2.1
    base = session.get(Result, result.baseline_result_id)
    assert base is not None and base.run_id == full.id
    assert repro.baseline_run_id == full.id


def test_the_runs_baseline_is_the_run_its_own_cases_were_compared_with(
    session: Session,
) -> None:
    # the baseline commit's whole suite on one card, then a subset again (the later run
    # wins each case it measured): the run's baseline is the subset's, not the run that
    # measured more cases that this run never ran
    _run(session, 2, ("softmax", "rmsnorm", "layernorm", "swiglu"))
    subset = _run(session, 2, ("softmax",))
    run = _run(session, 3, ("softmax",), baseline=2)
    (result,) = run.results
    base = session.get(Result, result.baseline_result_id)
    assert base is not None and base.run_id == subset.id
    assert run.baseline_run_id == subset.id


def test_a_case_no_baseline_run_measured_says_so_in_words(session: Session) -> None:
    _run(session, 2, ("softmax",))
    run = _run(session, 3, ("rmsnorm",), baseline=2)
    brief = run_brief(session, run)
    (case,) = brief["cases"]
    assert case["verdict"] is None
    assert f"no run of the baseline {SHAS[2][:12]} measured this case" in case["note"]


# ------------------------------------------------------------------ 3. one row per problem


def test_reruns_steps_and_confirmations_are_evidence_of_one_problem(session: Session) -> None:
    _run(session, 1)
    _run(session, 2, baseline=1)
    first = _run(session, 3, baseline=2)  # rmsnorm slower: a problem
    _run(session, 3, baseline=2)  # a manual re-run
    _run(session, 3, ("rmsnorm",), baseline=2)  # the Reproduce command
    slow = {"rmsnorm": ("regression", 2.0, 1.98, 2.02)}
    _run(session, 3, baseline=1, paired=slow, bisection_id=3)  # a bisection step c1..c3
    _run(session, 3, baseline=2, paired=slow, bisection_id=3)  # its confirmation c2..c3
    _run(session, 4, baseline=3)  # softmax broken
    _run(session, 4, ("softmax",), baseline=3)  # and again
    rows = session.scalars(select(Regression).order_by(Regression.id)).all()
    assert [(r.kind, r.case_id) for r in rows] == [
        ("regression", "c-rmsnorm"),
        ("broken", "c-softmax"),
    ]  # main d9ce479: a row per run (rmsnorm four times, softmax three)
    rms = rows[0]
    assert rms.run_id == first.id and (rms.good_sha, rms.bad_sha) == (SHAS[2], SHAS[3])
    sources = session.scalars(
        select(RegressionEvidence.source).where(RegressionEvidence.regression_id == rms.id)
    ).all()
    assert sorted(sources) == ["bisection", "bisection", "manual", "manual", "manual"]


def test_a_bisection_step_alone_opens_no_problem(session: Session) -> None:
    slow = {"rmsnorm": ("regression", 2.0, 1.98, 2.02)}
    _run(session, 3, baseline=1, paired=slow, bisection_id=3)
    assert session.scalars(select(Regression)).all() == []


def test_cpu_timing_rows_say_plumbing_only(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KW_CPU_TIMING_GATES")
    get_settings.cache_clear()
    _run(session, 2, device_class="cpu")
    run = _run(session, 3, baseline=2, device_class="cpu")
    reg = session.scalars(select(Regression)).one()
    assert reg.device_class == "cpu"
    session.commit()
    df = queries.regressions(session.get_bind(), ("open",))  # type: ignore[arg-type]
    row = df.iloc[0].to_dict()
    assert row["plumbing_only"] and "plumbing only" in kind_label(row)
    brief = run_brief(session, run)
    text = format_briefs([brief])
    assert "slower on CPU (plumbing only)" in text


# ------------------------------------------------------------------ 4. run --wait summary


def test_the_closing_summary_names_moved_cases_with_ratio_and_interval(session: Session) -> None:
    _run(session, 2)
    slow = _run(session, 3, baseline=2)
    broken = _run(session, 4, baseline=3)
    text = format_briefs([run_brief(session, slow), run_brief(session, broken)])
    line = next(line for line in text.splitlines() if "rmsnorm" in line)
    assert "regression" in line and "× [" in line and "(+" in line  # ratio, interval, change
    assert "broken" in text and "rel L2 0.406" in text
    brief = run_brief(session, slow)
    assert [m["kernel"] for m in brief["moved"]] == ["rmsnorm"]
    assert brief["moved"][0]["interval"][0] > 1.9


# ------------------------------------------------------------------ 8. one judgement


def test_a_failed_baseline_has_one_answer_everywhere(session: Session) -> None:
    # the analysis: c4 broke softmax; c5 (as c4 + 1) fixes it
    _run(session, 3)
    broken = _run(session, 4, baseline=3)
    fixed = Run(
        repository_id=broken.repository_id,
        commit_id=broken.commit_id,
        suites=["basic"],
        status="succeeded",
        device_class="h200",
        baseline_sha=SHAS[4],
        trigger="manual",
    )
    session.add(fixed)
    session.flush()
    session.add(Result(run_id=fixed.id, case_id="c-softmax", status="pass", median_s=1e-4,
                       samples=_samples(1e-4, 5), record={}))  # fmt: skip
    session.flush()
    session.expire(fixed)
    assert analyze(session, fixed, Settings())
    (result,) = fixed.results
    expected = judge_case("pass", "fail")
    assert expected.verdict == CaseVerdict.UNCHANGED and expected.detail == NOTE_BASELINE_BROKEN
    assert result.verdict == expected.verdict  # main: None (analysis), inconclusive (Compare)
    assert compare_stats.verdict("fail", "pass", 1.0, 0.99, 1.01, 0.01) == expected.verdict
    assert run_brief(session, fixed)["cases"][0]["note"] == NOTE_BASELINE_BROKEN


# ------------------------------------------------------------------ 5. one policy


def test_the_composed_answer_follows_the_judging_workers_settings_not_the_readers(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker judging with KW_INCONCLUSIVE_POLICY=fail; the gate, show and the API read
    # the answer in processes of their own, whose settings may differ (an audit found
    # the gate saying PASS for a run that show and run --wait called neutral)
    run = _run(session, 3, paired={"softmax": ("inconclusive", 1.004, 0.995, 1.013)})
    assert analyze(session, run, Settings(inconclusive_policy="fail"))
    session.flush()
    assert run.verdict == "fail"
    assert run.options.judged_with is not None
    assert run.options.judged_with.inconclusive_policy == "fail"
    monkeypatch.setenv("KW_INCONCLUSIVE_POLICY", "pass")  # the reader's own
    get_settings.cache_clear()
    assert _gate(session, 3).overall == "fail"
    (cls,) = _gate(session, 3).classes
    assert cls.run_verdict == "fail"


def test_a_run_that_measured_nothing_is_never_green_unless_nothing_applied(
    session: Session,
) -> None:
    """A gate run whose suites selected no case (a ``--case`` that matches nothing, a change
    that made a suite list nothing) read ``success: no cases measured``: a green check for
    a commit nothing had looked at. Only a run whose cases all skipped (none applies on
    the class, FA3 on an A100) is a quiet success."""
    _run(session, 1)
    empty = _run(session, 2, (), baseline=1, trigger="push")
    assert empty.verdict == "neutral"
    verdict = _gate(session, 2)
    (cls,) = verdict.classes
    assert (verdict.overall, cls.state) == ("neutral", "neutral")
    assert cls.description == "no cases measured: the suites selected none"
    comment = render_comment(verdict, dashboard_url="http://x")
    assert "### kernelwatch: ⚪ neutral: no cases measured: the suites selected none" in comment
    # ``show`` of that run says it too, with what selected (it printed no case and no reason)
    empty.options = empty.options.with_(bench_args=["--case", "zzz*"])
    shown = format_run(run_summary(session, empty))
    assert "no cases measured: the suites selected none (its selection: --case zzz*)" in shown

    skipped = _run(session, 3, (), baseline=2, trigger="push", device_class="a100")
    session.add(Result(run_id=skipped.id, case_id=CASES["rmsnorm"], status="skip",
                       error="needs sm90", record={}))  # fmt: skip
    session.flush()
    session.expire(skipped)
    (cls,) = _gate(session, 3).classes
    assert cls.state == "success"
    assert cls.description == "no cases measured: 1 skipped, none applies on a100"
