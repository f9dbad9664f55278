"""``inject``: the gate's power on real suite cases: +x % of work, measured by bench-paired.

For each target (a suite case of a real library: a thin GEMM, FlashInfer decode,
SDPA prefill, a Liger-Kernel norm, a large GEMM) ``kernelwatch bench-paired`` runs
with ``--repeat N`` (N trials, new inputs each) in the merge gate's full protocol
(pool of side processes, screen, re-measures, the fresh-process confirmation):
the baseline is the library itself, the candidate the same library with ``--pct``
percent of one call added after every call (``benchmarks/inject.py``: a calibrated
spin, both sides launch it, only its length differs). Per target: trials,
``regression`` after both stages (the gate's block), stage-1 regressions, other
verdicts, the mean measured ratio and its SD over trials, the injected size the
sides calibrated (nominal %), and GPU wall seconds per trial. ``--pct 0`` is an
A/A of the same targets through the same wrapper.

The size is measured where the gate measures (``--size-on comparison``, the
default): one probe comparison at ``--probe-pct`` reads what the spin costs in the
comparison's own timer and pairing, and the trials inject that cost scaled to
``--pct`` (``inject.comparison_sized_extra``). Sized by the spin's slope alone, a
"+1 %" on the 16 us GEMM measured +1.37 % (H200, 2026-12-04): a detection of more
than was claimed. The measured ratio column stays the check of what was injected.

    python -m benchmarks.gpu inject --flashinfer 0.5.3 --trials 20 --pct 1 -- --pairs 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "inject"
HELP = "power on real cases: +x %% of work injected, verdicts over N trials (both stages)"
ADAPTERS = "kernelwatch.kernels.adapters"


@dataclass(frozen=True)
class Target:
    """One case to inject into: which suite, library, adapter and case pattern."""

    name: str
    suite: str
    impl: str
    backend: str
    case: str
    needs: str = ""  # "flashinfer" or "liger": a library carried to the host


# the kernel classes of issue 25 (two under 50 us) and where each comes from
TARGETS = (
    Target("gemm 64x4096x4096 (~12 us)", "gemm", f"{ADAPTERS}.gemm", "torch", "5bd254d775259072"),
    Target(
        "decode b1 x 8192 (~19 us)",
        "decode",
        f"{ADAPTERS}.flashinfer",
        "flashinfer",
        "3ddfd832efbc9ba4",
        "flashinfer",
    ),
    Target(
        "layernorm 16384x4096 (Liger)",
        "layers",
        f"{ADAPTERS}.liger",
        "liger",
        "74e971bbfa01e088",
        "liger",
    ),
    Target("gemm 4096^3 (~175 us)", "gemm", f"{ADAPTERS}.gemm", "torch", "3d28f836ed5edb75"),
    Target(
        "prefill causal bf16 4x4096 (~1 ms)",
        "prefill",
        f"{ADAPTERS}.sdpa",
        "sdpa",
        "778abb1d91c5b87d",
    ),
)  # fmt: skip (case ids: kernels.record.case_id of the quick suites' cases)
CPU_TARGETS = (Target("gemm (CPU)", "gemm", f"{ADAPTERS}.gemm", "torch", "gemm"),)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", action="append", help="targets whose name contains this")
    p.add_argument("--trials", type=int, default=None, help="trials per target (20; CPU 2)")
    p.add_argument("--pct", type=_percent(0.0), default=1.0,
                   help="work added to the candidate, %% (0: an A/A)")  # fmt: skip
    p.add_argument("--flashinfer", metavar="VERSION", help="carried FlashInfer for decode")
    p.add_argument("--liger", type=Path, default=host.SOURCES / "liger" / "src")
    p.add_argument("--target-timeout", type=float, default=300, help="seconds per target")
    p.add_argument(
        "--size-on",
        choices=("comparison", "timer"),
        default="comparison",
        help="size the injection by a probe comparison (the gate's own timer and "
        "pairing: +x %% is what the gate measures) or by the spin's slope over the "
        "baseline's time in the suite timer (before 2026-12-04)",
    )
    p.add_argument("--probe-pct", type=_percent(1.0), default=10.0,
                   help="the probe's nominal %% (1 or more: it must stand out)")  # fmt: skip
    p.add_argument("bench_args", nargs="*", help="after --: more bench-paired options")


def _percent(least: float) -> Callable[[str], float]:
    """An argparse type: a percentage of at least ``least`` (work can only be added)."""

    def parse(text: str) -> float:
        value = float(text)
        if not value >= least:  # NaN too
            raise argparse.ArgumentTypeError(f"{text}: a percentage of at least {least:g}")
        return value

    return parse


def _library(ctx: host.Context, target: Target, args: argparse.Namespace) -> tuple[str, str]:
    """The folder that holds the target's library ("" for torch itself), or why none."""
    if target.needs == "flashinfer":
        path, why = host.flashinfer(ctx, args.flashinfer)
        return (path, "") if path is not None else ("", why)
    if target.needs == "liger":
        return _liger(args)
    return "", ""


