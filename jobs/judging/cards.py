"""Per-card offsets in a history series, so a change of card is not read as a step.

Why: two cards of one class differ by a fixed few per cent on the same kernel (on
the H200s the team measured, paired ratios held while absolute medians moved
between cards: 114 µs and 241 µs for one FA3 build, docs/bisect.md; ±0.3-0.55 %
process offsets, docs/measurement.md). A branch's history is measured on
whichever card was free, so a run of commits on a slower card looks like a
regression step to the change-point detector, and the gate's 1 % minimum effect
is well inside such offsets.

The model, in log space: ``log y = level(block) + offset(card) + noise``, where a
block is ``BLOCK`` consecutive points of the series (the level may step between
blocks). Alternating medians fit it: each card's offset is the median of its
points' residuals against their block's level, each block's level the median of
its points after the offsets. Only blocks holding two or more cards carry
information on an offset, so a card is corrected only where it shared blocks with
the others. That is the safe side: when a real step coincides with a switch to
another card and no block saw both, no offset can be told from the step, and the
series is left as it is (the step stays visible).

The most frequent card is the reference (offset 0): the corrected series reads as
if every point had been measured there. Points without a card identity (CPU runs,
records from before cards were named) form one card of their own, ``""``.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence

BLOCK = 6  # consecutive points that share one level
MIN_POINTS = 3  # a card with fewer points keeps offset 0
MIN_SHARED = 2  # ...and one sharing fewer blocks with other cards too
ROUNDS = 20


def card_offsets(
    values: Sequence[float], cards: Sequence[str], block: int = BLOCK
) -> dict[str, float]:
    """Each card's multiplicative offset against the most frequent card (1.0 = none).

    ``values``: positive measurements in series order; ``cards``: the card of each.
    """
    if len(values) != len(cards):
        raise ValueError(f"{len(values)} values but {len(cards)} cards")
    counts = Counter(cards)
    if len(counts) < 2:
        return dict.fromkeys(counts, 1.0)
    logs = [math.log(v) for v in values]
    blocks = [i // block for i in range(len(values))]
    mixed = _mixed_blocks(blocks, cards)
    reference = max(counts, key=lambda c: (counts[c], c == "", c))
    shared = Counter(c for b, c in set(zip(blocks, cards, strict=True)) if b in mixed)
    usable = [
        c
        for c, n in counts.items()
        if c != reference and n >= MIN_POINTS and shared[c] >= MIN_SHARED
    ]

    def residuals(card: str, level: dict[int, float]) -> list[float]:
        """The card's points in mixed blocks, against their block's level."""
        pairs = zip(logs, blocks, cards, strict=True)
        return [x - level[b] for x, b, c in pairs if c == card and b in mixed]

    offset = dict.fromkeys(counts, 0.0)
    for _ in range(ROUNDS):
        level = _block_levels(logs, blocks, cards, offset)
        ref = residuals(reference, level)
        shift = statistics.median(ref) if ref else 0.0  # offsets are relative to it
        new = {c: statistics.median(residuals(c, level)) - shift for c in usable}
        moved = max((abs(new[c] - offset[c]) for c in usable), default=0.0)
        offset.update(new)
        if moved < 1e-6:
            break
    return {c: math.exp(o) for c, o in offset.items()}


def level_cards(values: Sequence[float], cards: Sequence[str], block: int = BLOCK) -> list[float]:
    """``values`` as if all were measured on the most frequent card (see the module doc)."""
    offsets = card_offsets(values, cards, block)
    return [v / offsets[c] for v, c in zip(values, cards, strict=True)]


def _mixed_blocks(blocks: Sequence[int], cards: Sequence[str]) -> set[int]:
    seen: dict[int, set[str]] = {}
    for b, c in zip(blocks, cards, strict=True):
        seen.setdefault(b, set()).add(c)
    return {b for b, cs in seen.items() if len(cs) > 1}


def _block_levels(
    logs: Sequence[float], blocks: Sequence[int], cards: Sequence[str], offset: dict[str, float]
) -> dict[int, float]:
    grouped: dict[int, list[float]] = {}
    for x, b, c in zip(logs, blocks, cards, strict=True):
        grouped.setdefault(b, []).append(x - offset[c])
    return {b: statistics.median(xs) for b, xs in grouped.items()}


__all__ = ["BLOCK", "card_offsets", "level_cards"]
