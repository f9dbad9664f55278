"""How trustworthy is the timer? Run on a GPU; writes JSON and prints tables.

Part 1 (``--part cv``): run-to-run CV of the median over 10 independent
measurements, kernelwatch's timer against ``triton.testing.do_bench`` in the
same run (methods and kernels interleaved), and the GPU time each spent.

Part 2 (``--part paired``): the gate's paired mode across two processes with
cold L2: A/A false alarms and detection of injected +0.5/+1/+2 % slowdowns
(extra work of known size: a compute-only spin of calibrated length after the
kernel, both sides launching it, or extra dependent FMAs inside a launch-bound
kernel), 20+ trials each.

    python benchmarks/measurement.py --part all --out measurement.json

The GPU driver runs both parts as ``python -m benchmarks.gpu measure`` and
``python -m benchmarks.gpu paired`` (``benchmarks/gpu/``), with deadlines and a
CPU mode; this module holds the kernels and the protocol they share.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import benchcases, measurement_cases
from kernelwatch.kernels import spin
from kernelwatch.kernels.paired import PairedConfig, Side, compare
from kernelwatch.kernels.telemetry import Telemetry
from kernelwatch.kernels.timing import TimerConfig, measure
from kernelwatch.kernels.verdict import MIN_EFFECT, CaseVerdict

CV_KERNELS: dict[str, tuple[Any, dict[str, Any]]] = {
    "bf16 GEMM 8192^3": (benchcases.gemm, {"m": 8192, "n": 8192, "k": 8192}),
    "bf16 GEMM 2048^3": (benchcases.gemm, {"m": 2048, "n": 2048, "k": 2048}),
    "fp32 add 64M": (benchcases.add, {"numel": 64 * 2**20}),
    "fp32 add 64K (launch-bound)": (benchcases.add, {"numel": 64 * 2**10}),
    "FlashInfer decode 8K tokens": (measurement_cases.flashinfer_decode, {}),
    "SDPA prefill 4x32x4096 causal": (measurement_cases.sdpa_prefill, {}),
}

BENCHCASES = benchcases.__name__  # side processes import the factories by this name
PAIRED_KERNELS: dict[str, dict[str, Any]] = {
    "bf16 GEMM 4096^3": {
        "factory": f"{BENCHCASES}:gemm",
        "params": {"m": 4096, "n": 4096, "k": 4096},
        "inject": "spin",
        "min_effect": MIN_EFFECT,
    },
    # decode-shaped (m = 64, ~12 us on the H200): issue 13's short-kernel case
    "bf16 GEMM 64x4096x4096": {
        "factory": f"{BENCHCASES}:gemm",
        "params": {"m": 64, "n": 4096, "k": 4096},
        "inject": "spin",
        "min_effect": MIN_EFFECT,
    },
    "fp32 add 64M": {
        "factory": f"{BENCHCASES}:add",
        "params": {"numel": 64 * 2**20},
        "inject": "spin",
        "min_effect": MIN_EFFECT,
    },
    "add 64K launch-bound": {
        "factory": f"{BENCHCASES}:add_launch",
        "params": {"numel": 65536},
        "inject": "fma",
        "min_effect": 0.005,
        # timed as CUDA graphs over rotating input copies: placement already varies
        "placements": 2,
    },
}
# The CPU mode of the driver: the protocol end to end on a 128^3 matmul; the injected
# work is extra rows of a second matmul (rows / n of a call), coarse but of known size.
CPU_PAIRED_KERNELS: dict[str, dict[str, Any]] = {
    "cpu matmul 128": {
        "factory": f"{BENCHCASES}:cpu_matmul",
        "params": {"n": 128},
        "inject": "rows",
        "min_effect": 0.02,
        "placements": 1,
    },
}


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else math.nan


def part_cv(
    repeats: int, budget: float, only: list[str] | None, deadline: float = math.inf
) -> list[dict[str, Any]]:
    import triton.testing

    cases = {}
    for name, (factory, params) in CV_KERNELS.items():
        if only and not any(o in name for o in only):
            continue
        try:
            cases[name] = factory(**params)
        except Exception as exc:  # e.g. FlashInfer missing: reported, not fatal
            print(f"skip {name}: {type(exc).__name__}: {exc}", flush=True)
    res: dict[str, dict[str, list[float]]] = {
        n: {
            "kw": [],
            "kw_s": [],
            "db": [],
            "db_s": [],
            "kw_graph": [],
            "kw_n": [],
            "ng": [],
            "ng_s": [],
        }
        for n in cases
    }
    for rep in range(repeats):
        if rep and time.perf_counter() > deadline:
            print(f"cv: deadline reached after {rep} repeats", flush=True)
            break
        for name, (call, inputs) in cases.items():
            t = time.perf_counter()
            m = measure(call, inputs, TimerConfig(budget_s=budget))
            res[name]["kw_s"].append(time.perf_counter() - t)
            res[name]["kw"].append(m.timing.median)
            res[name]["kw_graph"].append(float(m.timing.cuda_graph))
            res[name]["kw_n"].append(m.timing.n)
            if m.timing.cuda_graph:  # the same kernel without a graph, for the record
                t = time.perf_counter()
                m = measure(call, inputs, TimerConfig(budget_s=budget, cuda_graph=False))
                res[name]["ng_s"].append(time.perf_counter() - t)
                res[name]["ng"].append(m.timing.median)
            t = time.perf_counter()
            ms = triton.testing.do_bench(lambda c=call, i=inputs: c(i), return_mode="median")
            res[name]["db_s"].append(time.perf_counter() - t)
            res[name]["db"].append(ms / 1e3)
        print(f"cv repeat {rep + 1}/{repeats} done", flush=True)
    rows = []
    for name, r in res.items():
        rows.append(
            {
                "kernel": name,
                "kw_median_us": statistics.median(r["kw"]) * 1e6,
                "kw_cv": cv(r["kw"]),
                "kw_gpu_s": statistics.mean(r["kw_s"]),
                "kw_graph": bool(r["kw_graph"][0]),
                "kw_samples": statistics.median(r["kw_n"]),
                "db_median_us": statistics.median(r["db"]) * 1e6,
                "db_cv": cv(r["db"]),
                "db_gpu_s": statistics.mean(r["db_s"]),
                "kw_all": r["kw"],
                "db_all": r["db"],
            }
        )
    return rows


def _base_params(spec: dict[str, Any]) -> dict[str, Any]:
    """The baseline's parameters: with the common base spin when the candidate spins."""
    return {**spec["params"], "extra_iters": 0} if spec["inject"] == "spin" else spec["params"]


