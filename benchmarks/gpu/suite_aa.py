"""``suite-aa``: whole suites in paired mode against themselves (A/A).

``kernelwatch bench-paired`` (``kernels/paired_suite.py``, the merge gate's
measurement) with the same library on both sides, over the quick ``gemm`` suite
(torch: cuBLAS), ``decode`` (FlashInfer when a carried wheel or an install is
there, else SDPA's gather path, said so in the JSON), ``prefill`` (SDPA) and
``layers`` (Liger-Kernel's Triton kernels, from ``--liger DIR``: a folder holding
``liger_kernel``, default ``.src/liger/src``). Nothing changed, so every case
should end ``unchanged``: per suite and pass it counts cases per verdict, whether
a PR would have been blocked (a case ``regression``, ``less_accurate`` or
``broken``), and the GPU **wall** seconds per case (each record's ``gpu_s``: side
start-up it waited for, set-up, check, screen, blocks, re-measures) and per suite,
with the median breakdown (``paired.cost``) and what the screen did (sides set up
again, pairs left out). ``--passes N`` repeats the whole set. Options after ``--``
go to every ``bench-paired`` call.

    python -m benchmarks.gpu suite-aa --passes 3 --flashinfer 0.5.3 -- --pairs 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "suite-aa"
HELP = "whole-suite A/A with bench-paired: verdicts and GPU wall s per case"
ADAPTERS = "kernelwatch.kernels.adapters"
LIGER = host.SOURCES / "liger" / "src"
# the record's host_late_* counts: samples retaken, kept at the cap, groups left out
LATE_COUNTS = ("retaken", "kept", "groups")


def cost_keys() -> tuple[str, ...]:
    """The breakdown's keys, in the order a case spends them (PairedSection.cost); the
    check's parts come from kernelwatch, importable only once ``prelude`` has run."""
    from kernelwatch.kernels.runner import CHECK_PARTS

    return ("start_wait_s", "process_start_s", "cuda_context_s", "restart_s", "prewarm_s",
            "setup_s", "setup_warmup_s", "check_s", *CHECK_PARTS, "screen_s", "blocks_s",
            "confirmation_s")  # fmt: skip


def median_breakdown(costs: Sequence[Mapping[str, float]], keys: Sequence[str]) -> dict[str, float]:
    """Each part's median seconds over the cases' breakdowns (a record's ``cost``), a
    part a case did not reach counted as 0; empty for no cases. Shared with ``service``
    (an unpaired run's ``ResultRecord.cost``)."""
    if not costs:
        return {}
    return {k: statistics.median([float(c.get(k, 0.0)) for c in costs]) for k in keys}


def breakdown_text(medians: Mapping[str, float]) -> str:
    """``check_call 1.20  blocks 0.33``: a breakdown's seconds by part, ``_s`` dropped."""
    return "  ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in medians.items())


@dataclass(frozen=True)
class SuiteRun:
    """One suite's bench-paired call: which adapter, which kernels, which path."""

    suite: str
    impl: str
    backend: str
    library: dict[str, Any]
    path: str = ""
    kernels: tuple[str, ...] = ()
    note: str = ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", action="append", choices=("gemm", "decode", "prefill", "layers"))
    p.add_argument("--liger", type=Path, default=LIGER, help="folder holding liger_kernel")
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--size", default=None, help="default quick (CPU: smoke)")
    p.add_argument("--flashinfer", metavar="VERSION", help="carried FlashInfer for decode")
    p.add_argument("--suite-timeout", type=float, default=300, help="seconds per suite call")
    p.add_argument("bench_args", nargs="*", help="after --: more bench-paired options")


def _plan(ctx: host.Context, args: argparse.Namespace) -> list[SuiteRun]:
    import torch

    torch_lib = {"name": "torch", "version": torch.__version__}
    wanted = args.suite or ["gemm", "decode", "prefill"]
    runs: list[SuiteRun] = []
    if "gemm" in wanted:
        # the CPU has no FP8/grouped GEMMs worth timing: the plain GEMMs prove the plumbing
        kernels = ("gemm",) if ctx.cpu else ()
        runs.append(SuiteRun("gemm", f"{ADAPTERS}.gemm", "torch", torch_lib, kernels=kernels))
    if "decode" in wanted:
        path, why = (None, "CPU mode") if ctx.cpu else host.flashinfer(ctx, args.flashinfer)
        if path is not None:
            version = why.split()[1] if why.startswith("flashinfer ") else "installed"
            lib = {"name": "flashinfer-python", "version": version}
            runs.append(SuiteRun("decode", f"{ADAPTERS}.flashinfer", "flashinfer", lib, path))
        else:
            note = f"no FlashInfer: {why}"
            runs.append(SuiteRun("decode", f"{ADAPTERS}.sdpa", "sdpa", torch_lib, note=note))
    if "prefill" in wanted:
        kernels = ("prefill",) if ctx.cpu else ()
        runs.append(SuiteRun("prefill", f"{ADAPTERS}.sdpa", "sdpa", torch_lib, kernels=kernels))
    if "layers" in wanted:
        liger: Path = args.liger
        lib = {"name": "liger-kernel", "version": "source"}
        if (liger / "liger_kernel").is_dir():
            runs.append(SuiteRun("layers", f"{ADAPTERS}.liger", "liger", lib, str(liger)))
        else:
            note = f"no liger_kernel in {liger}: skipped"
            runs.append(SuiteRun("layers", f"{ADAPTERS}.liger", "liger", lib, note=note,
                                 kernels=("none",)))  # fmt: skip
    return runs


