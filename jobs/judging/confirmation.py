"""A regression judged after its job ended is confirmed by a run of its own.

design.md: a run-level ``fail`` requires the blocking case to be confirmed by an
independent re-measure. The worker re-measures an unpaired run's would-be regressions
before it lets the card go (``worker/remeasure.py``), but only where the run could be
judged then. A run whose baseline was still measuring when its job ended (two pushes
in a row on two cards of a class; a baseline measured again after a torch upgrade:
``baseline_remeasure.py``) is judged later, in whichever process ends the baseline,
and one comparison then decided: a slow process on main failed the push.

Now such a run is marked when its judgement first waits (``RunOptions.judged_late``),
and its judgement, when it comes, asks for a run of the run's commit that measures
exactly those cases again (``--case`` with their ids), waits for it, and attaches
each of its records to the case it re-measures (``record.remeasure``, the form the
worker's own re-measure has) when it ends; the rule then keeps ``regression`` only
where the re-measure repeats it (``verdict.confirm``). A confirmation that fails, or
measures nothing of a case, leaves that case ``inconclusive`` with the reason. Each
run asks once (``RunOptions.confirmation``). Imported records never ask (nothing here
measures where they were measured): they are judged on their one comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from kernelwatch.db.models import FINAL_STATES, Run
from kernelwatch.jobs.judging.follow_up import plan_follow_up
from kernelwatch.kernels.record import ERROR_MAX, remeasure_entry


def request(session: Session, run: Run, case_ids: Sequence[str]) -> Run | None:
    """The run planned to measure ``case_ids`` of ``run`` again, or None: nothing to ask,
    ``run`` was judged when its job ended (the worker re-measured then), it asked
    already, or its records were imported."""
    options = run.options
    asked = options.confirmation is not None
    if not case_ids or not options.judged_late or asked or options.imported_from:
        return None
    # one argument, "--case=...": a case id a record made up cannot pass for an option
    args = [*run.options.bench_args, "--case=" + ",".join(sorted(case_ids))]
    again = plan_follow_up(session, run, run, run.suites, bench_args=args, confirms=run.id)
    run.options = run.options.with_(confirmation=again.id)
    return again


def pending(session: Session, run: Run) -> bool:
    """Whether ``run``'s confirmation run was asked for and has not ended: another run
    of its baseline commit ending meanwhile (a manual run, a bisection step, another
    run's baseline re-measure) judges it again, and must not judge it on one comparison."""
    asked = run.options.confirmation
    if asked is None:
        return False
    confirming = session.get(Run, asked)
    return confirming is not None and confirming.status not in FINAL_STATES


def attach(session: Session, confirming: Run) -> Run | None:
    """When ``confirming`` (finished) confirms another run, each of its records becomes
    the re-measure of that run's case; returns the run to judge again, else None."""
    target_id = confirming.options.confirms
    target = (
        session.get(Run, target_id, with_for_update=True, populate_existing=True)
        if target_id is not None
        else None
    )
    if target is None:
        return None
    asked = _asked(confirming)
    measured = {r.case_id: r for r in confirming.results}
    why = f"its confirmation run {confirming.id} ended {confirming.status}"
    if confirming.error:
        why += f": {confirming.error}"
    for result in target.results:
        if result.case_id not in asked:
            continue
        again = measured.get(result.case_id)
        entry = (
            remeasure_entry(again.record or {})
            if again is not None
            else {"status": "error", "timing": None, "error": why[:ERROR_MAX]}
        )
        # a new dict: a JSON column sees a change only when it is given a new value
        result.record = {**(result.record or {}), "remeasure": entry}
    session.flush()
    return target


def _asked(confirming: Run) -> set[str]:
    """The case ids the confirmation was asked to measure (its ``--case=`` argument)."""
    ids: set[str] = set()
    for arg in confirming.options.bench_args:
        if arg.startswith("--case="):
            ids.update(i for i in arg.removeprefix("--case=").split(",") if i)
    return ids


__all__ = ["attach", "pending", "request"]
