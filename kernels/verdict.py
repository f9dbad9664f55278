"""The verdict vocabulary and THE rule from (ratio, interval, minimum effect) to a verdict.

Every place that says "regression" calls this module: the paired judge
(``kernels/paired.py``), the run analysis and history (``jobs/judging``), the
Compare page and the PR comment. So they cannot disagree, and a grep for the
words finds one definition. Standard library only: this module is installed
into the environment of the library under test with the rest of ``kernels``.

The rule (``decide``), for a ratio r = candidate / baseline time (> 1: slower)
with an interval [lo, hi] at ``CONFIDENCE`` and a minimum effect d (1 % by
default everywhere):

- **regression** when the slowdown is significant *and* may be relevant:
  lo > 1 + MARGIN·d, hi >= 1 + d, and r >= 1 + POINT·d.
- **improvement**: the mirror image (on the log scale).
- **unchanged** when the whole interval lies inside (1/(1+d), 1+d): an
  equivalence test, so "unchanged" is a finding, not a shrug. A significant
  change smaller than d is unchanged too, and carries its size and direction
  in ``Decision.shift`` / ``detail`` (design.md: not a blocking verdict).
- **inconclusive** otherwise: the interval is too wide to tell.

Why these terms, and not "r >= 1 + d and lo > 1" (the old rule): with the
point estimate required at the threshold, a true +d is flagged only about
half the time, whatever the precision. Here the *interval* carries the
decision:

- lo > 1 + MARGIN·d is the significance test. At CONFIDENCE = 99 % two-sided
  an A/A case has at most a 0.5 % chance per measurement of passing it; the
  margin (a quarter of d) keeps offsets smaller than the interval can see (an
  order effect, a process state the pairs did not sample) from tipping it.
- hi >= 1 + d: an interval that lies wholly below 1 + d has *excluded* a
  relevant slowdown; that is "unchanged (+0.6 %)", never a block. It also
  stops any fixed offset smaller than d from blocking once the interval is
  tight, whatever the number of cases.
- r >= 1 + POINT·d (POINT = 0.5): a wide interval whose best estimate is under
  half the minimum effect is not evidence of a relevant slowdown; it is
  measured again (inconclusive) instead of blocking.

Power at the threshold: with a true +d and a standard error s of log r, the
interval's lower bound clears 1 + d/4 with probability Phi((0.75·d - t·s)/s)
(t the interval's quantile); the point term fails only when r < 1 + d/2,
probability Phi(-0.5·d/s), which is smaller whenever the lower-bound term has
any power. So a +1 % is flagged >= 95 % once s <= 0.75 % / (t + 1.645): 0.15 %
for 8 process pairs (t = 3.50), i.e. a per-pair SD of 0.41 %, about what the
H200 measured (0.38 %, docs/measurement.md run 11).

Multiplicity (``CONFIDENCE``, ``confirm``): a run of 200 cases must block an
unchanged PR at most 1 % of the time, 5e-5 per case. One measurement at 99 %
gives up to 5e-3 per case (one-sided), too much; a 99.99 % interval instead
would need a t quantile of 7.4 at 8 pairs and lose the power above. The design
asks for two stages: a case that would block is re-measured with fresh
processes, independently, and blocks only when the re-measure says regression
too (``confirm``, to be called by the suite runner with a fresh-process
re-measure); two independent 0.5 % events give 2.5e-5 per case, 0.5 % per
200-case PR, while a true +d passes both stages with probability p^2 (0.95^2 =
0.90 at the bare 95 % point, >= 0.99 a little above it). The simulation in
``tests/kernels/test_verdict_simulation.py`` measures both rates under the
two-state process offsets the H200 showed.

A throttled (unreliable) measurement never makes a regression or an
improvement: at worst it is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, TypeGuard

from kernelwatch.kernels.devclass import CPU_CLASS


class CaseVerdict(StrEnum):
    """What one case's comparison means (the design's per-case vocabulary)."""

    REGRESSION = "regression"
    LESS_ACCURATE = "less_accurate"
    BROKEN = "broken"
    ERROR = "error"
    INCONCLUSIVE = "inconclusive"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"


class RunVerdict(StrEnum):
    """What a run means for a merge."""

    PASS = "pass"
    FAIL = "fail"
    NEUTRAL = "neutral"
    ERROR = "error"


class InconclusivePolicy(StrEnum):
    """What a run whose worst case stayed inconclusive becomes (``KW_INCONCLUSIVE_POLICY``)."""

    NEUTRAL = "neutral"
    FAIL = "fail"
    PASS = "pass"


# The default minimum effect (relative) everywhere: service, CLI, deploy examples.
MIN_EFFECT = 0.01
# Two-sided level of each measurement's interval (one stage of two, see above).
CONFIDENCE = 0.99
# The lower bound must clear 1 + MARGIN * min_effect, the point 1 + POINT * min_effect.
MARGIN = 0.25
POINT = 0.5

# Verdicts that fail a merge.
BLOCKING: frozenset[CaseVerdict] = frozenset(
    {CaseVerdict.REGRESSION, CaseVerdict.LESS_ACCURATE, CaseVerdict.BROKEN}
)
# Verdicts that stand only if an independent second stage agrees (``confirm``): the
# blocking findings, and an improvement, which a kernel engineer reads as a claim too
# (an A/A FP8 GEMM read a one-stage "improvement" [0.983, 0.9973] on an H100,
# 2026-12-06, docs/measurement.md §29). Broken needs no second stage: a failed check
# is its own evidence.
CONFIRMED: frozenset[CaseVerdict] = frozenset(
    {CaseVerdict.REGRESSION, CaseVerdict.LESS_ACCURATE, CaseVerdict.IMPROVEMENT}
)
# Verdicts of a case whose time (or accuracy) was compared with the baseline.
COMPARED: frozenset[CaseVerdict] = frozenset(
    {
        CaseVerdict.REGRESSION,
        CaseVerdict.LESS_ACCURATE,
        CaseVerdict.IMPROVEMENT,
        CaseVerdict.UNCHANGED,
        CaseVerdict.INCONCLUSIVE,
    }
)
# Verdicts of the interval rule alone (what ``decide`` can answer).
TIMING: frozenset[CaseVerdict] = frozenset(
    {
        CaseVerdict.REGRESSION,
        CaseVerdict.IMPROVEMENT,
        CaseVerdict.UNCHANGED,
        CaseVerdict.INCONCLUSIVE,
    }
)
# Cases a person should look at, in the order tables list them (worst first).
MOVED: tuple[CaseVerdict, ...] = (
    CaseVerdict.REGRESSION,
    CaseVerdict.LESS_ACCURATE,
    CaseVerdict.BROKEN,
    CaseVerdict.ERROR,
    CaseVerdict.INCONCLUSIVE,
    CaseVerdict.IMPROVEMENT,
)
# Every word in summary order (counts, tables).
ORDER: tuple[CaseVerdict, ...] = (*MOVED, CaseVerdict.UNCHANGED)


@dataclass(frozen=True)
class Decision:
    """A verdict with what it was decided from.

    shift: the relative change (r - 1) when the interval excludes 1, else None;
      an ``unchanged`` case with a shift is a significant change smaller than
      the minimum effect.
    detail: one line for people ("+0.4 % (significant, below the 1 % minimum
      effect)", "a change beyond ±2.1 % is excluded").
    """

    verdict: CaseVerdict
    ratio: float
    low: float
    high: float
    min_effect: float
    shift: float | None = None
    detail: str = ""

    @property
    def blocking(self) -> bool:
        return self.verdict in BLOCKING


def decide(
    ratio: float,
    low: float,
    high: float,
    min_effect: float = MIN_EFFECT,
    *,
    reliable: bool = True,
) -> Decision:
    """The verdict of ratio ``ratio`` with interval [``low``, ``high``] (see the module)."""
    if not (_positive(ratio) and _positive(low) and _positive(high)) or not low <= high:
        return Decision(CaseVerdict.INCONCLUSIVE, ratio, low, high, min_effect, None, "no interval")
    if min_effect <= 0:
        raise ValueError(f"min_effect must be positive, got {min_effect}")
    up = 1 + min_effect
    # Improvements mirror regressions on the log scale: 1/(1+d) is "d faster".
    if low > 1 + MARGIN * min_effect and high >= up and ratio >= 1 + POINT * min_effect:
        verdict = CaseVerdict.REGRESSION
    elif (
        high < 1 / (1 + MARGIN * min_effect)
        and low <= 1 / up
        and ratio <= 1 / (1 + POINT * min_effect)
    ):
        verdict = CaseVerdict.IMPROVEMENT
    elif 1 / up < low and high < up:
        verdict = CaseVerdict.UNCHANGED
    else:
        verdict = CaseVerdict.INCONCLUSIVE
    shift = ratio - 1 if (low > 1 or high < 1) else None
    if not reliable and verdict in (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT):
        return Decision(
            CaseVerdict.INCONCLUSIVE,
            ratio,
            low,
            high,
            min_effect,
            shift,
            "measured on a throttled GPU: never a regression",
        )
    return Decision(
        verdict, ratio, low, high, min_effect, shift, _detail(verdict, ratio, low, high, min_effect)
    )


def case_verdict(
    ratio: float, low: float, high: float, min_effect: float = MIN_EFFECT, *, reliable: bool = True
) -> CaseVerdict:
    """``decide(...).verdict``."""
    return decide(ratio, low, high, min_effect, reliable=reliable).verdict


def confirm(first: CaseVerdict, second: CaseVerdict) -> CaseVerdict:
    """Two-stage verdict: a timing change stands only if an independent re-measure agrees.

    ``second`` must come from fresh processes, judged on its own groups only
    (pooled with the first it would not be independent). A disagreement is
    ``inconclusive``: one of the two measurements was wrong, and which one is
    not known. Verdicts that are not timing changes pass through.
    """
    if first not in (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT):
        return first
    return first if second == first else CaseVerdict.INCONCLUSIVE


def run_verdict(
    verdicts: Iterable[CaseVerdict | str | None],
    policy: InconclusivePolicy | str = InconclusivePolicy.NEUTRAL,
) -> RunVerdict:
    """A run's verdict from its cases' (``None``: no verdict, e.g. skipped or new).

    An error anywhere makes the run ``error``; else any blocking case fails it;
    else an inconclusive case makes it what ``policy`` says (neutral by default:
    never green by accident); else it passes.
    """
    seen = {CaseVerdict(v) for v in verdicts if v is not None}
    if CaseVerdict.ERROR in seen:
        return RunVerdict.ERROR
    if seen & BLOCKING:
        return RunVerdict.FAIL
    if CaseVerdict.INCONCLUSIVE in seen:
        return RunVerdict(InconclusivePolicy(policy).value)
    return RunVerdict.PASS


# --------------------------------------------------------------------------- one case, both sides
#
# The whole judgement of a case: what each side's status says first (a wrong candidate is
# broken whatever its speed; a side that did not pass has no time), then the interval
# rule at the case's threshold, with throttled measurements held back. The paired judge
# (``kernels/paired_suite.py``), the run analysis (``jobs/judging/analysis.py``) and the
# Compare page (``dashboard/compare_stats.py``) all call ``judge_case``, so a broken,
# failed or missing baseline gets one answer everywhere:
#
# - baseline broken (its correctness check failed), candidate correct: ``unchanged``,
#   no ratio, the note BASELINE_BROKEN. A fix is not a time comparison, and it must not
#   hold a merge (inconclusive would make the run neutral).
# - baseline errored or skipped, or never measured: no verdict (None) with a note: there
#   is nothing to compare with (a kernel new at this commit, or a baseline that crashed).

# Record statuses (``kernels/record.py``): what one side of a case ended as.
PASS_STATUS: Final = "pass"
FAIL_STATUS: Final = "fail"
ERROR_STATUS: Final = "error"
SKIP_STATUS: Final = "skip"

# Why a case has no verdict, or what its verdict rests on, in words people read.
NOTE_NEW = "no baseline measurement of this case: nothing to compare with"
NOTE_BASELINE_BROKEN = "baseline was broken: a fix is not a time comparison"
NOTE_STILL_BROKEN = "broken before this change too, its error no worse: not this change's doing"
NOTE_BASELINE_UNMEASURED = "baseline has no time for this case ({status}): nothing to compare with"
NOTE_SKIPPED = "skipped"
NOTE_UNMEASURED = "not measured: the run's GPU budget was spent"
# a case the worker's suite timeout ended the run before (``suite_process.unreached``): a
# ``skip`` whose error begins so, counted apart in a run's price
NOTE_UNREACHED = "not reached: suite timed out"
NOTE_TOO_FEW = "too few samples to compare"
NOTE_NO_PAIRED_VERDICT = "the paired record carries no verdict"
# an unpaired run's regression its re-measure in a fresh process did not repeat
NOTE_UNCONFIRMED = "a regression not confirmed"


@dataclass(frozen=True)
class Judgement:
    """A case's verdict with what it rests on.

    verdict: None when there is nothing to judge (skipped, new, a baseline without time).
    ratio, low, high: the compared interval (None when no time was compared).
    detail: one line for people (the rule's detail, or why there is no verdict).
    """

    verdict: CaseVerdict | None
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    detail: str = ""

    @property
    def blocking(self) -> bool:
        return self.verdict in BLOCKING


def judge_case(
    candidate: str,
    baseline: str | None,
    ratio: float | None = None,
    low: float | None = None,
    high: float | None = None,
    min_effect: float = MIN_EFFECT,
    *,
    reliable: bool = True,
    paired: bool = False,
    measured: CaseVerdict | str | None = None,
    measured_at: float | None = None,
    errors: tuple[Mapping[str, float], Mapping[str, float]] | None = None,
) -> Judgement:
    """THE verdict of one case from both sides' statuses, its interval and threshold.

    ``candidate``/``baseline``: the sides' record statuses (``baseline`` None: never
    measured). ``ratio``/``low``/``high``: candidate / baseline time with its interval.
    ``paired``: the case was judged inside a paired measurement, whose verdict
    ``measured`` (two stages, accuracy included) stands unless the case's threshold
    differs from the one it was measured at (``measured_at``) or the measurement was
    throttled: then the interval is judged again here. Throttled (``reliable`` false)
    is never a regression or an improvement. ``errors``: the baseline's and the
    candidate's check errors (``Correctness.errors``); a candidate that fails its check
    where the baseline failed it too, with an error no worse (:func:`still_broken`), is
    ``unchanged``: a change that leaves a broken kernel as broken as it was (a docs-only
    pull request on a broken main) is not blocked for it.
    """
    if candidate == FAIL_STATUS:
        if baseline == FAIL_STATUS and errors is not None and still_broken(*errors):
            return Judgement(CaseVerdict.UNCHANGED, detail=NOTE_STILL_BROKEN)
        return Judgement(CaseVerdict.BROKEN, detail="correctness check failed")
    if candidate == ERROR_STATUS:
        return Judgement(CaseVerdict.ERROR, detail="the case raised or crashed")
    if candidate != PASS_STATUS:
        if paired and measured == CaseVerdict.INCONCLUSIVE:
            # left unmeasured by the run's GPU budget: undecided, so the run is neutral,
            # never a pass that skipped what it could not afford (paired_suite.unmeasured)
            return Judgement(CaseVerdict.INCONCLUSIVE, detail=NOTE_UNMEASURED)
        return Judgement(None, detail=NOTE_SKIPPED)
    interval = _interval(ratio, low, high)
    if paired:
        if not is_verdict(measured):
            return Judgement(CaseVerdict.ERROR, detail=NOTE_NO_PAIRED_VERDICT)
        return _rejudged(CaseVerdict(measured), interval, min_effect, measured_at, reliable)
    if baseline is None:
        return Judgement(None, detail=NOTE_NEW)
    if baseline == FAIL_STATUS:
        return Judgement(CaseVerdict.UNCHANGED, detail=NOTE_BASELINE_BROKEN)
    if baseline != PASS_STATUS:
        return Judgement(None, detail=NOTE_BASELINE_UNMEASURED.format(status=baseline))
    if interval is None:
        return Judgement(None, ratio, low, high, NOTE_TOO_FEW)
    r, lo, hi = interval
    d = decide(r, lo, hi, min_effect, reliable=reliable)
    return Judgement(d.verdict, r, lo, hi, d.detail)


def _rejudged(
    measured: CaseVerdict,
    interval: tuple[float, float, float] | None,
    min_effect: float,
    measured_at: float | None,
    reliable: bool,
) -> Judgement:
    """A paired verdict, judged again by the rule where its threshold or reliability asks."""
    if interval is None:
        if measured in (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT) and not reliable:
            return Judgement(CaseVerdict.INCONCLUSIVE, detail=_THROTTLED)
        return Judgement(measured)
    r, lo, hi = interval
    other_threshold = measured_at is None or abs(measured_at - min_effect) > 1e-12
    if measured in TIMING and (other_threshold or not reliable):
        d = decide(r, lo, hi, min_effect, reliable=reliable)
        # The interval is the first stage's. Measured at a finer threshold than the
        # case's (the run measures at its smallest), the two stages looked for every
        # change this one can see: one they did not confirm is not made one here (it
        # blocked on one stage, an audit found, 2026-12-05). Measured at a coarser one,
        # they did not look at this resolution, and the interval is all there is.
        looser = measured_at is not None and min_effect > measured_at + 1e-12
        if (
            looser
            and d.verdict in (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT)
            and (d.verdict != measured)
        ):
            return Judgement(CaseVerdict.INCONCLUSIVE, r, lo, hi, f"{d.detail}; {_UNCONFIRMED}")
        return Judgement(d.verdict, r, lo, hi, d.detail)
    if measured in (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT) and not reliable:
        return Judgement(CaseVerdict.INCONCLUSIVE, r, lo, hi, _THROTTLED)
    detail = decide(r, lo, hi, min_effect, reliable=reliable).detail if measured in TIMING else ""
    return Judgement(measured, r, lo, hi, detail)


_THROTTLED = "measured on a throttled GPU: never a regression"
_UNCONFIRMED = "not confirmed by the measurement's second stage"


def _interval(
    ratio: float | None, low: float | None, high: float | None
) -> tuple[float, float, float] | None:
    if ratio is None or low is None or high is None:
        return None
    if not (_positive(ratio) and _positive(low) and _positive(high)) or low > high:
        return None
    return float(ratio), float(low), float(high)


# --------------------------------------------------------------------------- CPU timings
#
# On the CPU a timing verdict (regression, improvement, inconclusive) is plumbing only: a
# loaded shared machine moves CPU times by whole factors, so they never decide a gate
# unless ``KW_CPU_TIMING_GATES`` asks. Correctness and errors count everywhere. The
# setting acts wherever an answer is composed from case verdicts: the worker's analysis
# (the run's own verdict) and every reader of a commit's answer (gate, show, the API,
# the reporter, the dashboard), each with its own process's setting.

_CPU_WORDS: dict[CaseVerdict, str] = {
    CaseVerdict.REGRESSION: "slower",
    CaseVerdict.IMPROVEMENT: "faster",
    CaseVerdict.INCONCLUSIVE: "inconclusive",
    CaseVerdict.UNCHANGED: "unchanged",
}
PLUMBING_ONLY = "plumbing only"


def plumbing_only(device_class: str, verdict: object, *, cpu_timings_gate: bool = False) -> bool:
    """Whether a verdict is a CPU timing: shown, never with a GPU's authority."""
    return (
        device_class == CPU_CLASS
        and is_verdict(verdict)
        and CaseVerdict(verdict) in TIMING
        and not cpu_timings_gate
    )


