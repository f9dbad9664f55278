"""Comparing two sets of timing samples: ratio of medians, its interval, a rank test.

``compare`` answers "is the candidate slower than the baseline, by how much, and
how sure are we?" with a bootstrap interval of the ratio of medians and a
one-sided Mann-Whitney U test (normal approximation with tie correction). No
scipy: numpy is enough and keeps the worker light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Verdict = Literal["regression", "improvement", "unchanged", "inconclusive"]


@dataclass(frozen=True)
class Comparison:
    ratio: float  # candidate median / baseline median (> 1: slower)
    ci_low: float
    ci_high: float
    p_slower: float  # one-sided p-value that the candidate is slower
    p_faster: float
    verdict: Verdict


def mann_whitney_p(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> tuple[float, float]:
    """One-sided p-values (b > a, b < a) of the Mann-Whitney U test."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0, 1.0
    both = np.concatenate([a, b])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    i = 0
    tie_term = 0.0
    while i < len(both):
        j = i
        while j + 1 < len(both) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    u_b = ranks[n1:].sum() - n2 * (n2 + 1) / 2
    mean = n1 * n2 / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0, 1.0
    z_up = (u_b - mean - 0.5) / math.sqrt(var)
    z_down = (u_b - mean + 0.5) / math.sqrt(var)
    return _sf(z_up), 1 - _sf(z_down)


def bootstrap_ratio_ci(
    base: npt.NDArray[np.float64],
    cand: npt.NDArray[np.float64],
    level: float,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(cand) / median(base)."""
    rng = np.random.default_rng(seed)
    bi = rng.integers(0, len(base), size=(n_boot, len(base)))
    ci = rng.integers(0, len(cand), size=(n_boot, len(cand)))
    ratios = np.median(cand[ci], axis=1) / np.median(base[bi], axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(ratios, [alpha, 1 - alpha])
    return float(lo), float(hi)


def compare(
    base_samples: list[float],
    cand_samples: list[float],
    threshold: float = 0.05,
    confidence: float = 0.99,
) -> Comparison:
    """Verdict on cand vs base: a change counts when it exceeds ``threshold`` with confidence."""
    base = np.asarray(base_samples, dtype=float)
    cand = np.asarray(cand_samples, dtype=float)
    if len(base) < 2 or len(cand) < 2:
        raise ValueError("need at least two samples on each side")
    ratio = float(np.median(cand) / np.median(base))
    lo, hi = bootstrap_ratio_ci(base, cand, confidence)
    p_slower, p_faster = mann_whitney_p(base, cand)
    alpha = 1 - confidence
    verdict: Verdict
    if ratio >= 1 + threshold and lo > 1 and p_slower < alpha:
        verdict = "regression"
    elif ratio <= 1 / (1 + threshold) and hi < 1 and p_faster < alpha:
        verdict = "improvement"
    elif (
        1 / (1 + threshold) < lo
        and hi < 1 + threshold
        or abs(ratio - 1) < threshold
        and (p_slower >= alpha and p_faster >= alpha)
    ):
        verdict = "unchanged"
    else:
        verdict = "inconclusive"
    return Comparison(ratio, lo, hi, p_slower, p_faster, verdict)


def _sf(z: float) -> float:
    """Upper tail of the standard normal."""
    return 0.5 * math.erfc(z / math.sqrt(2))
