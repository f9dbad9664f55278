"""Fused attention forward (FlashAttention-style online softmax), causal or not.

Inputs are contiguous (batch, heads, seq, head_dim); K and V may have fewer heads
than Q (grouped-query attention), as long as they divide Q's head count.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    scale,
    seq,
    heads,
    kv_heads,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    kvh = h // (heads // kv_heads)
    q_base = (b * heads + h) * seq * HEAD_DIM
    kv_base = (b * kv_heads + kvh) * seq * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
        mask=offs_m[:, None] < seq,
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = seq
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, seq)
    for start in range(0, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        kv_mask = offs_n < seq
        k = tl.load(
            k_ptr + kv_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
            mask=kv_mask[:, None],
            other=0.0,
        )
        qk = tl.dot(q, tl.trans(k)) * scale
        valid = kv_mask[None, :]
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_n[None, :])
        qk = tl.where(valid, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + kv_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
            mask=kv_mask[:, None],
            other=0.0,
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(
        o_ptr + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
        acc.to(o_ptr.dtype.element_ty),
        mask=offs_m[:, None] < seq,
    )


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, out: torch.Tensor
) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v into ``out``; shapes (B, H, S, D)."""
    batch, heads, seq, head_dim = q.shape
    kv_heads = k.shape[1]
    if q.is_cuda and head_dim > 128:
        # 128x64 tiles need 256 KB of shared memory at head dim 256 (the H200 has
        # 227 KB: OutOfResources, 2026-11-29); 64x32 tiles need about half that
        block_m, block_n, warps = 64, 32, 4
    elif q.is_cuda:
        block_m, block_n, warps = 128, 64, 8
    else:
        block_m, block_n, warps = 32, 32, 4
    grid = (triton.cdiv(seq, block_m), batch * heads)
    _attn_fwd_kernel[grid](
        q,
        k,
        v,
        out,
        scale,
        seq,
        heads,
        kv_heads,
        HEAD_DIM=head_dim,
        CAUSAL=causal,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        num_warps=warps,
    )
    return out