def _summarise(records: list[dict[str, Any]], arrivals: list[float]) -> dict[str, Any]:
    from kernelwatch.kernels.verdict import BLOCKING

    verdicts: dict[str, int] = {}
    cases: list[dict[str, Any]] = []
    last = 0.0
    for i, r in enumerate(records):
        paired = r.get("paired") or {}
        verdict = paired.get("verdict") or r.get("status")
        verdicts[str(verdict)] = verdicts.get(str(verdict), 0) + 1
        at = arrivals[i] if i < len(arrivals) else last
        stage1 = paired.get("stage1") or {}
        cases.append(
            {
                "kernel": r.get("kernel"),
                "case_id": r.get("case_id"),
                "label": r.get("label"),
                "params": r.get("params"),
                "status": r.get("status"),
                "verdict": verdict,
                "ratio": paired.get("ratio"),
                "ci": [paired.get("ci_low"), paired.get("ci_high")],
                "median_s": paired.get("baseline_median"),
                "blocks_s": paired.get("seconds"),
                "attempts": paired.get("attempts"),
                # the record's own price, else the time between records
                "wall_s": round(paired.get("gpu_s") or (at - last), 2),
                "cost": paired.get("cost") or {},
                "resetups": stage1.get("resetups", 0),
                "respawns": stage1.get("respawns", 0),
                "excluded_pairs": stage1.get("excluded_pairs", 0),
                # timed samples whose host queued the call late (timing.HostGuard)
                # and the groups left out of the verdict for the kept ones
                "host_late": [stage1.get(f"host_late_{k}", 0) for k in LATE_COUNTS],
                "screen": stage1.get("screen", []),
                "group_ratios": paired.get("group_ratios", []),
                "group_pairs": paired.get("group_pairs", []),
                "error": (r.get("error") or "")[:300],
            }
        )
        last = at
    blocked = [c for c in cases if c["verdict"] in {str(v) for v in BLOCKING}]
    passed = [c for c in cases if c["status"] == "pass"]
    walls = [c["wall_s"] for c in passed]
    medians = median_breakdown([c["cost"] for c in passed], cost_keys())
    breakdown = {key: round(v, 3) for key, v in medians.items()}
    return {
        "verdicts": verdicts,
        "blocked": bool(blocked),
        "blocking_cases": blocked,
        "blocks_s": sum(c["blocks_s"] or 0 for c in cases),
        "cases_wall_s": sum(c["wall_s"] for c in cases),
        "wall_s_per_case_median": statistics.median(walls) if walls else None,
        "cost_median": breakdown,
        "resetups": sum(c["resetups"] for c in cases),
        "respawns": sum(c["respawns"] for c in cases),
        "excluded_pairs": sum(c["excluded_pairs"] for c in cases),
        "cases": cases,
    }


# what a case pays for its pool coming up (PairedSection.cost): each suite's first case
def pool_start_s(cost: dict[str, float]) -> float:
    """What a case paid for its pool's start: ``start_wait_s``, the wall time it waited.

    ``process_start_s`` and ``cuda_context_s`` say where that wait went (the slowest
    side's interpreter and imports, its CUDA context) and lie inside it; the price
    summed all three until 2026-12-03 and so counted each start twice. Records with
    no ``start_wait_s`` give their parts.
    """
    if "start_wait_s" in cost:
        return cost["start_wait_s"]
    return cost.get("process_start_s", 0.0) + cost.get("cuda_context_s", 0.0)