def _calibrate(name: str, spec: dict[str, Any], a: Side, b: Side) -> dict[str, Any]:
    """Per-call time of A (cold) and the extra work that adds 0.5/1/2 % of it."""
    d = a.ask({"cmd": "setup", "factory": spec["factory"], "params": _base_params(spec)})
    vals = a.ask({"cmd": "block", "samples": max(20, int(0.2 / max(d["sample_s"], 1e-6)))})
    t_call = statistics.median(vals["values"])
    out: dict[str, Any] = {"t_call_s": t_call}
    if spec["inject"] == "rows":
        n = out["n"] = int(spec["params"]["n"])
        out["extra"] = {p: {"extra_rows": max(1, round(p / 100 * n))} for p in (0.5, 1, 2)}
    elif spec["inject"] == "spin":
        per_iter = spin.seconds_per_iter()
        reading = Telemetry(0).read()
        out["spin_s_per_iter"] = per_iter
        # the spin's cycles are fixed, its seconds follow the clock: the GEMM runs
        # power-capped below the clock of this calibration, so record both
        out["spin_cal_mhz"] = reading.sm_mhz if reading else None
        out["load_mhz"] = vals.get("clock")
        out["extra"] = {p: {"extra_iters": round(p / 100 * t_call / per_iter)} for p in (0.5, 1, 2)}
    else:
        # slope of time per extra FMA, from a long paired comparison of EXTRA=64 vs 0
        probe = compare(
            a,
            b,
            spec["factory"],
            spec["params"],
            {**spec["params"], "extra_fma": 64},
            PairedConfig(budget_s=3, groups_min=20, min_effect=0.0, placements=2),
        )
        per_fma = (probe.ratio - 1) / 64
        out["per_fma"] = per_fma
        # not linear at this granularity: fixed counts, the measured ratio is the size
        out["extra"] = {0.5: {"extra_fma": 1}, 1: {"extra_fma": 3}, 2: {"extra_fma": 8}}
    return out


def _fresh_pairs(m: int, trial: int) -> tuple[list[Side], list[Side]]:
    """m new baseline and m new candidate processes (all started at once)."""
    return [Side(f"A{trial}.{i}") for i in range(m)], [Side(f"B{trial}.{i}") for i in range(m)]


