"""The injected slowdown's calibration (benchmarks/inject.py) refuses a slope it cannot trust.

On the H200 (2026-12-02) candidate processes that calibrated while 15 others set up
read the spin's slope as <= 0, clamped it to 1e-12 s and injected +11 000 % while
their log said 1.00 %. The calibration now repeats until its rounds agree on a
physical slope, and fails the side otherwise. The GPU timing is replaced here by a
model of call times; the arithmetic and the decision are the real ones.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks import inject

T_CALL = 20e-6  # a 20 us kernel
SLOPE = 3.5e-9  # the H200's spin, seconds per iteration


class _Gpu:
    """Call times: ``noisy_calls`` contended readings, then a quiet GPU's."""

    def __init__(self, noisy_calls: int) -> None:
        self.noisy_calls, self.calls = noisy_calls, 0

    def time_calls(self, fn: object, args: object, iters: int) -> float:
        self.calls += 1
        if self.calls <= self.noisy_calls:
            # another process's set-up: the base call slow, the probe's not
            return 3 * T_CALL + (0 if iters > inject.BASE_ITERS else 40e-6)
        return T_CALL + iters * SLOPE


@pytest.fixture
def quiet_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    log = tmp_path / "calibration.jsonl"
    monkeypatch.setattr(inject, "_conf", lambda: types.SimpleNamespace(LOG=str(log)))
    monkeypatch.setattr(inject, "spin_after", lambda iters: None)
    monkeypatch.setattr(inject, "seconds_per_iter", lambda device: 4 * SLOPE)  # long spins'
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    return log


def _timer(monkeypatch: pytest.MonkeyPatch, noisy_calls: int) -> None:
    monkeypatch.setattr(inject, "_time_calls", _Gpu(noisy_calls).time_calls)


