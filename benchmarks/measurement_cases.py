"""Library cases for the measurement benchmark: FlashInfer decode and SDPA prefill."""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.benchcases import SideCase


def flashinfer_decode(
    tokens: int = 8192, q_heads: int = 32, kv_heads: int = 8, head_dim: int = 128
) -> SideCase:
    import flashinfer

    q = torch.randn(q_heads, head_dim, device="cuda", dtype=torch.float16)
    k = torch.randn(tokens, kv_heads, head_dim, device="cuda", dtype=torch.float16)
    v = torch.randn(tokens, kv_heads, head_dim, device="cuda", dtype=torch.float16)

    def call(i: Any) -> Any:
        return flashinfer.single_decode_with_kv_cache(i[0], i[1], i[2])

    return call, (q, k, v)


def sdpa_prefill(
    batch: int = 4, heads: int = 32, seq: int = 4096, head_dim: int = 128, causal: bool = True
) -> SideCase:
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)
        for _ in range(3)
    )

    def call(i: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(i[0], i[1], i[2], is_causal=causal)

    return call, (q, k, v)


def flashinfer_prefill(
    seq: int = 4096, q_heads: int = 32, kv_heads: int = 8, head_dim: int = 128
) -> SideCase:
    import flashinfer

    q = torch.randn(seq, q_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(seq, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(seq, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)

    def call(i: Any) -> Any:
        return flashinfer.single_prefill_with_kv_cache(i[0], i[1], i[2], causal=True)

    return call, (q, k, v)
