"""The decode suite: one query token per sequence against a paged KV cache.

Shapes come from ``decode.toml``. Each case builds a shuffled paged cache in the
requested layout (NHD or HND), page size and storage dtype (FP8 e4m3 with one
scale per tensor for K and for V), gives it to the implementation in both
common encodings (FlashInfer's CSR indices and FlashAttention's block table),
and checks the result against attention over the gathered valid tokens. Decode
is memory-bound: its roofline number is the bytes of ``flops.decode_bytes``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelwatch.kernels import flops, grid
from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites.common import (
    FP8,
    batch_slices,
    decode_attention_ref,
    dtype_of,
    gather_padded,
    invoke,
    mla_ref,
    paged_cache,
    paged_layout,
    quantize_fp8,
    randn,
)

Params = dict[str, Any]


def build(size: str, device: torch.device) -> list[CaseSpec]:
    return [make_case(p) for p in grid.builtin("decode").cases(size)]


def make_case(raw: Params) -> CaseSpec:
    p = dict(raw)
    kernel = str(p.pop("kernel"))
    if "kv_lens" in p:
        lens = [int(x) for x in p["kv_lens"]]
    else:
        lens = [int(p["kv_len"])] * int(p["batch"])
    if kernel == "decode_paged":
        return _paged(p, lens)
    if kernel == "decode_mla":
        return _mla(p, lens)
    raise ValueError(f"decode suite has no kernel {kernel!r}")


def _meta(lens: list[int], ps: int, dev: torch.device) -> Inputs:
    return {
        "kv_lens": lens,
        "page_size": ps,
        "cache_seqlens": torch.tensor(lens, dtype=torch.int32, device=dev),
        "kv_last_page_len": torch.tensor(
            [(n - 1) % ps + 1 for n in lens], dtype=torch.int32, device=dev
        ),
    }


def _paged(p: Params, lens: list[int]) -> CaseSpec:
    h, hk, d = int(p["heads"]), int(p["kv_heads"]), int(p["head_dim"])
    if h % hk:
        raise ValueError(f"decode_paged: heads {h} not a multiple of kv_heads {hk}")
    ps, layout_name = int(p["page_size"]), str(p["layout"])
    dtype = dtype_of(str(p["dtype"]))
    kv_name = str(p.get("kv_dtype", p["dtype"]))
    kv_dtype = dtype_of(kv_name)
    fp8 = kv_dtype == FP8
    scale = 1.0 / math.sqrt(d)
    batch = len(lens)

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        layout = paged_layout(lens, ps, g)
        case: Inputs = {
            "q": randn((batch, h, d), g, dev, dtype),
            "layout": layout_name,
            "pages": layout.pages,
            "scale": scale,
            "out": torch.empty((batch, h, d), device=dev, dtype=dtype),
            **_meta(lens, ps, dev),
        }
        for name in ("k_cache", "v_cache"):
            cache = paged_cache(
                layout, lens, hk, d, layout_name, g, dev, torch.float32 if fp8 else kv_dtype
            )
            if fp8:
                cache, case[name.replace("cache", "scale")] = quantize_fp8(cache)
            case[name] = cache
        case.update(layout.tensors(dev))
        return case

    padded = math.ceil(max(lens) / ps) * ps  # the longest sequence's rows, whole pages

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        outs = []
        for rows in batch_slices(batch, padded * max(h, hk * d)):
            k = _kv(i, "k", gather_padded(i["k_cache"], i["pages"][rows], layout_name), dt)
            v = _kv(i, "v", gather_padded(i["v_cache"], i["pages"][rows], layout_name), dt)
            outs.append(decode_attention_ref(i["q"][rows], k, v, lens[rows], scale, dt))
        return torch.cat(outs)

    return CaseSpec(
        "decode_paged",
        p,
        make,
        invoke,
        ref,
        dtype,
        flops=flops.decode_flops(lens, h, d),
        bytes=flops.decode_bytes(lens, h, hk, d, str(p["dtype"]), kv_name, ps),
        tolerance_kind="fp8" if fp8 else "kv_cache",
    )


def _kv(case: Inputs, which: str, x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """Dequantized K or V: FP8 values times their scale, else the values."""
    if x.dtype == FP8:
        return (x.to(torch.float32) * float(case[f"{which}_scale"])).to(dt)
    return x.to(dt)


def _mla(p: Params, lens: list[int]) -> CaseSpec:
    h, d_ckv, d_kpe = int(p["heads"]), int(p["head_dim_ckv"]), int(p["head_dim_kpe"])
    ps = int(p["page_size"])
    dtype = dtype_of(str(p["dtype"]))
    scale = float(p["sm_scale"])
    batch = len(lens)

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        layout = paged_layout(lens, ps, g)
        ckv = paged_cache(layout, lens, 1, d_ckv, "NHD", g, dev, dtype).squeeze(2)
        kpe = paged_cache(layout, lens, 1, d_kpe, "NHD", g, dev, dtype).squeeze(2)
        case: Inputs = {
            "q_nope": randn((batch, h, d_ckv), g, dev, dtype),
            "q_pe": randn((batch, h, d_kpe), g, dev, dtype),
            "ckv_cache": ckv.contiguous(),
            "kpe_cache": kpe.contiguous(),
            "pages": layout.pages,
            "scale": scale,
            "out": torch.empty((batch, h, d_ckv), device=dev, dtype=dtype),
            **_meta(lens, ps, dev),
        }
        case.update(layout.tensors(dev))
        return case

    padded = math.ceil(max(lens) / ps) * ps  # the longest sequence's rows, whole pages

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        outs = []
        for rows in batch_slices(batch, padded * max(h, d_ckv + d_kpe)):
            c = gather_padded(i["ckv_cache"], i["pages"][rows])
            k = gather_padded(i["kpe_cache"], i["pages"][rows])
            q_nope, q_pe = i["q_nope"][rows], i["q_pe"][rows]
            outs.append(mla_ref(q_nope, q_pe, c, k, lens[rows], scale, dt))
        return torch.cat(outs)

    name = str(p["dtype"])
    return CaseSpec(
        "decode_mla",
        p,
        make,
        invoke,
        ref,
        dtype,
        flops=flops.mla_decode_flops(lens, h, d_ckv, d_kpe),
        bytes=flops.mla_decode_bytes(lens, h, d_ckv, d_kpe, name, ps),
        tolerance_kind="kv_cache",
    )
