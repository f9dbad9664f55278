"""How far a case's time moves between runs of the same code: the term a comparison of
two separately measured runs must add to its interval.

An unpaired comparison (``comparison.compare``: a run against its baseline run, a
history run against its parent) bootstraps the samples of each run, and those samples
are blocks of one process. What one process measures differs from what the next one
measures by more than its blocks scatter: on the H200 (2026-12-02, Liger-Kernel's 8
commits through the worker, ``docs/data/service-h200-2026-12-02``) the medians of a
softmax whose code never changed sat at 39.0-39.4 µs in four runs and 40.1-40.4 µs in
the other four, each run's own interval about ±0.1 %; the history's comparison called
one of them +3.4 % [1.030, 1.037], a failed run. The paired gate interleaves both sides
over 8 process pairs and is not affected; every other comparison is.

So the interval of the ratio of two runs' medians is widened by the spread of a run's
median around the series' level, ``sd`` on the log scale, which both runs carry:
half-widths ``sqrt(h**2 + (z * sqrt(2) * sd)**2)`` (``widen``). ``sd`` is read from the
case's own history on the GPU class (``series_sd``: successive differences of the last
``WINDOW`` runs' medians, median absolute, so one real step does not count as noise;
a difference of ``STEP`` or more, a factor of two, is left out as a step whatever the
series' length), and is never below ``GPU_FLOOR`` on a GPU: the median of that
spread over Liger's ten bf16 cases in those 8 runs (0.09-2.5 %, median 0.2 %; the
per-process offsets of ``docs/measurement.md`` §2 are of that size too, ±0.3 % on a
bandwidth kernel). Two
earlier runs (the baseline and one before it) are enough to read a spread, a rough
one: Liger's softmax jumped +3.4 % at its third run, and the 0.9 % between its first
two made that ``inconclusive``. A series of one run has the floor alone, so the
second run of a series cannot know a spread it has not yet shown (the paired gate
measures it). At the floor the term added to each half-width is 0.73 % (99 %): an
unchanged case can still be called ``unchanged`` at the 1 % minimum effect when its
runs agree closely, and a case whose runs move more is ``inconclusive`` rather than a
false ``regression``. CPU timings are plumbing only (``kernels/verdict.py``) and get
no floor.

Why ``STEP``: the median of a handful of differences is no defence against a real step
and its revert. A user's softmax went 431x slower at one commit and back at the next:
with 2-4 differences in its history, two of them were that step, their median read it
as noise (sd 3.2 on the log scale) and every later comparison of the case had an
interval like [0.0047, 39702537], an unchanged commit "0.886x [7.7e-6, 101439]"; a
real regression after it would have read ``inconclusive``. The history's change-point
detector (``detect.py``) cannot see it: it needs ``min_segment`` (4) runs on each side
of a level, never calls a one-run excursion a level, and even a clean 2x step takes
about 8 runs a side to pass its rank test; the median fails exactly where the history
is shorter than that (a step and its revert are two differences, the median of five
or more is safe from them). So the difference itself must say
it: run-to-run noise of unchanged code is a few per cent on a GPU (Liger's softmax 3.4 %
at most; the largest process offset in ``docs/measurement.md`` §20, a whole role 25 %
slow), and a median that moved by a factor of two between two runs was a change of the
code (or of the machine), never the noise the next comparison must allow for. A series
whose every difference is that large has no reading (None: the floor alone).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Commit, Result, Run
from kernelwatch.jobs.judging.bootstrap import Interval
from kernelwatch.jobs.judging.history import (
    HISTORY_TRIGGERS,
    environment_columns,
    row_environment,
)
from kernelwatch.kernels.record import environment_class, same_class
from kernelwatch.kernels.verdict import CONFIDENCE, CPU_CLASS

# sd of one run's median around its series' level on a GPU, at least (log scale)
GPU_FLOOR = 0.002
# runs of a case's history read for its spread, and the fewest that give one
WINDOW = 30
MIN_POINTS = 2
# a successive difference of log medians this large (a factor of two) is a step of the
# code or the machine, never run-to-run noise: left out of the spread
STEP = math.log(2.0)
# runs read at most, newest first (each case then keeps its newest WINDOW of them)
RUNS_READ = 4 * WINDOW
# the runs a spread is read from: the history's triggers and imported measurements of
# branch commits (a dataset's history, ``kernelwatch import``); never pull requests
SPREAD_TRIGGERS = (*HISTORY_TRIGGERS, "import")
# a median absolute deviation of a normal variable is 0.6745 of its sd
_MAD_TO_SD = 1 / 0.6745


def series_sd(medians: Sequence[float]) -> float | None:
    """The sd of one run's log median around its series' level, from the series
    (oldest first); None for fewer than ``MIN_POINTS`` positive medians (one
    difference is a rough reading, but a reading: better than none), or when every
    difference is a step.

    Successive differences see the noise of two runs each (hence ``/ sqrt(2)``) and a
    level shift only once; their median absolute value ignores the few that a real
    change made in a long series. A difference of ``STEP`` or more is a change, not
    noise, and is left out first: in a short series a step and its revert are half
    the differences, and their median would be the step.
    """
    logs = [math.log(m) for m in medians if m is not None and math.isfinite(m) and m > 0]
    if len(logs) < MIN_POINTS:
        return None
    moves = [abs(b - a) for a, b in zip(logs, logs[1:], strict=False)]
    noise = [d for d in moves if d < STEP]
    if not noise:
        return None
    return statistics.median(noise) * _MAD_TO_SD / math.sqrt(2)


def floor_for(device_class: str | None) -> float:
    """The least spread a run's median has on this device class (0 on the CPU)."""
    return 0.0 if (device_class or "").lower() == CPU_CLASS else GPU_FLOOR


