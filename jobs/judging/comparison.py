"""Comparing two sets of timing samples: ratio of medians, its interval, a rank test.

``compare`` answers "is the candidate slower than the baseline, by how much, and
how sure are we?" for two runs measured separately (the unpaired path; the
merge gate's paired path judges inside ``kernels/paired.py``). The interval is
the bootstrap of the ratio of medians (``bootstrap.py``, shared with the
dashboard), widened by how far the case's median moves from run to run
(``run_spread.py``); the verdict is THE rule (``kernels/verdict.py``) applied to it. The
one-sided Mann-Whitney p-values (scipy) are reported beside it, not part of the
decision: one rule, one interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kernelwatch.jobs.judging.bootstrap import bootstrap_ratio
from kernelwatch.jobs.judging.run_spread import widen
from kernelwatch.kernels.verdict import CONFIDENCE, MIN_EFFECT, CaseVerdict, Decision, decide


@dataclass(frozen=True)
class Comparison:
    ratio: float  # candidate median / baseline median (> 1: slower)
    ci_low: float
    ci_high: float
    p_slower: float  # one-sided p-value that the candidate is slower
    p_faster: float
    decision: Decision

    @property
    def verdict(self) -> CaseVerdict:
        return self.decision.verdict


def mann_whitney_p(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> tuple[float, float]:
    """One-sided p-values (b > a, b < a) of the Mann-Whitney U test (tie-corrected)."""
    if len(a) == 0 or len(b) == 0:
        return 1.0, 1.0
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0, 1.0  # all equal: no evidence either way
    # imported here: scipy.stats takes 0.6 s to import, which every ``kernelwatch``
    # command paid at start (the CLI imports the judging modules to build its parser)
    from scipy.stats import mannwhitneyu

    up = mannwhitneyu(b, a, alternative="greater", method="asymptotic").pvalue
    down = mannwhitneyu(b, a, alternative="less", method="asymptotic").pvalue
    return float(up), float(down)


def compare(
    base_samples: list[float],
    cand_samples: list[float],
    threshold: float = MIN_EFFECT,
    confidence: float = CONFIDENCE,
    *,
    reliable: bool = True,
    spread: float = 0.0,
) -> Comparison:
    """Verdict on cand vs base: the rule applied to the bootstrap interval of the ratio,
    widened by ``spread``, the sd of one run's median around its level
    (``run_spread.py``: samples of one run cannot show how the next run differs)."""
    base = np.asarray(base_samples, dtype=float)
    cand = np.asarray(cand_samples, dtype=float)
    if len(base) < 2 or len(cand) < 2:
        raise ValueError("need at least two samples on each side")
    interval = bootstrap_ratio(base_samples, cand_samples, confidence)
    if interval is not None:
        interval = widen(interval, spread, confidence)
    ratio, lo, hi = interval if interval is not None else (math.nan, math.nan, math.nan)
    p_slower, p_faster = mann_whitney_p(base, cand)
    decision = decide(ratio, lo, hi, threshold, reliable=reliable)
    return Comparison(ratio, lo, hi, p_slower, p_faster, decision)


__all__ = ["Comparison", "compare", "mann_whitney_p"]
