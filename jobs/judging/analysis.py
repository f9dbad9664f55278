"""Judging a run against its baseline: per-case verdicts, regressions, the run's verdict.

A case that failed its correctness check is ``broken`` whatever its speed, and a
broken or errored baseline case is never compared with. A case measured under
throttling (``reliable`` false) can be ``inconclusive`` at worst, never a
regression. Every verdict comes from the one rule (``kernels/verdict.py``), and so
does the run's: an inconclusive case makes it ``neutral`` unless
``KW_INCONCLUSIVE_POLICY`` says otherwise. Runs whose baseline has not finished yet
stay unjudged until it has;
``analyze_ready`` is called whenever any run finishes.
"""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Regression, Result, Run
from kernelwatch.db.store import latest_run_for
from kernelwatch.jobs.judging import bisect_trigger, history
from kernelwatch.jobs.judging.comparison import compare
from kernelwatch.jobs.library.repoconfig import Thresholds
from kernelwatch.kernels.record import PairedSection, paired_section
from kernelwatch.kernels.verdict import (
    TIMING,
    CaseVerdict,
    RunVerdict,
    decide,
    is_verdict,
    run_verdict,
)


def analyze_ready(session: Session, run: Run, settings: Settings) -> list[Run]:
    """Judge ``run`` and every finished run that was waiting for it as a baseline."""
    judged = []
    if analyze(session, run, settings):
        judged.append(run)
        for step in history.scan_run(session, run, run_thresholds(run, settings).default):
            bisect_trigger.on_change_point(session, step)  # a step over several commits
    if run.commit is not None:
        waiting = session.scalars(
            select(Run).where(
                Run.repository_id == run.repository_id,
                Run.baseline_sha == run.commit.sha,
                Run.verdict.is_(None),
                Run.status == "succeeded",
                Run.device_class == run.device_class,
            )
        )
        for other in waiting:
            if other.id != run.id and analyze(session, other, settings):
                judged.append(other)
    for each in judged:  # a blocking verdict over several commits asks for a bisection
        bisect_trigger.on_judged(session, each)
    return judged


def analyze(session: Session, run: Run, settings: Settings) -> bool:
    """Fill verdicts of ``run``; False if it must wait for its baseline."""
    if run.status != "succeeded":
        run.verdict = RunVerdict.ERROR
        return True
    policy = settings.inconclusive_policy
    if run.options.paired:
        return _analyze_paired(session, run, run_thresholds(run, settings), settings)
    baseline = _baseline_run(session, run)
    if baseline is not None and baseline.status not in FINAL_STATES:
        return False
    thresholds = run_thresholds(run, settings)
    confidence = run.options.confidence
    confidence = settings.confidence if confidence is None else confidence
    base_results: dict[str, Result] = {}
    if baseline is not None and baseline.status == "succeeded":
        run.baseline_run_id = baseline.id
        base_results = {r.case_id: r for r in baseline.results}
    _clear_verdict_rows(session, run)
    verdicts = []
    for result in run.results:
        verdicts.append(
            _judge(
                session,
                run,
                result,
                base_results.get(result.case_id),
                _threshold_of(thresholds, result),
                confidence,
            )
        )
    run.verdict = run_verdict(gating_verdicts(run.device_class, verdicts, settings), policy)
    return True


def gating_verdicts(
    device_class: str, verdicts: list[CaseVerdict | None], settings: Settings
) -> list[CaseVerdict | None]:
    """The case verdicts that count for the run's verdict.

    On the CPU a timing verdict (regression, improvement, inconclusive) is plumbing only:
    a loaded shared machine moves CPU times by whole factors, so they never decide a
    gate unless ``KW_CPU_TIMING_GATES`` asks. Correctness and errors count everywhere.
    """
    if device_class != "cpu" or settings.cpu_timing_gates:
        return verdicts
    return [None if v in TIMING else v for v in verdicts]


def _judge(
    session: Session,
    run: Run,
    result: Result,
    base: Result | None,
    threshold: float,
    confidence: float,
) -> CaseVerdict | None:
    """The case's verdict (None: nothing to judge, e.g. skipped or new)."""
    result.ratio = result.ratio_ci_low = result.ratio_ci_high = result.p_value = None
    if result.status == "fail":
        result.verdict = CaseVerdict.BROKEN
        session.add(
            Regression(
                run_id=run.id,
                baseline_run_id=run.baseline_run_id,
                case_id=result.case_id,
                kind=CaseVerdict.BROKEN,
                detail=result.error or "correctness check failed",
            )
        )
        return CaseVerdict.BROKEN
    if result.status == "error":
        result.verdict = CaseVerdict.ERROR
        return CaseVerdict.ERROR
    if result.status != "pass":
        result.verdict = None
        return None
    if base is None or base.status != "pass" or len(base.samples) < 2 or len(result.samples) < 2:
        result.verdict = None  # new case, or nothing trustworthy to compare with
        return None
    # throttled measurements never make a regression (the rule's ``reliable``)
    cmp = compare(
        base.samples,
        result.samples,
        threshold,
        confidence,
        reliable=bool(result.reliable and base.reliable),
    )
    result.ratio, result.ratio_ci_low, result.ratio_ci_high = cmp.ratio, cmp.ci_low, cmp.ci_high
    result.p_value = cmp.p_slower if cmp.ratio >= 1 else cmp.p_faster
    verdict = cmp.verdict
    result.verdict = verdict
    if verdict == CaseVerdict.REGRESSION:
        session.add(
            Regression(
                run_id=run.id,
                baseline_run_id=run.baseline_run_id,
                case_id=result.case_id,
                kind=CaseVerdict.REGRESSION,
                ratio=cmp.ratio,
                ratio_ci_low=cmp.ci_low,
                ratio_ci_high=cmp.ci_high,
                p_value=cmp.p_slower,
                detail=f"{(cmp.ratio - 1) * 100:.1f}% slower "
                f"(interval {cmp.ci_low:.3f}–{cmp.ci_high:.3f}, p={cmp.p_slower:.2g})",
            )
        )
    return verdict


