"""``cards``: how much the card a run lands on matters, on a host with several (issue 17).

With one worker per GPU a commit's run lands on whichever card is free, so a fleet
compares numbers measured on different cards. Two parts (``--part``, default both):

- **offsets**: for every visible GPU (``nvidia-smi``, else ``torch.cuda``),
  ``--repeats`` fresh processes pinned with ``CUDA_VISIBLE_DEVICES=<uuid>`` each run
  the suite runner (``python -m kernelwatch.kernels.runner``, the service's own
  measurement) on a few named cases of the ``gemm`` suite at ``--size quick`` through
  the torch adapter (cuBLAS): a large GEMM (8192^3), the ~12 us decode-shaped GEMM
  (64x4096x4096) and a weight-streaming, bandwidth-bound GEMM (64x28672x4096, the
  llama3-8b gate_up at 64 tokens). The runner selects kernels, not shapes, so the
  other cases are passed as ``--skip-case`` ids. Per case: each card's mean of its
  process medians, the within-card SD (between processes on one card, pooled), the
  between-card SD (of the card means), their ratio and what that ratio would be
  without any card offset (1/sqrt(n): the spread of a mean of n processes), plus
  the variance-component estimate of the card offset itself. By default every card
  measures at the same time (one process each, round after round: the fleet's own
  condition); ``--serial`` measures one card at a time. With one GPU only the
  within-card part exists: the JSON says ``"cards": 1, "between_card_sd": null``
  and why.
- **interference**: a paired A/A comparison on GPU 0 (``kernelwatch bench-paired``,
  ``python -m kernelwatch.kernels.paired_suite``, both sides and the coordinator
  pinned to that one card: a comparison's two sides never span two cards), with
  neighbours idle and with every other visible GPU running a heavy bf16 GEMM loop
  in its own process (started and warm before, stopped after). ``--trials``
  comparisons per condition, the conditions' order alternating per trial. Per
  condition and case: ratio, interval width and verdict. With one GPU the busy
  condition is not run ("no neighbour card").

NVLink multicast stays off in every child (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``). Every step is
bounded by the driver's deadline; a part that fails is reported, never raised.
``--cpu``: the CPU stands in for one card (the smoke GEMMs), interference idle only.

    python -m benchmarks.gpu cards
    python -m benchmarks.gpu cards --part offsets --repeats 8 --serial
    python -m benchmarks.gpu cards --part interference --trials 3 --pairs 4
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "cards"
HELP = "card-to-card offsets of process medians, and A/A with busy neighbour cards"
PARTS = ("offsets", "interference")
NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
GEMM_IMPL = "kernelwatch.kernels.adapters.gemm"
BACKEND = "torch"
# offsets: large (compute, power), ~12 us (launch/latency), weight-streaming (bandwidth)
GPU_CASES = ("8192x8192x8192", "64x4096x4096", "64x28672x4096")
GPU_AA_CASES = ("64x4096x4096", "8192x8192x8192")
CPU_CASES = ("96x80x64", "33x64x128")  # the gemm suite's smoke shapes

# A neighbour's load: bf16 8192^3 GEMMs back to back until the stop file appears.
_LOAD = r"""
import json, os, sys, time
import torch
stop, ready, max_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
for _ in range(3):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
open(ready, "w").close()
t0 = time.perf_counter()
it = 0
while not os.path.exists(stop) and time.perf_counter() - t0 < max_s:
    for _ in range(20):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    it += 20
