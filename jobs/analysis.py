"""Judging a run against its baseline: per-case verdicts, regressions, the run's verdict.

A case that failed its correctness check is ``broken`` whatever its speed, and a
broken or errored baseline case is never compared with. A case measured under
throttling (``reliable`` false) can be ``inconclusive`` at worst, never a
regression. Runs whose baseline has not finished yet stay unjudged until it has;
``analyze_ready`` is called whenever any run finishes.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Regression, Result, Run
from kernelwatch.db.store import latest_run_for
from kernelwatch.jobs.stats import compare


def analyze_ready(session: Session, run: Run, settings: Settings) -> list[Run]:
    """Judge ``run`` and every finished run that was waiting for it as a baseline."""
    judged = []
    if analyze(session, run, settings):
        judged.append(run)
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
    baseline = _baseline_run(session, run)
    if baseline is not None and baseline.status not in FINAL_STATES:
        return False
    threshold = float(run.options.get("regression_threshold", settings.regression_threshold))
    confidence = float(run.options.get("confidence", settings.confidence))
    base_results: dict[str, Result] = {}
    if baseline is not None and baseline.status == "succeeded":
        run.baseline_run_id = baseline.id
        base_results = {r.case_id: r for r in baseline.results}
    session.query(Regression).filter(Regression.run_id == run.id).delete()
    verdicts = []
    for result in run.results:
        verdicts.append(
            _judge(session, run, result, base_results.get(result.case_id), threshold, confidence)
        )
    if any(v == "error" for v in verdicts):
        run.verdict = "error"
    elif any(v in ("regression", "broken") for v in verdicts):
        run.verdict = "fail"
    else:
        run.verdict = "pass"
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
