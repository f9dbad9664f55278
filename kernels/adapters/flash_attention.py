"""FlashAttention-2 and FlashAttention-3: one adapter, two binders.

The two libraries share their API (``flash_attn_func``, ``flash_attn_varlen_func``,
``flash_attn_with_kvcache``) and differ in a handful of places, which
``Flavour`` names so that each difference is written once:

- where the API lives: the ``flash-attn`` package (``flash_attn``) for FA2, the
  top-level ``flash_attn_interface`` of the repository's ``hopper/`` build for FA3
  (no wheel on the package index; kernelwatch builds it per commit, see
  ``docs/flash-attention.kernelwatch.toml``);
- the paged-KV keyword: ``block_table`` (FA2) or ``page_table`` (FA3);
- paged prefill (new tokens over a paged cache): FA2 passes the cache to
  ``flash_attn_varlen_func(..., block_table=)``; FA3 to
  ``flash_attn_with_kvcache`` with ``cu_seqlens_q`` and ``max_seqlen_q``;
- what each takes: FA2 fp16/bf16 only, pages of a multiple of 256 tokens
  (``flash_api.cpp``: "Paged KV cache block size must be divisible by 256"), no
  FP8; FA3 also e4m3 inputs (``prefill_fp8``, ``q/k/v_descale`` of shape
  ``[batch, kv_heads]``) and any page size;
- trimmed builds: FA3 is often compiled with ``FLASH_ATTENTION_DISABLE_*`` set to
  build in a minute for PR gating. The same variables reach the suite runner
  through the recipe's environment, so a case the build left out (head dim 64
  with ``FLASH_ATTENTION_DISABLE_HDIM64=TRUE``) is skipped with that reason
  instead of running into a missing kernel.

Neither wires MLA decode. Both causal masks are bottom-right aligned, like the
suites' reference. Keyword arguments only: positions moved across FA3's history,
names did not (FA2's ``cu_seqlens_*``/``max_seqlen_*`` carry the same names).
Return values changed from ``(out, lse)`` to ``out``; ``first`` takes either.

This module is not an implementation module itself (``--impl`` names one library,
and each must be its own series): ``flash_attn.py`` (FA2) and ``fa3.py`` bind it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from kernelwatch.kernels.adapters import Unavailable, first, require_cuda, require_module
from kernelwatch.kernels.suite import Inputs
from kernelwatch.kernels.suites.common import FP8

Kernel = Callable[[Inputs], torch.Tensor]
HEAD_DIMS = (64, 96, 128, 192, 256)


@dataclass(frozen=True)
class Flavour:
    """What one FlashAttention library differs in (see the module docstring).

    name: how reasons name the library ("FlashAttention-3 needs a CUDA device").
    package: what to install, in the "not installed" reason.
    module: the import name of the API.
    page_keyword: the paged-KV keyword of ``flash_attn_with_kvcache``.
    dtypes: input dtypes it takes (None: any, the library decides).
    page_multiple: pages must hold a multiple of this many tokens.
    fp8: whether ``prefill_fp8`` runs (FA3's descaled e4m3 forward).
    trimmed_builds: whether ``FLASH_ATTENTION_DISABLE_*`` describes the build.
    paged_prefill_by_kvcache: paged prefill through ``flash_attn_with_kvcache``
        (FA3) rather than ``flash_attn_varlen_func(..., block_table=)`` (FA2).
    no_fp8 / no_mla: the skip reasons of the kernels it does not offer.
    """

    name: str
    package: str
    module: str
    page_keyword: str
    dtypes: tuple[torch.dtype, ...] | None
    page_multiple: int
    fp8: bool
    trimmed_builds: bool
    paged_prefill_by_kvcache: bool
    no_fp8: str
    no_mla: str


FA2 = Flavour(
    name="flash-attn",
    package="flash-attn",
    module="flash_attn",
    page_keyword="block_table",
    dtypes=(torch.float16, torch.bfloat16),
    page_multiple=256,
    fp8=False,
    trimmed_builds=False,
    paged_prefill_by_kvcache=False,
    no_fp8="flash-attn has no FP8 forward (FlashAttention-3 has)",
    no_mla="flash-attn has no MLA decode kernel",
)
FA3 = Flavour(
    name="FlashAttention-3",
    package="flash-attn-3 (flash_attn_interface from hopper/)",
    module="flash_attn_interface",
    page_keyword="page_table",
    dtypes=None,
    page_multiple=1,
    fp8=True,
    trimmed_builds=True,
    paged_prefill_by_kvcache=True,
    no_fp8="",
    no_mla="the FlashAttention-3 adapter does not wire its MLA (qv) path yet",
)


def disabled_features(env: dict[str, str] | None = None) -> set[str]:
    """Features this build was compiled without: ``FLASH_ATTENTION_DISABLE_X=TRUE`` → ``X``."""
    env = dict(os.environ) if env is None else env
    prefix = "FLASH_ATTENTION_DISABLE_"
    return {
        k.removeprefix(prefix)
        for k, v in env.items()
        if k.startswith(prefix) and v.upper() in ("TRUE", "1", "ON", "YES")
    }


def check_build(case: Inputs, *, paged: bool = False, varlen: bool = False) -> None:
    """Raise ``Unavailable`` when the trimmed FA3 build lacks what ``case`` needs."""
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


def _api(fl: Flavour, case: Inputs, *, paged: bool = False, varlen: bool = False) -> ModuleType:
    """The library's API for ``case``, or ``Unavailable`` saying why it cannot run here."""
    require_cuda(case["q"], fl.name)
    dt = case["q"].dtype
    if fl.dtypes is not None and dt not in fl.dtypes:
        raise Unavailable(f"{fl.name} takes fp16/bf16 inputs, not {dt}")
    api = require_module(fl.module, fl.package)
    if fl.trimmed_builds:
        check_build(case, paged=paged, varlen=varlen)
    if paged:
        _paged_ok(fl, case)
    return api


def _paged_ok(fl: Flavour, case: Inputs) -> None:
    if case["layout"] != "NHD":
        raise Unavailable(f"{fl.name} reads paged KV in NHD layout only")
    if case["page_size"] % fl.page_multiple:
        raise Unavailable(
            f"{fl.name} needs pages of a multiple of {fl.page_multiple} tokens, "
            f"not {case['page_size']}"
        )
    if case["k_cache"].dtype != case["q"].dtype:
        raise Unavailable(
            f"{fl.name} needs q and the KV cache in the same dtype, "
            f"not {case['q'].dtype} and {case['k_cache'].dtype}"
        )


def _dense(fa: ModuleType, case: Inputs, **extra: Any) -> torch.Tensor:
    """``flash_attn_func`` on the case's q, k, v (both libraries take the same call)."""
    return first(
        fa.flash_attn_func(
            case["q"],
            case["k"],
            case["v"],
            softmax_scale=case["scale"],
            causal=bool(case["causal"]),
            **extra,
        )
    )


def prefill(fl: Flavour, case: Inputs) -> torch.Tensor:
    return _dense(_api(fl, case), case)


def prefill_fp8(fl: Flavour, case: Inputs) -> torch.Tensor:
    if not fl.fp8:
        raise Unavailable(fl.no_fp8)
    fa = _api(fl, case)
    b, hk = case["k"].size(0), case["k"].size(2)
    descale = {
        f"{n}_descale": torch.full(
            (b, hk), float(case[f"{n}_scale"]), dtype=torch.float32, device=case["q"].device
        )
        for n in "qkv"
    }
    return _dense(fa, case, **descale)


def prefill_varlen(fl: Flavour, case: Inputs) -> torch.Tensor:
    return _varlen(_api(fl, case, varlen=True), case, case["k"], case["v"])


def _varlen(fa: ModuleType, case: Inputs, k: Any, v: Any, **extra: Any) -> torch.Tensor:
    """``flash_attn_varlen_func`` over the case's packed queries and ``k``/``v``."""
    return first(
        fa.flash_attn_varlen_func(
            case["q"],
            k,
            v,
            cu_seqlens_q=case["cu_seqlens_q"],
            cu_seqlens_k=case["cu_seqlens_k"],
            max_seqlen_q=case["max_seqlen_q"],
            max_seqlen_k=case["max_seqlen_k"],
            softmax_scale=case["scale"],
            causal=bool(case["causal"]),
            **extra,
        )
    )


def prefill_paged(fl: Flavour, case: Inputs) -> torch.Tensor:
    fa = _api(fl, case, paged=True, varlen=True)
    pages = {fl.page_keyword: case["block_table"]}
    if fl.paged_prefill_by_kvcache:
        out = fa.flash_attn_with_kvcache(
            case["q"],
            case["k_cache"],
            case["v_cache"],
            cache_seqlens=case["cache_seqlens"],
            cu_seqlens_q=case["cu_seqlens_q"],
            max_seqlen_q=case["max_seqlen_q"],
            softmax_scale=case["scale"],
            causal=bool(case["causal"]),
            **pages,
        )
        return first(out)
    return _varlen(fa, case, case["k_cache"], case["v_cache"], **pages)


def decode_paged(fl: Flavour, case: Inputs) -> torch.Tensor:
    fa = _api(fl, case, paged=True)
    out = first(
        fa.flash_attn_with_kvcache(
            case["q"].unsqueeze(1),
            case["k_cache"],
            case["v_cache"],
            cache_seqlens=case["cache_seqlens"],
            softmax_scale=case["scale"],
            **{fl.page_keyword: case["block_table"]},
        )
    )
    return out.squeeze(1)


def decode_mla(fl: Flavour, case: Inputs) -> torch.Tensor:
    raise Unavailable(fl.no_mla)


def bind(fl: Flavour) -> dict[str, Kernel]:
    """The kernels of this module for one library (for ``flash_attn.py`` and ``fa3.py``)."""

    def pin(fn: Callable[[Flavour, Inputs], torch.Tensor]) -> Kernel:
        def call(case: Inputs) -> torch.Tensor:
            return fn(fl, case)

        call.__name__ = call.__qualname__ = fn.__name__
        call.__doc__ = f"{fn.__name__} on {fl.name}."
        return call

    kernels = (prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla)
    return {fn.__name__: pin(fn) for fn in kernels}
