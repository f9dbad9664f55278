"""Judging a run against its baseline: per-case verdicts, regressions, the run's verdict.

Every case verdict comes from the one judgement (``kernels/verdict.py:judge_case``):
the statuses of both sides (a wrong candidate is ``broken`` whatever its speed; a
broken baseline against a correct candidate is a fix, ``unchanged``; a baseline with
no time has nothing to compare with), then the interval rule at the case's threshold
(throttled measurements at worst ``inconclusive``). Each case is compared with its
own baseline result (``baselines.py``: a run of the baseline commit that measured it,
gate runs first), recorded in ``Result.baseline_result_id``. The run's verdict is the
rule's aggregation (``class_verdict_of``): an inconclusive case makes it ``neutral``
unless ``KW_INCONCLUSIVE_POLICY`` says otherwise, and CPU timings count only with
``KW_CPU_TIMING_GATES`` (read here, in the process that judges: the worker). Runs
whose baseline commit is still being measured stay unjudged until it is, and so do runs
whose baseline commit was measured only in another environment class (a worker
upgraded since): they ask for it to be measured again (``baseline_remeasure.py``);
``analyze_ready`` is called whenever any run finishes. Blocking findings become
evidence of one problem row each (``problems.py``), never a row per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Result, Run
from kernelwatch.jobs.judging import (
    baseline_remeasure,
    bisect_trigger,
    confirmation,
    history,
    problems,
    run_spread,
)
from kernelwatch.jobs.judging.baselines import baseline_results, main_baseline_run
from kernelwatch.jobs.judging.comparison import compare
from kernelwatch.jobs.library.repoconfig import Thresholds
from kernelwatch.kernels.record import (
    PairedSection,
    check_errors,
    paired_section,
    remeasure_of,
)
from kernelwatch.kernels.verdict import (
    BLOCKING,
    FAIL_STATUS,
    PASS_STATUS,
    CaseVerdict,
    Judgement,
    RunVerdict,
    class_verdict_of,
    confirm,
    judge_case,
    plumbing_only,
)

# Verdicts recorded as a problem's evidence by the pairwise analysis (history adds its own).
_FINDINGS = tuple(v.value for v in BLOCKING)


def analyze_ready(session: Session, run: Run, settings: Settings) -> list[Run]:
    """Judge ``run``, every finished run that was waiting for it as a baseline, and the
    run it confirms; scan each judged run's history."""
    judged = []
    # a confirmation run's records become the re-measures of the run it confirms
    confirmed = confirmation.attach(session, run) if run.options.confirms is not None else None
    if analyze(session, run, settings):
        judged.append(run)
    if run.commit is not None:
        # locked, in id order, re-read: two processes ending two runs of the baseline
        # commit at once judge each waiting run once, and the second sees what the first
        # decided (a follow-up it planned), not the row it read before (PostgreSQL
        # re-checks the filter after the wait: a run judged meanwhile drops out)
        waiting = session.scalars(
            select(Run)
            .where(
                Run.repository_id == run.repository_id,
                Run.baseline_sha == run.commit.sha,
                Run.verdict.is_(None),
                Run.status == "succeeded",
                Run.device_class == run.device_class,
            )
            .order_by(Run.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        for other in waiting:
            if other.id != run.id and analyze(session, other, settings):
                judged.append(other)
    if confirmed is not None and analyze(session, confirmed, settings):
        judged.append(confirmed)
    for each in judged:
        # the history's second signal for every run judged here, late ones too (a run
        # that waited for its baseline was never scanned: its steps were found a run late)
        for step in history.scan_run(session, each, run_thresholds(each, settings).default):
            bisect_trigger.on_change_point(session, step)  # a step over several commits
        bisect_trigger.on_judged(session, each)  # a blocking verdict over several commits
    return judged


def analyze(session: Session, run: Run, settings: Settings) -> bool:
    """Fill verdicts of ``run``; False if it must wait: for its baseline, or for a run
    that measures its baseline again or confirms its would-be regressions."""
    if run.status != "succeeded":
        run.verdict = RunVerdict.ERROR
        return True
    thresholds = run_thresholds(run, settings)
    if run.options.paired:
        judged = [_paired(result, case_threshold(thresholds, result)) for result in run.results]
    else:
        bases = baseline_results(session, run)
        if bases is None or baseline_remeasure.request(session, run, bases) is not None:
            # its baseline commit is still measuring, or is measured again where it was
            # measured: judged later, when no worker re-measure can come (``confirmation``)
            if not run.options.judged_late:
                run.options = run.options.with_(judged_late=True)
            return False
        # the run most of *this run's* cases were compared with: a baseline commit with a
        # whole-suite run and a later subset run (FlashInfer 0.5.3 on two cards, H200
        # 2026-12-04) has its whole suite's cases in ``bases`` too
        own = {result.case_id for result in run.results}
        run.baseline_run_id = main_baseline_run({c: b for c, b in bases.items() if c in own})
        confidence = run.options.confidence
        confidence = settings.confidence if confidence is None else confidence
        spreads = run_spread.case_spreads(session, run)
        judged = [
            _unpaired(
                result,
                bases.get(result.case_id),
                case_threshold(thresholds, result),
                confidence,
                spreads[result.case_id],
            )
            for result in run.results
        ]
        unconfirmed = [
            result.case_id
            for result, judgement in zip(run.results, judged, strict=True)
            if _counts(run, judgement.verdict, settings) and remeasure_of(result.record) is None
        ]
        if confirmation.pending(session, run) or (
            confirmation.request(session, run, unconfirmed) is not None
        ):
            return False  # judged after its job: its would-be regressions are measured again
    problems.forget_run(session, run, _FINDINGS)
    for result, judgement in zip(run.results, judged, strict=True):
        _store(result, judgement)
        if judgement.verdict in BLOCKING:
            problems.record(session, _finding(session, run, result, judgement))
    policy, gates = settings.inconclusive_policy, settings.cpu_timing_gates
    run.verdict = class_verdict_of(
        run.device_class, [j.verdict for j in judged], policy, cpu_timings_gate=gates
    )
    if not judged:  # nothing at all to judge: the composed answer says neutral, so does the run
        run.verdict = RunVerdict.NEUTRAL
    # what the composed answer of the commit reads, wherever it is read (``verdicts.py``)
    run.options = run.options.with_(
        judged_with={"inconclusive_policy": str(policy.value), "cpu_timings_gate": gates}
    )
    return True


def _unpaired(
    result: Result, base: Result | None, threshold: float, confidence: float, spread: float
) -> Judgement:
    """The case against its baseline result, from both runs' raw samples, allowing for
    ``spread``: how far the case's median moves between runs (``run_spread.py``).

    A regression stands only where the worker's re-measure of the case (``remeasure``, a
    fresh runner process: ``worker/remeasure.py``) compared with the same baseline says
    so too (design.md: a run-level ``fail`` needs an independent re-measure); a record
    without one (measured before, imported) is judged on its one comparison."""
    result.baseline_result_id = base.id if base is not None else None
    first, once, result.p_value = _once(result, base, threshold, confidence, spread)
    again = remeasure_of(result.record)
    if first.verdict != CaseVerdict.REGRESSION or again is None:
        return first
    second: CaseVerdict | None = None
    if again.status == PASS_STATUS and again.timing is not None:
        twice, _ = _against(again.timing.samples, base, threshold, confidence, spread,
                            once.reliable)  # fmt: skip
        second = judge_case(
            PASS_STATUS, PASS_STATUS, twice.ratio, twice.low, twice.high, threshold,
            reliable=twice.reliable,
        ).verdict  # fmt: skip
    # what the re-measure said is in the record; ``report`` words it (NOTE_UNCONFIRMED)
    verdict = confirm(first.verdict, second or CaseVerdict.INCONCLUSIVE)
    return replace(first, verdict=verdict)


def _once(
    result: Result, base: Result | None, threshold: float, confidence: float, spread: float
) -> tuple[Judgement, _Compared, float | None]:
    """The case's one comparison with its baseline: the judgement, the interval behind
    it and its one-sided p (the worker's choice of what to re-measure reads it too)."""
    samples = result.samples if result.status == PASS_STATUS else []
    once, p_value = _against(samples, base, threshold, confidence, spread, result.reliable)
    judged = judge_case(
        result.status,
        base.status if base is not None else None,
        once.ratio,
        once.low,
        once.high,
        threshold,
        reliable=once.reliable,
        errors=None if base is None else (_errors(base), _errors(result)),
    )
    return judged, once, p_value


def _errors(result: Result) -> dict[str, float]:
    return check_errors((result.record or {}).get("correctness"))


@dataclass(frozen=True)
class _Compared:
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    reliable: bool = True


def _against(
    samples: list[float],
    base: Result | None,
    threshold: float,
    confidence: float,
    spread: float,
    reliable: bool,
) -> tuple[_Compared, float | None]:
    """``samples`` against the baseline result's: the interval and its one-sided p."""
    reliable = bool(reliable and (base is None or base.reliable))
    if base is None or base.status != PASS_STATUS or len(base.samples) < 2 or len(samples) < 2:
        return _Compared(reliable=reliable), None
    cmp = compare(base.samples, samples, threshold, confidence, reliable=reliable, spread=spread)
    p_value = cmp.p_slower if cmp.ratio >= 1 else cmp.p_faster
    return _Compared(cmp.ratio, cmp.ci_low, cmp.ci_high, reliable), p_value


def would_regress(session: Session, run: Run, settings: Settings) -> list[str]:
    """The cases of an unpaired ``run`` whose one comparison with their baseline reads a
    regression that would count for the run: those the worker measures again before
    it ends the job. Nothing is stored; ``analyze`` judges them with the re-measure."""
    if run.options.paired:
        return []
    bases = baseline_results(session, run)
    if not bases:
        return []
    thresholds = run_thresholds(run, settings)
    confidence = run.options.confidence
    confidence = settings.confidence if confidence is None else confidence
    spreads = run_spread.case_spreads(session, run)
    found = []
    for result in run.results:
        threshold = case_threshold(thresholds, result)
        judged, _, _ = _once(
            result, bases.get(result.case_id), threshold, confidence, spreads[result.case_id]
        )
        if _counts(run, judged.verdict, settings):
            found.append(result.case_id)
    return found


def _counts(run: Run, verdict: CaseVerdict | None, settings: Settings) -> bool:
    """Whether ``verdict`` is a regression that would count for ``run`` (not a CPU
    timing that only checks the plumbing): what an independent re-measure must confirm."""
    return verdict == CaseVerdict.REGRESSION and not plumbing_only(
        run.device_class, verdict, cpu_timings_gate=settings.cpu_timing_gates
    )


def _paired(result: Result, threshold: float) -> Judgement:
    """A case measured in paired mode (``kernels/paired_suite.py``): its verdict stands,
    judged again by the rule where the case's threshold differs from the one it was
    measured at, or where the measurement was throttled. The interval comes from
    baseline and candidate interleaved on one GPU; recomputing it from two separate
    sample sets would throw that pairing away."""
    paired = paired_section(result.record) or PairedSection()
    result.baseline_result_id = None
    result.p_value = None
    base = paired.baseline_correctness  # the baseline's check on the same inputs
    return judge_case(
        result.status,
        FAIL_STATUS if base is not None and not base.passed else None,
        _num(paired.ratio),
        _num(paired.ci_low),
        _num(paired.ci_high),
        threshold,
        reliable=result.reliable,
        paired=True,
        measured=paired.verdict,
        measured_at=_num(paired.min_effect),
        errors=(check_errors(base), check_errors((result.record or {}).get("correctness"))),
    )


def _store(result: Result, judgement: Judgement) -> None:
    result.verdict = judgement.verdict
    result.ratio = judgement.ratio
    result.ratio_ci_low = judgement.low
    result.ratio_ci_high = judgement.high
    if judgement.ratio is None:
        result.p_value = None


def _finding(session: Session, run: Run, result: Result, judgement: Judgement) -> problems.Finding:
    """A blocking case as a finding of its problem, over baseline commit..this commit."""
    base = session.get(Result, result.baseline_result_id) if result.baseline_result_id else None
    base_run = session.get(Run, base.run_id) if base is not None else None
    good = base_run.commit.sha if base_run is not None and base_run.commit else run.baseline_sha
    verdict = judgement.verdict
    ratio, lo, hi = judgement.ratio, judgement.low, judgement.high
    paired = run.options.paired
    if verdict == CaseVerdict.REGRESSION and ratio and lo and hi:
        how = (
            f"paired on one GPU, {(paired_section(result.record) or PairedSection()).groups} groups"
            if paired
            else f"p={result.p_value:.2g}"
            if result.p_value is not None
            else "unpaired"
        )
        detail = f"{(ratio - 1) * 100:.1f}% slower (interval {lo:.3f}–{hi:.3f}, {how})"
    elif verdict == CaseVerdict.LESS_ACCURATE:
        section = paired_section(result.record) or PairedSection()
        detail = section.accuracy_detail or judgement.detail
    else:
        detail = result.error or judgement.detail
    return problems.Finding(
        run=run,
        case_id=result.case_id,
        kind=str(verdict),
        good_sha=good,
        ratio=ratio,
        ratio_ci_low=lo,
        ratio_ci_high=hi,
        p_value=result.p_value if verdict == CaseVerdict.REGRESSION else None,
        detail=detail,
        baseline_run_id=base_run.id if base_run is not None else None,
    )


def run_thresholds(run: Run, settings: Settings) -> Thresholds:
    """The run's thresholds: per case pattern and per suite (``.kernelwatch.toml``), else
    the repository's, else the service default."""
    default = run.options.regression_threshold
    default = settings.regression_threshold if default is None else default
    return Thresholds.from_options(default, run.options.thresholds)


def case_threshold(thresholds: Thresholds, result: Result) -> float:
    """The minimum effect ``result``'s case is judged at (per case, per suite, default)."""
    record = result.record or {}
    label = result.case.label if result.case is not None else ""
    return thresholds.for_case(str(record.get("suite", "")), str(record.get("kernel", "")), label)


def _num(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None
