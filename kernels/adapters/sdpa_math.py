"""Implementation module ``sdpa_math``: torch SDPA pinned to MATH.

MATH: the unfused reference composition, which also runs on the CPU.

One module per backend because ``kernelwatch bench --impl`` names a module and
every backend must be its own series; the adapter code is in ``sdpa.py``.
"""

from torch.nn.attention import SDPBackend

from kernelwatch.kernels.adapters.sdpa import bind

# prefill, prefill_varlen, prefill_paged, prefill_fp8, decode_paged, decode_mla
_KERNELS = bind(SDPBackend.MATH)
__all__ = list(_KERNELS)
globals().update(_KERNELS)
