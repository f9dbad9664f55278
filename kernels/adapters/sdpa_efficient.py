"""Implementation module ``sdpa_efficient``: torch SDPA pinned to EFFICIENT_ATTENTION.

EFFICIENT_ATTENTION: the memory-efficient (xFormers) kernels.

One module per backend because ``kernelwatch bench --impl`` names a module and
every backend must be its own series; the adapter code is in ``sdpa.py``.
"""

from torch.nn.attention import SDPBackend

from kernelwatch.kernels.adapters.sdpa import bind

# prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla
_KERNELS = bind(SDPBackend.EFFICIENT_ATTENTION)
__all__ = list(_KERNELS)
globals().update(_KERNELS)
