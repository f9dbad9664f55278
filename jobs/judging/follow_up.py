"""A run the judgement itself asks for: one more measurement before a verdict is given.

Two rules of the judgement need a measurement the run does not have: a baseline
measured only in another environment class (``baseline_remeasure.py``) and a
regression judged after its job ended, with no independent re-measure
(``confirmation.py``). Each plans a follow-up run here, in the judging transaction:
a manual run marked as the follow-up it is (``RunOptions.follow_up``: it ranks with
bisection steps, ``Authority.BISECTION``, and never gives its commit's answer;
design.md), with the resolved snapshot of a run of that commit (its own recipe, as
the planner resolved it), on the queue of the run that waits, noted in the outbox so
the reconciler sends it (``jobs/planning/reconcile.py``; the judging worker needs no
broker of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from kernelwatch.db import outbox
from kernelwatch.db.models import Run
from kernelwatch.db.run_options import RunOptions
from kernelwatch.jobs.judging.compose import MANUAL_TRIGGER

# What a copied snapshot must not carry over: where the run came from, what happened
# to it, and what it was compared with (a follow-up is one commit, measured alone).
_NOT_COPIED = ("pr", "github", "requested", "joined", "imported_from", "records", "gate",
               "bisection_id", "requeued_at", "requeues", "runner_log_tail", "judged_with",
               "baseline_remeasure", "confirmation", "baseline_for", "confirms",
               "judged_late", "paired", "baseline_run_id")  # fmt: skip


def plan_follow_up(
    session: Session, like: Run, waiting: Run, suites: Sequence[str], **options: Any
) -> Run:
    """A queued manual run of ``like``'s commit with ``like``'s snapshot and ``options``
    on top, on ``waiting``'s queue, its message noted in the outbox."""
    kept: Mapping[str, Any] = {
        k: v for k, v in like.options.to_json().items() if k not in _NOT_COPIED
    }
    run = Run(
        repository_id=like.repository_id,
        commit_id=like.commit_id,
        suites=list(suites),
        trigger=MANUAL_TRIGGER,
        status="queued",
        baseline_sha=None,
        device_class=waiting.device_class,
        queue=waiting.queue,
        options=RunOptions.parse({**kept, **options}),
    )
    session.add(run)
    session.flush()
    outbox.add(session, run.id, run.queue, run.trigger)
    return run


__all__ = ["plan_follow_up"]
