"""out = x + y, with EXTRA dependent FMAs per element: launch-bound work of tunable size."""

import triton
import triton.language as tl


@triton.jit
def busy_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, EXTRA: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    acc = x + y
    for _ in tl.static_range(EXTRA):
        acc = acc * 1.0000001 + 1e-7
    tl.store(out_ptr + offs, acc, mask=mask)
