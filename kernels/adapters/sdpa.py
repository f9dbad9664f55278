"""PyTorch ``scaled_dot_product_attention``, with PyTorch's choice of backend or a forced one.

This module is the implementation module ``sdpa`` (PyTorch decides the backend,
as a user who writes plain SDPA gets); ``sdpa_flash``, ``sdpa_cudnn``,
``sdpa_efficient`` and ``sdpa_math`` pin one backend through
``torch.nn.attention.sdpa_kernel``. A backend that cannot take a case (GQA on
the nested-tensor path, an explicit mask on FLASH, a head dim cuDNN leaves out)
makes PyTorch refuse it; that becomes a ``skip`` naming the backend.

How each kernel maps onto SDPA:

- ``prefill``: ``[b, s, h, d]`` inputs viewed as ``[b, h, s, d]`` (no copy);
  ``is_causal`` when ``seq_q == seq_k``, else the bottom-right
  ``causal_lower_right`` bias (SDPA's ``is_causal`` is top-left aligned, which
  is a different mask when the lengths differ); ``enable_gqa`` for GQA.
- ``prefill_varlen``: jagged nested tensors (what PyTorch offers for packed
  sequences); multi-head only, since its fused kernels take no GQA.
- ``prefill_paged`` / ``decode_paged`` / ``decode_mla``: there is no paged SDPA,
  so this is the eager PyTorch path a serving engine without a paged kernel
  runs: gather the pages into a padded batch, mask the padding, call SDPA. The
  gather is part of the cost. MLA runs as multi-query attention over the
  concatenated ``[ckv, kpe]`` cache with ``ckv`` as values.
- ``prefill_fp8``: not offered by SDPA.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernelwatch.kernels.adapters import Unavailable
from kernelwatch.kernels.suite import Inputs
from kernelwatch.kernels.suites.common import FP8

_REFUSED = ("No available kernel", "No viable backend")


@contextmanager
def _backend(backend: SDPBackend | None) -> Iterator[None]:
    """Pin ``backend``; turn PyTorch's refusal into ``Unavailable`` naming it."""
    try:
        if backend is None:
            yield
        else:
            with sdpa_kernel([backend]):
                yield
    except RuntimeError as exc:
        if any(m in str(exc) for m in _REFUSED):
            name = backend.name if backend is not None else "any backend"
            raise Unavailable(f"torch SDPA {name} cannot run this case: {exc}") from exc
        raise


def _sdpa(backend: SDPBackend | None, q: Any, k: Any, v: Any, **kw: Any) -> torch.Tensor:
    gqa = q.size(1) != k.size(1)
    with _backend(backend):
        out: torch.Tensor = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **kw)
    return out


# --------------------------------------------------------------------------- dense


def prefill(case: Inputs, backend: SDPBackend | None = None) -> torch.Tensor:
    q, k, v = (case[n].transpose(1, 2) for n in "qkv")
    sq, sk = q.size(2), k.size(2)
    kw: dict[str, Any] = {"scale": case["scale"]}
    if case["causal"] and sq == sk:
        kw["is_causal"] = True
    elif case["causal"]:
        from torch.nn.attention.bias import causal_lower_right

        kw["attn_mask"] = causal_lower_right(sq, sk)
    return _sdpa(backend, q, k, v, **kw).transpose(1, 2)


def prefill_varlen(case: Inputs, backend: SDPBackend | None = None) -> torch.Tensor:
    q, k = case["q"], case["k"]
    if q.size(1) != k.size(1):
        raise Unavailable("torch SDPA on nested tensors has no grouped-query attention")
    lens = case["seq_lens"]
    offsets = case["cu_seqlens_q"].to(torch.int64)
    bounds = {"min_seqlen": min(lens), "max_seqlen": max(lens)}
    with warnings.catch_warnings(), _backend(backend):
        # torch's own "nested tensors are a prototype" notice is not about this code
        warnings.filterwarnings("ignore", message=".*nested tensors is in prototype")
        qn, kn, vn = (
            torch.nested.nested_tensor_from_jagged(case[n], offsets, **bounds).transpose(1, 2)
            for n in "qkv"
        )
        out = F.scaled_dot_product_attention(
            qn, kn, vn, is_causal=bool(case["causal"]), scale=case["scale"]
        )
    values: torch.Tensor = out.transpose(1, 2).values()
    return values


def prefill_fp8(case: Inputs, backend: SDPBackend | None = None) -> torch.Tensor:
    raise Unavailable("torch SDPA has no FP8 attention")


# --------------------------------------------------------------------------- paged


