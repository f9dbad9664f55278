"""FLOP and byte models, checked against hand counts and the H200 numbers in docs/gpu.md."""

from __future__ import annotations

import pytest

from kernelwatch.kernels import flops


def _lattice_pairs(sq: int, sk: int) -> int:
    """Exact count of kept pairs of a bottom-right causal mask."""
    return sum(1 for i in range(sq) for j in range(sk) if j <= i + sk - sq)


def test_square_causal_is_half_of_full() -> None:
    full = flops.attention_flops(32, [4096], [4096], 128, causal=False)
    assert full == 4 * 32 * 4096 * 4096 * 128
    assert flops.attention_flops(32, [4096], [4096], 128, causal=True) == full / 2


@pytest.mark.parametrize(("sq", "sk"), [(64, 64), (16, 80), (1, 300), (100, 40), (512, 2048)])
def test_causal_pairs_track_the_bottom_right_lattice(sq: int, sk: int) -> None:
    """Continuous area vs exact lattice count: they differ by at most the diagonal."""
    exact = _lattice_pairs(sq, sk)
    model = flops.causal_pairs(sq, sk)
    assert abs(exact - model) <= min(sq, sk) / 2 + 1e-9


def test_chunk_after_a_prefix_is_not_halved() -> None:
    """1024 new tokens after 4096 cached ones see most of the keys: far more than half."""
    pairs = flops.causal_pairs(1024, 5120)
    assert pairs == 1024 * 5120 - 1024 * 1024 / 2
    assert pairs > 0.85 * 1024 * 5120
    # top-left alignment would have kept only ~sq²/2 pairs: the model must not do that
    assert pairs > 1024 * 1024


def test_gqa_changes_bytes_not_flops() -> None:
    mha = flops.attention_flops(32, [2048], [2048], 128, True)
    gqa = flops.attention_flops(32, [2048], [2048], 128, True)
    assert mha == gqa
    b_mha = flops.attention_bytes(32, 32, 2048, 2048, 128, "bfloat16")
    b_gqa = flops.attention_bytes(32, 8, 2048, 2048, 128, "bfloat16")
    q_and_o = 2 * 2048 * 32 * 128 * 2
    assert b_mha - q_and_o == 4 * (b_gqa - q_and_o)


def test_varlen_sums_its_sequences() -> None:
    lens = [5, 17, 33]
    total = flops.attention_flops(4, lens, lens, 64, True)
    assert total == pytest.approx(sum(flops.attention_flops(4, [n], [n], 64, True) for n in lens))


def test_h200_sdpa_number_from_the_gpu_notes() -> None:
    """docs/gpu.md: batch 4, 32 heads, 4096 tokens, d128, causal, 1.68 ms = 327 TFLOP/s."""
    f = flops.attention_flops(32, [4096] * 4, [4096] * 4, 128, causal=True)
    assert f / 1.68e-3 / 1e12 == pytest.approx(327, rel=0.01)


def test_decode_bytes_match_the_gpu_notes() -> None:
    """docs/gpu.md: 64 × 1024 tokens, 32/8 heads, d128, fp16, page 16: 97.8 µs = 2.74 TB/s."""
    lens = [1024] * 64
    b = flops.decode_bytes(lens, 32, 8, 128, "float16", "float16", page_size=16)
    kv = 64 * 1024 * 8 * 128 * 2 * 2
    assert kv < b < kv * 1.01  # Q, O and page indices are small next to the cache
    assert b / 97.8e-6 / 1e12 == pytest.approx(2.74, rel=0.01)
    single = flops.decode_bytes([8192], 32, 8, 128, "float16", "float16", page_size=None)
    assert single / 25.7e-6 / 1e12 == pytest.approx(1.30, rel=0.01)


def test_paged_bytes_count_valid_tokens_and_indices_not_page_padding() -> None:
    one = flops.decode_bytes([17], 4, 1, 32, "float16", "float16", page_size=16)
    full_pages = flops.decode_bytes([32], 4, 1, 32, "float16", "float16", page_size=16)
    kv_token = 2 * 32 * 2
    assert full_pages - one == (32 - 17) * kv_token  # same two pages, fewer valid tokens
    assert flops.paged_index_bytes([17], 16) == 4 * (2 + 2 + 1)


def test_fp8_kv_halves_the_cache_bytes() -> None:
    lens = [4096] * 64
    fp16 = flops.decode_bytes(lens, 32, 8, 128, "float16", "float16", 16)
    fp8 = flops.decode_bytes(lens, 32, 8, 128, "float16", "float8_e4m3fn", 16)
    kv16 = 64 * 4096 * 8 * 128 * 2 * 2
    assert fp16 - fp8 == pytest.approx(kv16 / 2)


def test_mla_cache_is_shared_by_heads() -> None:
    lens = [4096] * 64
    b16 = flops.mla_decode_bytes(lens, 16, 512, 64, "float16", 16)
    b128 = flops.mla_decode_bytes(lens, 128, 512, 64, "float16", 16)
    cache = 64 * 4096 * 576 * 2
    assert b16 > cache and b128 - b16 == 64 * (128 - 16) * (576 + 512) * 2
    assert flops.mla_decode_flops([10], 16, 512, 64) == 2 * 16 * 10 * (576 + 512)


def test_gemm() -> None:
    assert flops.gemm_flops(4096, 4096, 4096) == 2 * 4096**3
    bf16 = flops.gemm_bytes(128, 256, 512, "bfloat16", "bfloat16")
    assert bf16 == (128 * 512 + 512 * 256 + 128 * 256) * 2
    fp8 = flops.gemm_bytes(
        128, 256, 512, "float8_e4m3fn", "bfloat16", flops.rowwise_scale_bytes(128, 256)
    )
    assert fp8 == (128 * 512 + 512 * 256) + 128 * 256 * 2 + 4 * (128 + 256)


def test_unknown_dtype_is_an_error() -> None:
    with pytest.raises(ValueError, match="float4"):
        flops.dtype_bytes("float4")
