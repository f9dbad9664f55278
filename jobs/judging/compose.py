"""Which measurement speaks for a case at a commit: the authority of runs, per case.

A commit is measured many times: by the push or pull-request run that gates it, by
``kernelwatch run`` (with ``--gate`` or without), by the Reproduce command of the
dashboard, by bisection steps and their confirmation re-measures. None of them is
"the" answer; each case's answer comes from its most authoritative measurement
(design.md, "A commit's answer"):

    push / pull-request run (and nightly, demo, import)  >  manual run with --gate
    >  manual run  >  bisection step or confirmation re-measure

and the newest within a kind. A run that measured some cases only adds or refreshes
those; a case that was measured but could not be compared (nothing to compare with)
gives way to a compared one of the same kind. Bisection steps never take part in a
commit's gate (``runs_of_commit`` leaves them out); they only fill in a commit's
trend point where nothing else measured it.

This module is the ranking and the pick, pure; :mod:`kernelwatch.jobs.judging.verdicts`
composes a commit's answer with it, :mod:`kernelwatch.jobs.judging.baselines` picks
each case's baseline with it, and the dashboard's trends pick each commit's point
with it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar

from kernelwatch.db.models import Run

MANUAL_TRIGGER = "manual"
# a pull request's runs (its webhook's, ``gate``'s): measured against the merge-base
PR_TRIGGERS = ("pull_request", "gate")
# a watched branch's runs: each commit against its first parent
BRANCH_TRIGGERS = ("push", "nightly")


def baseline_word(trigger: str) -> str:
    """What a run's baseline commit is to a reader: ``merge-base`` for a pull request's
    run, ``parent`` for a branch's, ``baseline`` for the rest (a manual run's
    ``--baseline`` or the commit before it in a range, an import's parent). The PR
    comment said "against merge-base" for every run, a manual range's included."""
    if trigger in PR_TRIGGERS:
        return "merge-base"
    return "parent" if trigger in BRANCH_TRIGGERS else "baseline"


class Authority(IntEnum):
    """How much a run's measurement of a case counts for its commit (higher wins)."""

    BISECTION = 0  # a bisection's step or confirmation, a follow-up run: never a commit's gate
    MANUAL = 1  # kernelwatch run
    MANUAL_GATE = 2  # kernelwatch run --gate
    GATE = 3  # push, pull request, nightly, demo, import

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Authority.BISECTION: "bisection step",
    Authority.MANUAL: "manual run",
    Authority.MANUAL_GATE: "manual run --gate",
    Authority.GATE: "gate run",
}


def authority_of(trigger: str, *, gate: bool = False, bisection: bool = False) -> Authority:
    """The authority of a run from its trigger and options (also for dashboard frames)."""
    if bisection:
        return Authority.BISECTION
    if trigger == MANUAL_TRIGGER:
        return Authority.MANUAL_GATE if gate else Authority.MANUAL
    return Authority.GATE


def authority(run: Run) -> Authority:
    options = run.options
    step = options.bisection_id is not None or options.follow_up
    return authority_of(run.trigger, gate=options.gate, bisection=step)


def source_word(
    trigger: str, kind: Authority, *, baseline_for: bool = False, confirms: bool = False
) -> str:
    """``push run`` / ``manual run`` / ``baseline re-measure``: what kind of run a
    measurement came from (also for dashboard frames)."""
    if baseline_for:
        return "baseline re-measure"
    if confirms:
        return "confirmation re-measure"
    return f"{trigger} run" if kind == Authority.GATE else kind.label


def source_label(run: Run) -> str:
    """``push run 12`` / ``manual run 14``: where a case's answer came from."""
    options = run.options
    what = source_word(
        run.trigger,
        authority(run),
        baseline_for=options.baseline_for is not None,
        confirms=options.confirms is not None,
    )
    return f"{what} {run.id}"


K = TypeVar("K", bound=Hashable)
M = TypeVar("M")


@dataclass(frozen=True)
class Measured(Generic[K, M]):
    """One measurement of case ``key``: by a run of ``authority`` (``run_id`` orders a kind),
    ``judged`` when it was compared (has a verdict); ``item`` is the caller's row."""

    key: K
    authority: Authority
    run_id: int
    judged: bool
    item: M

    @property
    def rank(self) -> tuple[int, bool, int]:
        return (int(self.authority), self.judged, self.run_id)


def pick(measurements: Iterable[Measured[K, M]]) -> dict[K, Measured[K, M]]:
    """Per case, its most authoritative measurement (then a compared one, then the newest)."""
    best: dict[K, Measured[K, M]] = {}
    for m in measurements:
        current = best.get(m.key)
        if current is None or m.rank > current.rank:
            best[m.key] = m
    return best


__all__ = [
    "BRANCH_TRIGGERS",
    "MANUAL_TRIGGER",
    "PR_TRIGGERS",
    "Authority",
    "Measured",
    "authority",
    "authority_of",
    "baseline_word",
    "pick",
    "source_label",
    "source_word",
]