def _gather(case: Inputs, name: str, max_len: int) -> torch.Tensor:
    """Pages of every sequence as a padded ``[b, kv_heads, max_len, d]`` batch."""
    cache = case[name]
    pages = cache[case["block_table"].long()]  # [b, pages, ps, hk, d] or [b, pages, hk, ps, d]
    if case.get("layout", "NHD") == "HND":
        pages = pages.transpose(2, 3)
    b = pages.size(0)
    dense: torch.Tensor = pages.reshape(b, -1, *pages.shape[3:])[:, :max_len]
    return dense.transpose(1, 2)


def _dequant(case: Inputs, which: str, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if x.dtype == FP8:
        return (x.to(torch.float32) * float(case[f"{which}_scale"])).to(dtype)
    return x


def decode_paged(case: Inputs, backend: SDPBackend | None = None) -> torch.Tensor:
    q = case["q"]
    max_len = max(case["kv_lens"])
    k = _dequant(case, "k", _gather(case, "k_cache", max_len), q.dtype)
    v = _dequant(case, "v", _gather(case, "v_cache", max_len), q.dtype)
    lens = case["cache_seqlens"]
    mask = torch.arange(max_len, device=q.device)[None, :] < lens[:, None]
    out = _sdpa(
        backend, q.unsqueeze(2), k, v, attn_mask=mask[:, None, None, :], scale=case["scale"]
    )
    return out[:, :, 0]


def prefill_paged(case: Inputs, backend: SDPBackend | None = None) -> torch.Tensor:
    q_lens, kv_lens = case["q_lens"], case["kv_lens"]
    q, dev = case["q"], case["q"].device
    b, max_q, max_k = len(q_lens), max(q_lens), max(kv_lens)
    rows = case.get("_cache_sdpa_rows")
    if rows is None:  # packed row -> (sequence, position) and the mask, built once
        seq = torch.repeat_interleave(torch.arange(b), torch.tensor(q_lens))
        pos = torch.cat([torch.arange(n) for n in q_lens])
        qi = torch.arange(max_q)[None, :, None]
        kj = torch.arange(max_k)[None, None, :]
        prefix = torch.tensor([k - n for k, n in zip(kv_lens, q_lens, strict=True)])
        keep = kj < torch.tensor(kv_lens)[:, None, None]
        if case["causal"]:
            keep = keep & (kj <= qi + prefix[:, None, None])
        rows = case["_cache_sdpa_rows"] = (seq.to(dev), pos.to(dev), keep[:, None].to(dev))
    seq, pos, keep = rows
    padded = q.new_zeros((b, max_q) + tuple(q.shape[1:]))
    padded[seq, pos] = q
    k = _gather(case, "k_cache", max_k)
    v = _gather(case, "v_cache", max_k)
    out = _sdpa(backend, padded.transpose(1, 2), k, v, attn_mask=keep, scale=case["scale"])
    return out.transpose(1, 2)[seq, pos]


def decode_mla(case: Inputs, backend: SDPBackend | None = None) -> torch.Tensor:
    q = torch.cat([case["q_nope"], case["q_pe"]], dim=-1).unsqueeze(2)  # [b, h, 1, 576]
    max_len = max(case["kv_lens"])
    table = case["block_table"].long()
    ckv = case["ckv_cache"][table].reshape(table.size(0), -1, case["ckv_cache"].size(-1))
    kpe = case["kpe_cache"][table].reshape(table.size(0), -1, case["kpe_cache"].size(-1))
    ckv, kpe = ckv[:, :max_len], kpe[:, :max_len]
    k = torch.cat([ckv, kpe], dim=-1).unsqueeze(1)  # [b, 1, L, 576]
    v = ckv.unsqueeze(1)
    mask = torch.arange(max_len, device=q.device)[None, :] < case["cache_seqlens"][:, None]
    out = _sdpa(backend, q, k, v, attn_mask=mask[:, None, None, :], scale=case["scale"])
    return out[:, :, 0]


def bind(backend: SDPBackend) -> dict[str, Callable[[Inputs], torch.Tensor]]:
    """The kernels of this module with ``backend`` pinned (for the ``sdpa_*`` modules)."""

    def pin(fn: Callable[[Inputs, SDPBackend | None], torch.Tensor]) -> Callable[[Inputs], Any]:
        def call(case: Inputs) -> torch.Tensor:
            return fn(case, backend)

        call.__name__ = fn.__name__
        call.__doc__ = f"{fn.__name__} on SDPA backend {backend.name}."
        return call

    kernels = (prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla)
    return {fn.__name__: pin(fn) for fn in kernels}
