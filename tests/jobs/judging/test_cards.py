"""Per-card offsets: what they recover, and where they refuse to guess."""

from __future__ import annotations

import math
import random

import pytest

from kernelwatch.jobs.judging.cards import card_offsets, level_cards


def _noisy(rng: random.Random, base: float) -> float:
    return base * math.exp(rng.gauss(0, 0.002))


def test_an_interleaved_cards_offset_is_recovered_and_removed() -> None:
    rng = random.Random(1)
    cards = [rng.choice(["A", "B", "B"]) for _ in range(60)]  # B most frequent: the reference
    values = [_noisy(rng, 100 * (0.97 if c == "A" else 1.0)) for c in cards]
    offsets = card_offsets(values, cards)
    assert offsets["B"] == 1.0
    assert offsets["A"] == pytest.approx(0.97, abs=0.003)
    levelled = level_cards(values, cards)
    assert max(levelled) / min(levelled) < 1.02  # the 3 % between the cards is gone


def test_a_step_that_coincides_with_a_switch_of_card_is_left_alone() -> None:
    # no block saw both cards: a step and an offset cannot be told apart, keep the step
    cards = ["A"] * 30 + ["B"] * 30
    values = [100.0] * 30 + [105.0] * 30
    assert card_offsets(values, cards) == {"A": 1.0, "B": 1.0}
    assert level_cards(values, cards) == values


def test_one_card_or_unnamed_cards_change_nothing() -> None:
    values = [1.0, 1.1, 0.9, 1.05]
    assert level_cards(values, ["GPU-x"] * 4) == values
    assert level_cards(values, [""] * 4) == values


def test_a_card_seen_twice_keeps_offset_one() -> None:
    rng = random.Random(2)
    cards = ["A"] * 20
    cards[3] = cards[9] = "B"
    values = [_noisy(rng, 100 * (1.2 if c == "B" else 1.0)) for c in cards]
    assert card_offsets(values, cards)["B"] == 1.0


def test_values_and_cards_must_pair_up() -> None:
    with pytest.raises(ValueError, match="3 values but 2 cards"):
        card_offsets([1.0, 2.0, 3.0], ["A", "B"])
