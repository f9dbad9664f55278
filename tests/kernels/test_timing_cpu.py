"""The CPU path of the timer: same API as on a GPU, host clock, same stopping rule."""

import gc
import math

import torch

from kernelwatch.kernels import stats
from kernelwatch.kernels.timing import HostGuard, TimerConfig, make_sampler, measure


def test_host_timer_keeps_every_sample_and_reports_why_it_stopped() -> None:
    x = torch.randn(256, 256)
    m = measure(
        lambda i: i["x"] @ i["x"],
        {"x": x},
        TimerConfig(budget_s=0.3, min_samples=10, target_rel_ci=1e-9),
    )
    t = m.timing
    assert t.timer == "host_cpu"
    assert t.stop_reason == "budget"  # an impossible target: the budget must stop it
    assert t.n == len(t.samples) >= 10
    assert t.ci_low <= t.median <= t.ci_high
    assert t.median == stats.median(t.samples)


def test_host_timer_converges_on_a_loose_target() -> None:
    x = torch.randn(64, 64)
    m = measure(
        lambda i: i["x"].sum(),
        {"x": x},
        TimerConfig(budget_s=5.0, min_samples=20, target_rel_ci=0.5, min_time_s=0.0),
    )
    assert m.timing.stop_reason == "converged"
    assert m.timing.n >= 20


def test_median_interval_covers_the_median_and_narrows_with_n() -> None:
    import random

    rng = random.Random(0)
    small = [rng.gauss(100, 5) for _ in range(20)]
    large = [rng.gauss(100, 5) for _ in range(2000)]
    lo_s, hi_s = stats.median_ci(small)
    lo_l, hi_l = stats.median_ci(large)
    assert lo_s <= stats.median(small) <= hi_s
    assert (hi_l - lo_l) < (hi_s - lo_s) / 4
    assert stats.rel_half_width(large) < 0.01
    assert math.isclose(stats.median([3.0, 1.0, 2.0]), 2.0)


def test_batch_interval_widens_for_drifting_samples() -> None:
    import random

    rng = random.Random(1)
    steady = [100 + rng.gauss(0, 1) for _ in range(800)]
    drifting = [100 + 3 * (i // 100) + rng.gauss(0, 1) for i in range(800)]  # slow clock drift
    assert stats.batch_rel_half_width(steady) < 0.005
    assert stats.batch_rel_half_width(drifting) > 3 * stats.batch_rel_half_width(steady)
    assert stats.batch_rel_half_width([1.0] * 10) == math.inf  # too few for 8 batches


def test_host_guard_retakes_late_samples_with_a_longer_spin_until_its_cap() -> None:
    guard = HostGuard(iters=100, max_iters=400)
    assert guard.on_time([1.0, 2.0], [False, False]) == [1.0, 2.0]
    assert guard.iters == 100 and guard.retaken == 0
    # a late sample is dropped, and one late in three is systematic: the spin doubles
    assert guard.on_time([1.0, 9.0, 1.1], [False, True, False]) == [1.0, 1.1]
    assert (guard.iters, guard.retaken) == (200, 1)
    assert guard.on_time([9.0], [True]) == []
    assert (guard.iters, guard.retaken) == (400, 2)
    # at the cap nothing is gained by waiting longer: late samples are kept and counted
    assert guard.on_time([9.0, 1.0], [True, False]) == [9.0, 1.0]
    assert (guard.iters, guard.retaken, guard.late_kept) == (400, 2, 1)


def test_a_lone_late_sample_is_taken_again_without_lengthening_every_later_spin() -> None:
    # a host hiccup (one late sample in a batch of 16) is no reason to make every
    # later sample wait longer, nor, at the cap, to keep the host's time
    values, late = [1.0] * 15 + [9.0], [False] * 15 + [True]
    guard = HostGuard(iters=100, max_iters=400)
    assert guard.on_time(values, late) == [1.0] * 15
    assert (guard.iters, guard.retaken) == (100, 1)
    capped = HostGuard(iters=400, max_iters=400)
    assert capped.on_time(values, late) == [1.0] * 15
    assert (capped.retaken, capped.late_kept) == (1, 0)


def test_the_collector_is_paused_only_while_a_block_is_timed_where_asked() -> None:
    # docs/measurement.md §34d: a garbage collection inside a sample is host time
    seen: list[bool] = []

    def call(_: object) -> None:
        seen.append(gc.isenabled())

    assert gc.isenabled()
    running = make_sampler(call, torch.zeros(1), TimerConfig(min_warmup_s=0.0))
    seen.clear()
    running.block(3)
    assert seen == [True] * 3  # the default: as before
    paused = make_sampler(
        call, torch.zeros(1), TimerConfig(min_warmup_s=0.0, collect_garbage_in_blocks=False)
    )
    seen.clear()
    paused.block(3)
    assert seen == [False] * 3 and gc.isenabled()  # paused for the block, back after it
    # a collector the caller had off stays off
    gc.disable()
    try:
        paused.block(1)
        assert not gc.isenabled()
    finally:
        gc.enable()
