"""The one bootstrap of a ratio of medians: the unpaired comparison of two sample sets.

Used by the run analysis (``comparison.compare``, a run against its baseline run)
and by the dashboard's Compare page (any two runs), so both draw the same
interval for the same samples. Percentile bootstrap of median(cand) /
median(base), vectorised over cases: cases with the same sample counts share one
resampling index matrix, so 200 cases cost a few numpy medians, not 200 loops.
That matrix is seeded by the sample counts alone, so a case's interval depends on
its samples only, not on which other cases were compared in the same call: the
analysis (one case at a time) and the Compare page (a whole run) agree exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernelwatch.kernels.verdict import CONFIDENCE

RESAMPLES = 2000  # 99 % percentile bounds rest on the 10 outermost resamples each side
SEED = 20_240_601
# Resampled elements held at once (cases × resamples × samples) when vectorising.
CHUNK_ELEMENTS = 4_000_000

Interval = tuple[float, float, float]  # (ratio of medians, low, high)


def clean(values: Sequence[float] | None) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Positive finite samples only (a stored 0 or None is not a time)."""
    return np.asarray(
        [x for x in (values or []) if x is not None and math.isfinite(x) and x > 0], dtype=float
    )


def bootstrap_many(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
    level: float = CONFIDENCE,
    n: int = RESAMPLES,
    seed: int = SEED,
) -> list[Interval | None]:
    """(ratio of medians, low, high) of cand/base for many (base, cand) cases at once.

    None where a side has no samples; NaN bounds where a side has a single sample.
    """
    samples = [(clean(a), clean(b)) for a, b in pairs]
    out: list[Interval | None] = [None] * len(samples)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (a, b) in enumerate(samples):
        if a.size and b.size:
            groups.setdefault((a.size, b.size), []).append(i)
    tail = (1 - level) / 2 * 100
    for (na, nb), members in groups.items():
        base = np.stack([samples[i][0] for i in members])
        cand = np.stack([samples[i][1] for i in members])
        ratios = np.median(cand, axis=1) / np.median(base, axis=1)
        if na < 2 or nb < 2:
            for k, i in enumerate(members):
                out[i] = (float(ratios[k]), math.nan, math.nan)
            continue
        rng = np.random.default_rng((seed, na, nb))
        ia = rng.integers(0, na, size=(n, na))
        ib = rng.integers(0, nb, size=(n, nb))
        step = max(1, CHUNK_ELEMENTS // (n * max(na, nb)))
        for start in range(0, len(members), step):
            sl = slice(start, start + step)
            boot = np.median(cand[sl][:, ib], axis=2) / np.median(base[sl][:, ia], axis=2)
            low, high = np.percentile(boot, [tail, 100 - tail], axis=1)
            for k in range(boot.shape[0]):
                out[members[start + k]] = (float(ratios[start + k]), float(low[k]), float(high[k]))
    return out


def bootstrap_ratio(
    base: Sequence[float],
    cand: Sequence[float],
    level: float = CONFIDENCE,
    n: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """(ratio of medians, low, high) of cand/base; None without samples on both sides."""
    return bootstrap_many([(base, cand)], level, n, seed)[0]


__all__ = ["RESAMPLES", "SEED", "Interval", "bootstrap_many", "bootstrap_ratio", "clean"]
