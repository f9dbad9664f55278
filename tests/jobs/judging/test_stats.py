import numpy as np

from kernelwatch.jobs.judging.comparison import compare, mann_whitney_p


def _samples(rng: np.random.Generator, level: float, n: int = 30) -> list[float]:
    return list(level * (1 + 0.01 * rng.standard_normal(n)))


def test_clear_slowdown_is_a_regression_with_interval_above_one() -> None:
    rng = np.random.default_rng(0)
    c = compare(_samples(rng, 1.0), _samples(rng, 1.10), threshold=0.05)
    assert c.verdict == "regression"
    assert 1.05 < c.ci_low <= c.ratio <= c.ci_high < 1.15


def test_small_change_below_threshold_is_unchanged() -> None:
    rng = np.random.default_rng(1)
    c = compare(_samples(rng, 1.0), _samples(rng, 1.01), threshold=0.05)
    assert c.verdict == "unchanged"


def test_speedup_is_an_improvement() -> None:
    rng = np.random.default_rng(2)
    assert compare(_samples(rng, 1.0), _samples(rng, 0.8)).verdict == "improvement"


def test_too_few_noisy_samples_are_inconclusive_not_a_regression() -> None:
    c = compare([1.0, 1.3, 0.9], [1.2, 0.95, 1.4], threshold=0.05)
    assert c.verdict == "inconclusive"


def test_mann_whitney_one_sided_p_values() -> None:
    a = np.arange(20, dtype=float)
    b = a + 100
    p_up, p_down = mann_whitney_p(a, b)
    assert p_up < 1e-6 and p_down > 0.99
