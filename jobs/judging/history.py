"""The history as a second signal: change points on a branch's measurements.

A pairwise verdict sees one commit against its parent; a slow drift, or a step
smaller than one comparison's interval, shows only in the series. After each
run of branch history (pushes, nightly, manual runs — not pull requests), the
last ``WINDOW`` measurements of each of the run's cases on that GPU class go
through ``kernelwatch detect``'s detector (``jobs/judging/detect.py``). A regression
step is a finding of kind ``changepoint`` at the commit where the new level starts,
recorded once, with its magnitude and p-value, as evidence of its problem
(``problems.py``: the pairwise regression at that commit when there is one, else a
problem of its own); the dashboard lists it and its Trends page draws exactly these. The smallest
step recorded is the gate's minimum effect (the run's threshold, 1 % by default:
``kernels/verdict.py``), so history and the gate agree on what is worth a flag. The
detector needs ``min_segment`` points on each side, so a step is confirmed a few
commits after it happened; that delay is the price of not alarming on one noisy point.
Cards of one class differ by a few per cent, so the series is first levelled to one
card (``jobs/judging/cards.py``, from each record's ``device.uuid``): a run of commits
that happened to land on a slower card is not a step. A series holds one environment
class (``kernels.record.same_environment``: python, torch, Triton): the points measured
under another torch than the run's are left out, so a worker's upgrade is not a step.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Commit, Regression, RegressionEvidence, Result, Run
from kernelwatch.jobs.judging import problems
from kernelwatch.jobs.judging.cards import level_cards
from kernelwatch.jobs.judging.compose import Measured, authority, pick
from kernelwatch.jobs.judging.detect import detect
from kernelwatch.kernels.record import ENVIRONMENT_CLASS, environment_class, same_class
from kernelwatch.kernels.verdict import MIN_EFFECT, CaseVerdict

WINDOW = 60
HISTORY_TRIGGERS = ("push", "nightly", "release", "manual", "backfill")
CHANGEPOINT = "changepoint"  # the Regression kind of a step found in the history


def environment_columns() -> tuple[Any, ...]:
    """The parts of a result's environment class as columns of a query (JSON paths, so a
    series read never loads whole records); :func:`row_environment` reads them back."""
    return tuple(Result.record["environment"][k].as_string().label(k) for k in ENVIRONMENT_CLASS)


def row_environment(row: Any) -> dict[str, str]:
    """The environment class of a row selected with :func:`environment_columns`."""
    return environment_class({"environment": {k: getattr(row, k) for k in ENVIRONMENT_CLASS}})


def same_history(run: Run) -> tuple[ColumnElement[bool], ...]:
    """Conditions on ``Run`` for the runs whose measurements form ``run``'s history: the
    same repository and GPU class, branch triggers, succeeded."""
    return (
        Run.repository_id == run.repository_id,
        Run.device_class == run.device_class,
        Run.trigger.in_(HISTORY_TRIGGERS),
        Run.status == "succeeded",
    )


def scan_run(
    session: Session, run: Run, min_effect: float = MIN_EFFECT
) -> list[RegressionEvidence]:
    """Record new change points in the histories of ``run``'s cases; returns them."""
    if run.trigger not in HISTORY_TRIGGERS or run.status != "succeeded" or run.commit is None:
        return []
    case_ids = [r.case_id for r in run.results if r.status == "pass"]
    if not case_ids:
        return []
    # The newest WINDOW measured commits first (bounded: this runs whenever a run ends),
    # then only their results for this run's cases.
    recent = session.execute(
        select(Run.id, Commit.sequence, Commit.sha)
        .join(Commit, Run.commit_id == Commit.id)
        .where(*same_history(run), Commit.sequence <= run.commit.sequence)
        .order_by(Commit.sequence.desc(), Run.id.desc())
        .limit(4 * WINDOW)
    ).all()
    at: dict[int, tuple[int, str]] = {}  # run id -> (sequence, sha) of the WINDOW commits
    seen: set[int] = set()
    for run_id, sequence, sha in recent:
        if sequence is None or (sequence not in seen and len(seen) >= WINDOW):
            continue
        seen.add(sequence)
        at[run_id] = (sequence, sha)
    runs = {r.id: r for r in session.scalars(select(Run).where(Run.id.in_(list(at))))}
    rows = session.execute(
        select(
            Result.case_id,
            Result.median_s,
            Result.run_id,
            Result.record["device"]["uuid"].as_string().label("card"),
            *environment_columns(),
        ).where(
            Result.run_id.in_(list(at)),
            Result.case_id.in_(case_ids),
            Result.status == "pass",
            Result.reliable.is_(True),
            Result.median_s.is_not(None),
        )
    ).all()
    # a series holds one environment class (design.md): a point measured under another
    # torch than this run's is not part of this run's history (an upgrade is no step)
    own = {r.case_id: environment_class(r.record or {}) for r in run.results}

    def in_series(case_id: str, row: Any) -> bool:
        return same_class(row_environment(row), own.get(case_id, {}))

    # one point per (case, commit): its composed answer's run (compose.py), as Trends draw it
    chosen = pick(
        Measured(
            (row.case_id, at[row.run_id][0]),
            authority(runs[row.run_id]),
            row.run_id,
            True,
            (row.median_s, row.card),
        )
        for row in rows
        if row.median_s is not None and in_series(row.case_id, row)
    )
    series: dict[str, list[tuple[int, float, int, str, str]]] = {}
    for (case_id, sequence), m in chosen.items():
        median, card = m.item
        point = (sequence, float(median), m.run_id, at[m.run_id][1], card or "")
        series.setdefault(case_id, []).append(point)
    found: list[RegressionEvidence] = []
    for case_id, points in series.items():
        points.sort()  # oldest first
        # as if every point had been measured on one card (jobs/judging/cards.py)
        levelled = level_cards([p[1] for p in points], [p[4] for p in points])
        for cp in detect(levelled, lower_is_better=True, min_effect=min_effect):
            if cp.direction != CaseVerdict.REGRESSION:
                continue
            _, _, at_run, sha, _ = points[cp.index]
            exists = session.scalar(
                select(RegressionEvidence.id)
                .join(Regression, Regression.id == RegressionEvidence.regression_id)
                .where(RegressionEvidence.run_id == at_run, Regression.case_id == case_id)
            )
            if exists is not None:
                continue  # already flagged there (pairwise or by an earlier scan)
            before = points[cp.index - 1][3] if cp.index > 0 else None
            evidence = problems.record(
                session,
                problems.Finding(
                    run=runs[at_run],
                    case_id=case_id,
                    kind=CHANGEPOINT,
                    good_sha=before,
                    ratio=1 + cp.magnitude,
                    p_value=cp.p_value,
                    detail=(
                        f"history: level {cp.magnitude * 100:+.1f} % from {sha[:12]} on "
                        f"(change point over {len(points)} commits, p={cp.p_value:.2g})"
                    ),
                    source=problems.HISTORY,
                ),
            )
            if evidence is not None:
                found.append(evidence)
    session.flush()
    return found
