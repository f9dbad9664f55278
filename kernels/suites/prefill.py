"""The prefill suite: attention over whole prompts, dense, varlen, paged and FP8.

Shapes come from ``prefill.toml`` (see ``kernelwatch.kernels.grid``); this module
turns each parameter set into a case: random inputs in the layout most libraries
take natively (``[batch, seq, heads, head_dim]``, so SDPA gets free transposed
views and FlashAttention/FlashInfer get their own layout), a reference computed
one sequence at a time, and the FLOP/byte counts of ``kernelwatch.kernels.flops``.
Implementations follow the ``fn(case) -> Tensor`` convention of
``kernels/suites/common.py``; the dict keys of each kernel are listed in
``docs/suites.md``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelwatch.kernels import flops, grid
from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites.common import (
    FP8,
    attention_ref,
    cu_seqlens,
    dtype_name,
    dtype_of,
    gather_pages,
    invoke,
    paged_cache,
    paged_layout,
    quantize_fp8,
    randn,
)

Params = dict[str, Any]


def build(size: str, device: torch.device) -> list[CaseSpec]:
    return [make_case(p) for p in grid.builtin("prefill").cases(size)]


def make_case(raw: Params) -> CaseSpec:
    p = dict(raw)
    kernel = str(p.pop("kernel"))
    if "seq" in p:
        s = int(p.pop("seq"))
        p.setdefault("seq_q", s)
        p.setdefault("seq_k", s)
    heads, kv_heads = int(p["heads"]), int(p["kv_heads"])
    if heads % kv_heads:
        raise ValueError(f"{kernel}: heads {heads} not a multiple of kv_heads {kv_heads}")
    builders = {
        "prefill": _dense,
        "prefill_fp8": _dense,
        "prefill_varlen": _varlen,
        "prefill_paged": _paged,
    }
    if kernel not in builders:
        raise ValueError(f"prefill suite has no kernel {kernel!r}")
    return builders[kernel](kernel, p)


def _dense(kernel: str, p: Params) -> CaseSpec:
    b, sq, sk = int(p["batch"]), int(p["seq_q"]), int(p["seq_k"])
    h, hk, d, causal = int(p["heads"]), int(p["kv_heads"]), int(p["head_dim"]), bool(p["causal"])
    fp8 = kernel == "prefill_fp8"
    dtype = dtype_of(str(p["dtype"]))
    out_dtype = torch.bfloat16 if fp8 else dtype
    scale = 1.0 / math.sqrt(d)

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        shapes = {"q": (b, sq, h, d), "k": (b, sk, hk, d), "v": (b, sk, hk, d)}
        case: Inputs = {"causal": causal, "scale": scale}
        for name, shape in shapes.items():
            x = randn(shape, g, dev, torch.float32 if fp8 else dtype)
            if fp8:
                case[name], case[f"{name}_scale"] = quantize_fp8(x)
            else:
                case[name] = x
        case["out"] = torch.empty((b, sq, h, d), device=dev, dtype=out_dtype)
        return case

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        q, k, v = (_dequant(i, n, dt) if fp8 else i[n] for n in "qkv")
        # FP8: the low-precision reference rounds P to e4m3 as the kernel does (FA3's test)
        pd = FP8 if fp8 and dt not in (torch.float32, torch.float64) else None
        return torch.stack(
            [attention_ref(q[j], k[j], v[j], causal, scale, dt, pd) for j in range(b)]
        )

    in_dt = str(p["dtype"])
    return CaseSpec(
        kernel,
        p,
        make,
        invoke,
        ref,
        out_dtype,
        flops=flops.attention_flops(h, [sq] * b, [sk] * b, d, causal),
        bytes=flops.attention_bytes(
            h, hk, b * sq, b * sk, d, in_dt, out_dtype=dtype_name(out_dtype)
        ),
        tolerance_kind="fp8" if fp8 else "default",
    )


def _varlen(kernel: str, p: Params) -> CaseSpec:
    lens = [int(x) for x in p["seq_lens"]]
    h, hk, d, causal = int(p["heads"]), int(p["kv_heads"]), int(p["head_dim"]), bool(p["causal"])
    dtype = dtype_of(str(p["dtype"]))
    scale = 1.0 / math.sqrt(d)
    total = sum(lens)

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        cu = cu_seqlens(lens, dev)
        return {
            "q": randn((total, h, d), g, dev, dtype),
            "k": randn((total, hk, d), g, dev, dtype),
            "v": randn((total, hk, d), g, dev, dtype),
            "cu_seqlens_q": cu,
            "cu_seqlens_k": cu,
            "max_seqlen_q": max(lens),
            "max_seqlen_k": max(lens),
            "seq_lens": lens,
            "causal": causal,
            "scale": scale,
            "out": torch.empty((total, h, d), device=dev, dtype=dtype),
        }

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        outs, at = [], 0
        for n in lens:
            s = slice(at, at + n)
            outs.append(attention_ref(i["q"][s], i["k"][s], i["v"][s], causal, scale, dt))
            at += n
        return torch.cat(outs)

    name = str(p["dtype"])
    return CaseSpec(
        kernel,
        p,
        make,
        invoke,
        ref,
        dtype,
        flops=flops.attention_flops(h, lens, lens, d, causal),
        bytes=flops.attention_bytes(
            h, hk, total, total, d, name, index_bytes=8.0 * (len(lens) + 1)
        ),
    )


def _paged(kernel: str, p: Params) -> CaseSpec:
    q_lens = [int(x) for x in p["q_lens"]]
    prefix = [int(x) for x in p["prefix_lens"]]
    if len(q_lens) != len(prefix):
        raise ValueError("prefill_paged: q_lens and prefix_lens need one entry per sequence")
    kv_lens = [a + b for a, b in zip(q_lens, prefix, strict=True)]
    h, hk, d, causal = int(p["heads"]), int(p["kv_heads"]), int(p["head_dim"]), bool(p["causal"])
    ps, layout_name = int(p["page_size"]), str(p["layout"])
    dtype = dtype_of(str(p["dtype"]))
    scale = 1.0 / math.sqrt(d)
    total_q = sum(q_lens)

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        layout = paged_layout(kv_lens, ps, g)
        case: Inputs = {
            "q": randn((total_q, h, d), g, dev, dtype),
            "k_cache": paged_cache(layout, kv_lens, hk, d, layout_name, g, dev, dtype),
            "v_cache": paged_cache(layout, kv_lens, hk, d, layout_name, g, dev, dtype),
            "layout": layout_name,
            "page_size": ps,
            "pages": layout.pages,
            "q_lens": q_lens,
            "kv_lens": kv_lens,
            "cache_seqlens": torch.tensor(kv_lens, dtype=torch.int32, device=dev),
            "kv_last_page_len": torch.tensor(
                [(n - 1) % ps + 1 for n in kv_lens], dtype=torch.int32, device=dev
            ),
            "cu_seqlens_q": cu_seqlens(q_lens, dev),
            "cu_seqlens_k": cu_seqlens(kv_lens, dev),
            "max_seqlen_q": max(q_lens),
            "max_seqlen_k": max(kv_lens),
            "causal": causal,
            "scale": scale,
            "out": torch.empty((total_q, h, d), device=dev, dtype=dtype),
        }
        case.update(layout.tensors(dev))
        return case

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        outs, at = [], 0
        for j, (nq, nk) in enumerate(zip(q_lens, kv_lens, strict=True)):
            k = gather_pages(i["k_cache"], i["pages"][j], nk, layout_name)
            v = gather_pages(i["v_cache"], i["pages"][j], nk, layout_name)
            outs.append(attention_ref(i["q"][at : at + nq], k, v, causal, scale, dt))
            at += nq
        return torch.cat(outs)

    name = str(p["dtype"])
    index = flops.paged_index_bytes(kv_lens, ps) + 4.0 * (len(q_lens) + 1)
    return CaseSpec(
        kernel,
        p,
        make,
        invoke,
        ref,
        dtype,
        flops=flops.attention_flops(h, q_lens, kv_lens, d, causal),
        bytes=flops.attention_bytes(h, hk, total_q, sum(kv_lens), d, name, index_bytes=index),
        tolerance_kind="kv_cache",
    )


def _dequant(case: Inputs, name: str, dt: torch.dtype) -> torch.Tensor:
    x: torch.Tensor = case[name]
    return (x.to(torch.float32) * float(case[f"{name}_scale"])).to(dt)
