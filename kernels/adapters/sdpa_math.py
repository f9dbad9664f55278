"""Implementation module ``sdpa_math``: torch SDPA pinned to MATH.

MATH: the unfused reference composition, which also runs on the CPU.

One module per backend because ``kernelwatch bench --impl`` names a module and
every backend must be its own series; the adapter code is in ``sdpa.py``.
"""

from torch.nn.attention import SDPBackend

from kernelwatch.kernels.adapters.sdpa import bind

_KERNELS = bind(SDPBackend.MATH)
prefill = _KERNELS["prefill"]
prefill_varlen = _KERNELS["prefill_varlen"]
prefill_paged = _KERNELS["prefill_paged"]
prefill_fp8 = _KERNELS["prefill_fp8"]
decode_paged = _KERNELS["decode_paged"]
decode_mla = _KERNELS["decode_mla"]
