"""``kernels/stats.py`` against scipy: the t quantile is exact at every df (issue 12 item 10)."""

from __future__ import annotations

import pytest
from scipy import stats as scipy_stats

from kernelwatch.kernels import stats


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99, 0.999, 0.9999])
@pytest.mark.parametrize("dof", [*range(1, 31), 50, 100, 1000, 100_000])
def test_t_quantile_matches_scipy(level: float, dof: int) -> None:
    expected = scipy_stats.t.ppf(0.5 + level / 2, dof)
    assert stats.t_quantile(level, dof) == pytest.approx(expected, rel=1e-9)


def test_t_quantile_at_few_degrees_of_freedom() -> None:
    # The old Cornish-Fisher expansion gave 28.3 and 8.7 here: intervals over 2 or 3
    # process pairs were 2.2x and 1.1x too narrow.
    assert stats.t_quantile(0.99, 1) == pytest.approx(63.657, abs=1e-3)
    assert stats.t_quantile(0.99, 2) == pytest.approx(9.925, abs=1e-3)
    assert stats.t_quantile(0.99, 0) == float("inf")


def test_normal_quantile_of_the_median_interval_matches_scipy() -> None:
    for level in (0.9, 0.95, 0.99, 0.997):
        assert stats._z(level) == pytest.approx(scipy_stats.norm.ppf(0.5 + level / 2), rel=1e-12)