def gating(
    device_class: str,
    verdicts: Iterable[CaseVerdict | str | None],
    *,
    cpu_timings_gate: bool = False,
) -> list[CaseVerdict | None]:
    """The case verdicts that count for a run's or a commit's answer (CPU timings: none)."""
    return [
        CaseVerdict(v)
        if is_verdict(v) and not plumbing_only(device_class, v, cpu_timings_gate=cpu_timings_gate)
        else None
        for v in verdicts
    ]


def cpu_word(verdict: CaseVerdict | str, *, short: bool = False) -> str:
    """A CPU timing verdict as tables print it: ``slower on CPU (plumbing only)``."""
    what = _CPU_WORDS.get(CaseVerdict(verdict), str(verdict))
    return f"{what} on CPU" if short else f"{what} on CPU ({PLUMBING_ONLY})"


def class_verdict_of(
    device_class: str,
    verdicts: Iterable[CaseVerdict | str | None],
    policy: InconclusivePolicy | str = InconclusivePolicy.NEUTRAL,
    *,
    cpu_timings_gate: bool = False,
) -> RunVerdict:
    """A run's (or one GPU class's composed) verdict from its case verdicts."""
    return run_verdict(gating(device_class, verdicts, cpu_timings_gate=cpu_timings_gate), policy)