def _nominal_pct(cal: dict[str, Any], extra: dict[str, Any]) -> float | None:
    """The injected work as % of a call, from the spin's measured slope (None: FMAs)."""
    if "extra_rows" in extra:
        return 100.0 * float(extra["extra_rows"]) / float(cal["n"])
    if "extra_iters" not in extra:
        return 0.0 if not extra else None
    pct = 100 * extra["extra_iters"] * cal["spin_s_per_iter"] / cal["t_call_s"]
    if cal.get("spin_cal_mhz") and cal.get("load_mhz"):
        pct *= cal["spin_cal_mhz"] / cal["load_mhz"]  # the spin at the clock under load
    return float(pct)


def part_paired(
    trials: int,
    budget: float,
    only: list[str] | None,
    save: Any = None,
    swap: bool = False,
    pairs: int = 1,
    conditions: list[str] | None = None,
    deadline: float = math.inf,
    specs: dict[str, dict[str, Any]] | None = None,
    prestart: bool = True,
) -> list[dict[str, Any]]:
    """``prestart``: start the next trial's processes while this trial measures (saves
    their start-up time; ``--no-prestart`` tests whether their CUDA start-up disturbs the
    measurement, the lead for the 12 µs GEMM's states, docs/measurement.md §5)."""
    rows: list[dict[str, Any]] = []
    for name, spec in (PAIRED_KERNELS if specs is None else specs).items():
        if time.perf_counter() > deadline:
            print(f"{name}: not started, deadline reached", flush=True)
            continue
        if only and not any(o in name for o in only):
            continue
        a, b = Side("A"), Side("B")
        upcoming: tuple[list[Side], list[Side]] | None = None
        try:
            cal = _calibrate(name, spec, a, b)
            print(f"{name}: calibration {json.dumps(cal)}", flush=True)
            cfg = PairedConfig(
                min_effect=spec["min_effect"],
                budget_s=budget,
                # with m process pairs the process is the unit; placements nest inside
                placements=max(1, spec.get("placements", PairedConfig.placements) // pairs),
            )
            base = _base_params(spec)
            conds: dict[str, dict[str, Any]] = {"A/A": {}}
            conds.update({f"+{p}%": cal["extra"][p] for p in (0.5, 1, 2)})
            if conditions:  # in the order asked: the first set-up of a trial's
                # processes may differ from the second (docs/measurement.md §5)
                conds = {c: conds[c] for c in dict.fromkeys(conditions) if c in conds}
            trial_log: dict[str, list[dict[str, Any]]] = {c: [] for c in conds}
            upcoming = _fresh_pairs(pairs, 0) if pairs > 1 and prestart else None
            for t in range(trials):
                if time.perf_counter() > deadline:  # report the trials done, not nothing
                    print(f"{name}: deadline reached after {t} trials", flush=True)
                    break
                # --pairs m: m fresh process pairs per trial (shared by its conditions),
                # the gate's remedy for offsets that belong to a process (run 8); the
                # next trial's processes start (import torch) while this one measures
                fresh = upcoming if prestart else _fresh_pairs(pairs, t) if pairs > 1 else None
                ahead = prestart and pairs > 1 and t + 1 < trials
                upcoming = _fresh_pairs(pairs, t + 1) if ahead else None
                try:
                    for cond, extra in conds.items():
                        s = time.perf_counter()
                        # --swap-roles: odd trials give the baseline to process B, so an
                        # offset that belongs to a process flips sign and one that belongs
                        # to the condition does not (docs/measurement.md, runs 5-6, 8)
                        first, second = (b, a) if swap and t % 2 else (a, b)
                        roles = "BA" if first is b else "AB"
                        sides: tuple[Any, Any] = fresh or (first, second)
                        r = compare(*sides, spec["factory"], base, {**base, **extra}, cfg)
                        trial_log[cond].append(
                            {**r.to_dict(), "wall_s": time.perf_counter() - s, "roles": roles}
                        )
                finally:
                    for side in (fresh[0] + fresh[1]) if fresh else []:
                        side.close()
                print(f"{name}: trial {t + 1}/{trials}", flush=True)
            for cond, log in trial_log.items():
                if not log:  # the deadline came first
                    continue
                flagged = sum(r["verdict"] == CaseVerdict.REGRESSION for r in log)
                alarms = (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT)
                any_alarm = sum(r["verdict"] in alarms for r in log)
                rows.append(
                    {
                        "kernel": name,
                        "condition": cond,
                        "trials": len(log),
                        "flagged": flagged,
                        "alarms": any_alarm,
                        "ci_excludes_1": sum(r["ci_low"] > 1 or r["ci_high"] < 1 for r in log),
                        "mean_ratio": statistics.mean(r["ratio"] for r in log),
                        "sd_ratio": (
                            statistics.stdev(r["ratio"] for r in log) if len(log) > 1 else math.nan
                        ),
                        "mean_blocks_s": statistics.mean(r["seconds"] for r in log),
                        "max_blocks_s": max(r["seconds"] for r in log),
                        "mean_wall_s": statistics.mean(r["wall_s"] for r in log),
                        "mean_groups": statistics.mean(r["groups"] for r in log),
                        "verdicts": {
                            v: sum(r["verdict"] == v for r in log)
                            for v in (
                                CaseVerdict.REGRESSION,
                                CaseVerdict.IMPROVEMENT,
                                CaseVerdict.UNCHANGED,
                                CaseVerdict.INCONCLUSIVE,
                            )  # fmt: skip
                        },
                        "calibration": {k: v for k, v in cal.items() if k != "extra"},
                        "extra": conds[cond],
                        "nominal_pct": _nominal_pct(cal, conds[cond]),
                        "min_effect": spec["min_effect"],
                        "ratios": [r["ratio"] for r in log],
                        "roles": [r["roles"] for r in log],
                        # per trial: group ratios with their placements, so offsets can be
                        # attributed to placements or processes afterwards
                        "groups": [
                            {
                                k: r[k]
                                for k in ("group_ratios", "placements", "pairs", "roles", "clocks")
                            }
                            for r in log
                        ],
                        "mean_ratio_by_roles": {
                            k: statistics.mean(r["ratio"] for r in log if r["roles"] == k)
                            for k in ("AB", "BA")
                            if any(r["roles"] == k for r in log)
                        },
                    }
                )
        finally:
            # the next trial's processes, started early, when the loop ended first
            for side in [a, b, *(upcoming[0] + upcoming[1] if upcoming else [])]:
                side.close()
        if save is not None:
            save(rows)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["cv", "paired", "all"], default="all")
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--budget", type=float, default=2.0, help="kernelwatch seconds per case")
    p.add_argument("--paired-budget", type=float, default=3.0)
    p.add_argument("--only", action="append")
    p.add_argument(
        "--swap-roles",
        action="store_true",
        help="baseline in process B on odd trials (does an offset follow the process?)",
    )
    p.add_argument("--pairs", type=int, default=1, help="fresh process pairs per trial")
    p.add_argument("--deadline-s", type=float, default=math.inf, help="no new trial after")
    p.add_argument("--condition", action="append", help="only these (A/A, +0.5%%, +1%%, +2%%)")
    args = p.parse_args()
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    path = Path(args.out)

    def save_paired(rows: list[dict[str, Any]]) -> None:
        out["paired"] = rows
        path.write_text(json.dumps(out, indent=1))

    if args.part in ("paired", "all"):
        out["paired"] = part_paired(
            args.trials,
            args.paired_budget,
            args.only,
            save_paired,
            args.swap_roles,
            args.pairs,
            args.condition,
            time.perf_counter() + args.deadline_s,
        )
        out["pairs"] = args.pairs
        path.write_text(json.dumps(out, indent=1))
        print(
            f"\n{'kernel':<24}{'cond':<8}{'nominal':>8}{'flag':>6}{'alarm':>6}{'ratio':>9}{'sd':>8}"
            f"{'blocks s':>9}{'wall s':>8}"
        )
        for r in out["paired"]:
            print(
                f"{r['kernel']:<24}{r['condition']:<8}"
                f"{'' if r['nominal_pct'] is None else format(r['nominal_pct'], '.2f') + '%':>8}"
                f"{r['flagged']:>3}/{r['trials']:<2}"
                f"{r['alarms']:>6}{r['mean_ratio']:>9.4f}{r['sd_ratio'] * 100:>7.3f}%"
                f"{r['mean_blocks_s']:>9.2f}{r['mean_wall_s']:>8.2f}"
                + "".join(f"  {k} {v:.4f}" for k, v in r["mean_ratio_by_roles"].items())
            )
    if args.part in ("cv", "all"):
        out["cv"] = part_cv(args.repeats, args.budget, args.only)
        path.write_text(json.dumps(out, indent=1))
        print(
            f"\n{'kernel':<32}{'kw med':>10}{'kw CV':>8}{'kw s':>7}{'do_bench':>10}"
            f"{'db CV':>8}{'db s':>7}{'ratio':>7}"
        )
        for r in out["cv"]:
            print(
                f"{r['kernel']:<32}{r['kw_median_us']:>9.1f}u{r['kw_cv'] * 100:>7.2f}%"
                f"{r['kw_gpu_s']:>7.2f}{r['db_median_us']:>9.1f}u{r['db_cv'] * 100:>7.2f}%"
                f"{r['db_gpu_s']:>7.2f}{r['db_cv'] / max(r['kw_cv'], 1e-9):>7.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
