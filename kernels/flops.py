"""FLOP and byte models of the attention and GEMM suites, for TFLOP/s, GB/s and the roofline.

Why a module of its own: every adapter of a kernel shares one model, so two
libraries measured on the same case are divided by the same numbers, and the
models can be checked against hand-counted cases (``tests/kernels/test_flops.py``).
Pure arithmetic, no torch: the counts depend on shapes and dtypes only.

Conventions (the ones FlashAttention's and FlashInfer's benchmarks report):

- **Attention FLOPs** are the two matrix products only: ``2·d_qk`` per score and
  ``2·d_v`` per output element, over the (query, key) pairs the mask keeps.
  Softmax, scaling and masking are not counted. Heads are *query* heads: with
  grouped-query attention the K/V heads are shared but every query head still
  does its own products.
- **Causal pairs** use the continuous area of the kept region, so a square
  causal case counts ``s²/2`` pairs (the "halved" convention), not the lattice
  count ``s(s+1)/2``; the two differ by ``1/s``. The mask is aligned to the
  bottom-right corner, as in FlashAttention 2/3 and FlashInfer: query ``i``
  sees keys ``j <= i + sk - sq``. So ``sq < sk`` (a chunk appended to a cached
  prefix) keeps ``sq·sk - sq²/2`` pairs, and ``sq > sk`` keeps ``sk²/2``.
- **Bytes** are what a kernel must move at least once: Q, K, V read and O
  written at their storage dtypes; for a paged KV cache the *valid* tokens of
  every sequence (the partly filled last page is not charged: reading it whole
  is the kernel's inefficiency, and charging it would flatter the kernel), plus
  the int32 page indices and per-sequence metadata. FP8 scales passed as scalars
  cost nothing. Varlen batches sum over their sequences.
- **GEMM**: ``2·M·N·K`` FLOPs; A and B read, C written once; row-wise FP8
  scales add ``4·(M + N)`` bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Storage size of the dtypes the suites use, by torch's name without "torch.".
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int32": 4,
}


def dtype_bytes(name: str) -> int:
    """Bytes per element of dtype ``name`` (``"bfloat16"``, ``"float8_e4m3fn"``, ...)."""
    try:
        return DTYPE_BYTES[name.removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"no byte size for dtype {name!r}") from None


# --------------------------------------------------------------------------- attention


def causal_pairs(seq_q: int, seq_k: int) -> float:
    """Kept (query, key) pairs of a bottom-right aligned causal mask (continuous area)."""
    if seq_q <= 0 or seq_k <= 0:
        return 0.0
    if seq_k >= seq_q:
        return seq_q * seq_k - seq_q * seq_q / 2.0
    return seq_k * seq_k / 2.0


def attention_pairs(seq_q: int, seq_k: int, causal: bool) -> float:
    return causal_pairs(seq_q, seq_k) if causal else float(seq_q * seq_k)


def attention_flops(
    heads: int,
    seq_q: Sequence[int],
    seq_k: Sequence[int],
    head_dim: int,
    causal: bool,
    head_dim_v: int | None = None,
) -> float:
    """FLOPs of attention over a batch of sequences (one entry per sequence)."""
    if len(seq_q) != len(seq_k):
        raise ValueError("seq_q and seq_k need one length per sequence")
    dv = head_dim if head_dim_v is None else head_dim_v
    pairs = math.fsum(attention_pairs(q, k, causal) for q, k in zip(seq_q, seq_k, strict=True))
    return 2.0 * heads * pairs * (head_dim + dv)


def attention_bytes(
    heads: int,
    kv_heads: int,
    q_tokens: int,
    kv_tokens: int,
    head_dim: int,
    q_dtype: str,
    kv_dtype: str | None = None,
    out_dtype: str | None = None,
    head_dim_v: int | None = None,
    index_bytes: float = 0.0,
) -> float:
    """Q and O (query heads), K and V (KV heads) moved once, plus index metadata."""
    dv = head_dim if head_dim_v is None else head_dim_v
    q = q_tokens * heads * head_dim * dtype_bytes(q_dtype)
    o = q_tokens * heads * dv * dtype_bytes(out_dtype or q_dtype)
    kv = kv_tokens * kv_heads * (head_dim + dv) * dtype_bytes(kv_dtype or q_dtype)
    return float(q + o + kv) + index_bytes


def paged_index_bytes(kv_lens: Sequence[int], page_size: int) -> float:
    """int32 page indices of every used page, plus indptr/length arrays (CSR form)."""
    pages = sum(math.ceil(n / page_size) for n in kv_lens)
    return 4.0 * (pages + 2 * len(kv_lens) + 1)


def decode_flops(kv_lens: Sequence[int], heads: int, head_dim: int) -> float:
    """One query token per sequence against its whole cache."""
    return attention_flops(heads, [1] * len(kv_lens), list(kv_lens), head_dim, causal=False)


def decode_bytes(
    kv_lens: Sequence[int],
    heads: int,
    kv_heads: int,
    head_dim: int,
    q_dtype: str,
    kv_dtype: str,
    page_size: int | None,
    out_dtype: str | None = None,
) -> float:
    """Q + O of one token per sequence, K + V of every valid cached token, page indices."""
    index = paged_index_bytes(kv_lens, page_size) if page_size else 4.0 * len(kv_lens)
    return attention_bytes(
        heads,
        kv_heads,
        len(kv_lens),
        sum(kv_lens),
        head_dim,
        q_dtype,
        kv_dtype,
        out_dtype,
        index_bytes=index,
    )


def mla_decode_flops(kv_lens: Sequence[int], heads: int, d_ckv: int, d_kpe: int) -> float:
    """Absorbed MLA decode: scores over ``d_ckv + d_kpe``, output over ``d_ckv``."""
    return 2.0 * heads * sum(kv_lens) * ((d_ckv + d_kpe) + d_ckv)


def mla_decode_bytes(
    kv_lens: Sequence[int], heads: int, d_ckv: int, d_kpe: int, dtype: str, page_size: int
) -> float:
    """Q (nope + rope parts) and O per head; the compressed cache is shared by all heads."""
    e = dtype_bytes(dtype)
    batch = len(kv_lens)
    q = batch * heads * (d_ckv + d_kpe) * e
    o = batch * heads * d_ckv * e
    cache = sum(kv_lens) * (d_ckv + d_kpe) * e
    return float(q + o + cache) + paged_index_bytes(kv_lens, page_size)


# --------------------------------------------------------------------------- GEMM


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def gemm_bytes(
    m: int, n: int, k: int, in_dtype: str, out_dtype: str, scale_bytes: float = 0.0
) -> float:
    """A (m×k) and B (k×n) read once, C (m×n) written once, plus scale vectors."""
    return (
        float((m * k + k * n) * dtype_bytes(in_dtype) + m * n * dtype_bytes(out_dtype))
        + scale_bytes
    )


def grouped_gemm_bytes(
    m: int, n: int, k: int, groups: int, in_dtype: str, out_dtype: str, scale_bytes: float = 0.0
) -> float:
    """Grouped (MoE) GEMM: A (m×k) once, every group's weight (groups × n × k) once,
    C (m×n) written once, the group offsets (int32) and scales."""
    return (
        float((m * k + groups * n * k) * dtype_bytes(in_dtype) + m * n * dtype_bytes(out_dtype))
        + 4.0 * groups
        + scale_bytes
    )


def rowwise_scale_bytes(m: int, n: int) -> float:
    """float32 scale per row of A and per column of B."""
    return 4.0 * (m + n)