# --------------------------------------------------------------------------- a commit


class CommitAnswer(StrEnum):
    """A commit's answer over its GPU classes (``kernelwatch gate`` maps it to exit codes)."""

    PASS = RunVerdict.PASS.value
    FAIL = RunVerdict.FAIL.value
    NEUTRAL = RunVerdict.NEUTRAL.value
    ERROR = RunVerdict.ERROR.value
    PENDING = "pending"
    NONE = "none"


def commit_answer(classes: Iterable[RunVerdict | str | None]) -> CommitAnswer:
    """The commit's answer from each GPU class's verdict (None: that class is pending).

    ``none`` without classes. Pending wins (a class still measuring may change the
    answer); then a definite failure anywhere, even beside another class's error (the
    more useful answer); then error; then neutral (a case stayed inconclusive); else pass.
    """
    seen = list(classes)
    if not seen:
        return CommitAnswer.NONE
    if any(v is None for v in seen):
        return CommitAnswer.PENDING
    words = {RunVerdict(v) for v in seen if v is not None}
    for verdict in (RunVerdict.FAIL, RunVerdict.ERROR, RunVerdict.NEUTRAL):
        if verdict in words:
            return CommitAnswer(verdict.value)
    return CommitAnswer.PASS


def is_verdict(value: object) -> TypeGuard[str]:
    """Whether ``value`` is one of the case-verdict words."""
    return isinstance(value, str) and value in CaseVerdict.__members__.values()