def spread(medians: Sequence[float], device_class: str | None) -> float:
    """What a comparison of two runs of this case must allow for: the series' own
    spread, never below the device class's floor."""
    own = series_sd(medians)
    return max(own or 0.0, floor_for(device_class))


def widen(interval: Interval, sd: float, level: float = CONFIDENCE) -> Interval:
    """``interval`` (ratio, low, high) with two runs' spread ``sd`` added in quadrature
    on the log scale; unchanged for ``sd`` 0 or bounds that are not positive."""
    ratio, low, high = interval
    if sd <= 0 or not (ratio > 0 and low > 0 and high > 0):
        return interval
    extra = statistics.NormalDist().inv_cdf(0.5 + level / 2) * math.sqrt(2) * sd
    below = math.hypot(math.log(ratio / low), extra) if low <= ratio else extra
    above = math.hypot(math.log(high / ratio), extra) if high >= ratio else extra
    return ratio, ratio * math.exp(-below), ratio * math.exp(above)


def history_medians(
    session: Session, run: Run, case_ids: Iterable[str], *, exclude: Iterable[int] = ()
) -> dict[str, list[float]]:
    """Each case's medians over the last ``WINDOW`` branch runs (``SPREAD_TRIGGERS``) of
    ``run``'s repository, GPU class and environment class (its result's, per case) up to
    ``run``'s baseline commit (oldest first), leaving out the runs in ``exclude`` (the
    run being judged). The baseline's own run
    stays in: how it differs from the runs before it is the spread."""
    ids = list(dict.fromkeys(case_ids))
    if not ids:
        return {}
    # the newest runs first, bounded (this runs whenever a run is judged), then only
    # their results for these cases
    recent = (
        select(Run.id)
        .join(Commit, Run.commit_id == Commit.id)
        .where(
            Run.repository_id == run.repository_id,
            Run.device_class == run.device_class,
            Run.trigger.in_(SPREAD_TRIGGERS),
            Run.status == "succeeded",
            Run.id.not_in(list(exclude)),
        )
        .order_by(Commit.sequence.desc(), Run.id.desc())
        .limit(RUNS_READ)
    )
    upto = _baseline_sequence(session, run)
    if upto is not None:
        recent = recent.where(Commit.sequence <= upto)
    order = {run_id: i for i, run_id in enumerate(session.scalars(recent))}
    if not order:
        return {}
    found = session.execute(
        select(Result.case_id, Result.median_s, Result.run_id, *environment_columns()).where(
            Result.run_id.in_(list(order)),
            Result.case_id.in_(ids),
            Result.status == "pass",
            Result.median_s.is_not(None),
        )
    ).all()
    # a series holds one environment class (design.md): the runs before a torch upgrade
    # on the workers are not this case's spread (the upgrade's step would widen every
    # comparison after it)
    own = {r.case_id: environment_class(r.record or {}) for r in run.results if r.case_id in ids}
    rows = sorted(found, key=lambda row: order[row.run_id])  # newest first
    out: dict[str, list[float]] = {}
    for row in rows:
        series = out.setdefault(row.case_id, [])
        if not same_class(row_environment(row), own.get(row.case_id, {})):
            continue
        if row.median_s is not None and len(series) < WINDOW:
            series.append(float(row.median_s))
    return {case_id: series[::-1] for case_id, series in out.items()}


def case_spreads(session: Session, run: Run) -> dict[str, float]:
    """Each of ``run``'s cases with the spread a comparison of it against its baseline
    allows for: what the analysis judges with and the Compare page widens by."""
    cases = [r.case_id for r in run.results]
    series = history_medians(session, run, cases, exclude=(run.id,))
    return {case: spread(series.get(case, []), run.device_class) for case in cases}


def _baseline_sequence(session: Session, run: Run) -> int | None:
    """Where the history read for ``run`` ends: its baseline commit, so that no run of
    the change being judged (its own commit, re-runs of it, commits between) counts as
    spread; without a known baseline, the commit before ``run``'s."""
    if run.baseline_sha:
        sequence = session.scalar(
            select(Commit.sequence).where(
                Commit.repository_id == run.repository_id, Commit.sha == run.baseline_sha
            )
        )
        if sequence is not None:
            return int(sequence)
    own = run.commit.sequence if run.commit is not None else None
    return None if own is None else int(own) - 1


__all__ = [
    "GPU_FLOOR",
    "MIN_POINTS",
    "SPREAD_TRIGGERS",
    "STEP",
    "WINDOW",
    "case_spreads",
    "floor_for",
    "history_medians",
    "series_sd",
    "spread",
    "widen",
]
