"""Two separately measured runs differ by more than their samples show: the unpaired
comparison allows for the case's run-to-run spread (``jobs/judging/run_spread.py``).

The scenario is the H200's (2026-12-02, ``docs/data/service-h200-2026-12-02``): Liger's
softmax 32768x1000, whose code no commit touched, read 39.0-39.4 µs in four runs and
40.1-40.4 µs in four, each run's samples within ±0.1 %. Judged from the samples alone,
the jump read +3.4 % [1.030, 1.037], a failed run.
"""

from __future__ import annotations

import math
import random

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case, Result, Run
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.comparison import compare
from kernelwatch.jobs.judging.run_spread import (
    GPU_FLOOR,
    STEP,
    floor_for,
    series_sd,
    spread,
    widen,
)
from kernelwatch.kernels.verdict import CaseVerdict, RunVerdict

# the medians (µs) of Liger's softmax 32768x1000 over its 8 commits on the H200
SOFTMAX_H200 = [39.39, 39.04, 40.38, 39.44, 40.38, 40.11, 40.32, 39.11]
# a case of the same runs whose median held still: layernorm 16384x4096
LAYERNORM_H200 = [71.71, 71.36, 71.62, 71.74, 71.55, 71.39, 71.46, 71.36]
CASE = "c-softmax"


def test_the_spread_is_read_from_successive_runs_and_ignores_one_real_step() -> None:
    assert series_sd(SOFTMAX_H200) == pytest.approx(0.0248, abs=0.001)
    assert series_sd(LAYERNORM_H200) == pytest.approx(0.00235, abs=0.0003)
    stepped = [100.0, 100.1, 99.9, 100.0, 120.0, 120.1, 119.9, 120.0]  # one +20 % change
    assert series_sd(stepped) == pytest.approx(0.0012, abs=0.0002)
    assert series_sd([100.0]) is None  # too short to tell
    assert series_sd([100.0, 101.0]) == pytest.approx(0.0105, abs=0.0002)  # one difference


def test_the_floor_holds_on_a_gpu_and_not_on_the_cpu() -> None:
    assert spread([], "h200") == GPU_FLOOR
    assert spread([1.0] * 8, "h200") == GPU_FLOOR  # a perfectly still history: the floor
    assert spread(SOFTMAX_H200, "h200") == series_sd(SOFTMAX_H200)
    assert floor_for("cpu") == 0.0
    assert spread([], "cpu") == 0.0


def test_widening_adds_two_runs_spread_in_quadrature_on_the_log_scale() -> None:
    ratio, low, high = widen((1.01, 1.005, 1.015), 0.002)
    extra = 2.5758 * math.sqrt(2) * 0.002
    assert ratio == 1.01
    assert math.log(ratio / low) == pytest.approx(math.hypot(math.log(1.01 / 1.005), extra), 1e-3)
    assert math.log(high / ratio) == pytest.approx(math.hypot(math.log(1.015 / 1.01), extra), 1e-3)
    assert widen((1.01, 1.005, 1.015), 0.0) == (1.01, 1.005, 1.015)
    assert widen((1.0, math.nan, math.nan), 0.01)[0] == 1.0


def test_a_jump_the_history_has_made_before_is_not_a_regression() -> None:
    rng = random.Random(7)
    base = [39.04 * (1 + rng.gauss(0, 0.001)) for _ in range(300)]
    cand = [40.38 * (1 + rng.gauss(0, 0.001)) for _ in range(300)]
    alone = compare(base, cand)
    assert alone.verdict == CaseVerdict.REGRESSION  # what the samples alone said
    assert alone.ci_low > 1.03
    allowed = compare(base, cand, spread=spread(SOFTMAX_H200, "h200"))
    assert allowed.verdict == CaseVerdict.INCONCLUSIVE
    assert allowed.ci_low < 1.0 < allowed.ci_high
    # a change far beyond that spread is still found
    slower = [x * 1.3 for x in cand]
    assert compare(base, slower, spread=spread(SOFTMAX_H200, "h200")).verdict == (
        CaseVerdict.REGRESSION
    )


def _history(
    session: Session,
    medians: list[float],
    device_class: str = "h200",
    settings: Settings | None = None,
) -> list[Run]:
    """One manual run per commit of a linear history, each judged against its parent as
    the worker judges it; samples within ±0.1 % of the run's median."""
    repo = get_or_create_repository(session, "spready", "/src/spready")
    if session.get(Case, CASE) is None:
        session.add(Case(id=CASE, suite="basic", kernel="softmax", backend="lib", params={},
                         label="rows=32768"))  # fmt: skip
    rng = random.Random(11)
    runs: list[Run] = []
    for n, median in enumerate(medians, start=1):
        sha = f"{n:040x}"
        parent = f"{n - 1:040x}"
        commit = upsert_commit(session, repo, sha, [parent] if n > 1 else [], f"c{n}", generation=n)
        run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"], trigger="manual",
                  status="succeeded", device_class=device_class,
                  baseline_sha=parent if n > 1 else None, options={})  # fmt: skip
        session.add(run)
        session.flush()
        samples = [median * 1e-6 * (1 + rng.gauss(0, 0.001)) for _ in range(200)]
        session.add(Result(run_id=run.id, case_id=CASE, status="pass",
                           median_s=median * 1e-6, samples=samples,
                           record={"suite": "basic", "kernel": "softmax"}))  # fmt: skip
        session.flush()
        session.expire(run)
        assert analyze(session, run, settings or Settings())
        session.flush()
        runs.append(run)
    return runs