# --------------------------------------------------------------------------- accuracy
#
# ``less_accurate`` (design.md): correct within the absolute bound, but the error
# against the reference grew beyond a margin over the baseline's error on
# identical inputs. Paired mode checks both sides once with the same seed, so the
# two errors differ only by what the libraries compute; for identical libraries
# they are equal. Why a margin on rel-L2 *or* max-abs: the absolute bound
# (``correctness.check``) allows 2-4x PyTorch's own low-precision error, so a
# kernel that was at 1x can lose more than half its accuracy and still pass it
# (on the H200 a split-K fork accumulating in bf16 went from rel-L2 0.00166 to
# 0.00403, 2.4x, against a bound of 0.0072). max-abs catches a slip confined to a
# few outputs that rel-L2 averages away.
# Why 1.25: the promise is a 1.5x loss caught, and a verdict needs both stages, each
# on inputs of its own seed: a true 1.5x reads a little above or below 1.5 on a
# draw, so a margin at 1.5 caught it in about a quarter of the cases (both stages
# over it; an audit, 2026-12-05). As the timing rule flags from half its threshold
# (``POINT``), this flags from half the way to 1.5x. Identical libraries repeat
# their error exactly on the same inputs: growth 1.000 in all 58 paired checks of
# unchanged code in docs/data (H200, FlashInfer, SDPA, Liger), so 1.25x is far
# outside what identical code reads.
# Why a noise floor: errors far below the output's resolution (a float32 kernel
# at 1e-7) may triple by reordering a sum and mean nothing; an error under
# ACCURACY_NOISE units of the output dtype's roundoff counts as that floor.

