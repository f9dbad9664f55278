"""Every adapter's real call on a CUDA GPU, checked against the float32 reference.

Marked ``gpu`` (skipped without CUDA, in tests/conftest.py). A library that is
not importable skips its own cases only; a case the library or build does not
support skips with the adapter's reason. Shapes are small: this proves the
plumbing and the numbers' correctness on the device, the suites measure.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from kernelwatch.kernels.record import case_id
from kernelwatch.kernels.runner import run_case
from kernelwatch.kernels.suite import CaseSpec
from kernelwatch.kernels.suites import decode, gemm, prefill
from kernelwatch.kernels.timing import TimerConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

A = "kernelwatch.kernels.adapters."
NEEDS = {
    "flashinfer": "flashinfer",
    "fa3": "flash_attn_interface",
    "flash_attn": "flash_attn",
    "cutlass_dsl": "cutlass",
}
GQA = {"heads": 8, "kv_heads": 2}


def _pre(kernel: str, **kw: Any) -> CaseSpec:
    base = {"kernel": kernel, **GQA, "head_dim": 128, "causal": True, "dtype": "bfloat16"}
    return prefill.make_case({**base, **kw})


def _dec(**kw: Any) -> CaseSpec:
    base = {"kernel": "decode_paged", **GQA, "head_dim": 128, "batch": 4, "kv_len": 777}
    return decode.make_case({**base, "page_size": 16, "layout": "NHD", "dtype": "float16", **kw})


MLA = {"kernel": "decode_mla", "heads": 16, "head_dim_ckv": 512, "head_dim_kpe": 64}
MLA.update(sm_scale=192**-0.5, batch=4, kv_len=300, page_size=16, dtype="float16")
GEMM = {"m": 1024, "n": 768, "k": 512}
MOE = {"n": 768, "k": 512, "group_lens": [100, 7, 300, 33, 1, 64]}

CASES: list[tuple[str, CaseSpec]] = [
    *[
        (m, _pre("prefill", batch=2, seq=256))
        for m in ("sdpa", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math")
    ],
    ("sdpa", _pre("prefill", batch=2, seq_q=64, seq_k=320)),
    ("sdpa_flash", _pre("prefill_varlen", heads=8, kv_heads=8, seq_lens=[17, 200, 64])),
    ("sdpa", _dec()),
    ("sdpa", decode.make_case(MLA)),
    ("triton", _pre("prefill", batch=2, seq=256, head_dim=64)),
    ("triton", gemm.make_case({"kernel": "gemm", **GEMM, "dtype": "bfloat16"})),
    ("gemm", gemm.make_case({"kernel": "gemm", **GEMM, "dtype": "bfloat16"})),
    ("gemm", gemm.make_case({"kernel": "gemm_fp8_rowwise", **GEMM, "dtype": "float8_e4m3fn"})),
    ("gemm", gemm.make_case({"kernel": "gemm_fp8_tensorwise", **GEMM, "dtype": "float8_e4m3fn"})),
    ("gemm", gemm.make_case({"kernel": "gemm_grouped", **MOE, "dtype": "bfloat16"})),
    ("cutlass_dsl", gemm.make_case({"kernel": "gemm", **GEMM, "dtype": "bfloat16"})),
    (
        "gemm",
        gemm.make_case({"kernel": "gemm_grouped_fp8_rowwise", **MOE, "dtype": "float8_e4m3fn"}),
    ),
    # FP8 prefill with as many KV heads as query heads (FlashInfer's own FP8 test covers
    # only that): tells a GQA-specific FP8 failure from a general one
    ("flashinfer", _pre("prefill_fp8", batch=1, seq=256, dtype="float8_e4m3fn", kv_heads=8)),
    ("flash_attn", _pre("prefill", batch=2, seq=256)),
    ("flash_attn", _pre("prefill_varlen", seq_lens=[17, 200, 64])),
    ("flash_attn", _dec(page_size=256, dtype="bfloat16")),
    (
        "flash_attn",
        _pre("prefill_paged", q_lens=[5, 40], prefix_lens=[300, 600], page_size=256, layout="NHD"),
    ),
    ("fa3", _pre("prefill", batch=2, seq=256)),
    ("fa3", _pre("prefill", batch=2, seq_q=64, seq_k=320)),
    ("fa3", _pre("prefill_fp8", batch=2, seq=256, dtype="float8_e4m3fn")),
    ("fa3", _pre("prefill_varlen", seq_lens=[17, 200, 64])),
    ("fa3", _dec(dtype="bfloat16")),
    (
        "fa3",
        _pre("prefill_paged", q_lens=[5, 40], prefix_lens=[300, 600], page_size=16, layout="NHD"),
    ),
    ("flashinfer", _pre("prefill", batch=1, seq=256, dtype="float16")),
    ("flashinfer", _pre("prefill", batch=2, seq=256, dtype="float16")),
    ("flashinfer", _pre("prefill_varlen", seq_lens=[17, 200, 64], dtype="float16")),
    ("flashinfer", _pre("prefill_fp8", batch=1, seq=256, dtype="float8_e4m3fn")),
    *[
        (
            "flashinfer",
            _pre(
                "prefill_paged",
                q_lens=[5, 40],
                prefix_lens=[300, 600],
                page_size=16,
                layout=lay,
                dtype="float16",
            ),
        )
        for lay in ("NHD", "HND")
    ],
    *[
        ("flashinfer", _dec(page_size=ps, layout=lay))
        for ps in (1, 16, 64)
        for lay in ("NHD", "HND")
    ],
    ("flashinfer", _dec(kv_dtype="float8_e4m3fn")),
    ("flashinfer", _dec(heads=32, kv_heads=4)),  # group size 8: tensor-core decode
    ("flashinfer", decode.make_case(MLA)),
]


def _id(item: tuple[str, CaseSpec]) -> str:
    module, spec = item
    extra = "-".join(
        f"{k}={v}"
        for k, v in spec.params.items()
        if k in ("layout", "page_size", "kv_dtype", "seq_q", "kv_heads")
    )
    return f"{module}-{spec.kernel}-{spec.params.get('dtype')}-{extra}"


# Failures measured on the H200 and not yet diagnosed to a cause (issue 15). Strict:
# the day one passes, the test says so and the entry goes.
KNOWN_FAILURES = {
    ("flashinfer", "prefill_fp8"): "FlashInfer 0.5.3 FP8 prefill: rel L2 0.725 against a "
    "bound of 0.21 with GQA 8/2 and 8/8 alike (H200, 2026-12-01), so not GQA-specific; "
    "adapter scale convention or library, undiagnosed (issue 15)",
}


@pytest.mark.parametrize("item", CASES, ids=[_id(c) for c in CASES])
def test_adapter_on_cuda(item: tuple[str, CaseSpec], request: pytest.FixtureRequest) -> None:
    module, spec = item
    known = KNOWN_FAILURES.get((module, spec.kernel))
    if known is not None:
        request.applymarker(pytest.mark.xfail(reason=known, strict=True))
    lib = NEEDS.get(module)
    if lib is not None and importlib.util.find_spec(lib) is None:
        pytest.skip(f"{lib} is not importable here")
    device = torch.device("cuda")
    config = TimerConfig(budget_s=0.05, min_samples=5, min_time_s=0.0, max_warmup_s=0.2)
    cid = case_id(spec.kernel, module, spec.params)
    rec = run_case(spec, "gpu-test", cid, module, A + module, device, config)
    if rec.status == "skip" or rec.error.startswith("Unavailable:"):
        pytest.skip(rec.error)
    assert rec.status == "pass", f"{rec.error}\n{rec.log_tail[-3000:]}"
    assert rec.correctness is not None and rec.correctness.passed
    assert rec.timing is not None and rec.timing.median > 0
    assert rec.throughput is not None and rec.throughput.tflops > 0


@pytest.mark.parametrize("kernel", ["gemm_grouped", "gemm_grouped_fp8_rowwise"])
def test_grouped_gemm_runs_a_cutlass_kernel_on_hopper(kernel: str) -> None:
    """The adapter's CUTLASS claim, checked where it is made: the profiler's kernel names."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("ATen's CUTLASS grouped GEMMs are the sm90 path")
    from kernelwatch.kernels.adapters import gemm as adapter

    dtype = "float8_e4m3fn" if "fp8" in kernel else "bfloat16"
    spec = gemm.make_case({"kernel": kernel, **MOE, "dtype": dtype})
    inputs = spec.make_inputs(torch.Generator(device="cuda").manual_seed(0), torch.device("cuda"))
    call = getattr(adapter, kernel)
    call(inputs)
    torch.cuda.synchronize()
    activity = torch.profiler.ProfilerActivity.CUDA
    with torch.profiler.profile(activities=[activity]) as prof:
        call(inputs)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("cutlass" in n.lower() for n in names), names
