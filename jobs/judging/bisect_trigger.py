"""The automatic trigger: a blocking verdict on main that spans several commits asks
for a bisection.

Called where runs are judged (``analysis.analyze_ready``, in whichever process ended
the run), it only *records* the request as a ``running`` bisection with no commit
list yet; the driver (``jobs/planning/bisect_driver.py``, in the API process or a
waiting command) reads the range from git and takes the steps. So a worker never
plans runs and never needs the broker or GitHub for this.

When:

- a push or nightly run (main history: pull requests are never bisected from here)
  whose verdict is ``fail`` with a regression, ``less_accurate`` or broken case, and
  whose baseline commit is more than one first-parent commit back (a push of several
  commits, a nightly run) (:func:`on_judged`);
- a change point in the history (``history.scan_run``) at a push or nightly run whose
  case was last measured more than one first-parent commit earlier
  (:func:`on_change_point`). The step was seen across separate runs, not paired, so
  that bisection first measures bad against good (``establish``): a step the paired
  comparison does not repeat ends the bisection with no culprit instead of blaming one.

A range one commit long needs no search: the commit is the culprit. A second trigger
of the same range joins the first.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db import bisect as store
from kernelwatch.db.bisect import Bisection
from kernelwatch.db.models import Commit, RegressionEvidence, Result, Run
from kernelwatch.jobs.judging.compose import BRANCH_TRIGGERS
from kernelwatch.jobs.judging.history import CHANGEPOINT, same_history
from kernelwatch.kernels.verdict import BLOCKING, RunVerdict


def on_judged(session: Session, run: Run) -> Bisection | None:
    """Record a bisection for ``run`` if it calls for one (see the module); else None."""
    if run.trigger not in BRANCH_TRIGGERS or run.options.bisection_id is not None:
        return None
    if run.verdict != RunVerdict.FAIL or run.commit is None or not run.baseline_sha:
        return None
    moved = [r for r in run.results if r.verdict in BLOCKING]
    if not moved:
        return None
    base = session.scalars(
        select(Commit).where(
            Commit.repository_id == run.repository_id, Commit.sha == run.baseline_sha
        )
    ).first()
    if base is None:
        return None
    # the run itself found bad worse than good: no establishing step
    return _record(session, run, base, moved, establish=False)


def on_change_point(session: Session, finding: RegressionEvidence) -> Bisection | None:
    """Record a bisection for a history change point if it spans several commits."""
    if finding.kind != CHANGEPOINT:
        return None
    case_id = finding.regression.case_id
    run = session.get(Run, finding.run_id)
    if run is None or run.trigger not in BRANCH_TRIGGERS or run.options.bisection_id is not None:
        return None
    if run.commit is None or run.commit.sequence is None:
        return None
    moved = [r for r in run.results if r.case_id == case_id]
    good = _last_measured_before(session, run, case_id, run.commit.sequence)
    if not moved or good is None:
        return None
    return _record(session, run, good, moved, establish=True)


def _last_measured_before(session: Session, run: Run, case_id: str, sequence: int) -> Commit | None:
    """The newest commit before ``sequence`` whose history run measured ``case_id``."""
    return session.scalars(
        select(Commit)
        .join(Run, Run.commit_id == Commit.id)
        .join(Result, Result.run_id == Run.id)
        .where(
            *same_history(run),
            Result.case_id == case_id,
            Result.status == "pass",
            Commit.sequence < sequence,
        )
        .order_by(Commit.sequence.desc())
        .limit(1)
    ).first()


def _record(
    session: Session, run: Run, good: Commit, moved: list[Result], *, establish: bool
) -> Bisection | None:
    """The bisection of ``good..run.commit`` on ``moved``'s cases, joined or new; None when
    the range is one commit (that commit is the culprit) or its order is unknown."""
    bad = run.commit
    if bad is None or good.sequence is None or bad.sequence is None:
        return None
    if bad.sequence - good.sequence <= 1:
        return None
    pattern = ",".join(sorted({r.case_id for r in moved}))
    joined = store.active_for_range(
        session, run.repository_id, good.sha, bad.sha, run.device_class, pattern
    )
    if joined is not None:
        return joined
    bench_args = list(run.options.bench_args)
    if "--kernel" not in bench_args:
        kernels = sorted({str((r.record or {}).get("kernel", "")) for r in moved} - {""})
        bench_args += [a for k in kernels for a in ("--kernel", k)]
    github = run.options.github
    row = Bisection(
        repository_id=run.repository_id,
        good_sha=good.sha,
        bad_sha=bad.sha,
        commits=[],  # read from git by the driver
        case_pattern=pattern,
        device_class=run.device_class,
        suites=list(run.suites),
        bench_args=bench_args,
        trigger="auto",
        origin_run_id=run.id,
        establish=establish,
        budget_s=store.DEFAULT_BUDGET_S,
        full_name=github.repository if github is not None else None,
    )
    session.add(row)
    session.flush()
    return row


__all__ = ["on_change_point", "on_judged"]
