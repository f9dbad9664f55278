"""Roofline percentages: each dtype against its own measured ceiling, or none at all."""

import pytest

from kernelwatch.kernels.peaks import compute_ceiling, pct_of_peak

PEAKS = {"copy_gbps": 4000.0, "bf16_tflops": 800.0, "fp8_tflops": 1400.0}


def test_fp8_gemm_is_held_against_the_fp8_ceiling() -> None:
    # 8192^3 FP8 at 1300 TFLOP/s: 93 % of FP8, not the ~160 % the bf16 ceiling gave
    flops, nbytes = 2 * 8192**3, 3 * 8192**2
    pct, bound = pct_of_peak(1300.0, 300.0, flops, nbytes, PEAKS, "float8_e4m3fn")
    assert bound == "compute"
    assert pct == pytest.approx(100 * 1300 / 1400)


def test_bf16_and_fp16_share_the_bf16_ceiling() -> None:
    assert compute_ceiling(PEAKS, "float16") == compute_ceiling(PEAKS, "bfloat16") == 800.0


def test_a_dtype_without_a_probe_gets_no_compute_percentage() -> None:
    pct, bound = pct_of_peak(50.0, 10.0, 2 * 4096**3, 3 * 4096**2 * 4, PEAKS, "float32")
    assert (pct, bound) == (None, "compute")
    older = {"copy_gbps": 4000.0, "bf16_tflops": 800.0}  # a cache without fp8_tflops
    assert pct_of_peak(900.0, 1.0, 1e12, 1e6, older, "float8_e4m3fn")[0] is None


def test_memory_bound_kernels_use_the_copy_ceiling() -> None:
    # a decode kernel: ~1 FLOP per byte, far left of the ridge (200 FLOP/byte)
    pct, bound = pct_of_peak(3.0, 3000.0, 1e9, 1e9, PEAKS, "bfloat16")
    assert bound == "memory"
    assert pct == pytest.approx(75.0)
