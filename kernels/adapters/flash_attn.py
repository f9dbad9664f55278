"""Implementation module ``flash_attn``: the FlashAttention-2 package (``pip install flash-attn``).

- ``prefill``: ``flash_attn_func`` on ``[b, s, h, d]`` (its native layout).
- ``prefill_varlen``: ``flash_attn_varlen_func`` on packed sequences.
- ``prefill_paged``: ``flash_attn_varlen_func(..., block_table=...)``.
- ``decode_paged``: ``flash_attn_with_kvcache(q, k_cache, v_cache,
  cache_seqlens=..., block_table=...)``.

What FlashAttention-2 does not take is skipped with its reason: paged KV only
in NHD layout and with pages of a multiple of 256 tokens, fp16/bf16 only, no
FP8, no MLA. One module per library because ``kernelwatch bench --impl`` names a
module and each library is its own series; the adapter code, shared with
FlashAttention-3, is in ``flash_attention.py``.
"""

from kernelwatch.kernels.adapters.flash_attention import FA2, bind

LIB = FA2.package
# prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla
_KERNELS = bind(FA2)
__all__ = [*_KERNELS, "LIB"]
globals().update(_KERNELS)
