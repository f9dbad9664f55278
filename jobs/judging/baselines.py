"""The baseline of each case: a run of the baseline commit that measured that case.

A comparison used to take the newest run of the baseline commit as the baseline of
every case. When that run was a bisection step that measured one kernel, or a manual
run of a subset, every other case came out "new": nothing compared, and no word why.
Here each case gets its own baseline result, from the runs of the baseline commit on
the same GPU class that measured it, by the composition's order (gate runs first,
then manual ``--gate``, manual, bisection steps; a result with a time before one
without; newest within a kind: ``compose.pick``). A run with an explicit baseline
run (``RunOptions.baseline_run_id``) compares with that run only.

Only a result of the case's own environment class is its baseline
(``kernels.record.same_environment``: python, torch, Triton): a worker upgraded from
one torch to another between the two runs moves every case, and a comparison across
that is not of the library's change (design.md: comparisons happen only inside a
series). Such a case has no baseline until the baseline commit is measured again there.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.models import FINAL_STATES, Result, Run
from kernelwatch.db.store import runs_of
from kernelwatch.jobs.judging.compose import Measured, authority, pick
from kernelwatch.kernels.record import environment_class, same_class
from kernelwatch.kernels.verdict import PASS_STATUS, SKIP_STATUS

IN_FLIGHT = ("queued", "running")


def baseline_results(session: Session, run: Run) -> dict[str, Result] | None:
    """Per case id, the result ``run``'s case is compared with; None: wait, a run of the
    baseline commit on this class is still measuring (it may be the one that has it)."""
    # each of the run's cases' environment class, once (``kernels.record.same_class``)
    own = {r.case_id: environment_class(r.record or {}) for r in run.results}
    explicit = run.options.baseline_run_id
    if explicit:
        base = session.get(Run, explicit)
        if base is None or base.status == "cancelled":
            return {}
        if base.status not in FINAL_STATES:
            return None
        if base.status != "succeeded":
            return {}
        return {r.case_id: r for r in base.results if _same_series(r, own)}
    found = _baseline_commit_results(session, run)
    if found is None:
        return None
    done, results = found
    chosen = pick(
        Measured(r.case_id, authority(done[r.run_id]), r.run_id, r.status == PASS_STATUS, r)
        for r in results
        if _same_series(r, own)
    )
    return {case_id: m.item for case_id, m in chosen.items()}


def measured_elsewhere(session: Session, run: Run, bases: dict[str, Result]) -> Run | None:
    """The run of the baseline commit that measured ``run``'s uncompared cases in another
    environment class (a worker upgraded since: the stale baseline), or None.

    A case of ``run`` that passed, has no baseline in ``bases``, and was measured well at
    the baseline commit on this class, only with another python, torch or Triton, is
    waiting for the baseline commit to be measured again where ``run`` was
    (``baseline_remeasure.py`` plans that run). Paired runs and runs with an explicit
    baseline run never ask: they name what they compare with.
    """
    if run.options.paired or run.options.baseline_run_id or not run.baseline_sha:
        return None
    uncompared = {
        r.case_id: environment_class(r.record or {})
        for r in run.results
        if r.status == PASS_STATUS and r.case_id not in bases
    }
    if not uncompared:
        return None
    found = _baseline_commit_results(session, run)
    if found is None:
        return None
    done, results = found
    stale = Counter(
        r.run_id
        for r in results
        if r.case_id in uncompared and r.status == PASS_STATUS and not _same_series(r, uncompared)
    )
    if not stale:
        return None
    return done[max(stale, key=lambda run_id: (stale[run_id], run_id))]


def _baseline_commit_results(
    session: Session, run: Run
) -> tuple[dict[int, Run], list[Result]] | None:
    """The baseline commit's finished runs on ``run``'s class and their measured results;
    None while one of them (not a bisection step) is still measuring."""
    if not run.baseline_sha:
        return {}, []
    runs = session.scalars(
        runs_of(run.repository_id, run.baseline_sha, run.device_class).where(
            Run.status != "cancelled", Run.id != run.id
        )
    ).all()
    if any(r.status in IN_FLIGHT and r.options.bisection_id is None for r in runs):
        return None
    done = {r.id: r for r in runs if r.status == "succeeded"}
    if not done:
        return done, []
    results = session.scalars(
        select(Result).where(Result.run_id.in_(list(done)), Result.status != SKIP_STATUS)
    ).all()
    return done, list(results)


def _same_series(base: Result, own: dict[str, dict[str, str]]) -> bool:
    """Whether ``base`` may be the baseline of the run's result of its case."""
    mine = own.get(base.case_id)
    return mine is None or same_class(environment_class(base.record or {}), mine)


def main_baseline_run(chosen: dict[str, Result]) -> int | None:
    """The run most cases were compared with (the Compare page's default baseline)."""
    counts = Counter(r.run_id for r in chosen.values())
    if not counts:
        return None
    return max(counts, key=lambda run_id: (counts[run_id], run_id))


__all__ = ["baseline_results", "main_baseline_run", "measured_elsewhere"]
