"""What the decode suite's correctness reference costs, one sequence at a time and batched.

A paired case checks its result once per role during set-up, and the reference is
on that path: on an H100 (2026-12-06, docs/measurement.md §26g) a warm decode
A/A pass spent 0.03-0.71 s a case in ``check_reference_s``, about a tenth of its
GPU wall. The reference then gathered and attended one sequence at a time, some
40 launches and two host copies a sequence and dtype, while the pool's other
sides set up on the same card. The suite now gathers a batch's pages in one go
(``common.gather_padded``, ``decode_attention_ref``, ``mla_ref``). This times both
forms of each decode case's two references (float32/float64 and the case's
dtype, as ``runner.checked_case`` computes them), alone and beside ``--beside``
processes that keep the GPU busy with small launches as set-ups do, and prints
the table. ``one_at_a_time`` is the slow form written out, the specification
the batched one is tested against (``tests/kernels/suites/test_decode_suite.py``).

    python -m benchmarks.reference_cost                       # CPU, smoke cases
    python -m benchmarks.reference_cost --size quick --beside 15   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.host_gap import burners
from kernelwatch.kernels.suite import CaseSpec, Inputs
from kernelwatch.kernels.suites import common, decode
from kernelwatch.kernels.suites.common import hi_dtype

# a side setting up: small kernels and a synchronize, over and over
BUSY = (
    "import torch\n"
    "x = torch.randn(512, 512, device='cuda')\n"
    "while True:\n"
    "    for _ in range(20): x = torch.tanh(x @ x * 1e-3)\n"
    "    torch.cuda.synchronize()\n"
)


def one_at_a_time(spec: CaseSpec, i: Inputs, dt: torch.dtype) -> torch.Tensor:
    """A decode case's reference the slow way: each sequence gathered and attended alone."""
    lens = [int(n) for n in i["kv_lens"]]
    outs = []
    for j, n in enumerate(lens):
        if spec.kernel == "decode_mla":
            c = common.gather_pages(i["ckv_cache"], i["pages"][j], n, "NHD").to(dt)
            k = common.gather_pages(i["kpe_cache"], i["pages"][j], n, "NHD").to(dt)
            qn, qp = i["q_nope"][j].to(dt), i["q_pe"][j].to(dt)
            probs = torch.softmax(((qn @ c.t() + qp @ k.t()) * i["scale"]).float(), dim=-1)
            outs.append((probs.to(dt) @ c)[None])
            continue
        kv = []
        for which in ("k", "v"):
            x = common.gather_pages(i[f"{which}_cache"], i["pages"][j], n, i["layout"])
            if x.dtype == common.FP8:
                x = x.to(torch.float32) * float(i[f"{which}_scale"])
            kv.append(x)
        outs.append(common.attention_ref(i["q"][j : j + 1], kv[0], kv[1], False, i["scale"], dt))
    return torch.cat(outs)


def _seconds(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median wall seconds of ``fn`` ended by a synchronize, after one unrecorded call."""
    times = []
    for r in range(reps + 1):
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if r:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def both_references(
    form: Callable[[CaseSpec, Inputs, torch.dtype], torch.Tensor],
    spec: CaseSpec,
    i: Inputs,
    hi: torch.dtype,
) -> list[torch.Tensor]:
    """The check's two references (``runner.checked_case``): high precision and the case's."""
    return [form(spec, i, hi), form(spec, i, spec.dtype)]


def measure_case(spec: CaseSpec, device: torch.device, reps: int) -> dict[str, Any]:
    gen = torch.Generator(device=device).manual_seed(1)
    inputs = spec.make_inputs(gen, device)
    hi = hi_dtype(device)
    batched = both_references(lambda s, i, dt: s.reference(i, dt), spec, inputs, hi)
    slow = both_references(one_at_a_time, spec, inputs, hi)
    pairs = zip(batched, slow, strict=True)
    diff = max(float((a.double() - b.double()).abs().max()) for a, b in pairs)
    t_slow = _seconds(lambda: both_references(one_at_a_time, spec, inputs, hi), device, reps)
    t_new = _seconds(
        lambda: both_references(lambda s, i, dt: s.reference(i, dt), spec, inputs, hi),
        device, reps,
    )  # fmt: skip
    lens = inputs["kv_lens"]
    shape = f"{min(lens)}-{max(lens)}" if min(lens) != max(lens) else f"{lens[0]}"
    kv = spec.params.get("kv_dtype", spec.params["dtype"])
    label = f"{spec.params.get('layout', 'mla')} p{inputs['page_size']} {kv} kv {shape}"
    return {"case": label, "kernel": spec.kernel, "batch": len(lens),
            "one_at_a_time_s": t_slow, "batched_s": t_new, "max_abs_diff": diff}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'case':<36}{'kernel':<14}{'beside':>7}{'batch':>6}{'one-at-a-time s':>17}"
             f"{'batched s':>11}{'faster':>8}{'max |diff|':>12}"]  # fmt: skip
    for r in rows:
        slow, new = r["one_at_a_time_s"], r["batched_s"]
        lines.append(
            f"{r['case']!s:<36}{r['kernel']!s:<14}{r['beside']!s:>7}{r['batch']!s:>6}"
            f"{slow:>17.4f}{new:>11.4f}{slow / new:>7.1f}x{r['max_abs_diff']:>12.2e}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="smoke", help="decode suite size (smoke, quick, ...)")
    p.add_argument("--beside", type=int, action="append", help="busy GPU processes (repeatable)")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loads = (args.beside or [0]) if device.type == "cuda" else [0]
    specs = decode.build(args.size, device)
    rows: list[dict[str, Any]] = []
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    for n in loads:
        with burners(n, BUSY, settle_s=8.0):  # their CUDA contexts up and launching
            for spec in specs:
                row = {**measure_case(spec, device, args.reps), "beside": n, "device": name}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
