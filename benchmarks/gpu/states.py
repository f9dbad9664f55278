"""``states``: why a short kernel's time depends on the process (issue 13).

On the H200 (2026-12-01) the 12 µs GEMM's A/A group ratios clustered at 0.74, 1.00 and
1.35 per process pair: each process sits in one of two states about 35 % apart. This
sub-command starts ``--procs`` fresh processes one after the other, each measuring
the named kernels of ``benchmarks/measurement.py`` the way a paired side does (CUDA
graph blocks over rotating input copies, ``kernels/timing.py``), and records beside
each process's median what could decide its state:

- the kernels that ran (``torch.profiler``): a heuristic that picks another cuBLAS
  algorithm per process would show as another kernel name;
- the inputs' device addresses (mod 2 MiB and the 2 MiB page), and the placement
  that padding allocations give them;
- the CPU the process ran on, its allowed set and its NUMA node;
- the SM clock seen during the blocks.

Then a few processes measure with ``--placements`` instances each, to see whether the
state belongs to the process (all instances alike) or to the allocation.
The table prints each kernel's process medians sorted, with the names and addresses
beside, so two clusters and what separates them read off directly.

    python -m benchmarks.gpu states --kernel "GEMM 64x" --procs 16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "states"
VARIANTS = ("plain", "spin")
HELP = "per-process states of short kernels: medians beside kernel names and addresses"

# One process: measure, profile, report as one JSON line (stdout).
_CHILD = r"""
import json, os, sys, importlib, statistics, time
import torch
from kernelwatch.kernels.timing import TimerConfig, measure
spec = json.loads(sys.argv[1]); placements = int(sys.argv[2])
turn = sys.argv[3] if len(sys.argv) > 3 else ""  # live mode: measure only holding this lock
live = int(sys.argv[4]) if len(sys.argv) > 4 else 0  # live mode: processes to wait for
import random
from benchmarks.turns import gpu_turn  # the child runs from the repository root
mod, fn = spec["factory"].split(":")
factory = getattr(importlib.import_module(mod), fn)
out = {"pid": os.getpid(), "cpu": None, "affinity": sorted(os.sched_getaffinity(0))[:64]}
try:
    out["cpu"] = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36])
except Exception as exc:
    out["cpu_error"] = str(exc)
rows = []
pads = []
cuda = torch.cuda.is_available()
dev = "cuda" if cuda else "cpu"
sync = torch.cuda.synchronize if cuda else (lambda: None)
for p in range(placements):
    if p:
        size = int(torch.randint(1, 64, (1,))) * 2**20
        pads.append(torch.empty(size, dtype=torch.uint8, device=dev))
    call, inputs = factory(**spec["params"])
    ptrs = [t.data_ptr() for t in (inputs if isinstance(inputs, (tuple, list)) else [inputs])
            if isinstance(t, torch.Tensor)]
    call(inputs); sync()
    if live:  # every process set up before anyone measures, as a paired trial's sides
        import glob
        open(f"{turn}.ready-{os.getpid()}", "w").close()
        t_end = time.time() + 120
        while len(glob.glob(f"{turn}.ready-*")) < live and time.time() < t_end:
            time.sleep(0.05)
    med = []
    for _ in range(3):
        if turn:
            time.sleep(random.random() * 0.2)  # let the others' turns interleave with ours
        with gpu_turn(turn):
            t = measure(call, inputs, TimerConfig(budget_s=0.4))
        med.append(t.timing.median)
        out.setdefault("graph", t.telemetry.get("cuda_graph"))
        out.setdefault("sm_mhz", t.telemetry.get("sm_clock_mhz") or t.telemetry.get("clocks"))
    rows.append({"placement": p, "median_us": [m * 1e6 for m in med],
                 "ptr_mod_2m": [x % 2**21 for x in ptrs], "ptr_page_2m": [x >> 21 for x in ptrs]})
from torch.profiler import profile, ProfilerActivity
activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
with gpu_turn(turn), profile(activities=[activity]) as prof:
    for _ in range(5):
        call(inputs)
    sync()
