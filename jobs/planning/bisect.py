"""The bisection search, pure: which commit to measure next, and when the culprit is known.

No database, no git, no broker: the driver (``bisect_driver.py``) turns stored steps
into :class:`Step` values, asks :func:`next_action` what to do, and turns the answer
into a run. So the whole search is tested with a fake measurement in milliseconds
(``tests/jobs/planning/test_bisect_search.py``), and any process can resume it from
the database after a restart: the answer depends on the steps alone.

Commits are indices into the first-parent list ``[good, c1, ..., bad]`` (0 is good,
``last`` is bad). A step measures one commit in paired mode against another build
and ends ``good`` (nothing that matters moved), ``bad`` (a regression,
``less_accurate`` or broken case: ``kernels.verdict.BLOCKING``) or ``skip`` (the
commit did not build, or its suite errored; as ``git bisect skip``: never blamed,
a neighbour is tried instead).

Phases, in order:

1. ``establish`` (optional; manual requests): bad against good. Not bad: nothing to
   find. Skipped: bad itself cannot be measured, an error.
2. ``search``: inside the current segment (good index ``g``, bad index ``last``)
   every step measures a commit against ``g``'s build; the probe is the untested,
   unskipped commit nearest the middle of the open interval (lowest known bad above
   the highest known good), so each step halves the range.
3. ``confirm``: the candidate culprit ``c`` against its parent ``c - 1``, in fresh
   runs: it stands only if that says bad too (a slow drift over many commits, each
   below the threshold, is not one commit's fault and is reported as not found).
4. ``residual``: bad against the confirmed culprit. Bad still differs: a second
   culprit lies in ``(c, last]``; the search starts again with ``c`` as the good
   build. This is how two steps in one range are found one after the other.

A budget of device seconds (the sum of the steps' measured time) stops the search
with ``not_found`` before the next step would start; so does ``max_steps``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kernelwatch.kernels.casepattern import case_names, matches
from kernelwatch.kernels.verdict import BLOCKING, ORDER, CaseVerdict

# A confirmation (the culprit against its parent) that could not be measured is tried
# this many times before the search says so.
CONFIRM_TRIES = 2
# The verdicts that are a change in time: a bisection following one needs a ratio.
TIME_CHANGES = frozenset({CaseVerdict.REGRESSION.value, CaseVerdict.IMPROVEMENT.value})


class Outcome(StrEnum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class Purpose(StrEnum):
    ESTABLISH = "establish"
    SEARCH = "search"
    CONFIRM = "confirm"
    RESIDUAL = "residual"


@dataclass(frozen=True)
class Step:
    """One measurement: commit ``index`` against the build of ``against``.

    outcome: None while its run is in flight.
    """

    index: int
    against: int
    purpose: Purpose
    outcome: Outcome | None = None


@dataclass(frozen=True)
class Measure:
    """Measure commit ``index`` against the build of ``against`` next."""

    index: int
    against: int
    purpose: Purpose


@dataclass(frozen=True)
class Wait:
    """A step is still running: nothing to decide until it ends."""


@dataclass(frozen=True)
class Done:
    """The search ended.

    status: found | not_found | error. culprits: confirmed culprit indices, oldest
    first (several when a residual showed a second step). reason: why it ended.
    """

    status: str
    culprits: tuple[int, ...] = ()
    reason: str = ""


Action = Measure | Wait | Done


@dataclass(frozen=True)
class Limits:
    """When to give up: device seconds spent and steps taken."""

    spent_s: float = 0.0
    budget_s: float | None = None
    max_steps: int = 64


@dataclass
class _Segment:
    good: int
    outcomes: dict[int, Outcome] = field(default_factory=dict)


@dataclass(frozen=True)
class CaseResult:
    """What judging a step needs of one case's result, from a stored row or a paired record.

    names: what the case pattern is matched against (the kernel, "kernel label", the
    case id). status: the record's status (``skip`` leaves the case out). verdict: the
    case verdict word, None when none was given. ratio: candidate over baseline time.
    """

    names: tuple[str, ...]
    status: str
    verdict: str | None
    ratio: float | None = None


def judge(
    cases: Sequence[CaseResult], pattern: str, follows: Collection[str] | None = None
) -> tuple[Outcome, str, int | None]:
    """A finished step's cases as good, bad or skip, the word shown, and the worst case.

    Bad: a matching case is blocking (regression, ``less_accurate``, broken) and of a
    kind the bisection ``follows`` (None: any blocking kind); the index of the worst one
    is returned. Skip: no case matched, or every matching case errored (a suite that
    cannot run says nothing about the change), or a matching case is blocking of
    another kind, or (following a time change) no matching case was compared in time.
    Good otherwise: unchanged, improvement or inconclusive (an inconclusive step is not
    evidence of the change the bisection follows, which was blocking where it was
    found). A step whose run did not build or errored is a skip before its cases are
    looked at (the driver's part).

    Why ``follows``: a bisection of a slowdown across a commit that broke the case for
    a while blamed the break (``broken`` is blocking) and, measured against the broken
    build (no time to compare with), read the real slowdown after it as good: it named
    the wrong commit and never the right one (an audit, 2026-12-05).
    """
    matching = [i for i, c in enumerate(cases) if c.status != "skip" and matches(c.names, pattern)]
    if not matching:
        return Outcome.SKIP, "no case", None
    blocking = [i for i in matching if cases[i].verdict in BLOCKING]
    followed = [i for i in blocking if follows is None or cases[i].verdict in follows]
    if followed:
        worst = min(followed, key=lambda i: (_rank(cases[i].verdict), -(cases[i].ratio or 0.0)))
        return Outcome.BAD, str(cases[worst].verdict), worst
    if blocking:  # blocking, but not the change this bisection follows: no evidence of it
        return Outcome.SKIP, str(cases[blocking[0]].verdict), None
    if all(cases[i].verdict == CaseVerdict.ERROR for i in matching):
        return Outcome.SKIP, CaseVerdict.ERROR.value, None
    if (
        follows is not None
        and set(follows) <= TIME_CHANGES
        and not any(cases[i].ratio is not None for i in matching)
    ):  # e.g. every baseline broken: no time was compared
        return Outcome.SKIP, "no timing", None
    shown = min(matching, key=lambda i: _rank(cases[i].verdict))
    return Outcome.GOOD, str(cases[shown].verdict or CaseVerdict.UNCHANGED.value), None


def _rank(verdict: str | None) -> int:
    order = [v.value for v in ORDER]
    return order.index(verdict) if verdict in order else len(order)


def distinct_builds(keys: Sequence[str]) -> list[int]:
    """The commits a bisection must consider, from each commit's build-input key.

    ``keys[i]``: what decides commit ``i``'s build and what it runs (the tree ids of the
    repository's ``[install] inputs``). A commit whose key equals its parent's builds the
    same library, so it cannot be the culprit and measuring it would only repeat its
    parent: kept are good (0), every commit that changes the key, and bad. FlashAttention-3
    between 16c7f0f6 and 3e87e421: 76 commits, 6 distinct builds of ``hopper/`` and
    ``csrc/cutlass``.
    """
    if not keys:
        return []
    keep = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]
    if keep[-1] != len(keys) - 1:
        keep.append(len(keys) - 1)
    return keep


def probe(good: int, bad: int, outcomes: Mapping[int, Outcome]) -> int | Done:
    """The next commit to search between ``good`` and ``bad`` (indices), or the end.

    ``outcomes``: search results of this segment (relative to ``good``'s build).
    Returns the culprit as ``Done("found", (c,))`` once the lowest known bad commit
    directly follows the highest known good one; ``Done("not_found")`` when only
    skipped commits lie between them (the culprit is one of those, as ``git bisect``
    says, and naming one would blame a commit nobody measured).
    """
    lo = max([good] + [i for i, o in outcomes.items() if o == Outcome.GOOD and good < i < bad])
    hi = min([bad] + [i for i, o in outcomes.items() if o == Outcome.BAD and lo < i <= bad])
    if hi == lo + 1:
        return Done("found", (hi,))
    untested = [i for i in range(lo + 1, hi) if i not in outcomes]
    if not untested:
        return Done(
            "not_found",
            reason=f"only skipped commits lie between indices {lo} and {hi}: the culprit "
            "is one of them or the first bad one",
        )
    mid = (lo + hi) // 2
    return min(untested, key=lambda i: (abs(i - mid), i))


def next_action(
    last: int, steps: Sequence[Step], limits: Limits = Limits(), *, establish: bool = False
) -> Action:
    """What to do next, from the steps so far (see the module docstring)."""
    if last < 1:
        return Done("error", reason="good and bad are the same commit")
    if any(s.outcome is None for s in steps):
        return Wait()
    by_purpose: dict[Purpose, list[Step]] = {p: [] for p in Purpose}
    for s in steps:
        by_purpose[s.purpose].append(s)
    if establish:
        first = by_purpose[Purpose.ESTABLISH]
        if not first:
            return _limited(Measure(last, 0, Purpose.ESTABLISH), steps, limits)
        if first[-1].outcome == Outcome.SKIP:
            return Done("error", reason="the bad commit could not be built or measured")
        if first[-1].outcome == Outcome.GOOD:
            return Done("not_found", reason="the bad commit does not differ from the good one")
    culprits: list[int] = []
    segment = _Segment(0)
    while True:
        for s in by_purpose[Purpose.SEARCH]:
            if s.against == segment.good and s.outcome is not None:
                segment.outcomes[s.index] = s.outcome
        found = probe(segment.good, last, segment.outcomes)
        if isinstance(found, int):
            return _limited(Measure(found, segment.good, Purpose.SEARCH), steps, limits)
        if found.status != "found":
            return Done("found", tuple(culprits), found.reason) if culprits else found
        (c,) = found.culprits
        confirm = [s for s in by_purpose[Purpose.CONFIRM] if s.index == c]
        if not confirm:
            return _limited(Measure(c, c - 1, Purpose.CONFIRM), steps, limits, culprits)
        if confirm[-1].outcome == Outcome.SKIP and len(confirm) < CONFIRM_TRIES:
            # not measured (a build or a run that failed): once more before giving up
            return _limited(Measure(c, c - 1, Purpose.CONFIRM), steps, limits, culprits)
        if confirm[-1].outcome != Outcome.BAD:
            why = (
                f"index {c} was bad against index {segment.good} but not against its "
                "parent: the change is spread over several commits"
                if confirm[-1].outcome == Outcome.GOOD
                else f"index {c} was bad against index {segment.good}, and against its "
                f"parent it could not be measured ({len(confirm)} tries, each skipped)"
            )
            return Done("found", tuple(culprits), why) if culprits else Done("not_found", (), why)
        culprits.append(c)
        if c == last:
            return Done("found", tuple(culprits))
        residual = [s for s in by_purpose[Purpose.RESIDUAL] if s.against == c]
        if not residual:
            return _limited(Measure(last, c, Purpose.RESIDUAL), steps, limits, culprits)
        if residual[-1].outcome != Outcome.BAD:
            return Done("found", tuple(culprits))
        segment = _Segment(c)  # a second step lies after the first culprit


def upcoming(
    last: int,
    steps: Sequence[Step],
    limits: Limits = Limits(),
    *,
    establish: bool = False,
    depth: int = 2,
) -> list[int]:
    """The commits the search may measure within the next ``depth`` steps, nearest first.

    Why: a step's build (FlashAttention-3: ~100 s) otherwise runs on the GPU that then
    measures it; knowing which commits can come next lets idle CPU workers build them
    ahead (``build_ahead.py``). Both outcomes of the step in flight (``steps``' one with
    no outcome; none in flight: the step :func:`next_action` would plan now) are
    assumed in turn, good and bad, and each hypothetical step's outcomes again, down to
    ``depth`` steps; a skip is not explored (its neighbour is one more build, then).
    Returned are each hypothetical step's commit and its ``against`` build, level by
    level, without duplicates and without commits ``steps`` already measure (those are
    built, or being built by their own run). ``depth`` 0: nothing.
    """
    known = {i for s in steps for i in (s.index, s.against)}
    out: list[int] = []
    level: list[list[Step]] = [list(steps)]
    for _ in range(depth):
        following: list[list[Step]] = []
        for state in level:
            for measure, after in _next_steps(last, state, limits, establish):
                following.append(after)
                for i in (measure.index, measure.against):
                    if i not in known:
                        known.add(i)
                        out.append(i)
        level = following
    return out


def _next_steps(
    last: int, steps: Sequence[Step], limits: Limits, establish: bool
) -> list[tuple[Measure, list[Step]]]:
    """The steps that can follow ``steps``: one per outcome of the step in flight, each
    with the history it leaves (that step resolved, the new one in flight)."""
    pending = [k for k, s in enumerate(steps) if s.outcome is None]
    if not pending:
        histories = [list(steps)]
    else:
        histories = [
            [replace(s, outcome=o) if k in pending else s for k, s in enumerate(steps)]
            for o in (Outcome.GOOD, Outcome.BAD)
        ]
    out: list[tuple[Measure, list[Step]]] = []
    for h in histories:
        action = next_action(last, h, limits, establish=establish)
        if isinstance(action, Measure):
            out.append((action, [*h, Step(action.index, action.against, action.purpose)]))
    return out


def _limited(
    action: Measure, steps: Sequence[Step], limits: Limits, culprits: Sequence[int] = ()
) -> Action:
    """``action`` unless the budget or the step limit says stop first."""
    over = limits.budget_s is not None and limits.spent_s >= limits.budget_s
    if over or len(steps) >= limits.max_steps:
        why = (
            f"budget of {limits.budget_s:g} device seconds spent ({limits.spent_s:.0f} s)"
            if over
            else f"step limit of {limits.max_steps} reached"
        )
        return Done("found" if culprits else "not_found", tuple(culprits), why)
    return action


__all__ = [
    "Action",
    "CaseResult",
    "Done",
    "Limits",
    "Measure",
    "Outcome",
    "Purpose",
    "Step",
    "Wait",
    "case_names",
    "judge",
    "matches",
    "next_action",
    "probe",
    "upcoming",
]
