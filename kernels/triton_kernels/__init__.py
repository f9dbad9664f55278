"""kernelwatch's own Triton kernels: the built-in implementations of the first suite.

Each module is self-contained (imports only torch and triton) and exposes one
function with the suite's calling convention: inputs first, then ``out``, which
the kernel must fill completely. ``kernelwatch demo`` copies these files into a
throwaway library repository, so they double as a realistic kernel library.
``collective.all_reduce`` is the exception: PyTorch's NCCL binding, no Triton, the
built-in implementation of the multi-GPU ``collective`` suite.
"""

from kernelwatch.kernels.triton_kernels.attention import attention
from kernelwatch.kernels.triton_kernels.collective import all_reduce
from kernelwatch.kernels.triton_kernels.matmul import matmul
from kernelwatch.kernels.triton_kernels.rmsnorm import rmsnorm
from kernelwatch.kernels.triton_kernels.softmax import softmax

__all__ = ["all_reduce", "attention", "matmul", "rmsnorm", "softmax"]
