"""Small, dependency-free statistics used by the timer: medians and their intervals.

The interval of the median comes from order statistics (the binomial method), so
it makes no assumption about the shape of the timing distribution, which on a
GPU is skewed and often multi-modal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no samples")
    mid = n // 2
    return s[mid] if n % 2 else 0.5 * (s[mid - 1] + s[mid])


def median_ci(xs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the median: order statistics n/2 ± z·√n/2."""
    s = sorted(xs)
    n = len(s)
    if n < 3:
        return (s[0], s[-1]) if n else (math.nan, math.nan)
    z = _z(level)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return s[lo], s[hi]


def rel_half_width(xs: Sequence[float], level: float = 0.95) -> float:
    """Half the width of the median's interval relative to the median."""
    lo, hi = median_ci(xs, level)
    m = median(xs)
    return (hi - lo) / 2 / m if m else math.inf


def batch_rel_half_width(xs: Sequence[float], level: float = 0.95, batches: int = 8) -> float:
    """Relative half-width of a t-interval over the medians of time-ordered batches.

    Robust to autocorrelated samples (slow clock drift), unlike the order-statistic
    interval. Needs at least 3 samples per batch; otherwise infinite.
    """
    n = len(xs)
    size = n // batches
    if size < 3:
        return math.inf
    meds = [median(xs[i * size : (i + 1) * size]) for i in range(batches)]
    mean = sum(meds) / batches
    sd = math.sqrt(sum((m - mean) ** 2 for m in meds) / (batches - 1))
    return t_quantile(level, batches - 1) * sd / math.sqrt(batches) / mean if mean else math.inf


def t_quantile(level: float, dof: int) -> float:
    """Two-sided Student-t quantile (Cornish-Fisher expansion around the normal)."""
    if dof <= 0:
        return math.inf
    z = _z(level)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3


def cv(xs: Sequence[float]) -> float:
    """Coefficient of variation (sample SD over mean)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return math.sqrt(var) / mean if mean else math.inf


def _z(level: float) -> float:
    """Two-sided normal quantile for the common levels (no scipy in this package)."""
    table = {0.8: 1.2816, 0.9: 1.6449, 0.95: 1.9600, 0.98: 2.3263, 0.99: 2.5758, 0.999: 3.2905}
    if level in table:
        return table[level]
    # Acklam-free fallback: bisection on erf.
    target = level
    lo, hi = 0.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if math.erf(mid / math.sqrt(2)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