def test_a_contended_first_attempt_is_measured_again(
    quiet_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _timer(monkeypatch, noisy_calls=2 * inject.ROUNDS)  # the whole first attempt
    extra = inject._calibrate("decode", lambda: None, (), 1.0)
    (row,) = [json.loads(line) for line in quiet_gpu.read_text().splitlines()]
    assert row["attempts"] == 2
    assert row["spin_s_per_iter"] == pytest.approx(SLOPE)
    one_call = T_CALL + inject.BASE_ITERS * SLOPE
    assert row["t_call_s"] == pytest.approx(one_call)
    assert extra == round(0.01 * one_call / SLOPE)
    assert row["nominal_pct"] == pytest.approx(1.0, abs=0.01)


def test_the_injection_is_a_percentage_of_the_suite_timers_baseline(
    quiet_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 12 us GEMM on the H200 (2026-12-03): the calibration's back-to-back calls read
    14.2 us, the comparison's baseline 16.0; sized on the first, "+1 %" was +0.89 %."""
    suite_s = 1.13 * (T_CALL + inject.BASE_ITERS * SLOPE)  # the gate's timer: slower
    monkeypatch.setattr(
        inject, "_conf", lambda: types.SimpleNamespace(LOG=str(quiet_gpu), BASE_S=suite_s)
    )
    _timer(monkeypatch, noisy_calls=0)
    extra = inject._calibrate("gemm", lambda: None, (), 1.0)
    (row,) = [json.loads(line) for line in quiet_gpu.read_text().splitlines()]
    assert extra == round(0.01 * suite_s / SLOPE)
    assert row["sized_on"] == "suite timer" and row["sized_on_s"] == pytest.approx(suite_s)
    assert 100 * extra * SLOPE / suite_s == pytest.approx(1.0, abs=0.01)
    # the calibration's own time is still what it measured, beside the size's base
    assert row["t_call_s"] == pytest.approx(T_CALL + inject.BASE_ITERS * SLOPE)
    # no suite timing (0, or not a number): the calibration's own time, said so
    assert inject.sizing_time(14e-6, 0.0) == (14e-6, "calibration")
    assert inject.sizing_time(14e-6, float("nan")) == (14e-6, "calibration")


def test_a_conf_carries_the_baseline_time(tmp_path: Path) -> None:
    import importlib.util

    folder = inject.write_conf(tmp_path / "B", "kernelwatch.kernels.adapters.gemm", 1.0,
                               tmp_path / "log.jsonl", base_s=16.0e-6)  # fmt: skip
    spec = importlib.util.spec_from_file_location("conf", folder / f"{inject.CONF}.py")
    assert spec is not None and spec.loader is not None
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    assert (conf.PCT, conf.BASE_S) == (1.0, 16.0e-6)


def test_a_slope_that_never_settles_fails_the_side(
    quiet_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _timer(monkeypatch, noisy_calls=10**9)
    with pytest.raises(inject.CalibrationError, match=f"did not settle in {inject.ATTEMPTS} "):
        inject._calibrate("decode", lambda: None, (), 1.0)
    assert not quiet_gpu.exists()  # nothing claims a nominal size


class _SteepGpu:
    """A contention that lasts ``steep_calls`` timings: the spin reads twice as steep,
    and the rounds agree with each other all the same."""

    def __init__(self, steep_calls: int) -> None:
        self.steep_calls, self.calls = steep_calls, 0

    def time_calls(self, fn: object, args: object, iters: int) -> float:
        self.calls += 1
        slope = 2 * SLOPE if self.calls <= self.steep_calls else SLOPE
        return T_CALL + iters * slope


def test_a_slope_steeper_than_another_sides_is_measured_again(
    quiet_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GEMM 4096^3 on the H200 (2026-12-02): two candidates read 7.5 and 8.9 ns where
    the others read 3.8-4.5, each attempt consistent, and injected +0.68 % for +1 %."""
    before = [SLOPE, 1.02 * SLOPE]  # two sides before this one
    quiet_gpu.write_text("".join(json.dumps({"spin_s_per_iter": x}) + "\n" for x in before))
    monkeypatch.setattr(inject, "_time_calls", _SteepGpu(1 + 2 * inject.ROUNDS).time_calls)
    inject._calibrate("gemm", lambda: None, (), 1.0)
    row = json.loads(quiet_gpu.read_text().splitlines()[-1])
    assert row["attempts"] == 2 and row["spin_s_per_iter"] == pytest.approx(SLOPE)
    assert Path(str(quiet_gpu) + ".lock").exists()  # the sides took turns
    # a side with one other before it has no reference yet: its own rounds decide
    quiet_gpu.write_text(json.dumps({"spin_s_per_iter": SLOPE}) + "\n")
    monkeypatch.setattr(inject, "_time_calls", _SteepGpu(10**9).time_calls)
    inject._calibrate("gemm", lambda: None, (), 1.0)
    second = json.loads(quiet_gpu.read_text().splitlines()[-1])
    assert second["attempts"] == 1 and second["spin_s_per_iter"] == pytest.approx(2 * SLOPE)


def test_the_reference_is_the_median_of_the_other_sides() -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for x in (3.52e-9, 3.53e-9, 2.02e-9):  # layernorm's sides, one under contention
            f.write(json.dumps({"spin_s_per_iter": x}) + "\n")
        f.write("not json\n")
    assert inject.logged_slope(f.name) == pytest.approx(3.52e-9)
    Path(f.name).unlink()
    assert inject.logged_slope(f.name) is None  # no log yet


def test_the_probe_is_about_one_call_long() -> None:
    assert inject.probe_iters(20e-6, SLOPE) == 5714  # a 20 us decode: 5 714 iterations
    assert inject.probe_iters(1e-3, SLOPE) == 285714  # a 1 ms prefill: 1 ms of spin
    assert inject.probe_iters(1e-6, SLOPE) == 4 * inject.BASE_ITERS  # never below 4 000
    assert inject.probe_iters(1.0, SLOPE) == 5_000_000
    assert inject.probe_iters(1e-3, 0.0) == 4 * inject.BASE_ITERS  # no prior: the floor


def test_slope_of_reports_the_rounds_spread() -> None:
    base = [10.0] * 9
    assert inject.slope_of(base, [14.0] * 9, 4) == (1.0, 0.0)
    slope, spread = inject.slope_of(base, [12.0, 14.0, 14.0, 14.0, 14.0, 14.0, 14.0, 14.0, 16.0], 4)
    assert slope == 1.0 and spread == 0.0  # one outlier each way: the quartiles hold
    slope, spread = inject.slope_of(base, [9.0] * 9, 4)
    assert slope < 0 and spread == float("inf")


@pytest.mark.gpu
def test_the_spin_after_a_call_adds_gpu_time_not_host_time() -> None:
    """The wrapper's spin is a replayed graph: same GPU time as a launch, less host time.

    A Triton launch per call made Liger's 71 us layernorm host-bound (117 us a call)
    and cost FlashInfer's 17 us decode its CUDA graph on the H200 (2026-12-02).
    """
    from kernelwatch.kernels.spin import spin

    def gpu_s(launch: object, iters: int, reps: int = 50) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin(200_000)  # the GPU ahead of the host: events time the GPU
        begin.record()
        for _ in range(reps):
            launch(iters)  # type: ignore[operator]
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3 / reps

    def host_s(launch: object, reps: int = 200) -> float:
        spin(2_000_000)
        start = time.perf_counter()
        for _ in range(reps):
            launch(1000)  # type: ignore[operator]
        took = (time.perf_counter() - start) / reps
        torch.cuda.synchronize()
        return took

    for launch in (spin, inject.spin_after):
        gpu_s(launch, 20_000, 5)
        host_s(launch, 20)
    plain, replayed = gpu_s(spin, 20_000), gpu_s(inject.spin_after, 20_000)
    assert replayed == pytest.approx(plain, rel=0.1)
    assert host_s(inject.spin_after) < host_s(spin)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # inside a capture the spin is captured, not replayed
        inject.spin_after(1000)
    graph.replay()
    torch.cuda.synchronize()


def test_a_long_list_is_keyed_by_its_length_not_element_by_element() -> None:
    """The key runs on every wrapped call: FlashInfer decode's 512 page ids, keyed one
    by one, cost 270 us a call and made a 19 us kernel host-bound on the H200."""
    pages = list(range(512))
    key = inject._shape(({"pages": pages, "q": torch.zeros(1, 32, 128)},))
    (case,) = key
    assert dict(case)["pages"] == ("seq", 512, "int")
    assert inject._shape(({"pages": list(range(513))},)) != inject._shape(({"pages": pages},))
    assert inject._shape(((1, 2), "x")) == ((1, 2), "x")  # short ones stay whole


def test_a_key_calibrated_once_is_the_size_every_side_injects(
    quiet_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the H200 (2026-12-03) a 12 us GEMM's first side calibrated on a quiet GPU and
    the sides after it beside the others' set-ups (a call read 22-29 us for 14.5): each
    sized its own injection, and 4 of 4 trials ended with a side that gave up. The
    first calibration of a kernel and input key (the harness's own, alone on the GPU)
    is now what every candidate side injects."""
    case = ({"a": torch.zeros(64, 4096)},)
    _timer(monkeypatch, noisy_calls=0)
    extra = inject._calibrate("gemm", lambda *a: None, case, 1.0)
    _timer(monkeypatch, noisy_calls=10**9)  # every later measurement contended
    assert inject._calibrate("gemm", lambda *a: None, case, 1.0) == extra  # not measured
    rows = [json.loads(line) for line in quiet_gpu.read_text().splitlines()]
    assert [("reused" in r) for r in rows] == [False, True]
    assert rows[1]["extra_iters"] == extra and rows[1]["reused"] == rows[0]["pid"]
    assert rows[0]["key"] == repr(inject._shape(case))
    # another input key, or another size asked for, is calibrated afresh
    other = ({"a": torch.zeros(64, 8192)},)
    with pytest.raises(inject.CalibrationError):
        inject._calibrate("gemm", lambda *a: None, other, 1.0)
    with pytest.raises(inject.CalibrationError):
        inject._calibrate("gemm", lambda *a: None, case, 2.0)
    assert inject.logged_extra(str(quiet_gpu), "gemm", repr(inject._shape(other))) is None


class _HostBoundGpu:
    """One stream, simulated: a call costs ``host_s`` to queue and ``T_CALL`` plus its
    spin to run; the GPU starts a call once it is queued and the one before it ran."""

    def __init__(self, host_s: float) -> None:
        self.host_s, self.host, self.gpu = host_s, 0.0, 0.0
        self.heads: list[int] = []

    def spin(self, iters: int) -> None:  # the head: GPU work queued at once
        self.heads.append(iters)
        self.gpu = max(self.gpu, self.host) + iters * SLOPE

    def call(self, iters: int) -> None:
        self.host += self.host_s
        self.gpu = max(self.gpu, self.host) + T_CALL + iters * SLOPE

    def event(self, **_: object) -> object:
        gpu = self

        class Event:
            at = 0.0

            def record(self) -> None:
                self.at = max(gpu.gpu, gpu.host)

            def query(self) -> bool:  # reached by the GPU by now (host time)?
                return gpu.host >= self.at

            def synchronize(self) -> None:
                gpu.host = max(gpu.host, self.at)

            def elapsed_time(self, other: Any) -> float:
                return float(other.at - self.at) * 1e3

        return Event()


@pytest.mark.parametrize("host_call_s", [5e-6, 45e-6, 300e-6])
def test_calls_are_timed_on_the_gpu_even_when_the_host_is_slower(
    monkeypatch: pytest.MonkeyPatch, host_call_s: float
) -> None:
    """On the H200 (2026-12-03) FlashInfer's decode (a 22 us kernel, 25-48 us of Python
    a call) timed behind a fixed head read 40.6-48.1 us a call and the spin's slope at
    2.25 and 1.72 ns for 3.2-3.4: "+1.00 %" injected +2.9 % and +4.4 %. The head now
    grows until the host has queued the batch before the GPU reaches it."""
    gpu = _HostBoundGpu(host_call_s)
    monkeypatch.setattr(inject, "_head", [20 * inject.BASE_ITERS])
    monkeypatch.setattr(inject, "spin", gpu.spin)
    monkeypatch.setattr(inject, "spin_after", lambda iters: gpu.call(iters))
    monkeypatch.setattr(torch.cuda, "Event", gpu.event)
    for iters in (inject.BASE_ITERS, 5 * inject.BASE_ITERS):
        got = inject._time_calls(lambda: None, (), iters)
        assert got == pytest.approx(T_CALL + iters * SLOPE)
    # the head outlasts the host's 20 calls, and grew only where it had to
    assert gpu.heads[-1] * SLOPE > 20 * host_call_s
    assert (len(set(gpu.heads)) > 1) == (20 * host_call_s > 20 * inject.BASE_ITERS * SLOPE)


def test_a_host_no_head_can_outlast_fails_the_side(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _HostBoundGpu(host_s=1.0)  # a second a call: 20 s of launches
    monkeypatch.setattr(inject, "_head", [20 * inject.BASE_ITERS])
    monkeypatch.setattr(inject, "spin", gpu.spin)
    monkeypatch.setattr(inject, "spin_after", lambda iters: gpu.call(iters))
    monkeypatch.setattr(torch.cuda, "Event", gpu.event)
    with pytest.raises(inject.CalibrationError, match="outlast a spin"):
        inject._time_calls(lambda: None, (), inject.BASE_ITERS)
    assert max(gpu.heads) == inject.MAX_HEAD_ITERS


def test_a_probe_comparison_sizes_the_injection_where_the_gate_times_it() -> None:
    """H200, 2026-12-04: a slope-sized "+1 %" on a 16 us GEMM measured +1.37 %. A probe
    of 480 iterations that the comparison measured at +13.7 % prices one iteration at
    0.0285 %: +1 % is 35 of them."""
    extra, why = inject.comparison_sized_extra(1.0, 10.0, 480, 1.137)
    assert extra == round(480 / 13.7) and "+13.70 %" in why
    # a probe that cost what its slope said scales to the slope's size
    assert inject.comparison_sized_extra(1.0, 10.0, 500, 1.10)[0] == 50
    # no ratio, no probe, or a ratio that is no spin's cost: the slope sizes it
    for ratio, probe in ((None, 480), (float("nan"), 480), (1.137, 0), (1.0, 480), (1.6, 480)):
        assert inject.comparison_sized_extra(1.0, 10.0, probe, ratio)[0] == 0, ratio
    assert "not the spin's cost" in inject.comparison_sized_extra(1.0, 10.0, 480, 1.003)[1]


def test_a_probe_too_wide_to_size_by_leaves_the_size_to_the_slope() -> None:
    """H200, 2026-12-04: decode's probe read +7.42 % [+0.55, +14.75 %] and sized a
    "+1 %" that measured +1.7 %; the 12 us GEMM's probes read within ±3-14 % of
    their effect and sized +1.00-1.01 %."""
    wide = inject.comparison_sized_extra(1.0, 10.0, 800, 1.0742, (1.0055, 1.1475))
    assert wide[0] == 0 and "too wide" in wide[1]
    assert inject.comparison_sized_extra(1.0, 10.0, 470, 1.1044, (1.0984, 1.1105))[0] == 45
    # an interval that is not known does not stop the probe from sizing
    assert inject.comparison_sized_extra(1.0, 10.0, 470, 1.1044, (None, 1.2))[0] == 45


def test_a_size_the_comparison_measured_is_injected_and_the_slope_still_logged(
    quiet_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = types.SimpleNamespace(LOG=str(quiet_gpu), BASE_S=0.0, EXTRA_ITERS=35)
    monkeypatch.setattr(inject, "_conf", lambda: conf)
    _timer(monkeypatch, noisy_calls=0)
    assert inject._calibrate("gemm", lambda: None, (), 1.0) == 35
    (row,) = [json.loads(line) for line in quiet_gpu.read_text().splitlines()]
    assert row["sized_on"] == "comparison" and row["extra_iters"] == 35
    assert row["spin_s_per_iter"] == pytest.approx(SLOPE)
    one_call = T_CALL + inject.BASE_ITERS * SLOPE
    assert row["nominal_pct"] == pytest.approx(100 * 35 * SLOPE / one_call)
    # every later side injects the logged size
    assert inject._calibrate("gemm", lambda: None, (), 1.0) == 35


def test_a_conf_carries_the_size_the_comparison_measured_or_none(tmp_path: Path) -> None:
    import importlib.util

    for extra in (0, 35):
        folder = inject.write_conf(tmp_path / f"B{extra}", "m", 1.0, tmp_path / "l.jsonl",
                                   extra_iters=extra)  # fmt: skip
        spec = importlib.util.spec_from_file_location("conf", folder / f"{inject.CONF}.py")
        assert spec is not None and spec.loader is not None
        conf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(conf)
        written = (conf.EXTRA_ITERS, conf.BASE_S)
        assert written == (extra, 0.0)
