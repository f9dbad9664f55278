"""kernelwatch.jobs.judging.detect: change points of a performance history."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from numpy.typing import NDArray

from kernelwatch.jobs.judging.detect import ChangePoint, detect, detect_json


def noisy(
    levels: list[tuple[int, float]], noise: float = 0.01, seed: int = 0
) -> NDArray[np.float64]:
    """Concatenated levels ``[(length, level), ...]`` with relative Gaussian noise."""
    rng = np.random.default_rng(seed)
    level = np.concatenate([np.full(length, value) for length, value in levels])
    series: NDArray[np.float64] = level * (1.0 + noise * rng.standard_normal(len(level)))
    return series


def indices(points: list[ChangePoint]) -> list[int]:
    return [p.index for p in points]


def assert_near(found: list[int], expected: list[int], tolerance: int = 1) -> None:
    assert len(found) == len(expected), f"found {found}, expected {expected}"
    for f, e in zip(found, expected, strict=True):
        assert abs(f - e) <= tolerance, f"found {found}, expected {expected}"


# ------------------------------------------------------------------- single steps


def test_step_up_is_a_regression_at_the_first_point_after() -> None:
    x = noisy([(100, 1.0), (100, 1.05)])
    [cp] = detect(x)
    assert abs(cp.index - 100) <= 1
    assert cp.direction == "regression"
    assert cp.magnitude == pytest.approx(0.05, abs=0.005)
    assert cp.p_value < 1e-6


def test_step_down_is_an_improvement_when_lower_is_better() -> None:
    x = noisy([(120, 2.0), (80, 1.9)], seed=1)
    [cp] = detect(x)
    assert abs(cp.index - 120) <= 1
    assert cp.direction == "improvement"
    assert cp.magnitude == pytest.approx(-0.05, abs=0.005)


@pytest.mark.parametrize(
    ("after", "lower_is_better", "direction"),
    [
        (1.1, True, "regression"),
        (0.9, True, "improvement"),
        (1.1, False, "improvement"),  # throughput went up
        (0.9, False, "regression"),  # throughput went down
    ],
)
def test_direction_follows_lower_is_better(
    after: float, lower_is_better: bool, direction: str
) -> None:
    x = noisy([(60, 1.0), (60, after)], seed=2)
    [cp] = detect(x, lower_is_better)
    assert abs(cp.index - 60) <= 1
    assert cp.direction == direction


def test_step_in_the_last_commits_is_found() -> None:
    # The newest commits matter most; the statistic is standardised so that a step
    # near the end of a long history is not drowned by the length before it.
    x = noisy([(190, 1.0), (10, 1.05)], seed=3)
    assert_near(indices(detect(x)), [190])


def test_step_below_min_effect_is_not_reported() -> None:
    x = noisy([(100, 1.0), (100, 1.005)], noise=0.001, seed=4)
    assert detect(x) == []
    # ...although it is statistically clear: with no effect floor it is found.
    assert_near(indices(detect(x, min_effect=0.0)), [100])


def test_short_series_have_no_change_points() -> None:
    assert detect([]) == []
    assert detect([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]) == []  # < 2 * min_segment
    assert detect([1.0] * 50) == []


# -------------------------------------------------------------- noise and outliers


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("noise", [0.003, 0.03])
def test_flat_noisy_series_has_no_change_points(seed: int, noise: float) -> None:
    assert detect(noisy([(300, 1.0)], noise=noise, seed=seed)) == []


@pytest.mark.parametrize("seed", range(5))
def test_outliers_do_not_create_change_points(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    x = noisy([(200, 1.0)], seed=seed)
    hit = rng.choice(200, size=12, replace=False)  # 6 % of points
    x[hit] *= rng.uniform(1.2, 3.0, size=12)  # throttled clock: far slower
    x[[50, 51, 52]] *= 2.0  # a burst shorter than min_segment
    x[-2:] *= 2.0  # two slow runs at the very end
    assert detect(x) == []


def test_outliers_do_not_move_a_step() -> None:
    x = noisy([(100, 1.0), (100, 1.05)], seed=7)
    x[[20, 98, 99, 101, 150]] *= 1.5  # slow runs on both sides of the step
    [cp] = detect(x)
    assert abs(cp.index - 100) <= 1
    assert cp.direction == "regression"
    assert cp.magnitude == pytest.approx(0.05, abs=0.005)


def test_tied_values_from_a_coarse_timer() -> None:
    x = np.round(noisy([(80, 100.0), (80, 106.0)], noise=0.01, seed=8), 0)  # 1-unit timer
    assert len(np.unique(x)) <= 15  # 160 values, mostly ties
    assert_near(indices(detect(x)), [80])


# ----------------------------------------------------------------- several steps


def test_several_steps_in_one_series() -> None:
    x = noisy([(50, 1.0), (40, 1.05), (60, 0.98), (30, 0.98 * 1.1), (40, 1.0)], seed=9)
    points = detect(x)
    assert_near(indices(points), [50, 90, 150, 180])
    assert [p.direction for p in points] == [
        "regression",
        "improvement",
        "regression",
        "improvement",
    ]


def test_regression_that_is_reverted_later() -> None:
    # Up then back down to the same level: one split of the whole series sees almost
    # nothing, which is why the detector also tests an inner interval against the rest.
    x = noisy([(70, 1.0), (25, 1.05), (105, 1.0)], seed=10)
    points = detect(x)
    assert_near(indices(points), [70, 95])
    assert [p.direction for p in points] == ["regression", "improvement"]


# ---------------------------------------------------------------- property style


@pytest.mark.parametrize("seed", range(8))
def test_random_steps_are_found_and_nothing_else(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    n_steps = int(rng.integers(0, 4))
    while True:
        cuts = sorted(rng.choice(np.arange(15, 285), size=n_steps, replace=False).tolist())
        if all(b - a >= 25 for a, b in zip(cuts, cuts[1:], strict=False)):
            break
    level, last = 1.0, 0
    lengths: list[tuple[int, float]] = []
    for cut in [*cuts, 300]:
        lengths.append((cut - last, level))
        level *= 1.0 + rng.choice([-1.0, 1.0]) * rng.uniform(0.03, 0.2)
        last = cut
    x = noisy(lengths, noise=0.005, seed=seed)
    x[rng.random(300) < 0.02] *= 1.3
    points = detect(x)
    assert_near(indices(points), cuts)
    for i, p in enumerate(points):
        before, after = lengths[i][1], lengths[i + 1][1]
        assert p.direction == ("regression" if after > before else "improvement")
        assert p.magnitude == pytest.approx(after / before - 1.0, abs=0.01)
        assert 0.0 <= p.p_value < 0.001

    # Invariances: deterministic, unit-free, mirror-symmetric.
    assert detect(x) == points
    assert indices(detect(1000.0 * x)) == indices(points)
    flipped = detect(x, lower_is_better=False)
    assert indices(flipped) == indices(points)
    assert all(f.direction != p.direction for f, p in zip(flipped, points, strict=True))
    reverse = detect(x[::-1])
    assert_near(sorted(300 - p.index for p in reverse), cuts)


def test_false_positive_rate_stays_below_alpha() -> None:
    # The p-value corrects for searching every split and every inner interval, so a
    # flat series is split with probability at most alpha, short series included.
    rng = np.random.default_rng(11)
    for n in (12, 20, 60):
        hits = sum(
            bool(detect(rng.standard_normal(n) + 10.0, alpha=0.05, min_effect=0.0))
            for _ in range(400)
        )
        assert hits / 400 <= 0.06, (n, hits)


def test_two_thousand_points_well_under_a_second() -> None:
    x = noisy([(500, 1.0), (500, 1.04), (500, 0.99), (500, 1.04)], seed=12)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        points = detect(x)
        best = min(best, time.perf_counter() - start)
    assert_near(indices(points), [500, 1000, 1500])
    assert best < 0.5


# -------------------------------------------------------------------- JSON shapes


def test_json_single_series() -> None:
    values = noisy([(40, 1.0), (40, 1.1)], seed=13).tolist()
    out = detect_json({"values": values, "lower_is_better": True})
    assert list(out) == ["change_points"]
    [cp] = out["change_points"]
    assert abs(cp["index"] - 40) <= 1
    assert cp["direction"] == "regression"
    assert cp["magnitude"] == pytest.approx(0.1, abs=0.01)
    assert 0.0 <= cp["p_value"] < 0.001
    json.dumps(out, allow_nan=False)  # plain JSON, no NaN/Infinity


def test_json_flat_series_and_default_direction() -> None:
    assert detect_json({"values": [5.0] * 30}) == {"change_points": []}
    out = detect_json({"values": noisy([(40, 1.0), (40, 0.9)], seed=14).tolist()})
    assert [cp["direction"] for cp in out["change_points"]] == ["improvement"]


def test_json_batch() -> None:
    up = noisy([(40, 1.0), (40, 1.1)], seed=15).tolist()
    flat = noisy([(80, 1.0)], seed=16).tolist()
    out = detect_json(
        {
            "series": [
                {"id": "gemm/bf16/4096", "values": up},
                {"id": 7, "values": flat},
                {"id": "tflops", "values": up, "lower_is_better": False},
            ],
            "lower_is_better": True,
        }
    )
    assert list(out) == ["results"]
    assert [r["id"] for r in out["results"]] == ["gemm/bf16/4096", 7, "tflops"]
    assert [[cp["direction"] for cp in r["change_points"]] for r in out["results"]] == [
        ["regression"],
        [],
        ["improvement"],
    ]
    assert all(list(r) == ["id", "change_points"] for r in out["results"])
    json.dumps(out, allow_nan=False)


def test_json_level_from_zero_has_null_magnitude() -> None:
    out = detect_json({"values": [0] * 20 + [3] * 20})
    [cp] = out["change_points"]
    assert cp["index"] == 20
    assert cp["magnitude"] is None
    assert cp["direction"] == "regression"
    assert detect([0.0] * 20 + [3.0] * 20)[0].magnitude == math.inf


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1.0, 2.0], "JSON object"),
        ({}, "missing key"),
        ({"values": "1,2,3"}, "list of numbers"),
        ({"values": [1.0, "2"]}, r"values\[1\] must be a number"),
        ({"values": [1.0, None]}, r"values\[1\] must be a number"),
        ({"values": [1.0, True]}, r"values\[1\] must be a number"),
        ({"values": [1.0, [2.0]]}, r"values\[1\] must be a number"),
        ({"values": [1.0, float("nan")]}, "finite"),
        ({"values": [1.0, float("inf")]}, "finite"),
        ({"values": [1.0, 10**400]}, "too large"),
        ({"values": [1.0], "lower_is_better": "yes"}, "true or false"),
        ({"values": [1.0], "lower_is_beter": True}, "unknown key"),
        ({"series": {"id": "a", "values": [1.0]}}, "must be a list"),
        ({"series": ["a"]}, r"series\[0\] must be an object"),
        ({"series": [{"values": [1.0]}]}, r"series\[0\]: missing key"),
        ({"series": [{"id": "a"}]}, r"series\[0\]: missing key"),
        ({"series": [{"id": None, "values": [1.0]}]}, r"series\[0\]\.id"),
        ({"series": [{"id": "a", "values": [1.0, "x"]}]}, r"series\[0\]\.values\[1\]"),
        ({"series": [], "lower_is_better": 1}, "true or false"),
        ({"series": [], "values": [1.0]}, "unknown key"),
    ],
)
def test_json_invalid_input_is_rejected(payload: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        detect_json(payload)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        ([1.0, float("nan")] * 10, {}, "finite"),
        ([[1.0, 2.0], [3.0, 4.0]], {}, "one-dimensional"),
        (["a", "b"], {}, "sequence of numbers"),
        ([1.0] * 20, {"alpha": 0.0}, "alpha"),
        ([1.0] * 20, {"alpha": 1.0}, "alpha"),
        ([1.0] * 20, {"min_effect": -0.1}, "min_effect"),
        ([1.0] * 20, {"min_segment": 1}, "min_segment"),
    ],
)
def test_detect_invalid_arguments(values: object, kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        detect(values, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("level", [1e200, 1e307])
def test_huge_values_are_a_step_like_any_other(level: float) -> None:
    """Squared deviations of 1e200 overflowed to a NaN cost and an IndexError."""
    (found,) = detect([level] * 8 + [1.7 * level] * 8)
    assert found.index == 8 and found.direction == "regression"
    assert found.magnitude == pytest.approx(0.7)
