"""A baseline measured in another environment is measured again, where the run was.

A series is (library, suite, case, GPU class, environment class: python, torch,
Triton; design.md), so after the workers move to a new torch every push's baseline
commit has measurements only of the old class, and its cases cannot be compared
(``baselines.py``). Reading that as ``error`` ("nothing compared") on every push
until someone re-measures the parent by hand is what the service did; here the run
that finds its baseline stale asks for a run of its baseline commit on its own
queue, waits for it as it waits for any baseline still measuring, and is judged
when it ends (``analysis.analyze_ready``).

The new run copies the stale baseline run's resolved snapshot (that commit's own
recipe, as the planner resolved it), with the suites of the run that waits. It is a
follow-up run: it never gives the baseline commit's answer, and it has no baseline of
its own, so it never asks for another. Each waiting
run asks once (``RunOptions.baseline_remeasure``): if the re-measure lands in yet
another environment, or fails, the run is judged with what there is, and says so. Imported
records never ask: they were measured elsewhere, and no worker here reproduces their
environment. The run is planned by ``follow_up.py``.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from kernelwatch.db.models import Result, Run
from kernelwatch.jobs.judging.baselines import measured_elsewhere
from kernelwatch.jobs.judging.follow_up import plan_follow_up


def request(session: Session, run: Run, bases: dict[str, Result]) -> Run | None:
    """The run planned to measure ``run``'s baseline commit again in ``run``'s
    environment, or None when there is nothing to ask (see the module)."""
    if run.options.baseline_remeasure is not None or run.options.imported_from is not None:
        return None
    stale = measured_elsewhere(session, run, bases)
    if stale is None:
        return None
    again = plan_follow_up(session, stale, run, run.suites, baseline_for=run.id)
    run.options = run.options.with_(baseline_remeasure=again.id)
    return again


__all__ = ["request"]