def _interval(run: Run) -> tuple[float, float, float]:
    (result,) = run.results
    assert result.ratio is not None
    assert result.ratio_ci_low is not None and result.ratio_ci_high is not None
    return result.ratio, result.ratio_ci_low, result.ratio_ci_high


def _verdict(run: Run) -> CaseVerdict:
    (result,) = run.results
    return CaseVerdict(result.verdict)


def test_the_h200_softmax_history_fails_no_run(session: Session) -> None:
    runs = _history(session, SOFTMAX_H200)
    # the third run jumps +3.4 %; the 0.9 % between the two before it is spread enough
    # to make that open, and from then on the history has shown its two levels
    assert all(r.verdict != RunVerdict.FAIL for r in runs), [_verdict(r) for r in runs[1:]]
    assert _verdict(runs[2]) == CaseVerdict.INCONCLUSIVE
    assert _verdict(runs[4]) == CaseVerdict.INCONCLUSIVE  # +2.4 %, the jump of run 3 again
    assert _verdict(runs[-1]) == CaseVerdict.INCONCLUSIVE  # -3.1 % inside a 2.5 % spread


def test_a_still_history_keeps_its_power_and_its_unchanged(session: Session) -> None:
    runs = _history(session, [*LAYERNORM_H200, 71.40, 71.40 * 1.03])
    assert _verdict(runs[-2]) == CaseVerdict.UNCHANGED
    assert _verdict(runs[-1]) == CaseVerdict.REGRESSION
    assert runs[-1].verdict == RunVerdict.FAIL


def test_the_spread_reads_a_bounded_window_up_to_the_baseline(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spread's query runs whenever a run is judged: it reads the newest
    ``RUNS_READ`` runs up to the baseline commit, never the whole history, and never the
    runs of the change being judged."""
    from kernelwatch.jobs.judging import run_spread

    medians = [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]
    runs = _history(session, medians)
    judged = runs[-1]  # baseline: the commit before it
    series = run_spread.history_medians(session, judged, [CASE], exclude=(judged.id,))
    assert [round(m * 1e6) for m in series[CASE]] == [100, 101, 102, 103, 104]
    monkeypatch.setattr(run_spread, "RUNS_READ", 3)
    series = run_spread.history_medians(session, judged, [CASE], exclude=(judged.id,))
    assert [round(m * 1e6) for m in series[CASE]] == [102, 103, 104]  # oldest first
    assert run_spread.history_medians(session, judged, []) == {}


# a user's softmax: one commit made it 431x slower, the next reverted it
STEP_AND_REVERT = [100.0, 100.2, 43100.0, 99.9, 100.1]


def test_a_step_and_its_revert_are_not_read_as_noise() -> None:
    """With 2-4 differences, two of them a step and its revert, the median of the
    differences was the step (sd 3.2 on the log scale): every comparison after it read
    an interval like [0.0047, 39702537]. Differences of ``STEP`` or more are left out."""
    assert series_sd(STEP_AND_REVERT) == pytest.approx(0.0021, abs=0.0003)
    assert series_sd(STEP_AND_REVERT[:4]) == pytest.approx(0.0021, abs=0.0003)  # 3 differences
    assert series_sd([100.0, 43100.0, 100.0]) is None  # nothing but the step: no reading
    assert spread([100.0, 43100.0, 100.0], "h200") == GPU_FLOOR
    assert series_sd([100.0, 250.0, 100.0, 100.5]) == pytest.approx(0.0053, abs=0.0003)
    assert math.log(2) == pytest.approx(STEP)
    # a genuinely noisy series (both halves of Liger's softmax: two levels 3 % apart,
    # visited in turn) is still read as noise, as are moves of 25 % or more short of 2x
    assert series_sd(SOFTMAX_H200) == pytest.approx(0.0248, abs=0.001)
    assert series_sd([100.0, 125.0, 100.0, 126.0]) == pytest.approx(0.24, abs=0.02)


@pytest.mark.parametrize("device_class", ["cpu", "h200"])
def test_after_a_step_and_its_revert_an_unchanged_commit_reads_unchanged(
    session: Session, device_class: str
) -> None:
    runs = _history(session, [*STEP_AND_REVERT, 100.0], device_class,
                    Settings(cpu_timing_gates=True))  # fmt: skip
    assert _verdict(runs[2]) == CaseVerdict.REGRESSION  # the 431x commit itself
    assert _verdict(runs[3]) == CaseVerdict.IMPROVEMENT  # its revert
    ratio, low, high = _interval(runs[-1])
    assert _verdict(runs[-1]) == CaseVerdict.UNCHANGED, (ratio, low, high)
    assert 1 / 1.01 < low < ratio < high < 1.01  # a sane interval, not [7.7e-6, 101439]


@pytest.mark.parametrize("device_class", ["cpu", "h200"])
def test_after_a_step_and_its_revert_a_real_regression_still_fails(
    session: Session, device_class: str
) -> None:
    runs = _history(session, [*STEP_AND_REVERT, 100.0, 120.0], device_class,
                    Settings(cpu_timing_gates=True))  # fmt: skip
    ratio, low, high = _interval(runs[-1])
    assert _verdict(runs[-1]) == CaseVerdict.REGRESSION, (ratio, low, high)
    assert ratio == pytest.approx(1.2, abs=0.01)
    assert 1.15 < low < ratio < high < 1.25
    assert runs[-1].verdict == RunVerdict.FAIL
