"""Does our L2 flush evict, and is warm warm? Time a streaming op five ways.

warm (nothing before the start event: the launch gap is timed too), warm_busy (a
compute-only spin queued first, as the timer does), after a write flush, after a
read flush, after both.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from kernelwatch.kernels.spin import iters_for, spin

L2 = torch.cuda.get_device_properties(0).L2_cache_size
buf = torch.empty(2 * L2 // 4, dtype=torch.int32, device="cuda")


def timed(fn, flush, n: int = 200) -> float:  # type: ignore[no-untyped-def]
    ts = []
    for _ in range(n):
        if flush:
            flush()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


busy = iters_for(50e-6)
rows = []
for mb in (2, 8, 24, 64):
    x = torch.randn(mb * 2**20 // 4, device="cuda")
    y = torch.empty_like(x)
    fn = lambda x=x, y=y: torch.mul(x, 2, out=y)
    for _ in range(50):
        fn()
    row = {
        "mb": mb,
        "warm_us": timed(fn, None),
        "warm_busy_us": timed(fn, lambda: spin(busy)),
        "zero_flush_us": timed(fn, buf.zero_),
        "read_flush_us": timed(fn, lambda: buf.sum()),
        "write_read_flush_us": timed(fn, lambda: (buf.zero_(), buf.sum())),
    }
    rows.append(row)
    print(json.dumps(row), flush=True)
with open(sys.argv[1], "w") as fh:
    json.dump({"l2_bytes": L2, "rows": rows}, fh, indent=1)
