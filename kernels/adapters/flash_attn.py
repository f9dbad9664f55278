"""Implementation module ``flash_attn``: the FlashAttention-2 package (``pip install flash-attn``).

- ``prefill``: ``flash_attn_func`` on ``[b, s, h, d]`` (its native layout).
- ``prefill_varlen``: ``flash_attn_varlen_func`` on packed sequences.
- ``prefill_paged``: ``flash_attn_varlen_func(..., block_table=...)``.
- ``decode_paged``: ``flash_attn_with_kvcache(q, k_cache, v_cache,
  cache_seqlens=..., block_table=...)``.

What FlashAttention-2 does not take is skipped with its reason: paged KV only
in NHD layout and with pages of a multiple of 256 tokens (``flash_api.cpp``:
"Paged KV cache block size must be divisible by 256"), fp16/bf16 only, no MLA.
Its causal mask is bottom-right aligned, like the suites' reference.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from kernelwatch.kernels.adapters import Unavailable, first, require_cuda, require_module

Case = dict[str, Any]
LIB = "flash-attn"


def _api(case: Case, tensor: str = "q") -> ModuleType:
    require_cuda(case[tensor], LIB)
    if case[tensor].dtype not in (torch.float16, torch.bfloat16):
        raise Unavailable(f"{LIB} takes fp16/bf16 inputs, not {case[tensor].dtype}")
    return require_module("flash_attn", LIB)


def _paged_ok(case: Case) -> None:
    if case["layout"] != "NHD":
        raise Unavailable(f"{LIB} reads paged KV in NHD layout only")
    if case["page_size"] % 256:
        raise Unavailable(f"{LIB} needs pages of a multiple of 256 tokens, not {case['page_size']}")
    if case["k_cache"].dtype != case["q"].dtype:
        raise Unavailable(f"{LIB} has no {case['k_cache'].dtype} KV cache")


def prefill(case: Case) -> torch.Tensor:
    fa = _api(case)
    return first(
        fa.flash_attn_func(
            case["q"],
            case["k"],
            case["v"],
            softmax_scale=case["scale"],
            causal=bool(case["causal"]),
        )
    )


def prefill_varlen(case: Case) -> torch.Tensor:
    fa = _api(case)
    return first(
        fa.flash_attn_varlen_func(
            case["q"],
            case["k"],
            case["v"],
            case["cu_seqlens_q"],
            case["cu_seqlens_k"],
            case["max_seqlen_q"],
            case["max_seqlen_k"],
            softmax_scale=case["scale"],
            causal=bool(case["causal"]),
        )
    )


def prefill_paged(case: Case) -> torch.Tensor:
    fa = _api(case)
    _paged_ok(case)
    return first(
        fa.flash_attn_varlen_func(
            case["q"],
            case["k_cache"],
            case["v_cache"],
            case["cu_seqlens_q"],
            case["cu_seqlens_k"],
            case["max_seqlen_q"],
            case["max_seqlen_k"],
            softmax_scale=case["scale"],
            causal=bool(case["causal"]),
            block_table=case["block_table"],
        )
    )


def decode_paged(case: Case) -> torch.Tensor:
    fa = _api(case)
    _paged_ok(case)
    out = first(
        fa.flash_attn_with_kvcache(
            case["q"].unsqueeze(1),
            case["k_cache"],
            case["v_cache"],
            cache_seqlens=case["cache_seqlens"],
            block_table=case["block_table"],
            softmax_scale=case["scale"],
        )
    )
    return out.squeeze(1)


def prefill_fp8(case: Case) -> torch.Tensor:
    raise Unavailable(f"{LIB} has no FP8 forward (FlashAttention-3 has)")


def decode_mla(case: Case) -> torch.Tensor:
    raise Unavailable(f"{LIB} has no MLA decode kernel")