def _clear_verdict_rows(session: Session, run: Run) -> None:
    """Forget the run's pairwise verdict rows before judging again (history's stay)."""
    session.query(Regression).filter(
        Regression.run_id == run.id,
        Regression.kind.in_((CaseVerdict.REGRESSION, CaseVerdict.BROKEN)),
    ).delete(synchronize_session=False)


def run_thresholds(run: Run, settings: Settings) -> Thresholds:
    """The run's thresholds: per case pattern and per suite (``.kernelwatch.toml``), else
    the repository's, else the service default."""
    default = run.options.regression_threshold
    default = settings.regression_threshold if default is None else default
    return Thresholds.from_options(default, run.options.thresholds)


def _threshold_of(thresholds: Thresholds, result: Result) -> float:
    record = result.record or {}
    label = result.case.label if result.case is not None else ""
    return thresholds.for_case(str(record.get("suite", "")), str(record.get("kernel", "")), label)


def _analyze_paired(session: Session, run: Run, thresholds: Thresholds, settings: Settings) -> bool:
    """Verdicts measured in paired mode (``kernels/paired_suite.py``) are taken as they are.

    The interval there comes from baseline and candidate interleaved on one GPU;
    recomputing it from two separate sample sets would throw that pairing away.
    """
    policy = settings.inconclusive_policy
    _clear_verdict_rows(session, run)
    verdicts = [
        _judge_paired(session, run, result, _threshold_of(thresholds, result))
        for result in run.results
    ]
    run.verdict = run_verdict(gating_verdicts(run.device_class, verdicts, settings), policy)
    return True


def _judge_paired(
    session: Session, run: Run, result: Result, threshold: float
) -> CaseVerdict | None:
    """The measured verdict; judged again by the rule where the case's threshold differs
    from the one it was measured at, or where the measurement was throttled."""
    paired = paired_section(result.record) or PairedSection()
    if result.status == "skip":
        result.verdict = None
        return None
    verdict = (
        CaseVerdict(paired.verdict)
        if is_verdict(paired.verdict)
        else (CaseVerdict.BROKEN if result.status == "fail" else CaseVerdict.ERROR)
    )
    result.verdict = verdict
    result.ratio = _num(paired.ratio)
    result.ratio_ci_low = _num(paired.ci_low)
    result.ratio_ci_high = _num(paired.ci_high)
    result.p_value = None
    ratio, lo, hi = result.ratio, result.ratio_ci_low, result.ratio_ci_high
    measured_at = _num(paired.min_effect)
    rethreshold = measured_at is None or abs(measured_at - threshold) > 1e-12
    if (
        verdict in TIMING
        and ratio is not None
        and lo is not None
        and hi is not None
        and (rethreshold or not result.reliable)
    ):
        decision = decide(ratio, lo, hi, threshold, reliable=result.reliable)
        verdict = result.verdict = decision.verdict
    elif verdict == CaseVerdict.REGRESSION and not result.reliable:
        verdict = result.verdict = CaseVerdict.INCONCLUSIVE  # throttled: never a regression
    if verdict in (CaseVerdict.REGRESSION, CaseVerdict.BROKEN):
        ratio, lo, hi = result.ratio, result.ratio_ci_low, result.ratio_ci_high
        detail = (
            f"{(ratio - 1) * 100:.1f}% slower, paired on one GPU "
            f"(interval {lo:.3f}–{hi:.3f}, {paired.groups} groups)"
            if verdict == CaseVerdict.REGRESSION and ratio and lo and hi
            else result.error or "correctness check failed"
        )
        session.add(
            Regression(
                run_id=run.id,
                baseline_run_id=None,
                case_id=result.case_id,
                kind=verdict,
                ratio=result.ratio,
                ratio_ci_low=result.ratio_ci_low,
                ratio_ci_high=result.ratio_ci_high,
                detail=detail,
            )
        )
    return verdict


def _num(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _baseline_run(session: Session, run: Run) -> Run | None:
    if run.options.baseline_run_id:
        return session.get(Run, run.options.baseline_run_id)
    if not run.baseline_sha:
        return None
    return latest_run_for(
        session,
        run.repository_id,
        run.baseline_sha,
        run.device_class,
        list(run.suites),
        exclude_id=run.id,
    )
