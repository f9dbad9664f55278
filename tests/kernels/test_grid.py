"""Shape grids: TOML suite files expanded into case parameters, and the built-in grids."""

from __future__ import annotations

import json

import pytest
import torch

from kernelwatch.kernels import grid
from kernelwatch.kernels.record import case_id
from kernelwatch.kernels.suites import decode, gemm, prefill

BUILDERS = {"prefill": prefill.build, "decode": decode.build, "gemm": gemm.build}


def test_lists_are_axes_scalars_fixed_tables_zipped() -> None:
    g = grid.parse(
        """
        [[smoke]]
        kernel = "k"
        dtype = ["float16", "bfloat16"]
        shape = [{ batch = 1, seq = 64 }, { batch = 4, seq = 32 }]
        causal = [true, false]
        """
    )
    cases = g.cases("smoke")
    assert len(cases) == 2 * 2 * 2
    assert cases[0] == {"kernel": "k", "dtype": "float16", "batch": 1, "seq": 64, "causal": True}
    # zipped keys never cross: batch 1 always comes with seq 64
    assert {(c["batch"], c["seq"]) for c in cases} == {(1, 64), (4, 32)}


def test_model_presets_fill_heads_and_split_under_tensor_parallelism() -> None:
    [case] = grid.parse('[[s]]\nmodel = "llama3-70b"\ntp = 8').cases("s")
    assert (case["heads"], case["kv_heads"], case["head_dim"]) == (8, 1, 128)
    [qwen] = grid.parse('[[s]]\nmodel = "qwen2.5-7b"').cases("s")
    assert (qwen["heads"], qwen["kv_heads"]) == (28, 4)
    # an explicit key wins over the preset
    [own] = grid.parse('[[s]]\nmodel = "llama3-8b"\nhead_dim = 64').cases("s")
    assert own["head_dim"] == 64 and own["heads"] == 32
    [mla] = grid.parse('[[s]]\nmodel = "deepseek-v3"\ntp = 8').cases("s")
    assert (mla["heads"], mla["head_dim_ckv"], mla["head_dim_kpe"]) == (16, 512, 64)
    assert mla["sm_scale"] == pytest.approx(192**-0.5)


def test_gemm_layers_of_a_model() -> None:
    assert grid.gemm_shape("llama3-8b", "qkv", 4096) == (4096, (32 + 16) * 128, 4096)
    assert grid.gemm_shape("llama3-8b", "gate_up", 64) == (64, 2 * 14336, 4096)
    assert grid.gemm_shape("llama3-70b", "down", 16, tp=8) == (16, 8192, 28672 // 8)
    # 8 KV heads over 8 GPUs: each keeps one, so qkv per GPU is (8 + 2) heads wide
    assert grid.gemm_shape("llama3-70b", "qkv", 1, tp=8)[1] == (8 + 2) * 128
    [case] = grid.parse('[[s]]\nmodel = "llama3-8b"\nlayer = "o"\ntokens = 128').cases("s")
    assert (case["m"], case["n"], case["k"]) == (128, 4096, 4096) and "heads" not in case


def test_length_mixes_are_deterministic_bounded_and_lists_are_values() -> None:
    a = grid.mixed_lengths(64, 64, 16384, seed=4)
    assert a == grid.mixed_lengths(64, 64, 16384, seed=4)
    assert a != grid.mixed_lengths(64, 64, 16384, seed=5)
    assert len(a) == 64 and min(a) >= 64 and max(a) <= 16384
    assert sorted(a)[32] < 4096  # log-uniform: the median is far below the mean range
    text = """
    [[s]]
    seq_lens = [5, 17, 33]
    [[s]]
    kv_lens = [{ count = 3, min = 10, max = 10 }, [1, 2]]
    """
    cases = grid.parse(text).cases("s")
    assert cases[0]["seq_lens"] == [5, 17, 33]  # one explicit list, not an axis
    assert [c["kv_lens"] for c in cases[1:]] == [[10, 10, 10], [1, 2]]


def test_filters_drop_cases_and_are_not_parameters() -> None:
    text = "[[s]]\nbatch = [1, 8]\nseq = [1024, 8192]\nmax_tokens = 16384"
    cases = grid.parse(text).cases("s")
    assert [(c["batch"], c["seq"]) for c in cases] == [(1, 1024), (1, 8192), (8, 1024)]
    assert all("max_tokens" not in c for c in cases)


def test_duplicates_removed_and_order_is_file_order() -> None:
    text = "[[s]]\nx = [3, 1, 2]\n[[s]]\nx = [1, 4]"
    assert [c["x"] for c in grid.parse(text).cases("s")] == [3, 1, 2, 4]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[s]]\nmodel = "llama9"', "unknown model"),
        ("[[s]]\nx = []", "empty"),
        ("s = 3", "array of tables"),
        ("[[s]]\nseq_lens = [{ count = 2 }]", "length mix"),
        ('[[s]]\nmodel = "llama3-8b"\ntp = 3', "do not split"),
        ("[[s]\n", "line"),
    ],
)
def test_bad_grids_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(grid.GridError, match=message):
        grid.parse(text, "bad.toml").cases("s")


def test_unknown_size_lists_the_known_ones() -> None:
    with pytest.raises(grid.GridError, match="sizes: smoke, quick, full"):
        grid.builtin("prefill").cases("huge")


@pytest.mark.parametrize("suite", sorted(BUILDERS))
@pytest.mark.parametrize("size", ["smoke", "quick", "full"])
def test_every_builtin_case_builds_with_sane_counts(suite: str, size: str) -> None:
    """Every case of every size becomes a CaseSpec (no tensors yet) with FLOPs and bytes."""
    specs = BUILDERS[suite](size, torch.device("cpu"))
    assert specs, f"{suite}/{size} is empty"
    ids = {case_id(s.kernel, "x", s.params) for s in specs}
    assert len(ids) == len(specs), "two cases share parameters"
    for s in specs:
        assert s.flops > 0 and s.bytes > 0
        json.dumps(s.params)  # parameters must be plain JSON (they are hashed into ids)
        assert "kernel" not in s.params and "max_tokens" not in s.params
    if size == "smoke":
        assert len(specs) <= 16  # CPU smoke runs must stay in seconds
    if size == "quick":
        assert len(specs) <= 24  # one H200 session runs every adapter over these


def test_smoke_grids_cover_every_kernel_of_the_suites() -> None:
    kernels = {s.kernel for build in BUILDERS.values() for s in build("smoke", torch.device("cpu"))}
    assert kernels == {
        "prefill",
        "prefill_varlen",
        "prefill_paged",
        "prefill_fp8",
        "decode_paged",
        "decode_mla",
        "gemm",
        "gemm_fp8_rowwise",
        "gemm_fp8_tensorwise",
        "gemm_grouped",
        "gemm_grouped_fp8_rowwise",
    }


def test_quick_grid_holds_the_reference_cases_of_the_gpu_notes() -> None:
    """docs/gpu.md measured these; the quick grid must contain them to compare."""
    pre = [s.params for s in prefill.build("quick", torch.device("cpu"))]
    assert any(
        p.get("model") == "llama3-8b" and p["batch"] == 4 and p["seq_q"] == 4096 and p["causal"]
        for p in pre
    )
    dec = [s.params for s in decode.build("quick", torch.device("cpu"))]
    assert any(
        p.get("batch") == 64 and p.get("kv_len") == 1024 and p["page_size"] == 16 for p in dec
    )
