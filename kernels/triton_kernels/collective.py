"""all_reduce: a sum over the GPUs of one host, single process, through NCCL.

Not a Triton kernel: the built-in implementation of the ``collective`` suite
(``kernels/suites/collective.py``), calling PyTorch's single-process multi-GPU
NCCL binding. Without CUDA tensors or without NCCL it raises ``Unavailable``, so
the runner records a skip, not an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelwatch.kernels.adapters import Unavailable


def all_reduce(x: Sequence[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` (one tensor per device) in place with NCCL; ``out`` gets device 0's sum."""
    tensors = list(x)
    if not tensors or any(t.device.type != "cuda" for t in tensors):
        where = ", ".join(sorted({str(t.device) for t in tensors})) or "no tensors"
        raise Unavailable(f"all_reduce needs CUDA tensors for NCCL; this case runs on {where}")
    from torch.cuda import nccl

    if not nccl.is_available(tensors):
        raise Unavailable(
            "NCCL is not available for these tensors (torch built without NCCL, or "
            "tensors not dense, contiguous and on distinct GPUs)"
        )
    nccl.all_reduce(tensors)
    out.copy_(tensors[0])
    return out
