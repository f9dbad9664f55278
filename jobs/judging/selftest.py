"""When a card's timer self-test says its noise grew: the one rule, pure.

A card (one GPU, or a CPU-only host) runs the A/A self-test once a night
(``kernels/selftest.py``). Its ``cv`` (the spread of per-block medians: the noise it
adds to a measurement) is compared with the card's own recent history, never with other
cards (classes differ, and a card is its own best reference):

- **noise grew**: with at least ``MIN_HISTORY`` earlier results, the new ``cv`` is above
  ``GROWTH`` times the median of the last ``WINDOW`` ones *and* above it by at least
  ``FLOOR`` (0.2 percentage points): a quiet card whose cv goes 0.05 % → 0.15 % is not
  worth a page, one that goes 0.3 % → 1.5 % is; the median keeps one earlier bad night
  from hiding the next;
- **biased**: the A/A interval excludes 1 by more than ``BIAS``: the two arms of the same
  kernel do not time alike on that card (placement, clocks stepping between blocks).

Either flags the result (``flagged``, with the reason in words); the Fleet page shows
flagged cards, and a gate measured on a flagged card is still judged by its own interval
(a noisy card makes verdicts inconclusive, not wrong).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_HISTORY = 3
WINDOW = 14
GROWTH = 2.0
FLOOR = 0.002
BIAS = 0.005  # the interval must miss 1 by half a per cent, not a hair


@dataclass(frozen=True)
class Finding:
    flagged: bool
    reason: str
    baseline_cv: float | None  # the median cv of the card's recent history


def judge(cv: float, ci_low: float, ci_high: float, history: Sequence[float]) -> Finding:
    """``history``: the card's earlier cvs, oldest first."""
    recent = [h for h in history if h == h][-WINDOW:]  # NaN never counts
    base = statistics.median(recent) if len(recent) >= MIN_HISTORY else None
    reasons = []
    if base is not None and cv > GROWTH * base and cv - base >= FLOOR:
        reasons.append(
            f"noise grew: cv {cv * 100:.2f} % against {base * 100:.2f} % over its last "
            f"{len(recent)} nights"
        )
    if ci_low > 1 + BIAS or ci_high < 1 - BIAS:
        reasons.append(f"A/A interval [{ci_low:.4f}, {ci_high:.4f}] excludes 1")
    return Finding(bool(reasons), "; ".join(reasons), base)


__all__ = ["BIAS", "FLOOR", "GROWTH", "MIN_HISTORY", "WINDOW", "Finding", "judge"]