# A candidate's error may grow by this factor over the baseline's.
ACCURACY_MARGIN = 1.25
# Errors below this many unit roundoffs of the output dtype are not told apart.
ACCURACY_NOISE = 0.1
# The error measures compared (``correctness.check``'s ``errors`` keys).
ACCURACY_MEASURES: tuple[str, ...] = ("rel_l2", "max_abs")


@dataclass(frozen=True)
class AccuracyDecision:
    """Whether the candidate lost accuracy against the baseline, and by how much.

    growth: candidate error / max(baseline error, noise floor), per measure.
    """

    verdict: CaseVerdict  # LESS_ACCURATE or UNCHANGED
    growth: dict[str, float]
    detail: str = ""

    @property
    def blocking(self) -> bool:
        return self.verdict in BLOCKING


def accuracy_verdict(
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    margin: float = ACCURACY_MARGIN,
) -> AccuracyDecision:
    """``less_accurate`` when a candidate error exceeds ``margin`` x the baseline's.

    ``baseline``/``candidate``: the ``errors`` of each side's check on the same
    inputs (``rel_l2``, ``max_abs``, ``output_roundoff``, ``ref_max_abs``). The
    noise floor of rel-L2 is ``ACCURACY_NOISE * output_roundoff``, of max-abs the
    same times ``ref_max_abs``. Records without the scale keys (older runs) are
    never called less accurate: there is no floor to compare at.
    """
    roundoff = candidate.get("output_roundoff", baseline.get("output_roundoff"))
    if not roundoff or not math.isfinite(roundoff):
        return AccuracyDecision(CaseVerdict.UNCHANGED, {}, "no error scale recorded")
    scale = {"rel_l2": 1.0, "max_abs": float(baseline.get("ref_max_abs", 0.0))}
    growth: dict[str, float] = {}
    for name in ACCURACY_MEASURES:
        if name not in baseline or name not in candidate:
            continue
        floor = ACCURACY_NOISE * roundoff * scale.get(name, 1.0)
        base = max(float(baseline[name]), floor)
        if base > 0:
            growth[name] = float(candidate[name]) / base
    worse = {k: g for k, g in growth.items() if g > margin}
    if not worse:
        return AccuracyDecision(CaseVerdict.UNCHANGED, growth, "")
    detail = ", ".join(
        f"{k} {candidate[k]:.3g} vs {baseline[k]:.3g} ({g:.2f}x)" for k, g in worse.items()
    )
    return AccuracyDecision(
        CaseVerdict.LESS_ACCURATE, growth, f"error grew beyond {margin:g}x: {detail}"
    )