def _named(pool: Sequence[Target], words: list[str] | None) -> list[Target]:
    """The targets of ``pool`` whose name holds one of ``words`` (all, without any)."""
    return [t for t in pool if not words or any(w in t.name for w in words)]


def _liger(args: argparse.Namespace) -> tuple[str, str]:
    liger: Path = args.liger
    ok = (liger / "liger_kernel").is_dir()
    return (str(liger), "") if ok else ("", f"no liger_kernel in {liger}")


def _carried(target: Target, args: argparse.Namespace) -> str:
    """On the CPU, what a GPU target would find of its library, not installing it: a
    GPU call whose carry lacks it skips the target (2026-12-06: LayerNorm's call
    carried no Liger-Kernel, and its CPU check had printed nothing)."""
    if target.needs == "flashinfer":
        found, pattern = host.flashinfer_wheels(args.flashinfer)
        if found:
            return f"needs {Path(found[0]).name}: here, carry {host.WHEELS.name}"
        return f"MISSING here, the GPU call would skip it: no {pattern} in {host.WHEELS}"
    if target.needs == "liger":
        lib, why = _liger(args)
        if lib:
            return f"needs {lib}: here, carry {host.SOURCES.name}"
        return f"MISSING here, the GPU call would skip it: {why}"
    return "needs nothing carried"


def _summarise(records: list[dict[str, Any]], calibrations: list[dict[str, Any]]) -> dict[str, Any]:
    verdicts: dict[str, int] = {}
    stage1_reg = 0
    ratios: list[float] = []
    walls: list[float] = []
    for r in records:
        p = r.get("paired") or {}
        v = str(p.get("verdict") or r.get("status"))
        verdicts[v] = verdicts.get(v, 0) + 1
        if (p.get("stage1") or {}).get("timing_verdict") == "regression":
            stage1_reg += 1
        if p.get("ratio") is not None:
            ratios.append(float(p["ratio"]))
        if p.get("gpu_s") is not None:
            walls.append(float(p["gpu_s"]))
    nominal = [c["nominal_pct"] for c in calibrations if c.get("pct")]
    of_baseline = _injected_of_baseline(records, calibrations)
    return {
        "trials": len(records),
        "flagged": verdicts.get("regression", 0),
        "stage1_regressions": stage1_reg,
        "verdicts": verdicts,
        "ratio_mean": statistics.mean(ratios) if ratios else None,
        "ratio_sd": statistics.stdev(ratios) if len(ratios) > 1 else None,
        "nominal_pct_mean": statistics.mean(nominal) if nominal else None,
        "nominal_pct_range": [min(nominal), max(nominal)] if nominal else None,
        "injected_pct_of_baseline": statistics.mean(of_baseline) if of_baseline else None,
        # sides that measured their own size, and sides that took the one logged first
        "calibrated": sum(1 for c in calibrations if c.get("pct") and "reused" not in c),
        "reused": sum(1 for c in calibrations if c.get("pct") and "reused" in c),
        "gpu_s_per_trial_median": statistics.median(walls) if walls else None,
        "gpu_s_total": sum(walls),
        "cases": [_trial(r) for r in records],
    }


def _injected_of_baseline(
    records: list[dict[str, Any]], calibrations: list[dict[str, Any]]
) -> list[float]:
    """Per trial, the injected spin's GPU time over the gate's own baseline median, %.

    The calibration's nominal % divides by the one call it timed; this divides the
    same spin time by what the comparison measured the baseline at, so a calibration
    that timed the host instead of the GPU shows as a gap between the two columns
    (H200, 2026-12-03: nominal 1.00 %, this 1.83 %, measured +2.9 %).
    """
    first = next((c for c in calibrations if c.get("pct") and "reused" not in c), None)
    if first is None:
        return []
    spin_s = float(first["extra_iters"]) * float(first["spin_s_per_iter"])
    medians = [(r.get("paired") or {}).get("baseline_median") for r in records]
    return [100 * spin_s / float(m) for m in medians if m]


def _trial(record: dict[str, Any]) -> dict[str, Any]:
    p = record.get("paired") or {}
    return {
        "verdict": p.get("verdict"),
        "ratio": p.get("ratio"),
        "ci": [p.get("ci_low"), p.get("ci_high")],
        "baseline_median_s": p.get("baseline_median"),
        "stage1": p.get("stage1"),
        "confirmation": p.get("confirmation"),
        "cost": p.get("cost"),
        "error": (record.get("error") or "")[:300],
    }


