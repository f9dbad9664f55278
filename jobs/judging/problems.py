"""Regressions as problems: one row per (repository, GPU class, case, culprit range).

A problem is found many times: the push run that saw the slowdown, the manual re-run
someone made to check it, the dashboard's Reproduce command, every bisection step
that measured a commit inside the range, the confirmation re-measure of the culprit,
the history's change point. Each of those is a *finding*; :func:`record` attaches it
to the open problem it belongs to as :class:`RegressionEvidence`, and opens a new
row only when no problem matches. A finding matches a problem of the same
repository, GPU class and case when it was measured at the same commit, or when both
ranges lie on the branch's first-parent history and overlap: the culprit then lies
in both, so the problem's range narrows to their intersection.

Bisection steps and confirmation re-measures only ever attach (they measure a commit
against another build to find a culprit, never a commit's own answer); a step that
matches no problem is left to the bisection's own record.

This module writes rows; it decides no verdict (``kernels/verdict.py`` did).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Commit, Regression, RegressionEvidence, Repository, Run
from kernelwatch.db.triage import TriageEvent
from kernelwatch.jobs.judging.compose import Authority, authority
from kernelwatch.kernels.verdict import CaseVerdict

# Sources of a finding, from the run that made it (``RegressionEvidence.source``).
GATE, MANUAL, BISECTION, HISTORY = "gate", "manual", "bisection", "history"
_SOURCE = {
    Authority.GATE: GATE,
    Authority.MANUAL_GATE: MANUAL,
    Authority.MANUAL: MANUAL,
    Authority.BISECTION: BISECTION,
}
# Worst first: a problem's kind is the worst kind any of its evidence had.
_SEVERITY = (
    CaseVerdict.BROKEN.value,
    CaseVerdict.LESS_ACCURATE.value,
    CaseVerdict.REGRESSION.value,
)
OPEN = "open"


@dataclass(frozen=True)
class Finding:
    """What one run says about one case: a blocking verdict over ``good_sha..bad_sha``."""

    run: Run
    case_id: str
    kind: str
    good_sha: str | None
    ratio: float | None = None
    ratio_ci_low: float | None = None
    ratio_ci_high: float | None = None
    p_value: float | None = None
    detail: str = ""
    baseline_run_id: int | None = None
    source: str | None = None  # None: from the run (gate | manual | bisection)


def record(session: Session, finding: Finding) -> RegressionEvidence | None:
    """Attach ``finding`` to its problem (opening one if none matches); its evidence row.

    None when a bisection step matches no problem (steps never open rows).
    """
    run = finding.run
    bad_sha = run.commit.sha if run.commit is not None else None
    if bad_sha is None:
        return None
    source = finding.source or _SOURCE[authority(run)]
    on_history = _on_history(run, source)
    good_seq = _sequence(session, run.repository_id, finding.good_sha)
    bad_seq = run.commit.sequence if run.commit is not None else None
    # one finder at a time per repository: two runs ending together find one problem
    session.get(Repository, run.repository_id, with_for_update=True)
    problem = _matching(
        session, run, finding.case_id, bad_sha, good_seq, bad_seq, on_history=on_history
    )
    if problem is None:
        if source == BISECTION:
            return None
        problem = Regression(
            run_id=run.id,
            baseline_run_id=finding.baseline_run_id,
            case_id=finding.case_id,
            kind=finding.kind,
            ratio=finding.ratio,
            ratio_ci_low=finding.ratio_ci_low,
            ratio_ci_high=finding.ratio_ci_high,
            p_value=finding.p_value,
            detail=finding.detail,
            repository_id=run.repository_id,
            device_class=run.device_class,
            good_sha=finding.good_sha,
            bad_sha=bad_sha,
            good_sequence=good_seq,
            bad_sequence=bad_seq,
            on_history=on_history,
        )
        session.add(problem)
        session.flush()
    else:
        _narrow(problem, finding.good_sha, good_seq, bad_sha, bad_seq)
        if _worse(finding.kind, problem.kind):
            problem.kind = finding.kind
            problem.detail = finding.detail
    existing = session.scalars(
        select(RegressionEvidence).where(
            RegressionEvidence.regression_id == problem.id,
            RegressionEvidence.run_id == run.id,
            RegressionEvidence.kind == finding.kind,
        )
    ).first()
    if existing is not None:
        return existing
    evidence = RegressionEvidence(
        regression_id=problem.id,
        run_id=run.id,
        kind=finding.kind,
        source=source,
        good_sha=finding.good_sha,
        bad_sha=bad_sha,
        ratio=finding.ratio,
        ratio_ci_low=finding.ratio_ci_low,
        ratio_ci_high=finding.ratio_ci_high,
        p_value=finding.p_value,
        detail=finding.detail,
    )
    session.add(evidence)
    session.flush()
    return evidence


def forget_run(session: Session, run: Run, kinds: tuple[str, ...]) -> None:
    """Drop ``run``'s evidence of ``kinds`` before it is judged again, and the problems
    it alone had opened (untriaged): a re-judged run must not leave stale rows."""
    ids = list(
        session.scalars(
            select(RegressionEvidence.regression_id).where(
                RegressionEvidence.run_id == run.id, RegressionEvidence.kind.in_(kinds)
            )
        )
    )
    if not ids:
        return
    session.execute(
        delete(RegressionEvidence).where(
            RegressionEvidence.run_id == run.id, RegressionEvidence.kind.in_(kinds)
        )
    )
    orphans = select(Regression.id).where(
        Regression.id.in_(ids),
        Regression.state == OPEN,
        ~exists().where(RegressionEvidence.regression_id == Regression.id),
        ~exists().where(TriageEvent.regression_id == Regression.id),
    )
    doomed = list(session.scalars(orphans))
    if doomed:
        session.execute(delete(Regression).where(Regression.id.in_(doomed)))
    session.expire_all()


def _matching(
    session: Session,
    run: Run,
    case_id: str,
    bad_sha: str,
    good_seq: int | None,
    bad_seq: int | None,
    *,
    on_history: bool,
) -> Regression | None:
    """The open problem of this case this finding belongs to (the newest that matches)."""
    rows = session.scalars(
        select(Regression)
        .where(
            Regression.repository_id == run.repository_id,
            Regression.device_class == run.device_class,
            Regression.case_id == case_id,
            Regression.state.in_((OPEN, "acknowledged")),
        )
        .order_by(Regression.id.desc())
    ).all()
    for row in rows:
        if row.bad_sha == bad_sha:
            return row
    if not on_history or bad_seq is None:
        return None
    low = good_seq if good_seq is not None else bad_seq - 1
    for row in rows:
        if not row.on_history or row.bad_sequence is None:
            continue
        row_low = row.good_sequence if row.good_sequence is not None else row.bad_sequence - 1
        if low < row.bad_sequence and row_low < bad_seq:  # (low, bad] meets (row_low, row_bad]
            return row
    return None


def _narrow(
    row: Regression,
    good_sha: str | None,
    good_seq: int | None,
    bad_sha: str,
    bad_seq: int | None,
) -> None:
    """The problem's range becomes the part both ranges share (where the culprit is)."""
    if not row.on_history or row.bad_sequence is None or bad_seq is None:
        return
    if good_seq is not None and (row.good_sequence is None or good_seq > row.good_sequence):
        row.good_sha, row.good_sequence = good_sha, good_seq
    if bad_seq < row.bad_sequence:
        row.bad_sha, row.bad_sequence = bad_sha, bad_seq


def _worse(kind: str, than: str) -> bool:
    rank = {k: i for i, k in enumerate(_SEVERITY)}
    return rank.get(kind, len(rank)) < rank.get(than, len(rank))


def _on_history(run: Run, source: str) -> bool:
    """Whether the finding's range lies on a branch's first-parent line (not a PR's)."""
    from kernelwatch.jobs.judging.history import HISTORY_TRIGGERS

    return source in (BISECTION, HISTORY) or run.trigger in HISTORY_TRIGGERS


def _sequence(session: Session, repository_id: int, sha: str | None) -> int | None:
    if not sha:
        return None
    return session.scalar(
        select(Commit.sequence).where(Commit.repository_id == repository_id, Commit.sha == sha)
    )


__all__ = ["BISECTION", "GATE", "HISTORY", "MANUAL", "Finding", "forget_run", "record"]