names = sorted({e.name for e in prof.events() if e.device_type.name == ("CUDA" if cuda else "CPU")})
out.update(rows=rows, kernels=names[:8])
print("KWSTATE " + json.dumps(out))
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", action="append", help="kernels whose name contains this")
    p.add_argument("--procs", type=int, default=16, help="fresh processes per kernel")
    p.add_argument("--placements", type=int, default=4, help="instances in the last procs")
    p.add_argument("--placement-procs", type=int, default=4, help="procs with placements")
    p.add_argument(
        "--live",
        type=int,
        default=0,
        help="also N processes alive at once, measuring in turn (as a paired trial's sides)",
    )
    p.add_argument(
        "--variant",
        action="append",
        choices=VARIANTS,
        help="which variants, in this order (default: plain, then spin)",
    )


def _one(ctx: host.Context, label: str, spec: dict[str, Any], i: int, k: int) -> dict[str, Any]:
    argv = [sys.executable, "-c", _CHILD, json.dumps(spec), str(k)]
    step = ctx.run(f"states-{label}-{i}", argv, 60, reserve=15)
    log = Path(step.log)
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        if line.startswith("KWSTATE "):
            return {"proc": i, "placements": k, **json.loads(line[8:])}
    return {"proc": i, "placements": k, "error": f"rc {step.rc}", "tail": step.tail}


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    from benchmarks import measurement

    specs = measurement.CPU_PAIRED_KERNELS if ctx.cpu else measurement.PAIRED_KERNELS
    picked = {n: s for n, s in specs.items() if not args.kernel or any(k in n for k in args.kernel)}
    result: dict[str, Any] = {}
    table = [f"{'kernel':<30}{'proc':>5}{'k':>3}{'median us':>11}  cpu  ptr%2M  kernels"]
    extras = {"plain": {}, "spin": {} if ctx.cpu else {"extra_iters": 0}}
    variants = [
        (f"{n} {v}", {"factory": s["factory"], "params": {**s["params"], **extras[v]}})
        for n, s in picked.items()
        # plain, and followed by the base spin as the paired trials' A/A sides run it
        for v in dict.fromkeys(args.variant or VARIANTS)
    ]
    for j, (name, spec) in enumerate(variants):
        if args.live and ctx.left() > 60:
            result[f"{name} live"] = procs = _live(ctx, str(j), spec, args.live)
            _rows(table, f"{name} live", procs)
        procs = []
        for i in range(args.procs + args.placement_procs):
            if ctx.left() < 25:
                break
            k = args.placements if i >= args.procs else 1
            procs.append(_one(ctx, str(j), spec, i, k))
        result[name] = procs
        _rows(table, name, procs)
    return result, table


def _live(ctx: host.Context, label: str, spec: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """``n`` processes started together; each measures three times, one at a time."""
    import subprocess

    lock = ctx.logs / f"states-turn-{label}.lock"
    logs = [ctx.logs / f"states-live-{label}-{i}.log" for i in range(n)]
    argv = [sys.executable, "-c", _CHILD, json.dumps(spec), "1", str(lock), str(n)]
    procs = []
    for log in logs:
        with open(log, "w") as fh:
            procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=host.ROOT))
    out: list[dict[str, Any]] = []
    for i, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        try:
            proc.wait(timeout=max(5.0, ctx.left() - 20))
        except subprocess.TimeoutExpired:
            proc.kill()
        found = [
            ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("KWSTATE ")
        ]
        row = json.loads(found[0][8:]) if found else {"error": f"rc {proc.returncode}"}
        out.append({"proc": i, "placements": 1, **row})
    return out


def _rows(table: list[str], name: str, procs: list[dict[str, Any]]) -> None:
    for p in sorted(procs, key=lambda p: _median(p) or 0):
        med = _median(p)
        ptr = (p.get("rows") or [{}])[0].get("ptr_mod_2m", [])
        table.append(
            f"{name[:30]:<30}{p['proc']:>5}{p['placements']:>3}"
            f"{(f'{med:.2f}' if med else '-'):>11}  {p.get('cpu')!s:>3}  "
            f"{','.join(str(x // 1024) for x in ptr[:3]):<14} "
            f"{' | '.join(n[:40] for n in p.get('kernels', [])[:2])}"
        )


def _median(p: dict[str, Any]) -> float | None:
    meds = [m for r in p.get("rows", []) for m in r["median_us"]]
    return statistics.median(meds) if meds else None
