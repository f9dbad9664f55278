"""A compute-only spin of a runtime number of dependent FMAs on one warp.

Why not ``torch.cuda._sleep``: it is a private API, and on the H200 our uses of it
gave effects that did not match its argument (docs/measurement.md). This kernel's
duration is ``iters`` x a fixed number of SM cycles (one dependent FMA chain, no
memory traffic but one 128-byte store), so it scales with the clock exactly like
the compute it stands in for, and it leaves the L2 as it found it.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["iters"])
def spin_kernel(out_ptr, iters, a, b):
    offs = tl.arange(0, 32)
    acc = offs.to(tl.float32)
    for _ in range(iters):
        acc = acc * a + b
    tl.store(out_ptr + offs, acc)
