"""The collective suite: a sum all-reduce across the GPUs of one host, through NCCL.

Shapes come from ``collective.toml``, whose ``[suite] gpus = 2`` makes the planner
send a run of this suite to a worker pinned to two cards (``gpu.<class>.x2``). The
case works on every GPU this process sees (``torch.cuda.device_count()``, at least
one): a worker pinned to two cards reduces over two, a single-GPU machine over one
(NCCL still runs; the "collective" is a copy). ``ranks`` in the case parameters is
that count, taken when the suite is built, so results over different numbers of
GPUs never share a case id.

Inputs: ``x``, one tensor of ``numel`` elements per device (the case's device
first), the buffers the implementation reduces *in place*; ``src``, copies of the
original per-device values on the case's device, which nothing writes; ``out`` on
the case's device. The implementation (``all_reduce(x, out)``, the built-in one in
``triton_kernels/collective.py``) must leave the sum in ``out``. The reference is the
sum of ``src`` in the reference precision on the case's device. Timed calls reduce
the same buffers again and again: their values grow (and may saturate to ±inf,
never NaN: every device holds the same values after the first call), which does not
change what NCCL does or how long it takes.

Throughput convention: ``bytes`` is the size of one rank's tensor (``numel`` ×
element size), so the recorded GB/s is nccl-tests' *algorithm bandwidth*; the bus
bandwidth is that × 2(k−1)/k for k ranks (not recorded). ``flops`` counts the
(k−1)·numel additions. Percent of peak compares against the HBM copy ceiling and
means little for a collective.

Cases are tagged ``cuda_graph: False``: NCCL across devices from one process is not
captured in a CUDA graph here, so the runner times every call by events
(``runner.run_case``).
"""

from __future__ import annotations

from typing import Any

import torch

from kernelwatch.kernels import grid
from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites.common import dtype_of, randn

Params = dict[str, Any]


def build(size: str, device: torch.device) -> list[CaseSpec]:
    ranks = len(devices_for(device)) if device.type == "cuda" else 1
    return [make_case(p, ranks) for p in grid.builtin("collective").cases(size)]


def devices_for(device: torch.device) -> list[torch.device]:
    """The devices a case reduces over: the case's device first, then every other GPU."""
    if device.type != "cuda":
        return [device]
    first = device.index if device.index is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    return [torch.device("cuda", first)] + [
        torch.device("cuda", i) for i in range(count) if i != first
    ]


def make_case(raw: Params, ranks: int) -> CaseSpec:
    p = dict(raw)
    kernel = str(p.pop("kernel"))
    if kernel != "all_reduce":
        raise ValueError(f"collective suite has no kernel {kernel!r}")
    numel = int(p["numel"])
    dtype = dtype_of(str(p["dtype"]))
    params = {**p, "ranks": ranks}

    def make(g: torch.Generator, dev: torch.device) -> Inputs:
        devices = devices_for(dev)
        src = [randn((numel,), g, dev, dtype) for _ in devices]
        x = [s.to(d, copy=True) for s, d in zip(src, devices, strict=True)]
        return {"x": x, "src": src, "out": torch.empty((numel,), device=dev, dtype=dtype)}

    def ref(i: Inputs, dt: torch.dtype) -> torch.Tensor:
        parts: list[torch.Tensor] = i["src"]
        acc = parts[0].to(dt)
        for t in parts[1:]:
            acc = acc + t.to(dt)
        return acc

    element = torch.empty((), dtype=dtype).element_size()
    return CaseSpec(
        kernel,
        params,
        make,
        lambda fn, i: fn(i["x"], i["out"]),
        ref,
        dtype,
        flops=float((ranks - 1) * numel),
        bytes=float(numel * element),
        tags={"cuda_graph": False},
    )
