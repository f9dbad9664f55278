"""The stages of one paired verdict: measure (with its re-measures), then confirm.

``paired_suite.measure_case`` runs stage 1 and, when it finds a change
(``verdict.CONFIRMED``: would block, or an improvement), an independent confirmation;
this module is what one stage is. A stage sets every side up from one seed (identical
inputs on both sides and in every process pair), lets the first pair's sides check their
result once per role, measures until the interval decides or the budget is spent, and
re-measures an inconclusive case in fresh processes (the process is the unit), pooling
the groups of its attempts. Its outcome carries both findings (the time interval's
verdict, with the throttle guard; the accuracy verdict from the two checks) for
``confirmed`` to combine with a second stage's. Record construction stays in
``paired_suite``; the rule itself is ``kernels/verdict.py``'s.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from kernelwatch.kernels.paired import (
    ROUNDS_MAX,
    SETUP_BOUND,
    UNSTEADY,
    CureLedger,
    PairedConfig,
    PairedResult,
    Side,
    compare,
    groups_left_out,
    judge_reliable,
    on_time_groups,
)
from kernelwatch.kernels.record import Correctness, PairedStage
from kernelwatch.kernels.runner import SEED_SPACE
from kernelwatch.kernels.verdict import (
    CONFIRMED,
    AccuracyDecision,
    CaseVerdict,
    accuracy_verdict,
    confirm,
    confirm_accuracy,
    excluded_effect,
)

log = logging.getLogger(__name__)


class SidePool(Protocol):
    """The side processes of a comparison (``paired_suite._Sides``)."""

    pairs: int

    def restart(self) -> None: ...

    def replace(self, names: Sequence[str]) -> None: ...

    def release(self) -> None: ...

    def pair(self) -> tuple[list[Side], list[Side]]: ...

    def respawn(self, sides: Sequence[Side]) -> list[Side]: ...

    def warm(self, asks: dict[str, dict[str, Any]]) -> None: ...

    def settle(self, timeout_s: float | None) -> None: ...

    @property
    def cures(self) -> CureLedger: ...


@dataclass
class Outcome:
    """One stage: its pooled comparison, and what its checks and telemetry said."""

    result: PairedResult
    attempts: int
    timing: CaseVerdict
    accuracy: AccuracyDecision
    seed: int
    reliable: bool
    throttled_blocks: int
    baseline: Correctness | None
    candidate: Correctness | None
    # seconds by where they went, summed over the stage's attempts (PairedResult.costs)
    costs: dict[str, float] = field(default_factory=dict)
    screen: dict[str, Any] = field(default_factory=dict)
    # timed samples the host queued late over the stage's attempts: retaken, kept
    host_late: tuple[int, int] = (0, 0)

    @property
    def verdict(self) -> CaseVerdict:
        """Accuracy first (a correctness matter, as ``broken`` is), then time."""
        if self.accuracy.verdict == CaseVerdict.LESS_ACCURATE:
            return CaseVerdict.LESS_ACCURATE
        return self.timing

    def section(self) -> PairedStage:
        r = self.result
        return PairedStage(
            verdict=str(self.verdict),
            timing_verdict=str(self.timing),
            accuracy_verdict=str(self.accuracy.verdict),
            accuracy_growth=dict(self.accuracy.growth),
            ratio=r.ratio,
            ci_low=r.ci_low,
            ci_high=r.ci_high,
            excluded_effect=excluded_effect(r.ci_low, r.ci_high),
            groups=r.groups,
            attempts=self.attempts,
            seconds=r.seconds,
            seed=self.seed,
            reliable=self.reliable,
            throttled_blocks=self.throttled_blocks,
            baseline_errors=dict(self.baseline.errors) if self.baseline else {},
            candidate_errors=dict(self.candidate.errors) if self.candidate else {},
            costs={k: round(v, 4) for k, v in self.costs.items()},
            resetups=int(self.screen.get("resetups", 0)),
            respawns=int(self.screen.get("respawns", 0)),
            excluded_pairs=int(self.screen.get("excluded_pairs", 0)),
            screen=list(self.screen.get("rows", [])),
            host_late_retaken=self.host_late[0],
            host_late_kept=self.host_late[1],
            host_late_groups=r.host_late_groups,
        )


def measure_stage(
    sides: SidePool,
    factory: str,
    params: dict[str, Any],
    cfg: PairedConfig,
    retries: int,
    fresh_processes: bool,
    seed: int,
    deadline: float | None = None,
    rotation: int = 0,
    max_pairs: int | None = None,
) -> Outcome:
    """Measure until a verdict, re-measuring an inconclusive case ``retries`` times.

    Every side builds its inputs from ``seed``; only the first pair's sides check
    their result (once per role: a marginal kernel's flakiness is not multiplied by
    the number of processes). Every attempt sets the case up anew in every side (a
    new set-up is a new unit: on the H200 the offsets of a short kernel belong to
    the set-up, 2-3 % for a 12 us GEMM, and a set-up again draws new ones,
    docs/measurement.md §6), with the candidates paired to other baselines
    (``rotation`` + the attempt: no baseline/candidate coupling carries over); with
    ``fresh_processes`` each re-measure starts new processes instead (seconds of
    CUDA contexts each). Every attempt's groups count, each attempt's pairs their own
    units. One throttled block in any attempt, and the stage can at worst be
    inconclusive. ``max_pairs``: measure with the first pairs only (a case whose
    inputs do not fit every side's memory at once). Past the ``retries``, a stage
    still inconclusive goes on with short re-measures while they fit its time
    (``next_attempt``, ``PairedConfig.short_remeasure_s``).
    """
    budget = cfg.budget_s
    logs: list[float] = []
    clusters: list[int] = []
    late: list[bool] = []  # per group: it holds a sample the host queued late
    reliable, throttled = True, 0
    side_params = {**params, "seed": seed, "check": False}
    checked: PairedResult | None = None
    result: PairedResult | None = None
    timed: PairedResult | None = None  # the last attempt that timed groups
    attempts = 0
    costs: dict[str, float] = {}
    screened: dict[str, Any] = {"resetups": 0, "respawns": 0, "excluded_pairs": 0, "rows": []}
    host_late = (0, 0)
    began = time.perf_counter()
    rounds_max = cfg.rounds_max
    for attempt in itertools.count():  # ``next_attempt`` says when the stage ends
        if attempt and deadline is not None and time.perf_counter() >= deadline:
            break  # the run's GPU budget is spent: the case stays as it is (inconclusive)
        attempt_began = time.perf_counter()
        if attempt and fresh_processes:
            sides.restart()
        a, b = sides.pair()
        if max_pairs is not None:  # a case too large for every side's memory at once
            a, b = a[:max_pairs], b[:max_pairs]
        turn = (rotation + attempt) % len(b)
        b = b[turn:] + b[:turn]  # candidate i measures beside baseline i - turn
        attempts = attempt + 1
        log.info("attempt %d: %d pairs%s", attempts, len(a), " (new processes)" if attempt
                 and fresh_processes else "")  # fmt: skip
        result = compare(
            a, b, factory, side_params, side_params,
            replace(cfg, budget_s=budget, rounds_max=rounds_max),
            first_pair={"check": True}, respawn=sides.respawn, cures=sides.cures,
            # a case too large for every side's memory has no room for spares' set-ups
            warm=sides.warm if max_pairs is None or max_pairs >= sides.pairs else None,
            settle=sides.settle,
        )  # fmt: skip
        checked = checked or result
        for key, value in result.costs.items():
            costs[key] = costs.get(key, 0.0) + value
        screened["resetups"] += result.resetups
        screened["respawns"] += result.respawns
        screened["excluded_pairs"] += len(result.excluded_pairs)
        screened["rows"] += result.screen
        host_late = (host_late[0] + result.host_late_retaken, host_late[1] + result.host_late_kept)
        # the screen's sick processes do not measure the next case, where new processes
        # cure here (``CureLedger``: on one H200 they stayed slow in 23 of 24 slots)
        if result.sick and sides.cures.respawn_pays():
            sides.replace(result.sick)
        reliable = reliable and result.reliable
        throttled += result.throttled_blocks
        # an unsteady attempt (``paired.compare``) timed nothing: the stage's evidence
        # is its other attempts', and the next attempt draws new set-ups
        if result.stop_reason != UNSTEADY:
            timed = result
        logs += [math.log(r) for r in result.group_ratios]
        clusters += [attempt * 1000 + c for c in result.clusters or []]
        late += result.late_groups or [False] * len(result.group_ratios)
        shown = timed or result
        if logs:
            judged, judged_by = on_time_groups(
                logs, clusters if shown.clusters is not None else None, late
            )
            ratio, lo, hi, verdict = judge_reliable(judged, cfg, judged_by, reliable)
        else:
            ratio, lo, hi, verdict = math.nan, math.nan, math.nan, CaseVerdict.INCONCLUSIVE
        shown.ratio, shown.ci_low, shown.ci_high = ratio, lo, hi
        shown.verdict, shown.groups = verdict, len(logs)
        shown.host_late_groups = groups_left_out(late)
        if verdict != CaseVerdict.INCONCLUSIVE:
            break
        if result.stop_reason == UNSTEADY and result.screen_drifted:
            # the time moved within processes between screen rounds: another attempt's
            # new set-ups cannot steady it (the varlen prefill of §13b: three attempts,
            # all unsteady, 67.7 GPU-s). A burst that only shrinks gets its next attempt
            log.info("unsteady, and the off sides moved between rounds: no new attempt")
            break
        now = time.perf_counter()
        kind = next_attempt(attempt + 1, retries, now - began, now - attempt_began, cfg)
        if kind is None:
            break
        if kind == "fixed":
            budget *= 2
        else:
            log.info("short re-measure: %.1f s spent, %.1f s the last attempt",
                     now - began, now - attempt_began)  # fmt: skip
        # an attempt that ran into rounds_max, or stopped as set-up bound, showed that
        # more rounds did not pay: the next one times only ``short_rounds`` and spends
        # the time on its new set-ups
        rounds_bound = result.stop_reason in (ROUNDS_MAX, SETUP_BOUND) and cfg.short_remeasure_s > 0
        rounds_max = max(2, cfg.short_rounds) if rounds_bound else cfg.rounds_max
    result = timed or result
    assert result is not None and checked is not None
    base, cand = correctness_of(checked.info_a), correctness_of(checked.info_b)
    accuracy = (
        accuracy_verdict(base.errors, cand.errors)
        if base is not None and cand is not None
        else AccuracyDecision(CaseVerdict.UNCHANGED, {}, "no correctness reported")
    )
    return Outcome(
        result, attempts, CaseVerdict(result.verdict), accuracy, seed, reliable, throttled,
        base, cand, costs, screened, host_late,
    )  # fmt: skip


def confirmation_stage(
    sides: SidePool,
    factory: str,
    params: dict[str, Any],
    cfg: PairedConfig,
    retries: int,
    seed: int,
    pairs: int,
) -> Outcome:
    """The independent stage that a stage-1 change needs (``verdict.CONFIRMED``):
    every attempt in new processes, so that each attempt's pairs are new units.

    A process carries an offset of its own that a new set-up in it does not draw
    again, so a confirmation in stage 1's processes repeats stage 1's offsets, and
    re-measures pooled in its own processes narrow onto them. On an H100 (2026-12-06,
    docs/measurement.md §29) an A/A FP8 rowwise GEMM read 1.0056-1.0204 in 13
    attempts of one pool, stage 1 pooled them to [1.0043, 1.0352], and a
    confirmation in the same processes agreed: a false block. It runs only for
    cases whose stage 1 found a change, so its start-ups (seconds each) fall on few
    cases.
    """
    sides.restart()
    return measure_stage(
        sides, factory, params, cfg, retries, True, seed,
        rotation=max(1, pairs // 2), max_pairs=pairs,
    )  # fmt: skip


def next_attempt(
    done: int, retries: int, spent_s: float, last_s: float, cfg: PairedConfig
) -> Literal["fixed", "short"] | None:
    """What follows ``done`` inconclusive attempts: ``"fixed"`` (one of the ``retries``
    re-measures, twice the budget), ``"short"`` (one more while the stage is cheap,
    ``PairedConfig.short_remeasure_s``) or None (the stage ends inconclusive).

    A short re-measure must fit: the time spent so far plus one more attempt like the
    last stays within ``short_remeasure_s``, so a long kernel (whose attempts cost
    seconds of blocks each) never gets one, and a stage never runs past the cap by
    more than one attempt's misjudged cost."""
    if done <= retries:
        return "fixed"
    if done >= cfg.attempts_max or cfg.short_remeasure_s <= 0:
        return None
    return "short" if spent_s + last_s <= cfg.short_remeasure_s else None


def confirmed(first: Outcome, second: Outcome) -> CaseVerdict:
    """The two-stage verdict: a stage-1 finding (``verdict.CONFIRMED``) stands only if
    stage 2 agrees; a blocking one is read first, so a less accurate kernel that also
    got faster is judged by its accuracy."""
    if first.accuracy.verdict == CaseVerdict.LESS_ACCURATE:
        acc = confirm_accuracy(CaseVerdict.LESS_ACCURATE, second.accuracy.verdict)
        if acc == CaseVerdict.LESS_ACCURATE:
            return acc
    timing = confirm(first.timing, second.timing)  # passes a non-change through
    return timing if timing in CONFIRMED else CaseVerdict.INCONCLUSIVE


def correctness_of(info: dict[str, Any]) -> Correctness | None:
    """The check a side reported with its set-up (or its ``BrokenCase``), if any."""
    data = info.get("correctness")
    return Correctness(**data) if isinstance(data, dict) else None


def next_seed(seed: int) -> int:
    """The confirmation's seed: new inputs, reproducible from stage 1's seed."""
    new = (seed * 6364136223846793005 + 1442695040888963407) % SEED_SPACE
    return new if new != seed else (seed + 1) % SEED_SPACE


__all__ = [
    "Outcome",
    "SidePool",
    "confirmed",
    "correctness_of",
    "measure_stage",
    "confirmation_stage",
    "next_attempt",
    "next_seed",
]