def _bench_once(
    ctx: host.Context, step: str, t: Target, path: list[str], budget_s: float
) -> tuple[host.Step, list[dict[str, Any]]]:
    """One bench of the target's case alone on the GPU, with ``path`` first on its
    ``PYTHONPATH`` (a side's conf and library), and the records it wrote."""
    out = ctx.logs / f"{step}.jsonl"
    argv = [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", t.suite,
            "--impl", "benchmarks.inject", "--backend", t.backend, "--case", t.case,
            "--size", "smoke" if ctx.cpu else "quick", "--budget", "0.2", "--no-peaks",
            "--out", str(out)]  # fmt: skip
    pythonpath = os.pathsep.join(p for p in [*path, str(host.ROOT)] if p)
    ran = ctx.run(step, argv, min(120.0, budget_s / 3), reserve=5, env={"PYTHONPATH": pythonpath})
    return ran, host.read_jsonl(out)


def _baseline_time(
    ctx: host.Context, label: str, t: Target, path: list[str], budget_s: float
) -> float:
    """One call's time of the baseline side in the suite's own timer, or 0.0 if none.

    The injection is a percentage of this (``inject.sizing_time``), not of the
    calibration's back-to-back calls, which timed a 12 us GEMM 12 % faster than the
    comparison did (H200, 2026-12-03).
    """
    _, records = _bench_once(ctx, f"{label}-baseline", t, path, budget_s)
    for r in records:
        median = (r.get("timing") or {}).get("median")
        if r.get("status") == "pass" and isinstance(median, (int, float)) and median > 0:
            return float(median)
    return 0.0


def _calibrate_alone(
    ctx: host.Context, label: str, t: Target, path: list[str], budget_s: float
) -> host.Step:
    """The target's injection sized once, by one process alone on the GPU.

    The candidate's wrapper (``benchmarks/inject.py``) calibrates at a case's first
    call and logs the size; the pool's candidate sides then inject that logged size
    (``inject.logged_extra``) instead of each measuring while the others set up beside
    it. One bench of the case with the candidate's path does that first call.
    """
    return _bench_once(ctx, f"{label}-calibrate", t, path, budget_s)[0]


def _paired_argv(t: Target, base: list[str], cand: list[str], repeat: int, out: Path) -> list[str]:
    """``bench-paired`` of the target's case, baseline and candidate paths as given."""
    argv = [sys.executable, "-m", "kernelwatch.kernels.paired_suite"]
    argv += ["--baseline-path", ":".join(x for x in base if x)]
    argv += ["--candidate-path", ":".join(x for x in cand if x)]
    argv += ["--suite", t.suite, "--impl", "benchmarks.inject", "--backend", t.backend]
    return [*argv, "--case", t.case, "--repeat", str(repeat), "--out", str(out)]


