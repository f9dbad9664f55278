"""Adapters on the CPU: real SDPA (MATH), torch GEMMs and Triton under the interpreter run
the new suites for real; GPU-only libraries turn into clean skips with a reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelwatch.kernels import runner
from kernelwatch.kernels.adapters import ADAPTERS
from kernelwatch.kernels.suites import gemm as gemm_suite
from tests.conftest import run_cli

ADAPTER = "kernelwatch.kernels.adapters"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, impl: str, *args: str
) -> list[dict[str, Any]]:
    """The runner in this process (fast); the subprocess tests below cover the command."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / f"{impl.rsplit('.', 1)[-1]}.jsonl"
    argv = ["--impl", impl, "--size", "smoke", "--device", "cpu", "--out", str(out)]
    assert runner.main([*argv, "--budget", "0.02", *args]) == 0
    return _records(out)


def test_bench_prefill_smoke_with_sdpa_math_passes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_cli(
        "bench",
        "--suite",
        "prefill",
        "--impl",
        f"{ADAPTER}.sdpa_math",
        "--backend",
        "sdpa-math",
        "--size",
        "smoke",
        "--kernel",
        "prefill",
        "--kernel",
        "prefill_paged",
        "--out",
        str(out),
        "--budget",
        "0.05",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = _records(out)
    assert {r["kernel"] for r in recs} == {"prefill", "prefill_paged"}
    assert len(recs) == 6
    for r in recs:
        assert r["status"] == "pass", r["error"]
        assert r["backend"] == "sdpa-math" and r["suite"] == "prefill"
        c = r["correctness"]
        assert c["passed"] and 0 < c["errors"]["rel_l2"] < c["bound"] < 5e-3
        assert r["throughput"]["tflops"] > 0 and r["timing"]["timer"] == "host_cpu"
        # design.md's record: every library field (unknown: null), Triton as installed
        # though no case of these imported it (an audit, 2026-12-05)
        assert r["library"] == {"name": None, "version": None, "commit": None}
        assert r["environment"]["triton"] and r["environment"]["torch"]
    # the chunked-prefill case (16 queries over 80 keys) ran with a bottom-right mask
    assert any(r["params"].get("seq_q") == 16 and r["params"]["causal"] for r in recs)


def test_bench_triton_adapter_runs_prefill_and_gemm_under_the_interpreter(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = run_cli(
        "bench",
        "--suite",
        "prefill",
        "--suite",
        "gemm",
        "--impl",
        f"{ADAPTER}.triton",
        "--kernel",
        "prefill",
        "--kernel",
        "gemm",
        "--size",
        "smoke",
        "--out",
        str(out),
        "--budget",
        "0.05",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = _records(out)
    square = [r for r in recs if r["params"].get("seq_q") == r["params"].get("seq_k")]
    assert len(square) == 4 and all(r["status"] == "pass" for r in square), square
    # the kernel needs seq_q == seq_k: those cases are not run, with the reason
    other = [r for r in recs if r not in square]
    assert other and all("seq_q == seq_k" in r["error"] for r in other)


def test_sdpa_default_runs_paged_decode_and_mla_through_the_torch_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _bench(tmp_path, monkeypatch, f"{ADAPTER}.sdpa", "--suite", "decode")
    assert len(recs) == 7
    assert {(r["params"]["layout"], r["params"]["page_size"]) for r in recs[:4]} == {
        ("NHD", 1),
        ("HND", 1),
        ("NHD", 16),
        ("HND", 16),
    }
    for r in recs:
        assert r["status"] == "pass", (r["params"], r["error"])
    fp8 = [r for r in recs if r["params"].get("kv_dtype") == "float8_e4m3fn"]
    # FP8 KV is judged with the larger factor; comparing the bounds themselves compared
    # two cases' random low-precision errors and failed about one run in four
    assert len(fp8) == 1 and fp8[0]["correctness"]["k"] > recs[0]["correctness"]["k"] == 3.0


def test_torch_gemm_adapter_passes_bf16_and_fp8_paths_on_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _bench(tmp_path, monkeypatch, f"{ADAPTER}.gemm", "--suite", "gemm")
    assert [r["kernel"] for r in recs] == [
        "gemm",
        "gemm",
        "gemm_fp8_rowwise",
        "gemm_fp8_tensorwise",
        "gemm_grouped",
        "gemm_grouped_fp8_rowwise",
    ]
    assert all(r["status"] == "pass" for r in recs[:5]), [r["error"] for r in recs]
    # the MoE GEMM: 4 experts with 20, 3, 45, 7 tokens padded to 32-row groups
    grouped = recs[4]
    assert grouped["params"]["group_lens"] == [20, 3, 45, 7]
    assert grouped["throughput"]["flops"] == 2 * (32 + 32 + 64 + 32) * 48 * 64
    # PyTorch has no CPU kernel for the FP8 grouped GEMM: a skip that says so
    fp8 = recs[5]
    assert fp8["status"] == "skip" and "CUDA" in fp8["error"], fp8["error"]


def test_grouped_gemm_reference_multiplies_each_expert_by_its_own_weight() -> None:
    spec = gemm_suite.make_case(
        {"kernel": "gemm_grouped", "n": 8, "k": 16, "group_lens": [1, 40], "dtype": "float32"}
    )
    inputs = spec.make_inputs(torch.Generator().manual_seed(0), torch.device("cpu"))
    assert inputs["offs"].tolist() == [32, 96]  # groups of 32 and 64 rows
    ref = spec.reference(inputs, torch.float64)
    a, w = inputs["a"].double(), inputs["w"].double()
    assert torch.allclose(ref[:32], a[:32] @ w[0].t())
    assert torch.allclose(ref[32:], a[32:] @ w[1].t())
    assert not torch.allclose(ref[32:], a[32:] @ w[0].t())


def test_unsupported_cases_name_the_backend_and_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _bench(
        tmp_path,
        monkeypatch,
        f"{ADAPTER}.sdpa_math",
        "--suite",
        "prefill",
        "--kernel",
        "prefill_varlen",
        "--kernel",
        "prefill_fp8",
    )
    by_reason = {r["error"].split(": ", 1)[-1][:40] for r in recs if r["status"] != "pass"}
    assert any("nested tensors has no grouped-query" in r["error"] for r in recs)
    assert any("no FP8 attention" in r["error"] for r in recs)
    assert any("SDPA MATH cannot run this case" in r["error"] for r in recs), by_reason
    # multi-head, non-causal varlen runs for real on nested tensors
    assert any(r["status"] == "pass" and r["kernel"] == "prefill_varlen" for r in recs)


@pytest.mark.parametrize(
    ("module", "reason"),
    [
        ("flashinfer", "FlashInfer needs a CUDA device"),
        ("fa3", "FlashAttention-3 needs a CUDA device"),
        ("flash_attn", "flash-attn needs a CUDA device"),
    ],
)
def test_gpu_only_libraries_give_readable_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, reason: str
) -> None:
    recs = _bench(tmp_path, monkeypatch, f"{ADAPTER}.{module}", "--suite", "decode")
    assert len(recs) == 7
    for r in recs:
        assert r["status"] in ("skip", "error")
        assert r["timing"] is None and r["correctness"] is None
        assert reason in r["error"] or "has no MLA" in r["error"] or "MLA" in r["error"]
        assert "Traceback" not in r["error"]


def test_unavailable_is_recorded_as_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _bench(tmp_path, monkeypatch, f"{ADAPTER}.flashinfer", "--suite", "decode")
    assert {r["status"] for r in recs} == {"skip"}
    assert all(r["error"].startswith("FlashInfer needs a CUDA device") for r in recs)


def test_a_top_left_causal_mask_fails_the_chunked_prefill_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference is bottom-right aligned: SDPA's plain is_causal (top-left) is wrong
    when seq_q != seq_k, and the correctness rule must catch it."""
    (tmp_path / "topleft.py").write_text(
        "import torch.nn.functional as F\n"
        "def prefill(case):\n"
        "    q, k, v = (case[n].transpose(1, 2) for n in 'qkv')\n"
        "    o = F.scaled_dot_product_attention(q, k, v, is_causal=case['causal'],\n"
        "        scale=case['scale'], enable_gqa=True)\n"
        "    return o.transpose(1, 2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    recs = _bench(tmp_path, monkeypatch, "topleft", "--suite", "prefill", "--kernel", "prefill")
    status = {(r["params"]["seq_q"], r["params"]["causal"]): r["status"] for r in recs}
    assert status == {
        (64, True): "pass",
        (64, False): "pass",
        (16, True): "fail",
        (16, False): "pass",
    }
    sys.modules.pop("topleft", None)


def test_half_written_output_is_caught_by_poisoning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "halfgemm.py").write_text(
        "import torch\n"
        "def gemm(case):\n"
        "    o = case['out']\n"
        "    o[: o.shape[0] // 2] = case['a'][: o.shape[0] // 2] @ case['w'].t()\n"
        "    return o\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    recs = _bench(tmp_path, monkeypatch, "halfgemm", "--suite", "gemm", "--kernel", "gemm")
    assert {r["status"] for r in recs} == {"fail"}
    assert all("non-finite or unwritten" in r["error"] for r in recs)
    sys.modules.pop("halfgemm", None)


def test_adapter_registry_points_at_importable_modules_with_their_kernels() -> None:
    import importlib

    for name, info in ADAPTERS.items():
        mod = importlib.import_module(info.module)
        missing = [k for k in info.kernels if not callable(getattr(mod, k, None))]
        assert not missing, f"{name} lacks {missing}"
