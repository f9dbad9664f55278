"""Judging a run against its baseline: per-case verdicts, regressions, the run's verdict.

A case that failed its correctness check is ``broken`` whatever its speed, and a
broken or errored baseline case is never compared with. A case measured under
throttling (``reliable`` false) can be ``inconclusive`` at worst, never a
regression. Runs whose baseline has not finished yet stay unjudged until it has;
``analyze_ready`` is called whenever any run finishes.
"""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Regression, Result, Run
from kernelwatch.db.store import latest_run_for
from kernelwatch.jobs.judging import history
from kernelwatch.jobs.judging.comparison import compare
from kernelwatch.jobs.library.repoconfig import Thresholds


def analyze_ready(session: Session, run: Run, settings: Settings) -> list[Run]:
    """Judge ``run`` and every finished run that was waiting for it as a baseline."""
    judged = []
    if analyze(session, run, settings):
        judged.append(run)
        history.scan_run(session, run, run_thresholds(run, settings).default)
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
    return judged


def analyze(session: Session, run: Run, settings: Settings) -> bool:
    """Fill verdicts of ``run``; False if it must wait for its baseline."""
    if run.status != "succeeded":
        run.verdict = "error"
        return True
    if run.options.get("paired"):
        return _analyze_paired(session, run, run_thresholds(run, settings))
    baseline = _baseline_run(session, run)
    if baseline is not None and baseline.status not in FINAL_STATES:
        return False
    thresholds = run_thresholds(run, settings)
    confidence = float(run.options.get("confidence", settings.confidence))
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
    run.verdict = run_verdict(verdicts)
    return True


def _judge(
    session: Session,
    run: Run,
    result: Result,
    base: Result | None,
    threshold: float,
    confidence: float,
) -> str:
    result.ratio = result.ratio_ci_low = result.ratio_ci_high = result.p_value = None
    if result.status == "fail":
        result.verdict = "broken"
        session.add(
            Regression(
                run_id=run.id,
                baseline_run_id=run.baseline_run_id,
                case_id=result.case_id,
                kind="broken",
                detail=result.error or "correctness check failed",
            )
        )
        return "broken"
    if result.status == "error":
        result.verdict = "error"
        return "error"
    if result.status != "pass":
        result.verdict = None
        return "skip"
    if base is None or base.status != "pass" or len(base.samples) < 2 or len(result.samples) < 2:
        result.verdict = None  # new case, or nothing trustworthy to compare with
        return "new"
    cmp = compare(base.samples, result.samples, threshold, confidence)
    result.ratio, result.ratio_ci_low, result.ratio_ci_high = cmp.ratio, cmp.ci_low, cmp.ci_high
    result.p_value = cmp.p_slower if cmp.ratio >= 1 else cmp.p_faster
    verdict: str = cmp.verdict
    if verdict in ("regression", "improvement") and not (result.reliable and base.reliable):
        verdict = "inconclusive"  # throttled measurements never make a regression
    result.verdict = verdict
    if verdict == "regression":
        session.add(
            Regression(
                run_id=run.id,
                baseline_run_id=run.baseline_run_id,
                case_id=result.case_id,
                kind="regression",
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
        Regression.run_id == run.id, Regression.kind.in_(("regression", "broken"))
    ).delete(synchronize_session=False)


def run_verdict(verdicts: list[str]) -> str:
    """A run fails on any regression or broken case; an error anywhere makes it error."""
    if any(v == "error" for v in verdicts):
        return "error"
    if any(v in ("regression", "broken") for v in verdicts):
        return "fail"
    return "pass"


def run_thresholds(run: Run, settings: Settings) -> Thresholds:
    """The run's thresholds: per case pattern and per suite (``.kernelwatch.toml``), else
    the repository's, else the service default."""
    default = float(run.options.get("regression_threshold", settings.regression_threshold))
    return Thresholds.from_options(default, run.options.get("thresholds"))


def _threshold_of(thresholds: Thresholds, result: Result) -> float:
    record = result.record or {}
    label = result.case.label if result.case is not None else ""
    return thresholds.for_case(str(record.get("suite", "")), str(record.get("kernel", "")), label)


def verdict_of_interval(ratio: float, lo: float, hi: float, threshold: float) -> str:
    """The paired mode's rule (``kernels/paired.judge``) at another threshold."""
    up, down = 1 + threshold, 1 / (1 + threshold)
    if lo > 1 and ratio >= up:
        return "regression"
    if hi < 1 and ratio <= down:
        return "improvement"
    if (down < lo and hi < up) or lo > 1 or hi < 1:
        return "unchanged"
    return "inconclusive"


def _analyze_paired(session: Session, run: Run, thresholds: Thresholds) -> bool:
    """Verdicts measured in paired mode (``kernels/paired_suite.py``) are taken as they are.

    The interval there comes from baseline and candidate interleaved on one GPU;
    recomputing it from two separate sample sets would throw that pairing away.
    """
    _clear_verdict_rows(session, run)
    verdicts = [
        _judge_paired(session, run, result, _threshold_of(thresholds, result))
        for result in run.results
    ]
    run.verdict = run_verdict(verdicts)
    return True


def _judge_paired(session: Session, run: Run, result: Result, threshold: float) -> str:
    paired = result.record.get("paired") or {}
    if result.status == "skip":
        result.verdict = None
        return "skip"
    verdict = str(paired.get("verdict") or ("broken" if result.status == "fail" else "error"))
    result.verdict = verdict
    result.ratio = _num(paired.get("ratio"))
    result.ratio_ci_low = _num(paired.get("ci_low"))
    result.ratio_ci_high = _num(paired.get("ci_high"))
    result.p_value = None
    ratio, lo, hi = result.ratio, result.ratio_ci_low, result.ratio_ci_high
    measured_at = _num(paired.get("min_effect"))
    if (
        verdict in _COMPARED
        and ratio is not None
        and lo is not None
        and hi is not None
        and (measured_at is None or abs(measured_at - threshold) > 1e-12)
    ):
        verdict = result.verdict = verdict_of_interval(ratio, lo, hi, threshold)
    if verdict == "regression" and not result.reliable:
        verdict = result.verdict = "inconclusive"  # throttled: never a regression
    if verdict in ("regression", "broken"):
        ratio, lo, hi = result.ratio, result.ratio_ci_low, result.ratio_ci_high
        detail = (
            f"{(ratio - 1) * 100:.1f}% slower, paired on one GPU "
            f"(interval {lo:.3f}–{hi:.3f}, {paired.get('groups')} groups)"
            if verdict == "regression" and ratio and lo and hi
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


_COMPARED = ("regression", "improvement", "unchanged", "inconclusive")


def _num(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _baseline_run(session: Session, run: Run) -> Run | None:
    if run.options.get("baseline_run_id"):
        return session.get(Run, int(run.options["baseline_run_id"]))
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
