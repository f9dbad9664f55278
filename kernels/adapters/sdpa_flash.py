"""Implementation module ``sdpa_flash``: torch SDPA pinned to FLASH_ATTENTION.

FLASH_ATTENTION: FlashAttention-2 kernels inside PyTorch.

One module per backend because ``kernelwatch bench --impl`` names a module and
every backend must be its own series; the adapter code is in ``sdpa.py``.
"""

from torch.nn.attention import SDPBackend

from kernelwatch.kernels.adapters.sdpa import bind

# prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla
_KERNELS = bind(SDPBackend.FLASH_ATTENTION)
__all__ = list(_KERNELS)
globals().update(_KERNELS)
