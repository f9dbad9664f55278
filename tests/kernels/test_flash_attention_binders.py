"""The FA2 and FA3 binders of ``adapters/flash_attention.py`` differ where the libraries do.

A recording stand-in for each library's API module is put in ``sys.modules`` and
the CUDA check is lifted, so the calls the binders make are seen on the CPU:
which function, which paged keyword, which arguments. The real calls run in
``test_gpu_adapters.py`` on a GPU.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest
import torch

from kernelwatch.kernels.adapters import Unavailable, fa3, flash_attention, flash_attn
from kernelwatch.kernels.suites import decode, prefill

Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def _fake_api(monkeypatch: pytest.MonkeyPatch, name: str) -> Calls:
    calls: Calls = []
    mod = ModuleType(name)

    def recorder(fn: str) -> Any:
        def call(*args: Any, **kw: Any) -> tuple[torch.Tensor, None]:
            calls.append((fn, args, kw))
            return args[0], None  # (out, lse), as older builds return

        return call

    for fn in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"):
        setattr(mod, fn, recorder(fn))
    monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(flash_attention, "require_cuda", lambda tensor, library: None)
    return calls


def _inputs(spec: Any) -> dict[str, Any]:
    return dict(spec.make_inputs(torch.Generator().manual_seed(0), torch.device("cpu")))


DECODE = {"kernel": "decode_paged", "heads": 8, "kv_heads": 2, "head_dim": 128, "batch": 2}
DECODE.update(kv_len=300, layout="NHD", dtype="bfloat16")
DENSE = {"kernel": "prefill", "heads": 8, "kv_heads": 2, "head_dim": 128, "causal": True}
DENSE.update(dtype="bfloat16")
PAGED = {"kernel": "prefill_paged", "heads": 8, "kv_heads": 2, "head_dim": 128, "causal": True}
PAGED.update(q_lens=[5, 40], prefix_lens=[300, 600], layout="NHD", dtype="bfloat16")


@pytest.mark.parametrize(
    ("module", "api", "keyword"),
    [(flash_attn, "flash_attn", "block_table"), (fa3, "flash_attn_interface", "page_table")],
)
def test_paged_decode_uses_each_librarys_page_keyword(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, api: str, keyword: str
) -> None:
    calls = _fake_api(monkeypatch, api)
    case = _inputs(decode.make_case({**DECODE, "page_size": 256}))
    out = module.decode_paged(case)
    ((fn, args, kw),) = calls
    assert fn == "flash_attn_with_kvcache"
    assert kw[keyword] is case["block_table"]
    other = {"block_table": "page_table", "page_table": "block_table"}[keyword]
    assert other not in kw
    assert args[0].shape[1] == 1 and out.shape == case["q"].shape  # one new token, squeezed


def test_paged_prefill_goes_through_varlen_on_fa2_and_kvcache_on_fa3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fa2_calls = _fake_api(monkeypatch, "flash_attn")
    case = _inputs(prefill.make_case({**PAGED, "page_size": 256}))
    flash_attn.prefill_paged(case)
    ((fn, _, kw),) = fa2_calls
    assert fn == "flash_attn_varlen_func" and kw["block_table"] is case["block_table"]
    assert kw["max_seqlen_k"] == case["max_seqlen_k"] and "page_table" not in kw

    fa3_calls = _fake_api(monkeypatch, "flash_attn_interface")
    fa3.prefill_paged(case)
    ((fn, _, kw),) = fa3_calls
    assert fn == "flash_attn_with_kvcache" and kw["page_table"] is case["block_table"]
    assert kw["cu_seqlens_q"] is case["cu_seqlens_q"] and "block_table" not in kw


def test_fa2_refuses_small_pages_and_fp8_where_fa3_takes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_api(monkeypatch, "flash_attn")
    small = _inputs(decode.make_case({**DECODE, "page_size": 16}))
    with pytest.raises(Unavailable, match="multiple of 256 tokens, not 16"):
        flash_attn.decode_paged(small)
    with pytest.raises(Unavailable, match="no FP8 forward"):
        flash_attn.prefill_fp8(small)
    calls = _fake_api(monkeypatch, "flash_attn_interface")
    fa3.decode_paged(small)
    assert len(calls) == 1


def test_fa3_skips_what_a_trimmed_build_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_api(monkeypatch, "flash_attn_interface")
    case = _inputs(prefill.make_case({**PAGED, "page_size": 16}))
    monkeypatch.setenv("FLASH_ATTENTION_DISABLE_PAGEDKV", "TRUE")
    with pytest.raises(Unavailable, match="leaves out a paged KV cache"):
        fa3.prefill_paged(case)
    assert calls == []
    dense = _inputs(prefill.make_case({**DENSE, "batch": 1, "seq": 64}))
    fa3.prefill(dense)
    assert len(calls) == 1  # the head dim is still in the build
    monkeypatch.setenv("FLASH_ATTENTION_DISABLE_HDIM128", "1")
    with pytest.raises(Unavailable, match="leaves out head dim 128"):
        fa3.prefill(dense)
    assert len(calls) == 1
    # FA2 builds have no such switches: the same environment changes nothing there
    fa2_calls = _fake_api(monkeypatch, "flash_attn")
    flash_attn.prefill(dense)
    assert len(fa2_calls) == 1
    assert fa3.disabled_features() == {"PAGEDKV", "HDIM128"}


def test_both_binders_offer_every_attention_kernel_under_its_own_name() -> None:
    for module in (fa3, flash_attn):
        for name in flash_attention.bind(flash_attention.FA2):
            fn = getattr(module, name)
            assert callable(fn) and fn.__name__ == name
    assert fa3.prefill.__doc__ == "prefill on FlashAttention-3."