def _probe_size(
    ctx: host.Context,
    label: str,
    t: Target,
    paths: tuple[str, str],
    base_s: float,
    args: argparse.Namespace,
    extra: list[str],
) -> dict[str, Any]:
    """The injection's size measured in the gate's own comparison (``--size-on comparison``).

    One comparison of the baseline against a probe side that injects ``--probe-pct``
    (sized by the slope) reads what those iterations cost where the gate times them;
    ``inject.comparison_sized_extra`` scales them to ``--pct``. The probe's verdict is
    not a trial and is not counted; its record stays in the logs.
    """
    from benchmarks.inject import comparison_sized_extra, write_conf

    base_conf, lib = paths
    log = ctx.logs / f"{label}-probe-calibration.jsonl"
    probe = write_conf(ctx.logs / f"{label}-conf-probe", t.impl, args.probe_pct, log, base_s)
    _calibrate_alone(ctx, f"{label}-probe", t, [str(probe), lib], args.target_timeout)
    out = ctx.logs / f"{label}-probe.jsonl"
    argv = _paired_argv(t, [base_conf, lib], [str(probe), lib], 1, out)
    step = ctx.run(f"{label}-probe", [*argv, *extra, "--size", "smoke" if ctx.cpu else "quick"],
                   args.target_timeout / 3, reserve=5, watch=out)  # fmt: skip
    paired = next(((r.get("paired") or {}) for r in host.read_jsonl(out)), {})
    ratio = paired.get("ratio")
    rows = [r for r in host.read_jsonl(log) if r.get("pct") and "reused" not in r]
    probe_extra = int(rows[0]["extra_iters"]) if rows else 0
    ci = (paired.get("ci_low"), paired.get("ci_high"))
    sized, why = comparison_sized_extra(
        args.pct, args.probe_pct, probe_extra, float(ratio) if ratio is not None else None, ci
    )
    return {"probe_pct": args.probe_pct, "probe_extra_iters": probe_extra,
            "probe_ratio": ratio, "probe_ci": [paired.get("ci_low"), paired.get("ci_high")],
            "probe_verdict": paired.get("verdict"), "probe_gpu_s": paired.get("gpu_s"),
            "probe_wall_s": round(step.seconds, 1), "extra_iters": sized, "sized": why}  # fmt: skip


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    from benchmarks.inject import write_conf

    trials = args.trials if args.trials is not None else (2 if ctx.cpu else 20)
    extra = [a for a in args.bench_args if a != "--"]
    if ctx.cpu and "--budget" not in extra:
        extra += ["--budget", "0.3", "--retries", "0"]
    targets = _named(CPU_TARGETS if ctx.cpu else TARGETS, args.target)
    results: list[dict[str, Any]] = []
    if ctx.cpu and args.target:  # the GPU call's targets: is what they need carried?
        results += [
            {"target": t.name, "skipped": f"GPU only; {_carried(t, args)}"}
            for t in _named(TARGETS, args.target)
        ]
    for t in targets:
        label = t.name.split(" (")[0].replace(" ", "-").replace("^", "")
        lib, why = _library(ctx, t, args)
        if why:
            results.append({"target": t.name, "skipped": why})
            continue
        log = ctx.logs / f"{label}-calibration.jsonl"
        base = write_conf(ctx.logs / f"{label}-conf-A", t.impl, 0.0, log)
        base_s = _baseline_time(ctx, label, t, [str(base), lib], args.target_timeout)
        sizing: dict[str, Any] = {"extra_iters": 0, "sized": "by the slope (--size-on timer)"}
        if args.size_on == "comparison" and args.pct:
            sizing = _probe_size(ctx, label, t, (str(base), lib), base_s, args, extra)
        cand = write_conf(ctx.logs / f"{label}-conf-B", t.impl, args.pct, log, base_s,
                          sizing["extra_iters"])  # fmt: skip
        _calibrate_alone(ctx, label, t, [str(cand), lib], args.target_timeout)
        out = ctx.logs / f"{label}.jsonl"
        argv = _paired_argv(t, [str(base), lib], [str(cand), lib], trials, out)
        argv += ["--size", "smoke" if ctx.cpu else "quick"]
        step = ctx.run(label, [*argv, *extra], args.target_timeout, reserve=5, watch=out)
        summary = _summarise(host.read_jsonl(out), host.read_jsonl(log))
        results.append({"target": t.name, "case": t.case, "rc": step.rc,
                        "timed_out": step.timed_out, "skipped": step.skipped,
                        "wall_s": round(step.seconds, 1), "baseline_s_suite_timer": base_s,
                        "sizing": sizing, **summary})  # fmt: skip
    table = [
        f"{'target':<36}{'trials':>7}{'flagged':>8}{'stage1':>7}{'ratio':>9}{'sd %':>7}"
        f"{'nominal %':>10}{'of base %':>10}{'s/trial':>8}  verdicts"
    ]
    for r in results:
        if "trials" not in r:
            table.append(f"{r['target']:<36}  skipped: {r['skipped']}")
            continue
        ratio = "-" if r["ratio_mean"] is None else f"{r['ratio_mean']:.4f}"
        sd = "-" if r["ratio_sd"] is None else f"{100 * r['ratio_sd']:.2f}"
        nom = "-" if r["nominal_pct_mean"] is None else f"{r['nominal_pct_mean']:.2f}"
        of_base = r["injected_pct_of_baseline"]
        of_base_s = "-" if of_base is None else f"{of_base:.2f}"
        per = r["gpu_s_per_trial_median"]
        table.append(
            f"{r['target']:<36}{r['trials']:>7}{r['flagged']:>8}{r['stage1_regressions']:>7}"
            f"{ratio:>9}{sd:>7}{nom:>10}{of_base_s:>10}{'-' if per is None else f'{per:.1f}':>8}  "
            + " ".join(f"{k} {v}" for k, v in sorted(r["verdicts"].items()))
            + (" TIMED OUT" if r["timed_out"] else "")
            + (f" rc {r['rc']}" if r["rc"] not in (0, None) else "")
        )
        table.append(f"{'':<4}sized: {r['sizing']['sized']}")
    return {"pct": args.pct, "trials": trials, "bench_args": extra, "targets": results}, table


__all__ = ["TARGETS", "Target", "run"]
