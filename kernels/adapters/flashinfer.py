"""Implementation module ``flashinfer``: FlashInfer's attention APIs (``flashinfer-python``).

- ``prefill``: ``single_prefill_with_kv_cache`` for one sequence; for a batch,
  ``BatchPrefillWithRaggedKVCacheWrapper`` over the ``[b·s, h, d]`` view (the
  API serving engines use for prompts without a cached prefix).
- ``prefill_fp8``: ``single_prefill_with_kv_cache`` on e4m3 inputs with
  per-head ``scale_q/k/v`` and ``o_dtype=bfloat16`` (one sequence).
- ``prefill_varlen``: ``BatchPrefillWithRaggedKVCacheWrapper``.
- ``prefill_paged``: ``BatchPrefillWithPagedKVCacheWrapper`` (NHD or HND).
- ``decode_paged``: ``BatchDecodeWithPagedKVCacheWrapper`` (NHD or HND, any page
  size, FP8 e4m3 KV with ``k_scale``/``v_scale``); tensor cores for GQA group
  sizes above 4, as vLLM and SGLang configure it.
- ``decode_mla``: ``BatchMLAPagedAttentionWrapper``, where the version has it.

Wrappers are created and planned in the first (checked) call and cached in the
case: ``plan()`` is per-batch host work that an engine does once per step for
all layers, and the 128 MB workspace is allocated once. Only ``run()`` is
timed. The first call of each kernel configuration also JIT-compiles it (8–13 s
on the H200), which the checked call absorbs.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from kernelwatch.kernels.adapters import Unavailable, first, require_cuda, require_module
from kernelwatch.kernels.suite import Inputs

LIB = "flashinfer-python"
WORKSPACE_BYTES = 128 * 1024 * 1024


def _api(case: Inputs, tensor: str) -> ModuleType:
    require_cuda(case[tensor], "FlashInfer")
    return require_module("flashinfer", LIB)


def _workspace(device: torch.device) -> torch.Tensor:
    # FlashInfer requires the float workspace zeroed before its first use.
    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)


def _wrapper(fi: ModuleType, name: str) -> Any:
    cls = getattr(fi, name, None)
    if cls is None:
        version = getattr(fi, "__version__", "?")
        raise Unavailable(f"flashinfer {version} has no {name}")
    return cls


def _ragged(
    case: Inputs, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: list[int]
) -> torch.Tensor:
    fi = _api(case, "q")
    wrapper = case.get("_cache_flashinfer")
    if wrapper is None:
        cls = _wrapper(fi, "BatchPrefillWithRaggedKVCacheWrapper")
        wrapper = cls(_workspace(q.device), "NHD")
        indptr = torch.tensor([0, *_cumsum(lens)], dtype=torch.int32, device=q.device)
        wrapper.plan(
            indptr,
            indptr,
            q.size(1),
            k.size(1),
            q.size(2),
            causal=bool(case["causal"]),
            sm_scale=float(case["scale"]),
            q_data_type=q.dtype,
            kv_data_type=k.dtype,
        )
        case["_cache_flashinfer"] = wrapper
    return first(wrapper.run(q, k, v))


def prefill(case: Inputs) -> torch.Tensor:
    fi = _api(case, "q")
    q, k, v = case["q"], case["k"], case["v"]
    b, sq = q.size(0), q.size(1)
    if b == 1:
        return first(
            fi.single_prefill_with_kv_cache(
                q[0],
                k[0],
                v[0],
                causal=bool(case["causal"]),
                sm_scale=float(case["scale"]),
                kv_layout="NHD",
            )
        ).unsqueeze(0)
    if sq != k.size(1):
        raise Unavailable("the ragged FlashInfer prefill here pairs equal q and kv lengths")
    qf, kf, vf = (x.reshape(-1, *x.shape[2:]) for x in (q, k, v))
    out = _ragged(case, qf, kf, vf, [sq] * b)
    return out.view(q.shape)


def prefill_varlen(case: Inputs) -> torch.Tensor:
    return _ragged(case, case["q"], case["k"], case["v"], case["seq_lens"])


def prefill_fp8(case: Inputs) -> torch.Tensor:
    fi = _api(case, "q")
    q, k, v = case["q"], case["k"], case["v"]
    if q.size(0) != 1:
        raise Unavailable("the FlashInfer FP8 prefill adapter covers one sequence")
    dev = q.device
    scales = {
        f"scale_{n}": torch.full(
            (case[n].size(2),), float(case[f"{n}_scale"]), dtype=torch.float32, device=dev
        )
        for n in "qkv"
    }
    out = first(
        fi.single_prefill_with_kv_cache(
            q[0],
            k[0],
            v[0],
            causal=bool(case["causal"]),
            sm_scale=float(case["scale"]),
            o_dtype=torch.bfloat16,
            **scales,
        )
    )
    return out.unsqueeze(0)


def prefill_paged(case: Inputs) -> torch.Tensor:
    fi = _api(case, "q")
    q, kc = case["q"], case["k_cache"]
    wrapper = case.get("_cache_flashinfer")
    if wrapper is None:
        cls = _wrapper(fi, "BatchPrefillWithPagedKVCacheWrapper")
        wrapper = cls(_workspace(q.device), case["layout"])
        wrapper.plan(
            case["cu_seqlens_q"],
            case["kv_indptr"],
            case["kv_indices"],
            case["kv_last_page_len"],
            q.size(1),
            _kv_heads(case),
            q.size(2),
            case["page_size"],
            causal=bool(case["causal"]),
            sm_scale=float(case["scale"]),
            q_data_type=q.dtype,
            kv_data_type=kc.dtype,
        )
        case["_cache_flashinfer"] = wrapper
    return first(wrapper.run(q, (kc, case["v_cache"])))


def decode_paged(case: Inputs) -> torch.Tensor:
    fi = _api(case, "q")
    q, kc = case["q"], case["k_cache"]
    wrapper = case.get("_cache_flashinfer")
    if wrapper is None:
        cls = _wrapper(fi, "BatchDecodeWithPagedKVCacheWrapper")
        hk = _kv_heads(case)
        tensor_cores = q.size(1) // hk > 4
        wrapper = cls(_workspace(q.device), case["layout"], use_tensor_cores=tensor_cores)
        wrapper.plan(
            case["kv_indptr"],
            case["kv_indices"],
            case["kv_last_page_len"],
            q.size(1),
            hk,
            q.size(2),
            case["page_size"],
            q_data_type=q.dtype,
            kv_data_type=kc.dtype,
            sm_scale=float(case["scale"]),
        )
        case["_cache_flashinfer"] = wrapper
    scales = {}
    if "k_scale" in case:
        scales = {"k_scale": float(case["k_scale"]), "v_scale": float(case["v_scale"])}
    return first(wrapper.run(q, (kc, case["v_cache"]), **scales))


def decode_mla(case: Inputs) -> torch.Tensor:
    fi = _api(case, "q_nope")
    qn = case["q_nope"]
    wrapper = case.get("_cache_flashinfer")
    if wrapper is None:
        cls = _wrapper(fi, "BatchMLAPagedAttentionWrapper")
        wrapper = cls(_workspace(qn.device))
        b = qn.size(0)
        wrapper.plan(
            torch.arange(b + 1, dtype=torch.int32, device=qn.device),
            case["kv_indptr"],
            case["kv_indices"],
            case["cache_seqlens"],
            qn.size(1),
            qn.size(2),
            case["q_pe"].size(2),
            case["page_size"],
            False,
            float(case["scale"]),
            qn.dtype,
            case["ckv_cache"].dtype,
        )
        case["_cache_flashinfer"] = wrapper
    return first(wrapper.run(qn, case["q_pe"], case["ckv_cache"], case["kpe_cache"]))


def _kv_heads(case: Inputs) -> int:
    kc = case["k_cache"]
    return int(kc.size(1) if case["layout"] == "HND" else kc.size(2))


def _cumsum(lens: list[int]) -> list[int]:
    out, total = [], 0
    for n in lens:
        total += n
        out.append(total)
    return out