dt = time.perf_counter() - t0
print("KWLOAD " + json.dumps({"iters": it, "seconds": round(dt, 2),
      "tflops": round(2 * n**3 * it / dt / 1e12, 1) if dt else None,
      "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--part", action="append", choices=PARTS, help="default: both")
    p.add_argument("--repeats", type=int, default=None, help="processes per card (5; CPU 3)")
    p.add_argument("--case", action="append", help="offsets: MxNxK of a gemm case (repeatable)")
    p.add_argument("--budget", type=float, default=None, help="runner s per case (0.5; CPU 0.2)")
    p.add_argument("--serial", action="store_true", help="offsets: one card at a time")
    p.add_argument("--aa-case", action="append", help="interference: MxNxK (repeatable)")
    p.add_argument("--trials", type=int, default=None, help="A/A per condition (2; CPU 1)")
    p.add_argument("--pairs", type=int, default=None, help="A/A process pairs (4; CPU 1)")
    p.add_argument("--aa-budget", type=float, default=None, help="s of blocks (2.5; CPU 0.3)")


def parts(selected: Sequence[str] | None) -> list[str]:
    """The parts to run, in their fixed order (offsets first), each once; default both."""
    if not selected:
        return list(PARTS)
    unknown = [s for s in selected if s not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; known: {', '.join(PARTS)}")
    return [p for p in PARTS if p in selected]


# ------------------------------------------------------------------------------ statistics


def offset_stats(per_card: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Per-card means and SDs, within-card (pooled) and between-card SD, their ratio.

    ``per_card``: each card's process medians (any unit). Within-card SD pools the
    cards' variances by their degrees of freedom; between-card SD is the SD of the
    card means. Without a card offset the card means still scatter by
    within / sqrt(n) (n: the harmonic mean of processes per card), which is the
    ratio to read the measured one against; ``offset_sd`` is the one-way random
    effects estimate of the offset itself, sqrt(max(0, var(means) - within^2 / n)),
    and ``f`` = n var(means) / within^2 (about 1 without offsets).
    """
    cards = {c: [float(x) for x in xs] for c, xs in per_card.items() if len(xs)}
    per: dict[str, dict[str, Any]] = {}
    for c, xs in cards.items():
        per[c] = {
            "n": len(xs),
            "mean": statistics.fmean(xs),
            "sd": statistics.stdev(xs) if len(xs) > 1 else None,
            "values": xs,
        }
    out: dict[str, Any] = {
        "cards": len(cards),
        "per_card": per,
        "mean": None,
        "within_card_sd": None,
        "within_card_pct": None,
        "within_df": 0,
        "between_card_sd": None,
        "between_card_pct": None,
        "ratio_between_within": None,
        "ratio_without_offsets": None,
        "offset_sd": None,
        "offset_pct": None,
        "f": None,
        "why": "",
    }
    if not cards:
        out["why"] = "no measurement"
        return out
    means = [v["mean"] for v in per.values()]
    grand = statistics.fmean(means)
    out["mean"] = grand
    df = sum(len(xs) - 1 for xs in cards.values())
    within = None
    if df > 0:
        ss = sum((len(xs) - 1) * statistics.variance(xs) for xs in cards.values() if len(xs) > 1)
        within = math.sqrt(ss / df)
        out.update(within_card_sd=within, within_df=df, within_card_pct=_pct(within, grand))
    why = []
    if within is None:
        why.append("one process per card: no within-card spread")
    if len(cards) < 2:
        why.append("one card: only the within-card spread is measured, no between-card part")
        out["why"] = "; ".join(why)
        return out
    between = statistics.stdev(means)
    n_h = statistics.harmonic_mean([len(xs) for xs in cards.values()])
    out.update(between_card_sd=between, between_card_pct=_pct(between, grand))
    out["ratio_without_offsets"] = 1.0 / math.sqrt(n_h)
    if within is not None and within > 0:
        out["ratio_between_within"] = between / within
        comp = max(0.0, between**2 - within**2 / n_h)
        out["offset_sd"] = math.sqrt(comp)
        out["offset_pct"] = _pct(math.sqrt(comp), grand)
        out["f"] = n_h * between**2 / within**2
    elif within is not None:
        why.append("within-card SD is 0: no ratio")
    out["why"] = "; ".join(why)
    return out


def _pct(x: float, of: float) -> float | None:
    return 100.0 * x / of if of else None


# ------------------------------------------------------------------------------ machine


def visible_cards(cpu: bool) -> list[dict[str, Any]]:
    """The cards a process may be pinned to: index, UUID (the pin), name, a short label."""
    if cpu:
        return [{"index": None, "uuid": None, "pin": "", "name": "cpu", "label": "cpu"}]
    smi = host.nvidia_smi()
    if isinstance(smi, list) and smi:
        return [
            {
                "index": i,
                "uuid": g.get("uuid"),
                "pin": g.get("uuid") or str(i),
                "name": g.get("name"),
                "label": f"gpu{i}",
            }
            for i, g in enumerate(smi)
        ]
    try:
        import torch

        n = torch.cuda.device_count()
    except Exception:
        n = 0
    return [
        {"index": i, "uuid": None, "pin": str(i), "name": None, "label": f"gpu{i}"}
        for i in range(n)
    ]


def child_env(card: Mapping[str, Any], cpu: bool) -> dict[str, str]:
    """One child's environment: pinned to ``card`` (none at all in CPU mode), no NVLS."""
    env = dict(NVLS_OFF)
    env["CUDA_VISIBLE_DEVICES"] = "" if cpu else str(card["pin"])
    return env


def _shape(label: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in label.lower().split("x"))
    return m, n, k


def pick_cases(size: str, shapes: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the gemm cases of ``shapes``, the case ids to skip so that only they run).

    The first case of each shape, the plain square before a model layer of the same
    shape; a shape the grid lacks is reported as ``{"label", "missing": True}``.
    """
    import torch

    from kernelwatch.kernels.record import case_id
    from kernelwatch.kernels.suite import load_suite

    specs = [s for s in load_suite("gemm", size, torch.device("cpu")) if s.kernel == "gemm"]
    ordered = sorted(specs, key=lambda s: len(s.params))  # stable: grid order among equals
    chosen: list[dict[str, Any]] = []
    keep: set[str] = set()
    for asked in shapes:
        want = _shape(asked)
        label = "x".join(map(str, want))
        hit = next(
            (s for s in ordered if (s.params["m"], s.params["n"], s.params["k"]) == want), None
        )
        if hit is None:
            chosen.append({"label": label, "missing": True})
            continue
        cid = case_id(hit.kernel, BACKEND, hit.params)
        keep.add(cid)
        chosen.append({"label": label, "case_id": cid, "params": hit.params})
    skip = [cid for s in specs if (cid := case_id(s.kernel, BACKEND, s.params)) not in keep]
    return chosen, skip


def _label_of(params: Mapping[str, Any] | None) -> str:
    p = params or {}
    return f"{p.get('m')}x{p.get('n')}x{p.get('k')}"


# ------------------------------------------------------------------------------ processes


def run_parallel(
    ctx: host.Context,
    jobs: Sequence[tuple[str, list[str], dict[str, str]]],
    want_s: float,
    reserve: float = 5.0,
) -> list[host.Step]:
    """Start every (name, argv, env) at once, each in its own process group, log to
    ``logs/NAME.log``; wait until all end or the limit passes (then end the groups).
    Never raises; each becomes a ``host.Step`` in ``ctx.steps``."""
    limit = ctx.limit(want_s, reserve)
    steps: list[host.Step] = []
    if limit < 5:
        for name, argv, _ in jobs:
            step = host.Step(name, argv, None, 0.0, limit, str(ctx.logs / f"{name}.log"))
            step.skipped = "no time left"
            steps.append(step)
        ctx.steps.extend(steps)
        return steps
    t0 = time.monotonic()
    running: list[tuple[str, list[str], subprocess.Popen[bytes] | None, Path, str]] = []
    for name, argv, env in jobs:
        log = ctx.logs / f"{name}.log"
        try:
            with open(log, "w", encoding="utf-8") as fh:
                proc = subprocess.Popen(
                    argv,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    cwd=host.ROOT,
                    start_new_session=True,
                )
            running.append((name, argv, proc, log, ""))
        except OSError as exc:
            running.append((name, argv, None, log, f"could not start: {exc}"))
    end = t0 + limit
    while time.monotonic() < end and any(
        p is not None and p.poll() is None for _, _, p, _, _ in running
    ):
        time.sleep(0.1)
    for name, argv, child, log, why in running:
        timed_out = False
        if child is not None and child.poll() is None:
            timed_out = True
            _end_group(child)
        rc = None if child is None else child.returncode
        step = host.Step(name, argv, rc, time.monotonic() - t0, limit, str(log), timed_out)
        step.skipped = why
        step.tail = host.tail(log, 3)
        steps.append(step)
    ctx.steps.extend(steps)
    return steps


def _end_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def smi_load() -> list[dict[str, str]] | dict[str, str]:
    """Utilisation, power, SM clock and temperature of every GPU, now."""
    fields = "index,uuid,utilization.gpu,power.draw,clocks.sm,temperature.gpu"
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    keys = fields.split(",")
    return [
        dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
        for line in done.stdout.splitlines()
        if line.strip()
    ]


# ------------------------------------------------------------------------------ offsets


def offsets(
    ctx: host.Context, args: argparse.Namespace, cards: list[dict[str, Any]], keep_s: float
) -> dict[str, Any]:
    """``--repeats`` runner processes per card; per case, ``offset_stats`` over cards."""
    size = "smoke" if ctx.cpu else "quick"
    shapes = args.case or (CPU_CASES if ctx.cpu else GPU_CASES)
    budget = args.budget if args.budget is not None else (0.2 if ctx.cpu else 0.5)
    repeats = args.repeats if args.repeats is not None else (3 if ctx.cpu else 5)
    chosen, skip = pick_cases(size, shapes)
    labels = [c["label"] for c in chosen if not c.get("missing")]
    values: dict[str, dict[str, list[float]]] = {
        lb: {c["label"]: [] for c in cards} for lb in labels
    }
    procs: list[dict[str, Any]] = []
    est = 40.0 if ctx.cpu else 25.0  # s per process until one was seen
    stopped = ""
    t_part = time.monotonic()
    for r in range(repeats):
        # two rounds (a within-card SD) come first; later ones leave keep_s to what follows
        keep = keep_s if r >= 2 else 10.0
        need = est * (len(cards) if args.serial else 1) + keep
        if ctx.left() < need:
            stopped = (
                f"deadline: {r} of {repeats} rounds ({ctx.left():.0f} s left, {need:.0f} needed)"
            )
            break
        jobs = []
        for card in cards:
            out = ctx.logs / f"offsets-{card['label']}-{r}.jsonl"
            argv = [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", "gemm"]
            argv += ["--size", size, "--kernel", "gemm", "--impl", GEMM_IMPL]
            argv += ["--backend", BACKEND, "--budget", str(budget), "--no-peaks", "--out", str(out)]
            argv += ["--device", "cpu"] if ctx.cpu else []
            for cid in skip:
                argv += ["--skip-case", cid]
            jobs.append((f"offsets-{card['label']}-{r}", argv, child_env(card, ctx.cpu), card, out))
        groups = [[j] for j in jobs] if args.serial else [jobs]
        for group in groups:
            want = max(60.0, 3 * est)
            steps = run_parallel(ctx, [(n, a, e) for n, a, e, _, _ in group], want, keep)
            for (_, _, _, card, out), step in zip(group, steps, strict=True):
                row = _process_row(card, r, out, step)
                procs.append(row)
                for lb, med in row["medians_us"].items():
                    if lb in values:
                        values[lb][card["label"]].append(med)
                if step.rc == 0:
                    est = max(est * 0.5, step.seconds * 1.2)
    cases = []
    for c in chosen:
        if c.get("missing"):
            cases.append({**c, "stats": offset_stats({})})
            continue
        cases.append({**c, "stats": offset_stats(values[c["label"]])})
    return {
        "cards": len(cards),
        "card_list": cards,
        "size": size,
        "budget_s": budget,
        "repeats_asked": repeats,
        "mode": "serial" if args.serial else "all cards at once",
        "stopped": stopped,
        "seconds": round(time.monotonic() - t_part, 1),
        "between_card": None if len(cards) < 2 else "measured",
        "why": "" if len(cards) > 1 else "one card visible: only the within-card part",
        "cases": cases,
        "processes": procs,
    }


def _process_row(card: Mapping[str, Any], r: int, out: Path, step: host.Step) -> dict[str, Any]:
    recs = host.read_jsonl(out)
    meds: dict[str, float] = {}
    detail = []
    for rec in recs:
        lb = _label_of(rec.get("params"))
        dev = rec.get("device") or {}
        timing = rec.get("timing") or {}
        if rec.get("status") == "pass" and timing.get("median"):
            meds[lb] = timing["median"] * 1e6
        detail.append(
            {
                "case": lb,
                "status": rec.get("status"),
                "median_us": timing["median"] * 1e6 if timing.get("median") else None,
                "n": timing.get("n"),
                "uuid": dev.get("uuid"),
                "sm_mhz_median": dev.get("sm_mhz_median"),
                "sm_mhz_min": dev.get("sm_mhz_min"),
                "power_w_max": dev.get("power_w_max"),
                "temp_c_max": dev.get("temp_c_max"),
                "reliable": dev.get("reliable"),
                "error": (rec.get("error") or "")[:200],
            }
        )
    uuids = sorted({str(d["uuid"]) for d in detail if d["uuid"]})
    return {
        "card": card["label"],
        "pin": card.get("pin"),
        "round": r,
        "rc": step.rc,
        "timed_out": step.timed_out,
        "skipped": step.skipped,
        "seconds": round(step.seconds, 2),
        "uuids_in_records": uuids,
        "pin_matches": (uuids == [card["uuid"]]) if card.get("uuid") and uuids else None,
        "medians_us": meds,
        "records": detail,
        "tail": step.tail if step.rc else [],
    }


# ------------------------------------------------------------------------------ interference


def interference(
    ctx: host.Context, args: argparse.Namespace, cards: list[dict[str, Any]]
) -> dict[str, Any]:
    """A/A on card 0 with its neighbours idle and, where there are any, busy."""
    size = "smoke" if ctx.cpu else "quick"
    shapes = args.aa_case or (CPU_CASES if ctx.cpu else GPU_AA_CASES)
    trials = args.trials if args.trials is not None else (1 if ctx.cpu else 2)
    pairs = args.pairs if args.pairs is not None else (1 if ctx.cpu else 4)
    budget = args.aa_budget if args.aa_budget is not None else (0.3 if ctx.cpu else 2.5)
    chosen, skip = pick_cases(size, shapes)
    card0, neighbours = cards[0], cards[1:]
    conds = ["idle", "busy"] if neighbours else ["idle"]
    runs: list[dict[str, Any]] = []
    stopped = ""
    est = 120.0 if ctx.cpu else 60.0  # s per comparison until one was seen
    t_part = time.monotonic()
    for t in range(trials):
        order = conds if t % 2 == 0 else conds[::-1]
        for cond in order:
            need = est + (60.0 if cond == "busy" else 0.0)
            if ctx.left() < need:
                stopped = f"deadline: trial {t + 1} {cond} not started ({ctx.left():.0f} s left)"
                break
            opts = {"pairs": pairs, "budget": budget}
            row = _aa(ctx, card0, neighbours if cond == "busy" else [], cond, t, size, skip, opts)
            row.update(pairs=pairs, budget_s=budget)
            runs.append(row)
            if row["rc"] == 0:
                est = max(est * 0.5, row["aa_seconds"] * 1.2)
        if stopped:
            break
    by_cond: dict[str, Any] = {}
    for cond in ("idle", "busy"):
        if cond not in conds:
            by_cond[cond] = {"not run": "no neighbour card"}
            continue
        mine = [r for r in runs if r["condition"] == cond]
        by_cond[cond] = _aa_summary(mine, [c["label"] for c in chosen if not c.get("missing")])
    return {
        "card": card0,
        "neighbours": [c["label"] for c in neighbours],
        "cases": chosen,
        "trials_asked": trials,
        "pairs": pairs,
        "budget_s": budget,
        "stopped": stopped,
        "seconds": round(time.monotonic() - t_part, 1),
        **by_cond,
        "runs": runs,
    }


def _aa_argv(size: str, skip: list[str], out: Path, opts: Mapping[str, Any]) -> list[str]:
    lib = json.dumps({"name": "torch", "version": _torch_version()})
    argv = [sys.executable, "-m", "kernelwatch.kernels.paired_suite"]
    argv += ["--baseline-path", "", "--candidate-path", "", "--suite", "gemm", "--kernel", "gemm"]
    argv += ["--impl", GEMM_IMPL, "--backend", BACKEND, "--size", size, "--out", str(out)]
    argv += ["--library", lib, "--baseline-library", lib, "--retries", "0"]
    argv += ["--pairs", str(opts["pairs"]), "--budget", str(opts["budget"])]
    for cid in skip:
        argv += ["--skip-case", cid]
    return argv


def _torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except Exception:
        return "unknown"


def _aa(
    ctx: host.Context,
    card0: dict[str, Any],
    neighbours: list[dict[str, Any]],
    cond: str,
    t: int,
    size: str,
    skip: list[str],
    opts: Mapping[str, Any],
) -> dict[str, Any]:
    """One comparison: neighbours' loads started and warm, the A/A, the loads stopped."""
    label = f"aa-{cond}-{t + 1}"
    out = ctx.logs / f"{label}.jsonl"
    loads: list[tuple[dict[str, Any], subprocess.Popen[bytes] | None, Path, Path]] = []
    stop = ctx.logs / f"{label}.stop"
    row: dict[str, Any] = {"condition": cond, "trial": t + 1, "neighbours": []}
    try:
        for card in neighbours:
            log = ctx.logs / f"{label}-load-{card['label']}.log"
            ready = ctx.logs / f"{label}-load-{card['label']}.ready"
            argv = [sys.executable, "-c", _LOAD, str(stop), str(ready), str(max(30, ctx.left()))]
            try:
                with open(log, "w", encoding="utf-8") as fh:
                    proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                        argv,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, **child_env(card, ctx.cpu)},
                        cwd=host.ROOT,
                        start_new_session=True,
                    )
            except OSError:
                proc = None
            loads.append((card, proc, log, ready))
        if loads:
            end = time.monotonic() + min(90.0, max(5.0, ctx.left() - 60))
            while time.monotonic() < end and not all(r.exists() for _, p, _, r in loads if p):
                if all(p is None or p.poll() is not None for _, p, _, _ in loads):
                    break
                time.sleep(0.2)
            row["neighbours_ready"] = [c["label"] for c, _, _, r in loads if r.exists()]
            row["smi_during"] = smi_load()
        step = ctx.run(
            label,
            _aa_argv(size, skip, out, opts),
            240 if ctx.cpu else 180,
            reserve=15 if loads else 5,
            env=child_env(card0, ctx.cpu),
            watch=out,
        )
    finally:
        stop.touch()
        for card, proc, log, _ in loads:
            if proc is not None:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    _end_group(proc)
            found = [ln for ln in host.tail(log, 5) if ln.startswith("KWLOAD ")]
            rep = json.loads(found[-1][7:]) if found else {"error": " ".join(host.tail(log, 2))}
            row["neighbours"].append({"card": card["label"], **rep})
    recs = host.read_jsonl(out)
    row.update(
        rc=step.rc,
        timed_out=step.timed_out,
        skipped=step.skipped,
        aa_seconds=round(step.seconds, 1),
        tail=step.tail if step.rc else [],
        cases=[_aa_case(r) for r in recs],
    )
    return row


def _aa_case(rec: Mapping[str, Any]) -> dict[str, Any]:
    p = rec.get("paired") or {}
    lo, hi = p.get("ci_low"), p.get("ci_high")
    return {
        "case": _label_of(rec.get("params")),
        "status": rec.get("status"),
        "verdict": p.get("verdict") or rec.get("status"),
        "ratio": p.get("ratio"),
        "ci": [lo, hi],
        "width": (hi - lo) if isinstance(lo, int | float) and isinstance(hi, int | float) else None,
        "blocks_s": p.get("seconds"),
        "uuid": (rec.get("device") or {}).get("uuid"),
        "error": (rec.get("error") or "")[:200],
    }


def _aa_summary(runs: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"comparisons": len(runs)}
    for lb in labels:
        rows = [c for r in runs for c in r["cases"] if c["case"] == lb]
        ratios = [c["ratio"] for c in rows if c["ratio"] is not None]
        widths = [c["width"] for c in rows if c["width"] is not None]
        verdicts: dict[str, int] = {}
        for c in rows:
            verdicts[str(c["verdict"])] = verdicts.get(str(c["verdict"]), 0) + 1
        out[lb] = {
            "n": len(rows),
            "ratios": ratios,
            "widths": widths,
            "mean_ratio": statistics.fmean(ratios) if ratios else None,
            "mean_width": statistics.fmean(widths) if widths else None,
            "verdicts": verdicts,
        }
    return out


# ------------------------------------------------------------------------------ driver


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    chosen = parts(args.part)
    cards = visible_cards(ctx.cpu)
    result: dict[str, Any] = {"parts": chosen, "cards": len(cards), "card_list": cards}
    table: list[str] = []
    if not cards:
        why = "no GPU visible (nvidia-smi and torch.cuda found none); try --cpu"
        result["why"] = why
        return result, [why]
    trials = args.trials if args.trials is not None else (1 if ctx.cpu else 2)
    per_cond = 60.0 if ctx.cpu else 50.0
    keep = 0.0
    if "interference" in chosen:  # what offsets leaves for the second part
        keep = trials * per_cond * (2 if len(cards) > 1 else 1) + 20
    for part in chosen:
        try:
            if part == "offsets":
                result[part] = offsets(ctx, args, cards, keep)
            else:
                result[part] = interference(ctx, args, cards)
        except Exception as exc:  # a part that fails is reported, the other still runs
            result[part] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        try:
            table += (offsets_table if part == "offsets" else interference_table)(result[part])
        except Exception as exc:  # a table that cannot be printed must not lose the JSON
            table.append(f"{part}: no table ({type(exc).__name__}: {exc})")
    return result, table


def _f(x: Any, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def offsets_table(res: Mapping[str, Any]) -> list[str]:
    if "error" in res:
        return [f"offsets: FAILED {res['error']}"]
    lines = [
        f"offsets: {res['cards']} card(s) x {res['repeats_asked']} processes ({res['mode']}), "
        f"runner gemm {res['size']} --budget {res['budget_s']}, {res['seconds']} s"
        + (f"; {res['stopped']}" if res["stopped"] else "")
        + (f"; {res['why']}" if res["why"] else ""),
        f"{'case':<16}{'card':<7}{'n':>3}{'mean us':>11}{'sd us':>9}",
    ]
    for c in res["cases"]:
        st = c["stats"]
        if c.get("missing"):
            lines.append(f"{c['label']:<16}not in the gemm grid")
            continue
        for card, v in st["per_card"].items():
            lines.append(
                f"{c['label']:<16}{card:<7}{v['n']:>3}{_f(v['mean']):>11}{_f(v['sd'], '.3f'):>9}"
            )
        lines.append(
            f"{'':<16}within {_f(st['within_card_sd'], '.3f')} us "
            f"({_f(st['within_card_pct'], '.2f')} %)  between {_f(st['between_card_sd'], '.3f')}"
            f" us ({_f(st['between_card_pct'], '.2f')} %)"
            f"  ratio {_f(st['ratio_between_within'])} (no offsets: "
            f"{_f(st['ratio_without_offsets'])})  offset {_f(st['offset_pct'], '.2f')} %"
            + (f"  [{st['why']}]" if st["why"] else "")
        )
    bad = [p for p in res["processes"] if p["pin_matches"] is False or p["rc"] not in (0,)]
    for p in bad[:6]:
        lines.append(
            f"  process {p['card']}/{p['round']}: rc {p['rc']}"
            + (" TIMED OUT" if p["timed_out"] else "")
            + (f" ({p['skipped']})" if p["skipped"] else "")
            + (f" records name {p['uuids_in_records']}" if p["pin_matches"] is False else "")
            + (f": {p['tail'][-1][:120]}" if p["tail"] else "")
        )
    return lines


def interference_table(res: Mapping[str, Any]) -> list[str]:
    if "error" in res:
        return [f"interference: FAILED {res['error']}"]
    card = res["card"]
    lines = [
        f"interference: A/A on {card['label']} ({card.get('uuid') or card['name']}), pairs "
        f"{res['pairs']}, blocks {res['budget_s']} s, {res['seconds']} s; neighbours "
        f"{', '.join(res['neighbours']) or 'none'}"
        + (f"; {res['stopped']}" if res["stopped"] else ""),
        f"{'condition':<10}{'case':<16}{'n':>3}{'ratio':>9}{'width':>9}  verdicts",
    ]
    for cond in ("idle", "busy"):
        s = res.get(cond) or {}
        if "not run" in s:
            lines.append(f"{cond:<10}not run: {s['not run']}")
            continue
        for c in res["cases"]:
            if c.get("missing"):
                continue
            v = s.get(c["label"]) or {}
            lines.append(
                f"{cond:<10}{c['label']:<16}{v.get('n', 0):>3}{_f(v.get('mean_ratio'), '.4f'):>9}"
                f"{_f(v.get('mean_width'), '.4f'):>9}  "
                + " ".join(f"{k} {n}" for k, n in sorted((v.get("verdicts") or {}).items()))
            )
    for r in res["runs"]:
        if r["condition"] == "busy":
            loads = ", ".join(
                f"{n['card']} {n.get('tflops', '-')} TFLOP/s" for n in r.get("neighbours", [])
            )
            ready = len(r.get("neighbours_ready") or [])
            lines.append(
                f"  busy trial {r['trial']}: {ready} of {len(r.get('neighbours', []))} "
                f"neighbours warm before the A/A; {loads or 'none'}"
            )
        if r["rc"] != 0:
            lines.append(
                f"  {r['condition']} trial {r['trial']}: rc {r['rc']}"
                + (" TIMED OUT" if r["timed_out"] else "")
                + (f" ({r['skipped']})" if r["skipped"] else "")
                + (f": {r['tail'][-1][:120]}" if r["tail"] else "")
            )
    return lines
