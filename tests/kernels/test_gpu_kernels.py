"""GPU behaviour of the timer, the probe and the first suite (run on the H200)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelwatch.kernels.peaks import probe
from kernelwatch.kernels.timing import TimerConfig, measure

pytestmark = pytest.mark.gpu


def test_gemm_timed_with_events_cold_l2_warm_clocks_and_telemetry() -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    m = measure(lambda i: i[0] @ i[1], (a, b), TimerConfig(budget_s=1.0))
    t = m.timing
    assert t.timer == "cuda_event" and t.cold_l2 and not t.cuda_graph
    assert t.n == len(t.samples) >= 20
    assert t.stop_reason in ("converged", "budget")
    assert 50e-6 < t.median < 2e-3  # ~0.2 ms on an H100/H200
    assert m.telemetry["nvml"] and m.telemetry["steady_sm_mhz"] > 1000
    assert m.reliable
    flops = 2 * 4096**3 / t.median / 1e12
    assert flops > 300, f"bf16 GEMM at {flops:.0f} TFLOP/s: clocks not warm?"


def test_launch_bound_kernel_uses_a_cuda_graph_with_rotating_inputs() -> None:
    x = torch.randn(64 * 1024, device="cuda")
    y = torch.randn(64 * 1024, device="cuda")
    m = measure(lambda i: i[0] + i[1], (x, y), TimerConfig(budget_s=0.5))
    t = m.timing
    assert t.cuda_graph and t.calls_per_sample > 100
    assert t.median < 20e-6
    assert t.cold_l2


def test_warm_l2_is_an_option() -> None:
    x = torch.randn(2 * 1024 * 1024, device="cuda")  # 8 MB in, 8 MB out: fits the 60 MB L2
    y = torch.empty_like(x)

    def call(i: torch.Tensor) -> None:
        torch.mul(i, 2, out=y)

    cold = measure(call, x, TimerConfig(budget_s=0.5, cuda_graph=False)).timing
    warm = measure(call, x, TimerConfig(budget_s=0.5, cuda_graph=False, cold_l2=False)).timing
    assert cold.cold_l2 and not warm.cold_l2
    assert warm.median < 0.9 * cold.median  # inputs served from L2 when warm


def test_a_slow_host_launch_is_not_timed_with_the_kernel() -> None:
    """A call whose host side outlasts the L2 flush (a Python wrapper) reads its kernel.

    Without the host guard the start event fired after the flush and the kernel came
    only when the host had queued it: the sample held the host's 300 us.
    """
    import time

    x = torch.randn(64 * 2**20, device="cuda")  # 256 MB: a sum of ~70 us, timed per launch
    sink = torch.empty((), device="cuda")

    def kernel(i: torch.Tensor) -> None:
        torch.sum(i, dim=0, out=sink)

    def slow_host(i: torch.Tensor) -> None:
        end = time.perf_counter() + 300e-6
        while time.perf_counter() < end:
            pass
        kernel(i)

    plain = measure(kernel, x, TimerConfig(budget_s=0.5, cuda_graph=False))
    slow = measure(slow_host, x, TimerConfig(budget_s=0.5, cuda_graph=False))
    unguarded = measure(slow_host, x, TimerConfig(budget_s=0.5, cuda_graph=False, host_guard=False))
    assert slow.timing.median == pytest.approx(plain.timing.median, rel=0.05)
    assert slow.telemetry["host_late_kept"] == 0
    assert slow.telemetry["keep_busy_s"] > 300e-6
    assert unguarded.timing.median > 1.5 * plain.timing.median  # what the guard removes
    # ... and what the record still says about the host: its launch, beside the GPU time
    assert slow.timing.host_launch_s is not None and slow.timing.host_launch_s > 300e-6
    assert plain.timing.host_launch_s is not None and plain.timing.host_launch_s < 150e-6


def test_peak_probe_measures_plausible_ceilings() -> None:
    peaks = probe(torch.device("cuda"), repeats=5)
    assert 1000 < peaks["copy_gbps"] < 10000
    assert 200 < peaks["bf16_tflops"] < 2500


def test_bench_runs_the_first_suite_natively(tmp_path: Path) -> None:
    out = tmp_path / "gpu.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", "--out", str(out), "--budget", "0.3"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["kernel"] for r in recs} == {"softmax", "rmsnorm", "matmul", "attention"}
    for r in recs:
        assert r["status"] == "pass", (r["kernel"], r["params"], r["error"])
        assert r["environment"]["triton_interpret"] is False
        assert r["timing"]["timer"] == "cuda_event"
        assert r["throughput"]["pct_of_peak"] is not None
    assert recs[0]["device"]["peaks"]["copy_gbps"] > 1000


def test_paired_mode_across_two_processes_on_the_gpu() -> None:
    from kernelwatch.kernels.launch import launch_note
    from kernelwatch.kernels.paired import PairedConfig, Side, compare
    from kernelwatch.kernels.spin import iters_for

    factory = "benchmarks.benchcases:gemm"
    params = {"m": 4096, "n": 4096, "k": 4096}
    extra = iters_for(0.05 * 200e-6)  # ~+5 % of a ~0.2 ms GEMM
    a, b = Side("A"), Side("B")
    try:
        cfg = PairedConfig(min_effect=0.01, budget_s=4)
        slow = compare(
            a, b, factory, {**params, "extra_iters": 0}, {**params, "extra_iters": extra}, cfg
        )
        assert slow.verdict == "regression", slow
        same = compare(a, b, factory, params, params, cfg)
        assert same.verdict in ("unchanged", "inconclusive"), same
        assert 0.99 < same.ratio < 1.01
        assert same.launch_a and same.launch_b  # each role's launch, from its blocks
        assert launch_note(same.launch_a, same.launch_b, same.b_median) == ""
        # a wrapper 200 us slower to launch: the GPU time is unchanged, the note says so
        wrapped = compare(a, b, factory, params, {**params, "host_delay_us": 200.0}, cfg)
        assert wrapped.verdict in ("unchanged", "inconclusive"), wrapped
        assert wrapped.host_launch_a is not None and wrapped.host_launch_b is not None
        assert wrapped.host_launch_b > wrapped.host_launch_a + 150e-6
        assert "slower" in launch_note(wrapped.launch_a, wrapped.launch_b, wrapped.b_median)
    finally:
        a.close()
        b.close()


def test_spin_is_linear_in_its_iterations() -> None:
    """Injected slowdowns and the keep-busy rest on this: t(base + k*n) - t(base) = k*t(n)."""
    from kernelwatch.kernels.spin import _time_spin, seconds_per_iter

    # base long enough (~170 us) that back-to-back spins are GPU-bound, not bound by
    # Triton's ~20 us host launch (with base 1000 the first step read 30 % short)
    base, n = 50_000, 20_000
    _time_spin(400_000, None, 200)  # ~0.3 s: the SM clock up from idle first
    t0 = _time_spin(base, None, 20)
    steps = [_time_spin(base + k * n, None, 20) - t0 for k in (1, 2, 4)]
    assert steps[1] == pytest.approx(2 * steps[0], rel=0.05), steps
    assert steps[2] == pytest.approx(4 * steps[0], rel=0.05), steps
    assert steps[0] == pytest.approx(n * seconds_per_iter(), rel=0.05)


def test_all_reduce_sums_over_every_visible_gpu_and_is_timed_without_a_graph() -> None:
    """The collective suite on the GPUs this process sees (one is enough: a one-rank sum)."""
    from kernelwatch.kernels import runner
    from kernelwatch.kernels.triton_kernels import all_reduce

    ranks = torch.cuda.device_count()
    x = [torch.full((1000,), float(r + 1), device=f"cuda:{r}") for r in range(ranks)]
    out = torch.empty(1000, device="cuda:0")
    all_reduce(x, out)
    torch.cuda.synchronize()
    assert torch.equal(out, torch.full_like(out, ranks * (ranks + 1) / 2))
    assert all(torch.equal(t.cpu(), out.cpu()) for t in x)  # every rank holds the sum

    device = torch.device("cuda")
    cases = list(runner.selected_cases(["collective"], "quick", device, "builtin", None, []))
    assert len(cases) == 4
    config = TimerConfig(budget_s=0.3, cuda_graph=True)  # the case's tag overrides "on"
    for suite, spec, cid in cases:
        r = runner.run_case(spec, suite, cid, "builtin", runner.BUILTIN_IMPL, device, config)
        assert r.status == "pass", (r.params, r.error)
        assert r.params["ranks"] == ranks
        assert r.timing is not None and r.timing.timer == "cuda_event"
        assert not r.timing.cuda_graph
        assert r.throughput is not None and r.throughput.gbps > 0