def still_broken(baseline: Mapping[str, float], candidate: Mapping[str, float]) -> bool:
    """Whether a candidate that failed its check is no worse than a baseline that failed
    it too: every compared error within the accuracy margin (:func:`accuracy_verdict`),
    and at least one compared. A candidate error that is not finite where the baseline's
    is, or errors that cannot be compared, are a new breakage (``broken``)."""
    for name in ACCURACY_MEASURES:
        cand, base = candidate.get(name), baseline.get(name)
        if cand is None or base is None:
            continue
        if not math.isfinite(float(cand)) and math.isfinite(float(base)):
            return False
    decision = accuracy_verdict(baseline, candidate)
    return bool(decision.growth) and not decision.blocking


def confirm_accuracy(first: CaseVerdict, second: CaseVerdict) -> CaseVerdict:
    """``confirm`` for accuracy: ``less_accurate`` stands only if the re-check agrees.

    The re-check runs in fresh processes on new inputs (a new seed, the same on
    both sides); a disagreement is ``inconclusive``. Other verdicts pass through.
    """
    if first != CaseVerdict.LESS_ACCURATE:
        return first
    return first if second == first else CaseVerdict.INCONCLUSIVE


def excluded_effect(low: float, high: float) -> float | None:
    """The relative change an interval has excluded: beyond ±this it is ruled out.

    What an inconclusive case reports (``+0.4 %; a change beyond ±2.1 % is
    excluded``); None without a finite positive interval.
    """
    if not (_positive(low) and _positive(high)) or low > high:
        return None
    return max(high - 1, 1 / low - 1, 0.0)


