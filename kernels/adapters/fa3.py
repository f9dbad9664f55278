"""Implementation module ``fa3``: FlashAttention-3, built from the repository's ``hopper/`` package.

The API is the top-level module ``flash_attn_interface`` (kernelwatch puts the
build on the path):

- ``prefill``: ``flash_attn_func``; ``prefill_fp8``: the same on e4m3 inputs
  with ``q/k/v_descale`` of shape ``[batch, kv_heads]``.
- ``prefill_varlen``: ``flash_attn_varlen_func``.
- ``prefill_paged``: ``flash_attn_with_kvcache`` with ``page_table``,
  ``cu_seqlens_q`` and ``max_seqlen_q`` (new tokens over a paged cache).
- ``decode_paged``: ``flash_attn_with_kvcache(q, ..., page_table=...)``.

Cases a trimmed build (``FLASH_ATTENTION_DISABLE_*``) left out are skipped with
that reason. One module per library because ``kernelwatch bench --impl`` names a
module and each library is its own series; the adapter code, shared with
FlashAttention-2, is in ``flash_attention.py``.
"""

from kernelwatch.kernels.adapters.flash_attention import (
    FA3,
    HEAD_DIMS,
    bind,
    check_build,
    disabled_features,
)

LIB = FA3.package
# prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla
_KERNELS = bind(FA3)
__all__ = [*_KERNELS, "HEAD_DIMS", "LIB", "check_build", "disabled_features"]
globals().update(_KERNELS)
