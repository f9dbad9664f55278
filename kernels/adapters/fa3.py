"""Implementation module ``fa3``: FlashAttention-3, built from the repository's ``hopper/`` package.

FA3 has no wheel on the package index; kernelwatch builds it per commit (see
``docs/flash-attention.kernelwatch.toml``) and puts ``hopper/`` on the path, so
the API is the top-level module ``flash_attn_interface``:

- ``prefill``: ``flash_attn_func``; ``prefill_fp8``: the same on e4m3 inputs
  with ``q/k/v_descale`` of shape ``[batch, kv_heads]``.
- ``prefill_varlen``: ``flash_attn_varlen_func``.
- ``prefill_paged``: ``flash_attn_with_kvcache`` with ``page_table``,
  ``cu_seqlens_q`` and ``max_seqlen_q`` (new tokens over a paged cache).
- ``decode_paged``: ``flash_attn_with_kvcache(q, ..., page_table=...)``.

Builds are often trimmed (``FLASH_ATTENTION_DISABLE_*``) to compile in a minute
for PR gating. The same variables reach the suite runner through the recipe's
environment, so a case the build left out (say head dim 64 in a build with
``FLASH_ATTENTION_DISABLE_HDIM64=TRUE``) is skipped with that reason instead of
running into a missing kernel. Keyword arguments only: positions moved across
FA3's history, names did not. Return values changed from ``(out, lse)`` to
``out``; ``first`` takes either.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import torch

from kernelwatch.kernels.adapters import Unavailable, first, require_cuda, require_module
from kernelwatch.kernels.suites.common import FP8

Case = dict[str, Any]
LIB = "flash-attn-3 (flash_attn_interface from hopper/)"
HEAD_DIMS = (64, 96, 128, 192, 256)


def disabled_features(env: dict[str, str] | None = None) -> set[str]:
    """Features this build was compiled without: ``FLASH_ATTENTION_DISABLE_X=TRUE`` → ``X``."""
    env = dict(os.environ) if env is None else env
    prefix = "FLASH_ATTENTION_DISABLE_"
    return {
        k.removeprefix(prefix)
        for k, v in env.items()
        if k.startswith(prefix) and v.upper() in ("TRUE", "1", "ON", "YES")
    }


def check_build(case: Case, *, paged: bool = False, varlen: bool = False) -> None:
    """Raise ``Unavailable`` when the trimmed build lacks what ``case`` needs."""
    off = disabled_features()
    d = int(case["q"].size(-1))
    rounded = next((h for h in HEAD_DIMS if d <= h), None)
    needs = {f"HDIM{rounded}": f"head dim {d}"}
    dt = case["q"].dtype
    if dt == torch.float16:
        needs["FP16"] = "fp16"
    if dt == FP8:
        needs["FP8"] = "FP8"
    if paged:
        needs["PAGEDKV"] = "a paged KV cache"
    if varlen:
        needs["VARLEN"] = "variable-length batches"
    for flag, what in needs.items():
        if flag in off:
            raise Unavailable(
                f"this FlashAttention-3 build leaves out {what} (FLASH_ATTENTION_DISABLE_{flag})"
            )


def _api(case: Case) -> ModuleType:
    require_cuda(case["q"], "FlashAttention-3")
    return require_module("flash_attn_interface", LIB)


def _paged_ok(case: Case) -> None:
    if case["layout"] != "NHD":
        raise Unavailable("FlashAttention-3 reads paged KV in NHD layout only")
    if case["k_cache"].dtype != case["q"].dtype:
        raise Unavailable("FlashAttention-3 needs q and the KV cache in the same dtype")


def prefill(case: Case) -> torch.Tensor:
    fa = _api(case)
    check_build(case)
    return first(
        fa.flash_attn_func(
            case["q"], case["k"], case["v"], softmax_scale=case["scale"], causal=case["causal"]
        )
    )


def prefill_fp8(case: Case) -> torch.Tensor:
    fa = _api(case)
    check_build(case)
    b, hk = case["k"].size(0), case["k"].size(2)
    descale = {
        f"{n}_descale": torch.full(
            (b, hk), float(case[f"{n}_scale"]), dtype=torch.float32, device=case["q"].device
        )
        for n in "qkv"
    }
    return first(
        fa.flash_attn_func(
            case["q"],
            case["k"],
            case["v"],
            softmax_scale=case["scale"],
            causal=case["causal"],
            **descale,
        )
    )


def prefill_varlen(case: Case) -> torch.Tensor:
    fa = _api(case)
    check_build(case, varlen=True)
    return first(
        fa.flash_attn_varlen_func(
            case["q"],
            case["k"],
            case["v"],
            cu_seqlens_q=case["cu_seqlens_q"],
            cu_seqlens_k=case["cu_seqlens_k"],
            max_seqlen_q=case["max_seqlen_q"],
            max_seqlen_k=case["max_seqlen_k"],
            softmax_scale=case["scale"],
            causal=case["causal"],
        )
    )


def prefill_paged(case: Case) -> torch.Tensor:
    fa = _api(case)
    check_build(case, paged=True, varlen=True)
    _paged_ok(case)
    return first(
        fa.flash_attn_with_kvcache(
            case["q"],
            case["k_cache"],
            case["v_cache"],
            cache_seqlens=case["cache_seqlens"],
            page_table=case["block_table"],
            cu_seqlens_q=case["cu_seqlens_q"],
            max_seqlen_q=case["max_seqlen_q"],
            softmax_scale=case["scale"],
            causal=case["causal"],
        )
    )


def decode_paged(case: Case) -> torch.Tensor:
    fa = _api(case)
    check_build(case, paged=True)
    _paged_ok(case)
    out = first(
        fa.flash_attn_with_kvcache(
            case["q"].unsqueeze(1),
            case["k_cache"],
            case["v_cache"],
            cache_seqlens=case["cache_seqlens"],
            page_table=case["block_table"],
            softmax_scale=case["scale"],
        )
    )
    return out.squeeze(1)


def decode_mla(case: Case) -> torch.Tensor:
    raise Unavailable("the FlashAttention-3 adapter does not wire its MLA (qv) path yet")