def _detail(verdict: CaseVerdict, ratio: float, low: float, high: float, d: float) -> str:
    pct = (ratio - 1) * 100
    if verdict in (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT):
        return f"{pct:+.1f} % (interval {low:.3f}–{high:.3f})"
    if verdict == CaseVerdict.UNCHANGED and (low > 1 or high < 1):
        return f"{pct:+.1f} % (significant, below the {d * 100:g} % minimum effect)"
    if verdict == CaseVerdict.UNCHANGED:
        return f"within ±{d * 100:g} %"
    excluded = excluded_effect(low, high)
    if excluded is None:
        return "no interval"
    return f"{pct:+.1f} %; a change beyond ±{excluded * 100:.1f} % is excluded"


def _positive(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


__all__ = [
    "ACCURACY_MARGIN",
    "CPU_CLASS",
    "ERROR_STATUS",
    "FAIL_STATUS",
    "NOTE_BASELINE_BROKEN",
    "NOTE_STILL_BROKEN",
    "NOTE_BASELINE_UNMEASURED",
    "NOTE_NEW",
    "NOTE_SKIPPED",
    "NOTE_UNCONFIRMED",
    "NOTE_UNMEASURED",
    "NOTE_UNREACHED",
    "PASS_STATUS",
    "PLUMBING_ONLY",
    "SKIP_STATUS",
    "CommitAnswer",
    "Judgement",
    "class_verdict_of",
    "commit_answer",
    "cpu_word",
    "gating",
    "judge_case",
    "plumbing_only",
    "ACCURACY_MEASURES",
    "ACCURACY_NOISE",
    "AccuracyDecision",
    "accuracy_verdict",
    "confirm_accuracy",
    "still_broken",
    "excluded_effect",
    "BLOCKING",
    "COMPARED",
    "CONFIRMED",
    "CONFIDENCE",
    "MARGIN",
    "MIN_EFFECT",
    "MOVED",
    "ORDER",
    "POINT",
    "TIMING",
    "CaseVerdict",
    "Decision",
    "InconclusivePolicy",
    "RunVerdict",
    "case_verdict",
    "confirm",
    "decide",
    "is_verdict",
    "run_verdict",
]