def pr_price(suites: list[dict[str, Any]], cases: int = 200) -> dict[str, float] | None:
    """A PR of ``cases`` cases of one library, priced from one pass of this A/A.

    The A/A starts a pool per suite (a library each); a PR's run starts one. So each
    suite's first measured case gives back its pool's start, the mean over every
    measured case is taken on what is left (re-measures, confirmations and restarts
    in the middle of a suite stay in), and one pool start (the median) is added.
    """
    walls: list[float] = []
    starts: list[float] = []
    for suite in suites:
        measured = [c for c in suite["cases"] if c["status"] == "pass"]
        for i, case in enumerate(measured):
            start = pool_start_s(case["cost"]) if i == 0 else 0.0
            if i == 0:
                starts.append(start)
            walls.append(case["wall_s"] - start)
    if not walls:
        return None
    mean, start = statistics.fmean(walls), statistics.median(starts)
    return {"mean_s": mean, "pool_start_s": start, "minutes": (cases * mean + start) / 60}


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    size = args.size or ("smoke" if ctx.cpu else "quick")
    extra = [a for a in args.bench_args if a != "--"]
    if ctx.cpu and "--budget" not in extra:
        extra += ["--budget", "0.3", "--retries", "0"]
    plan = _plan(ctx, args)
    results: list[dict[str, Any]] = []
    for n in range(args.passes):
        for s in plan:
            label = f"{s.suite}-{s.backend}-pass{n + 1}"
            out = ctx.logs / f"{label}.jsonl"
            argv = [sys.executable, "-m", "kernelwatch.kernels.paired_suite"]
            argv += ["--baseline-path", s.path, "--candidate-path", s.path, "--suite", s.suite]
            argv += ["--impl", s.impl, "--backend", s.backend, "--size", size, "--out", str(out)]
            lib = json.dumps(s.library)
            argv += ["--library", lib, "--baseline-library", lib]
            for k in s.kernels:
                argv += ["--kernel", k]
            step = ctx.run(label, [*argv, *extra], args.suite_timeout, reserve=5, watch=out)
            summary = _summarise(host.read_jsonl(out), step.arrivals)
            results.append(
                {
                    "pass": n + 1,
                    "suite": s.suite,
                    "impl": s.impl,
                    "library": s.library,
                    "note": s.note,
                    "rc": step.rc,
                    "timed_out": step.timed_out,
                    "skipped": step.skipped,
                    **summary,
                    # the GPU's time on the suite; a timeout's unrecorded case lies in
                    # it and not in the recorded cases' walls (H100, 2026-12-06: 150 s
                    # held, 98 s recorded)
                    "wall_s": round(step.seconds, 2),
                    "unrecorded_s": round(max(0.0, step.seconds - summary["cases_wall_s"]), 2),
                }
            )
    table = [f"{'pass':<5}{'suite':<9}{'backend':<11}{'cases':>6}{'wall s':>8}{'s/case':>8}"
             f"{'blocks s':>9}  blocked  verdicts"]  # fmt: skip
    for r in results:
        per = r["wall_s_per_case_median"]
        table.append(
            f"{r['pass']:<5}{r['suite']:<9}{r['impl'].rsplit('.', 1)[-1]:<11}"
            f"{len(r['cases']):>6}{r['wall_s']:>8.1f}{'' if per is None else f'{per:.1f}':>8}"
            f"{r['blocks_s']:>9.1f}  {'YES' if r['blocked'] else 'no':<7}  "
            + " ".join(f"{k} {v}" for k, v in sorted(r["verdicts"].items()))
            + (f"  ({r['skipped']})" if r["skipped"] else "")
            + (f" TIMED OUT ({r['unrecorded_s']:.0f} s in no record)" if r["timed_out"] else "")
            + (f" rc {r['rc']}: see logs/{NAME}/" if r["rc"] not in (0, None) else "")
        )
    blocked_passes = sum(
        any(r["blocked"] for r in results if r["pass"] == n + 1) for n in range(args.passes)
    )
    table.append(f"PRs that would be blocked: {blocked_passes} of {args.passes} passes")
    every = [c for r in results for c in r["cases"] if c["status"] == "pass"]
    if every:
        walls = sorted(c["wall_s"] for c in every)
        table.append(
            f"GPU wall per measured case: median {statistics.median(walls):.2f} s over "
            f"{len(walls)} cases (max {walls[-1]:.1f}); 200 cases at the median: "
            f"{200 * statistics.median(walls) / 60:.1f} min"
        )
        medians = median_breakdown([c["cost"] for c in every], cost_keys())
        table.append(f"median breakdown s: {breakdown_text(medians)}")
        table.append(
            f"screen: {sum(c['resetups'] for c in every)} sides set up again "
            f"({sum(c['respawns'] for c in every)} in a new process), "
            f"{sum(c['excluded_pairs'] for c in every)} pairs left out; samples the host "
            f"queued late: {sum(c['host_late'][0] for c in every)} retaken, "
            f"{sum(c['host_late'][1] for c in every)} kept at the spin's cap "
            f"({sum(c['host_late'][2] for c in every)} groups left out)"
        )
    for n in range(args.passes):
        price = pr_price([r for r in results if r["pass"] == n + 1])
        cut = sum(r["unrecorded_s"] for r in results if r["pass"] == n + 1 and r["timed_out"])
        if price is not None:
            table.append(
                f"pass {n + 1}: {price['mean_s']:.2f} s a case after its pool's start; a "
                f"200-case PR of one library (one start, {price['pool_start_s']:.1f} s): "
                f"{price['minutes']:.1f} min"
                + (f"; {cut:.0f} s of cases cut by a timeout are not in it" if cut else "")
            )
    doc = {"size": size, "bench_args": extra, "passes": args.passes, "suites": results}
    doc["blocked_passes"] = blocked_passes
    return doc, table
