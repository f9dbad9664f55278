"""CUTLASS's CuTe DSL dense GEMM on a Hopper GPU: correct, compiled once, and CUTLASS's kernel.

Marked ``gpu``. Every test skips where the DSL or CUTLASS's example is missing
(``python -m benchmarks.gpu cutlass-dsl`` installs the carried wheel and puts
both on the path) or the GPU is not sm_90. The kernel-name test checks the
adapter's claim where it is made, as ``test_grouped_gemm_runs_a_cutlass_kernel_on_hopper``
does for ATen's grouped GEMM: by the names the profiler records.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelwatch.kernels.adapters import Unavailable
from kernelwatch.kernels.adapters import cutlass_dsl as adapter
from kernelwatch.kernels.adapters.cutlass_dsl_env import KERNEL_CLASS, Dsl, load
from kernelwatch.kernels.record import case_id
from kernelwatch.kernels.runner import run_case
from kernelwatch.kernels.suites import gemm
from kernelwatch.kernels.timing import TimerConfig

# the DSL's and the example's own warnings are not this adapter's failures
WARNINGS = ("DeprecationWarning", "UserWarning", "FutureWarning")
pytestmark = [pytest.mark.gpu, *(pytest.mark.filterwarnings(f"ignore::{w}") for w in WARNINGS)]

IMPL = "kernelwatch.kernels.adapters.cutlass_dsl"
CUBLAS_MARKS = ("nvjet", "cublas", "xmma")  # cuBLAS(Lt) kernel names on sm90


@pytest.fixture(scope="module")
def dsl() -> Dsl:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("CUTLASS's Hopper dense GEMM is an sm_90 kernel")
    try:
        return load()
    except Unavailable as exc:
        pytest.skip(str(exc))


def _operands(m: int, n: int, k: int, dtype: torch.dtype, out: torch.dtype) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randn((m, k), generator=g, device="cuda").to(dtype)
    w = torch.randn((n, k), generator=g, device="cuda").to(dtype)
    return {"a": a, "w": w, "out": torch.full((m, n), float("nan"), device="cuda", dtype=out)}


@pytest.mark.parametrize(
    ("shape", "dtype", "graph"),
    [
        ({"m": 1024, "n": 768, "k": 512}, "bfloat16", None),
        ({"m": 1024, "n": 768, "k": 512}, "float16", None),
        ({"m": 1024, "n": 768, "k": 512}, "bfloat16", True),  # launches captured in a graph
        ({"m": 64, "n": 4096, "k": 1024}, "bfloat16", None),  # the thin tile (64 × 64)
        ({"m": 200, "n": 264, "k": 136}, "bfloat16", None),  # partial tiles on every edge
    ],
    ids=["bf16", "fp16", "bf16-graph", "bf16-thin", "bf16-ragged"],
)
def test_cutlass_dsl_gemm_matches_float32(
    dsl: Dsl, shape: dict[str, int], dtype: str, graph: bool | None
) -> None:
    spec = gemm.make_case({"kernel": "gemm", **shape, "dtype": dtype})
    config = TimerConfig(
        cuda_graph=graph, budget_s=0.05, min_samples=5, min_time_s=0.0, max_warmup_s=0.2
    )
    cid = case_id(spec.kernel, "cutlass-dsl", spec.params)
    rec = run_case(spec, "gpu-test", cid, "cutlass-dsl", IMPL, torch.device("cuda"), config)
    assert rec.status == "pass", f"{rec.error}\n{rec.log_tail[-3000:]}"
    assert rec.correctness is not None and rec.correctness.passed
    assert rec.timing is not None and rec.timing.median > 0
    if graph:
        assert rec.timing.cuda_graph


def test_fp8_without_scales_matches_the_float32_product(dsl: Dsl) -> None:
    case = _operands(512, 384, 256, torch.float8_e4m3fn, torch.bfloat16)
    out = adapter.run(case)
    torch.cuda.synchronize()
    ref = case["a"].float() @ case["w"].float().t()
    rel = float((out.float() - ref).norm() / ref.norm())
    assert rel < 1e-2, rel  # bf16 rounding of the output: ~2e-3


def test_each_configuration_compiles_once_and_serves_every_shape(dsl: Dsl) -> None:
    cfg = adapter.TileConfig((128, 128))  # a tile no other test compiles
    before = len(adapter.compile_log())
    for m, n, k in ((256, 256, 128), (256, 256, 128), (384, 512, 256)):
        case = _operands(m, n, k, torch.bfloat16, torch.bfloat16)
        adapter.run(case, cfg)
        torch.cuda.synchronize()
        assert torch.isfinite(case["out"]).all()
    new = adapter.compile_log()[before:]
    assert len(new) == 1 and new[0]["tile"] == [128, 128] and new[0]["seconds"] > 0
    keys = [
        (tuple(e["dtypes"]), tuple(e["tile"]), tuple(e["cluster"])) for e in adapter.compile_log()
    ]
    assert len(keys) == len(set(keys))


def test_the_profiler_names_a_cutlass_kernel_and_no_cublas_one(dsl: Dsl) -> None:
    """The adapter's CUTLASS claim, checked where it is made: the profiler's kernel names."""
    case = _operands(1024, 1024, 1024, torch.bfloat16, torch.bfloat16)
    adapter.run(case)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        adapter.run(case)
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    names = sorted({e.name for e in prof.events() if e.device_type == cuda})
    # "cutlass" here comes from the DSL: the example's module name has none (cutlass_dsl_env)
    ours = [n for n in names if "cutlass" in n.lower() and KERNEL_CLASS in n]
    assert ours, names
    assert not any(mark in n.lower() for n in names for mark in CUBLAS_MARKS), names
