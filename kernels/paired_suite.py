"""A whole suite in paired mode: baseline and candidate library, case by case.

This is the merge gate's measurement (``kernelwatch bench-paired``, run by the
worker for pull requests). Side processes (``kernels/paired.py``), each with one
library on its ``PYTHONPATH``, set up the same case from the same seed (recorded,
``--seed`` to repeat it): identical inputs on both sides and in every process
pair. The first pair's two sides check their result against the reference
(``runner.checked_case``), once per role, so a wrong result is never timed and
the two errors can be compared; then blocks alternate ABBA/BAAB and the ratio
candidate/baseline gets an interval and a verdict (``kernels/verdict.py``).

- **One pool per suite**: the side processes start once (interpreter, torch, CUDA
  context) and every case is streamed to them; a case costs its set-up, one check
  per role, the screen and its blocks (``paired.cost``, ``paired.gpu_s``).
- **Re-measures**: an *inconclusive* case is measured again, with twice the
  budget, up to ``--retries`` times, each time set up anew in every side with the
  candidates paired to other baselines (a set-up is the unit of a short kernel's
  offset, which a new one draws again; ``--fresh-processes`` starts new processes
  instead), and the groups of all its attempts are judged together. Past the
  ``--retries``, a stage still inconclusive goes on with short attempts (two rounds
  each) while it has spent less than ``--short-remeasure-s``: only short kernels'
  attempts are that cheap, and their intervals narrow with set-ups, not blocks.
- **The screen**: a side of a short (graph-timed) kernel that runs far slower than
  its role's others is set up again before its groups count (``paired.compare``).
- **A GPU budget** (``--gpu-budget``): cases it leaves unmeasured end
  inconclusive with a note, and the run neutral.
- **Accuracy**: a candidate whose error grew beyond the margin over the
  baseline's on the same inputs is ``less_accurate``, even inside the bound.
- **Two stages**: a change (regression, less_accurate, improvement:
  ``verdict.CONFIRMED``) is confirmed by an independent stage (new inputs, new set-ups,
  other pairings, its own groups, more re-measures); if it disagrees the case is
  ``inconclusive``. Both are recorded.
- **Telemetry**: one block under the clock floor or under a thermal/hardware
  throttle reason makes the case unreliable; it is then at worst inconclusive.
- **A failed baseline check** is re-checked once in fresh processes before the
  baseline is taken for broken (a flake must not end the case untimed).

Every case ends as one result record (JSON line, ``record.py`` schema) for the
candidate, with a ``paired`` section holding the comparison:

- both sides correct: ``status=pass``, timing from the candidate's blocks, both
  sides' errors (``correctness``, ``paired.baseline_correctness``),
  ``paired.verdict`` one of regression | less_accurate | improvement | unchanged |
  inconclusive, with ``stage1`` and (if it ran) ``confirmation``;
- the candidate wrong: ``status=fail`` (verdict ``broken``), whatever the baseline;
- the baseline wrong (twice) and the candidate right: ``status=pass``, verdict
  ``unchanged`` with no ratio and a note (a fix is not a time comparison);
- a side that crashes, hangs (``--case-timeout``) or raises: ``status=error``
  with the side's message; the side is restarted and the next case goes on;
- a case a library cannot run (``Unavailable``): ``status=skip``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TextIO

import torch

from kernelwatch.kernels import stats
from kernelwatch.kernels.adapters import build_profile_skips
from kernelwatch.kernels.device import pin_cpu_threads
from kernelwatch.kernels.launch import launch_note
from kernelwatch.kernels.paired import (
    UNSTEADY,
    CureLedger,
    PairedConfig,
    PairedResult,
    Side,
    SideDied,
    SideError,
    SideTimeout,
    role_of,
    screen_runs,
)
from kernelwatch.kernels.paired_stages import (
    Outcome,
    confirmation_stage,
    confirmed,
    correctness_of,
    measure_stage,
    next_seed,
)
from kernelwatch.kernels.plugins import resolve_impl
from kernelwatch.kernels.record import (
    COST_DIGITS,
    Correctness,
    PairedSection,
    ResultRecord,
    Timing,
    case_id,
    check_errors,
    library_fields,
)
from kernelwatch.kernels.runner import (
    CASE_FILE_HELP,
    CASE_HELP,
    blank_record,
    checked_case,
    note_plan,
    random_seed,
    selected_cases,
)
from kernelwatch.kernels.suite import CaseSpec, load_impl, load_suite, unknown_suites
from kernelwatch.kernels.units import ratio_text, seconds_text
from kernelwatch.kernels.verdict import (
    CONFIRMED,
    ERROR_STATUS,
    FAIL_STATUS,
    NOTE_STILL_BROKEN,
    NOTE_UNMEASURED,
    ORDER,
    PASS_STATUS,
    SKIP_STATUS,
    CaseVerdict,
    decide,
    excluded_effect,
    judge_case,
)

# named, not __name__: run as ``python -m`` this module is __main__
log = logging.getLogger("kernelwatch.kernels.paired_suite")

FACTORY = "kernelwatch.kernels.paired_suite:case"
# Process pairs per comparison on a GPU. On the H200 each process carries a fixed
# offset (for an fp32 add: ±0.3 %, so pairs differ by 0 or ±0.6 %); over 8 pairs the
# ratio's run-to-run SD was 0.11-0.14 % (docs/measurement.md, run 11).
GPU_PAIRS = 8
# Spare side processes a pool keeps up per role on a GPU, so that the screen's new
# process is one already started. On an H100 (2026-12-06, docs/measurement.md §28) a
# round of new processes waited 4.4-6.7 s for interpreters, torch and CUDA contexts,
# and the FP8 rowwise GEMM's cases paid it in round after round (17-22 s of screen a
# case); new processes are the cure that works for sides 5-10 % off (80 % cured, in
# place 45 %: ``python -m benchmarks.screen_cures``, 2026-12-06).
GPU_SPARES = 2
# Re-measures the confirmation may make beyond stage 1's: a block needs both stages to
# say regression, so the gate's power is the product of theirs; the confirmation runs
# only for cases whose stage 1 found a change (rare), so it can afford to decide more often
# (tests/kernels/test_verdict_simulation.py: +1 % caught >= 95 % with both stages).
CONFIRMATION_EXTRA_RETRIES = 2
# A stage's time for the short re-measures (``PairedConfig.short_remeasure_s``) on a GPU:
# about 10 more set-ups of 8 pairs for a 16 us GEMM, whose three fixed attempts took
# 9-14 s on the H200 (2026-12-04)
SHORT_REMEASURE_S = 30.0


class BrokenCase(RuntimeError):
    """The side's library computed a wrong result for this case.

    details: ``{"correctness": ...}``, sent to the coordinator with the error
    (``paired.serve``), so a broken case's record still carries its errors.
    """

    def __init__(self, message: str, correctness: Correctness | None = None) -> None:
        super().__init__(message)
        self.details = {"correctness": asdict(correctness)} if correctness else {}


# --------------------------------------------------------------------------- side


def case(
    suite: str,
    size: str,
    case_id: str,
    impl: str,
    backend: str,
    seed: int | None = None,
    check: bool = True,
) -> tuple[Callable[[Any], Any], Any, dict[str, Any]]:
    """Side factory: the case ``case_id`` of ``suite``, ready to time.

    Inputs come from ``seed`` (the coordinator gives every side the same one). With
    ``check`` the result is checked first (``runner.checked_case``) and the check's
    errors returned as the set-up ``info``; a wrong result raises ``BrokenCase``.
    """
    device = _device()
    spec = _find(_suite(suite, size, device.type), case_id, backend)
    if not check:
        fn = load_impl(resolve_impl(impl), spec.kernel)
        gen = torch.Generator(device=device)
        gen.manual_seed(random_seed() if seed is None else seed)
        inputs = spec.make_inputs(gen, device)
        call: Callable[[Any], Any] = lambda i: spec.invoke(fn, i)
        # One eager call on the default stream before any CUDA-graph capture, as the
        # checking side makes: a library's first-use allocations must not happen inside
        # a capture. Without it, on the H200 (2026-12-01) the second case of a suite
        # hit an illegal address in sides that did not check (pairs >= 2, a kernel that
        # allocates its output).
        with build_profile_skips():
            call(inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return call, inputs, _timer_hints(spec)
    began = time.perf_counter()
    parts: dict[str, float] = {}
    fn, inputs, correctness = checked_case(spec, resolve_impl(impl), device, seed, parts)
    if not correctness.passed:
        raise BrokenCase(correctness.detail or "correctness check failed", correctness)
    info = {
        "correctness": asdict(correctness),
        "check_s": time.perf_counter() - began,
        "check_parts": parts,
        **_timer_hints(spec),
    }
    return (lambda i: spec.invoke(fn, i)), inputs, info


@functools.cache
def _suite(suite: str, size: str, device_type: str) -> list[CaseSpec]:
    """A side's suite, built once a process: a pool's sides set up every case of it."""
    return load_suite(suite, size, torch.device(device_type))


def _timer_hints(spec: CaseSpec) -> dict[str, Any]:
    """What the case's tags ask of the side's timer (``kernels/paired.py:_setup``)."""
    return {"cuda_graph": False} if spec.tags.get("cuda_graph") is False else {}


def _find(specs: Sequence[CaseSpec], cid: str, backend: str) -> CaseSpec:
    for spec in specs:
        if case_id(spec.kernel, backend, spec.params) == cid:
            return spec
    raise LookupError(f"case {cid} is not in this suite at this size")


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------- coordinator


# The note of a case whose stage timed nothing (``paired.UNSTEADY``)
UNSTEADY_NOTE = (
    "unsteady: more than half the pairs kept a side off after every screen round (the "
    "kernel's time is not steady across processes); no group was timed"
)


# The prewarm (``_Sides.prewarm``) is off unless ``--prewarm-after`` asks for it: on the
# H200 (2026-12-03, docs/measurement.md §13c) FlashInfer decode's four modules compiled
# in 78.7 s prewarmed two a role at a time, and in 71.5 s one by one inside their cases'
# first checks. Its rounds: this many cases a role, none started past this budget.
PREWARM_WIDTH = 2
PREWARM_BUDGET_S = 60.0


def build_parser() -> argparse.ArgumentParser:
    """The options of ``kernelwatch bench-paired`` (and of the worker's ``python -m`` entry)."""
    p = argparse.ArgumentParser(
        prog="kernelwatch bench-paired",
        description="A suite in paired mode, no database: baseline and candidate library "
        "checked on identical inputs, then timed interleaved on one GPU until each case's "
        "ratio is decided. Exit 0 pass, 1 fail (regression, less_accurate, broken), 2 error, "
        "3 neutral (inconclusive).",
    )
    p.add_argument("--baseline-path", required=True, help="PYTHONPATH of the baseline library")
    p.add_argument("--candidate-path", required=True, help="PYTHONPATH of the candidate")
    p.add_argument(
        "--baseline-python",
        default=sys.executable,
        help="interpreter of the baseline's environment (default: this one)",
    )
    p.add_argument(
        "--candidate-python",
        default=sys.executable,
        help="interpreter of the candidate's environment (default: this one)",
    )
    p.add_argument(
        "--baseline-env",
        default="{}",
        help="JSON object: variables only the baseline's processes get (its recipe's)",
    )
    p.add_argument(
        "--candidate-env",
        default="{}",
        help="JSON object: variables only the candidate's processes get (its recipe's)",
    )
    p.add_argument("--suite", action="append", required=True, help="suite to run (repeatable)")
    p.add_argument("--impl", required=True, help="module providing the kernels (both sides)")
    p.add_argument("--backend", default=None, help="backend name in the case ids (default: --impl)")
    p.add_argument("--size", default=None, help="default smoke on CPU, quick on GPU")
    p.add_argument("--out", required=True,
                   help="JSON-lines file the records are appended to ('-' for stdout)")  # fmt: skip
    p.add_argument("--kernel", action="append", default=None, help="only this kernel (repeatable)")
    p.add_argument(
        "--skip-case", action="append", default=[], help="leave this case id out (repeatable)"
    )
    # the worker passes it to every runner; the coordinator lists its cases beside it
    # (``note_plan``) and announces each on stderr, not in the file
    p.add_argument("--case-file", default=None, help=CASE_FILE_HELP)
    p.add_argument("--case", default="", help=CASE_HELP)
    p.add_argument(
        "--min-effect",
        type=float,
        default=PairedConfig.min_effect,
        help="smallest relative change that counts (default 0.01: 1 %%)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=PairedConfig.confidence,
        help="two-sided level of one stage's interval (default 0.99)",
    )
    p.add_argument("--budget", type=float, default=None, help="seconds of blocks per attempt")
    p.add_argument("--retries", type=int, default=2, help="re-measures of an inconclusive case")
    p.add_argument(
        "--short-remeasure-s",
        type=float,
        default=None,
        metavar="S",
        help="after --retries, re-measure a still inconclusive case while its stage has "
        "spent less than S seconds, next attempt included (cheap attempts only: short "
        "kernels, whose interval is set by the number of set-ups; default "
        f"{SHORT_REMEASURE_S:g} on a GPU, 0 (off) on the CPU)",
    )
    p.add_argument(
        "--placements",
        type=int,
        default=None,
        help="copies of each case a side builds behind random padding (memory placement "
        "becomes noise in the interval; default from --pairs)",
    )
    p.add_argument(
        "--gpu-budget",
        type=float,
        default=None,
        metavar="S",
        help="GPU wall seconds for the whole run, start-up included: cases it leaves "
        "unmeasured end inconclusive (the run neutral), never silently dropped",
    )
    p.add_argument(
        "--screen-tol",
        type=float,
        default=None,
        help="a side this much slower than its role's lower quartile and its pair partner "
        "is set up again, then left out with its pair (default 0.05 on a GPU; 0: off, "
        "the CPU's default: its timing noise is larger than the state the screen finds)",
    )
    p.add_argument(
        "--spares",
        type=int,
        default=None,
        metavar="N",
        help="idle side processes kept up per role, so that a side the screen replaces "
        f"takes one instead of waiting for a new start-up (default {GPU_SPARES} on a GPU "
        "with the screen on and 3 pairs or more, else 0)",
    )
    p.add_argument(
        "--warm-spares",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="spares set each case up once beside a set-up the pool waits for anyway, so "
        "a side the screen replaces sets up warm (default off: on an H100 it lengthened "
        "the layers suites' first set-up and did not pay, docs/measurement.md §33)",
    )
    p.add_argument(
        "--prewarm-after",
        type=float,
        default=0.0,
        metavar="S",
        help="once a case's set-up takes this long (a JIT library compiling on first use), "
        "set every later case up once in each role, spread over the sides, so their "
        "compiles run side by side (default 0: off; on the H200 FlashInfer decode's four "
        "compiles took as long side by side as one after another)",
    )
    p.add_argument(
        "--prewarm-width",
        type=int,
        default=PREWARM_WIDTH,
        metavar="N",
        help="cases a prewarm round sets up at once in each role (default 2: two compiles "
        "a role beside the one a case's own set-up runs; a JIT compile takes cores and "
        "memory, and 16 at once on the H200 ran past a suite's limit)",
    )
    p.add_argument(
        "--prewarm-budget",
        type=float,
        default=PREWARM_BUDGET_S,
        metavar="S",
        help="no new prewarm round after this many seconds; the cases left compile in "
        "their own set-ups, as without a prewarm (default 60)",
    )
    p.add_argument(
        "--setup-one-at-a-time",
        action="store_true",
        help="set the sides up one after another, not all at once (an experiment on the "
        "fresh-process state; each stage pays the sum of its set-ups)",
    )
    p.add_argument(
        "--screen-delay-s",
        type=float,
        default=0.0,
        metavar="S",
        help="wait S seconds after each comparison's set-up before the screen (an "
        "experiment on the varlen prefill's screen storms, which 3 s did not prevent; "
        "default 0: off)",
    )
    p.add_argument(
        "--gc-off-in-blocks",
        action="store_true",
        help="pause Python's garbage collector while a block is timed (an experiment on "
        "the varlen prefill's late samples, docs/measurement.md §34d; default: it runs)",
    )
    p.add_argument(
        "--graph-footprint-mb",
        type=float,
        default=None,
        metavar="MB",
        help="memory the input copies of a graph-timed case fill (default 1024: many "
        "placements in every sample; kernels/timing.py)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="measure each case N times (new inputs each time), one record each: how "
        "often a verdict repeats (the benchmarks' detection trials)",
    )
    p.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="process pairs per comparison (default 8 on a GPU, 1 on the CPU): each "
        "process carries an offset of its own (docs/measurement.md, runs 8 and 11)",
    )
    p.add_argument(
        "--fresh-processes",
        dest="fresh_processes",
        action="store_true",
        default=False,
        help="new side processes for each re-measure of stage 1 (default: a new set-up "
        "in the same processes, the unit of a short kernel's offsets; new processes cost "
        "seconds of CUDA contexts each). The confirmation of a stage-1 change always "
        "has them, in every attempt",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of every case's inputs (default: a new one per case, recorded)",
    )
    p.add_argument("--case-timeout", type=float, default=300.0, help="seconds per set-up or block")
    p.add_argument("--library", default="{}", help="JSON of the candidate library")
    p.add_argument("--baseline-library", default="{}", help="JSON of the baseline library")
    p.add_argument(
        "--baseline-own-home",
        action="store_true",
        help="the baseline's sides run in this process's $HOME, not one of their own: the "
        "worker copies the baseline's kept JIT builds there (worker/venvs.copy_jit_seed); "
        "under bubblewrap that home is the one they were built in, so its ops load "
        "instead of compiling again",
    )
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    for flag in ("baseline_env", "candidate_env"):
        try:
            value = json.loads(getattr(args, flag))
        except json.JSONDecodeError as exc:
            p.error(f"--{flag.replace('_', '-')} is not JSON: {exc}")
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            p.error(f"--{flag.replace('_', '-')} must be a JSON object of strings")
        setattr(args, flag, value)
    if not args.min_effect > 0:
        p.error(f"--min-effect must be above 0 (a relative change), got {args.min_effect}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's entry (``python -m kernelwatch.kernels.paired_suite``): records only;
    ``kernelwatch bench-paired`` adds :func:`summary` and an exit code. Each
    comparison's progress goes to stderr (``KW-PAIRED`` lines, ``paired.log``), beside
    the case markers, so a case cut by its limit shows where its time went."""
    progress = logging.StreamHandler(sys.stderr)
    progress.setFormatter(logging.Formatter("KW-PAIRED %(message)s"))
    ours = logging.getLogger("kernelwatch.kernels")  # not the libraries' own loggers
    ours.addHandler(progress)
    ours.setLevel(logging.INFO)
    args = parse_args(argv)
    unknown = unknown_suites(args.suite)  # as the runner says it (``runner.main``)
    if unknown:
        print(f"kernelwatch paired runner: {unknown}", file=sys.stderr)
        return 2
    run(args)
    return 0


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every selected case measured in paired mode, each record written as it ends."""
    device = _device()
    cpu = device.type == "cpu"
    if cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    # before the sides start: they inherit the thread variables
    threads = pin_cpu_threads(device)
    size = args.size or ("smoke" if cpu else "quick")
    backend = args.backend or args.impl
    pairs = max(1, args.pairs if args.pairs is not None else (1 if cpu else GPU_PAIRS))
    cfg = PairedConfig(
        min_effect=args.min_effect,
        confidence=args.confidence,
        budget_s=args.budget if args.budget is not None else (5.0 if not cpu else 3.0),
        # placement is a GPU memory effect; on the CPU one instance per side is enough
        # with several process pairs the process is the unit; placements nest inside
        placements=args.placements or (1 if cpu else max(1, PairedConfig.placements // pairs)),
        block_s=0.02 if not cpu else 0.01,
        ask_timeout_s=args.case_timeout,
    )
    cfg.screen_tol = args.screen_tol if args.screen_tol is not None else (0.0 if cpu else 0.05)
    cfg.setup_one_at_a_time = args.setup_one_at_a_time
    cfg.screen_delay_s = args.screen_delay_s
    short = args.short_remeasure_s
    cfg.short_remeasure_s = short if short is not None else (0.0 if cpu else SHORT_REMEASURE_S)
    if args.gc_off_in_blocks:
        cfg.timer["collect_garbage_in_blocks"] = False
    if args.graph_footprint_mb is not None:
        cfg.timer["graph_footprint_bytes"] = int(args.graph_footprint_mb * 2**20)
    began = time.perf_counter()
    deadline = began + args.gpu_budget if args.gpu_budget is not None else None
    sides = _Sides(
        {"A": args.baseline_python, "B": args.candidate_python},
        {"A": args.baseline_path, "B": args.candidate_path},
        pairs,
        envs={"A": args.baseline_env, "B": args.candidate_env},
        own_home=frozenset({"A"} if args.baseline_own_home else ()),
        # only the screen asks for new processes, and it needs 3 pairs
        spares=args.spares if args.spares is not None else
        (GPU_SPARES if not cpu and screen_runs(cfg, pairs) else 0),
        warm_spares=args.warm_spares,
    )  # fmt: skip
    out: TextIO = sys.stdout if args.out == "-" else open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    ahead = selected_cases(args.suite, size, device, backend, args.kernel, args.skip_case,
                           args.case, announce=False)  # fmt: skip
    note_plan(args.case_file, ahead)
    records: list[dict[str, Any]] = []
    prewarm: list[dict[str, Any]] | None = None  # the later cases' set-ups, once due
    done: set[str] = set()
    try:
        library = library_fields(json.loads(args.library))
        baseline_library = library_fields(json.loads(args.baseline_library))
        for suite, spec, cid in (
            chosen
            for chosen in selected_cases(
                args.suite, size, device, backend, args.kernel, args.skip_case, args.case
            )
            for _ in range(max(1, args.repeat))
        ):
            params = {"suite": suite, "size": size, "case_id": cid, "impl": args.impl,
                      "backend": backend}  # fmt: skip
            case_began = time.perf_counter()
            # inside the next case's time, so its price includes it; not past the budget
            if prewarm and (deadline is None or case_began < deadline):
                sides.prewarm([a for a in prewarm if a["params"]["case_id"] not in done],
                              args.case_timeout, args.prewarm_width,
                              args.prewarm_budget)  # fmt: skip
                prewarm = []
            if deadline is not None and case_began >= deadline:
                record = unmeasured(spec, suite, cid, backend, args.gpu_budget)
            else:
                record = measure_case(
                    sides, spec, suite, cid, backend, params, cfg, args.retries,
                    args.fresh_processes, args.seed, deadline,
                )  # fmt: skip
            _priced(record, sides.take_costs(), time.perf_counter() - case_began)
            done.add(cid)
            setup_s = float((record.get("paired") or {}).get("cost", {}).get("setup_side_s", 0))
            if prewarm is None and args.prewarm_after > 0 and setup_s >= args.prewarm_after:
                ahead = selected_cases(args.suite, size, device, backend, args.kernel,
                                       args.skip_case, args.case, announce=False)  # fmt: skip
                later = {c: s for s, _, c in ahead if c not in done}
                prewarm = [
                    {"cmd": "setup", "factory": FACTORY, "timer": cfg.timer, "placements": 1,
                     "params": {"suite": s, "size": size, "case_id": c, "impl": args.impl,
                                "backend": backend, "seed": 0, "check": False}}
                    for c, s in later.items()
                ]  # fmt: skip
            record["library"] = library
            record["paired"]["baseline_library"] = baseline_library
            # the candidate's interpreter, torch and Triton (design.md's record contract);
            # the baseline's beside it, where a release comparison runs another torch
            record["environment"] = {**sides.environment("B"), **record.get("environment", {})}
            record["paired"]["baseline_environment"] = sides.environment("A")
            if threads is not None:
                record["environment"]["threads"] = threads
            # NaN stays NaN here, as in the runner's records: the store writes it as null
            out.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            out.flush()
            records.append(record)
    finally:
        sides.close()
        if out is not sys.stdout:
            out.close()
    return records


def summary(records: Sequence[dict[str, Any]]) -> str:
    """A table for people after the JSON lines: one line a case, worst first, then the
    count per verdict and each error or broken case's message."""
    if not records:
        return "no cases selected"
    rank: dict[str | None, int] = {v.value: i for i, v in enumerate(ORDER)}
    rows = sorted(records, key=lambda r: rank.get(_verdict(r), len(rank)))
    lines = [
        f"{'kernel':<16} {'verdict':<13} {'ratio [interval] (change)':<36} "
        f"{'baseline':>10} {'candidate':>10}  case"
    ]
    for r in rows:
        p = r.get("paired") or {}
        ratio = ratio_text(p.get("ratio"), p.get("ci_low"), p.get("ci_high"))
        base, cand = seconds_text(p.get("baseline_median")), seconds_text(p.get("candidate_median"))
        label = r.get("label") or json.dumps(r.get("params"), sort_keys=True)
        lines.append(
            f"{r.get('kernel', '?'):<16} {_verdict(r) or '-':<13} {ratio:<36} "
            f"{base:>10} {cand:>10}  {label}"
        )
    counts = Counter(_verdict(r) or "skip" for r in records)
    lines.append(
        f"{len(records)} case{'s' if len(records) != 1 else ''}: "
        + ", ".join(
            f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: rank.get(kv[0], 99))
        )
    )
    for r in rows:
        p = r.get("paired") or {}
        why = r.get("error") or p.get("note")
        if _verdict(r) in (CaseVerdict.ERROR, CaseVerdict.BROKEN) and why:
            lines.append(f"  {_verdict(r)} {r.get('kernel')} {r.get('case_id')}: {why}")
    return "\n".join(lines)


def _verdict(record: dict[str, Any]) -> str | None:
    verdict = (record.get("paired") or {}).get("verdict")
    return str(verdict) if verdict is not None else None


def side_home(python: str, library_path: str) -> dict[str, str]:
    """``HOME`` for the sides that run one library: one directory per interpreter and
    library path, under the coordinator's ``$HOME``, kept across the pool's restarts.

    JIT libraries cache what they compile under ``$HOME`` by a name and a version, not
    by the code: FlashInfer 0.5-0.6 at ``~/.cache/flashinfer/<version>/<arch>/
    cached_ops/<op>/<op>.so``, torch's ``cpp_extension.load`` at
    ``~/.cache/torch_extensions/<name>``. Two commits of one release share the version,
    so with one ``$HOME`` the second side to compile an op would load, or overwrite,
    the first side's build: a paired comparison of a changed kernel could time the
    baseline's code on both sides and call a regression unchanged. A home per library
    keeps each side's builds its own; the sides of one role still share theirs (one
    compile per op, not one per process, also after a sick side is replaced).

    Triton's cache is keyed by the kernel's source and stays shared
    (``TRITON_CACHE_DIR``, the sandbox's or Triton's default under the real home).
    """
    base = os.environ.get("HOME") or os.path.expanduser("~")
    key = hashlib.sha256(f"{python}\0{library_path}".encode()).hexdigest()[:16]
    home = os.path.join(base, ".cache", "kernelwatch", "side-homes", key)
    os.makedirs(home, mode=0o700, exist_ok=True)
    triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(base, ".triton", "cache")
    return {"HOME": home, "TRITON_CACHE_DIR": triton}


def side_env(
    python: str, library_path: str, recipe: dict[str, str] | None = None, own_home: bool = False
) -> dict[str, str]:
    """What a side's process gets on top of the coordinator's environment: its library
    first on ``PYTHONPATH``, then what the coordinator has; its own ``$HOME``
    (``side_home``; none with ``own_home``); its recipe's variables."""
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([p for p in library_path.split(os.pathsep) if p] + own)
    home = {} if own_home else side_home(python, library_path)
    return {**home, **(recipe or {}), "PYTHONPATH": path}


def warm_key(ask: dict[str, Any]) -> str:
    """Which case a set-up ask sets up (its factory and parameters), for ``Side.warmed``."""
    case = json.dumps([ask.get("factory"), ask.get("params")], sort_keys=True, default=str)
    return hashlib.sha256(case.encode()).hexdigest()[:16]


class _Sides:
    """The side processes, ``pairs`` per role, live across the cases of a suite.

    Started once (interpreter, torch, CUDA context: seconds each, 16 contexts at
    once ~10 s on the H200), each side makes its CUDA context at spawn
    (``Side.ready``), and every case, re-measure and confirmation sets itself up in
    these processes. ``restart`` (``--fresh-processes``) and a crashed, hung or sick
    side start new ones. (A spare pool started in the background while the first
    measured disturbed its blocks by up to 5x on the H200, 2026-12-02: no process
    starts while a comparison runs.)

    ``spares`` processes per role wait beside the pool, up and idle (no case set up):
    a side replaced (``respawn``, ``replace``, a dead side) takes a spare under its own
    name before a new process is started. Spares start only where the pool waits for
    a start-up anyway (its own start, or a replacement no spare covered), and that
    wait covers theirs, so no process is starting while blocks are timed. A role
    whose round of replacements outran its spares keeps as many spares as that round
    took from then on (up to its ``pairs``): on an H100 (2026-12-06, §29) the FP8
    rowwise GEMM's screen replaced up to 4 sides of a role a round, and with 2 spares
    each such round waited a start-up again (15.5 s of one case's 42.6 s).

    ``take_costs`` hands each case the start-up it waited for: ``start_wait_s`` (what
    it cost the case) and, for sides that came up during it, the slowest side's
    ``process_start_s`` (interpreter and imports) and ``cuda_context_s``.

    ``warm_spares``: a spare sets each case up once (and releases it) beside a set-up
    the pool waits for anyway, the comparison's first or a screen round's, so that a
    side it later replaces sets up warm. Once per case, not once per spare: on an H100
    (2026-12-07, §33) a spare warmed on the suite's first case still took 3.9 s to set
    SDPA's varlen prefill up, whose first call imports torch's nested-tensor path; a
    new process's first set-up of it took 4.1 s. A new process's first set-up pays its
    library's imports, JIT loads and first calls: in the logged suite A/As of
    2026-12-05..06 the screen's 69 rounds with new processes spent 346 s setting them
    up (5.0 s a round, against 0.2 s for a set-up again in place), 21 % of those A/As'
    1627 s (19 % on the H200), and
    a LayerNorm check's first call in a new process took 11-14 s on an H100
    (docs/measurement.md §32). ``warm`` sends the set-ups, ``settle`` reads them (the
    comparison calls it where it waits for its own); nothing is timed in between.
    """

    def __init__(
        self,
        pythons: dict[str, str],
        paths: dict[str, str],
        pairs: int = 1,
        ready_timeout_s: float | None = 600.0,
        envs: dict[str, dict[str, str]] | None = None,
        own_home: frozenset[str] = frozenset(),
        spares: int = 0,
        warm_spares: bool = False,
    ) -> None:
        self.pythons, self.paths, self.pairs = pythons, paths, pairs
        self.spares = spares
        self.warm_spares = warm_spares
        # spares sent a warm-up set-up, reply unread, and the case's ``warm_key``
        self._warming: list[tuple[Side, str]] = []
        self._spare: dict[str, list[Side]] = {name: [] for name in paths}
        # spares kept per role: ``spares``, raised to a round's demand that outran them
        self._keep: dict[str, int] = dict.fromkeys(paths, spares)
        self._spawned = 0  # spares started, for their names
        self.envs = envs or {}
        # roles whose sides keep this process's $HOME (``--baseline-own-home``)
        self.own_home = own_home
        self.ready_timeout_s = ready_timeout_s
        self._costs: dict[str, float] = {}
        self.sides = {name: self._start_all(name) for name in self.paths}
        self._top_up()  # the pool's own start is waited for: theirs lies within it
        # what setting an off side up again cured, over the pool's comparisons
        self._cures = CureLedger()

    @property
    def cures(self) -> CureLedger:
        return self._cures

    def _start_all(self, name: str) -> list[Side]:
        return [
            self._start(f"{name}{i}" if self.pairs > 1 else name, name) for i in range(self.pairs)
        ]

    def _start(self, label: str, role: str) -> Side:
        """A side: its own library first on the path, then what the coordinator has; its
        own ``$HOME`` (``side_home``; the coordinator's for a role in ``own_home``); its
        own recipe's variables on top of the coordinator's environment."""
        env = side_env(self.pythons[role], self.paths[role], self.envs.get(role, {}),
                       own_home=role in self.own_home)  # fmt: skip
        return Side(label, python=self.pythons[role], env=env, hello=True)

    def _top_up(self) -> None:
        """Start spares until each role has what it keeps; the caller waits for them."""
        for role, spare in self._spare.items():
            spare[:] = [s for s in spare if s.alive()]
            while len(spare) < self._keep[role]:
                self._spawned += 1
                spare.append(self._start(f"{role}spare{self._spawned}", role))

    def _fresh(self, role: str, name: str) -> Side:
        """A process for side ``name`` of ``role``: a spare that is up, else a new one."""
        if self._warming:
            self._abandon_warm_ups()
        spare = self._spare[role]
        while spare:
            side = spare.pop(0)
            if side.alive():
                side.rename(name)
                return side
            side.close()
        return self._start(name, role)

    def _wait_with_spares(self, sides: list[Side]) -> None:
        """Wait for ``sides``; where one of them is a new start-up, top the spares up
        first so that the one wait covers theirs too."""
        if any(s.started is None for s in sides):
            self._top_up()
            sides = sides + [s for spare in self._spare.values() for s in spare]
        self._wait_ready(sides)

    def _wait_ready(self, sides: list[Side]) -> None:
        """Wait until every side is up; count the wait and the slowest start-up."""
        waited = time.perf_counter()
        starts: list[dict[str, float]] = []
        fresh = [s for s in sides if s.started is None]
        for side in fresh:
            starts.append(side.ready(self.ready_timeout_s))
        if not starts:
            return
        self._add("start_wait_s", time.perf_counter() - waited)
        self._add("process_start_s", max(x["start_s"] - x["cuda_s"] for x in starts))
        self._add("cuda_context_s", max(x["cuda_s"] for x in starts))

    def warm(self, asks: dict[str, dict[str, Any]]) -> None:
        """Send each role's spares that never set this case up the set-up ``asks[role]``
        (one placement), without waiting: ``settle`` reads the replies. Off unless
        ``warm_spares``."""
        if not self.warm_spares:
            return
        warming = {id(s) for s, _ in self._warming}
        for role, spare in self._spare.items():
            ask = asks.get(role)
            if ask is None:
                continue
            key = warm_key(ask)
            for side in spare:
                if key in side.warmed or id(side) in warming or not side.alive():
                    continue
                try:
                    side.send({**ask, "placements": 1, "new_placement": False})
                except SideDied:
                    continue
                self._warming.append((side, key))

    def settle(self, timeout_s: float | None = None) -> None:
        """Read the warm-ups ``warm`` sent (each within ``timeout_s``, the case's own
        limit) and release their memory; a spare that failed, died or hung is closed
        (the next top-up replaces it): a spare's warm-up never decides a case, whose own
        sides meet the same failure in their set-ups."""
        warming, self._warming = self._warming, []
        if not warming:
            return
        began = time.perf_counter()
        done = 0
        for side, key in warming:
            try:
                side.receive("setup", timeout_s)
                side.ask({"cmd": "release"}, timeout_s)
            except (SideError, SideDied, SideTimeout) as exc:
                log.info("spare %s failed its warm-up (%s): closed", side.name,
                         type(exc).__name__)  # fmt: skip
                side.close(grace_s=2.0)
                continue
            side.warmed.add(key)
            done += 1
        self._drop_dead_spares()
        log.info("warmed %d spares in %.1f s (beside the set-up waited for)", done,
                 time.perf_counter() - began)  # fmt: skip

    def _abandon_warm_ups(self) -> None:
        """Close the spares whose warm-up nobody read: the comparison that sent them
        ended in a failure before its ``settle``, and a warm-up still running there (a
        hung case) must not hold the pool."""
        warming, self._warming = self._warming, []
        for side, _ in warming:
            side.close(grace_s=2.0)
        self._drop_dead_spares()

    def _drop_dead_spares(self) -> None:
        for spare in self._spare.values():
            spare[:] = [s for s in spare if s.alive()]

    def _add(self, key: str, value: float) -> None:
        self._costs[key] = self._costs.get(key, 0.0) + value

    def environment(self, role: str) -> dict[str, Any]:
        """What a side of ``role`` runs on (``describe_environment``, said in its hello)."""
        return next((dict(s.environment) for s in self.sides[role] if s.environment), {})

    def take_costs(self) -> dict[str, float]:
        costs, self._costs = self._costs, {}
        return costs

    def restart(self) -> None:
        """Fresh processes for every side."""
        began = time.perf_counter()
        self._close(self.sides)
        self.sides = {name: self._start_all(name) for name in self.paths}
        self._add("restart_s", time.perf_counter() - began)

    def release(self) -> None:
        """Every side drops its case and gives its GPU memory back (``serve``'s release)."""
        every = [side for sides in self.sides.values() for side in sides]
        for side in every:
            with contextlib.suppress(SideDied):
                side.send({"cmd": "release"})
        for side in every:
            with contextlib.suppress(SideError, SideDied, SideTimeout):
                side.receive("release", self.ready_timeout_s)

    def replace(self, names: Sequence[str]) -> None:
        """New processes for the named sides only (the screen's sick ones)."""
        for role, sides in self.sides.items():
            for i, side in enumerate(sides):
                if side.name in names:
                    self._swap(role, i)

    def _swap(self, role: str, i: int) -> Side:
        """Side i of ``role`` closed; a spare or a new process takes its name."""
        old = self.sides[role][i]
        old.close(grace_s=2.0)
        self.sides[role][i] = self._fresh(role, old.name)
        return self.sides[role][i]

    def respawn(self, sides: Sequence[Side]) -> list[Side]:
        """New processes in place of ``sides`` (same names and roles), up and ready.

        The screen asks for them when a set-up again in the same process did not cure
        slow sides (``paired._Screen``). They start together, so a round of the
        screen's replacements waits for one start-up (5-10 s on the H200), not one per
        side; the start-up is counted like the pool's.
        """
        where = {
            id(s): (role, i) for role, group in self.sides.items() for i, s in enumerate(group)
        }
        strangers = [s.name for s in sides if id(s) not in where]
        if strangers:
            raise ValueError(f"sides {strangers} are not in this pool")
        roles = [where[id(s)][0] for s in sides]
        new = [self._swap(*where[id(s)]) for s in sides]
        if self.spares:
            uncovered = {r for s, r in zip(new, roles, strict=True) if s.started is None}
            for role in uncovered:
                self._keep[role] = max(self._keep[role], min(self.pairs, roles.count(role)))
            log.info("spares took %d of %d sides; spares kept a role: %s",
                     sum(s.started is not None for s in new), len(new), self._keep)  # fmt: skip
        self._wait_with_spares(new)
        return new

    def prewarm(
        self,
        asks: Sequence[dict[str, Any]],
        timeout_s: float | None,
        width: int = PREWARM_WIDTH,
        budget_s: float = PREWARM_BUDGET_S,
    ) -> None:
        """Set each case up once in each role, ``width`` cases a round per role, spread
        over the role's sides and released after each round: a JIT library then
        compiles a few of the suite's variants side by side, into the role's home
        (``side_home``), instead of one per case in that case's first check. On the
        H200 (2026-12-03) FlashInfer decode's first checks of five variants took 9-21 s
        each, 71 of the suite's 105 s; nine cases a role at once (16 compiles) had not
        finished in 115 s, so a round is narrow and no round starts past ``budget_s``
        (the cases left compile in their own set-ups, as without a prewarm).

        A side that fails, dies or hangs here (a hung one is killed by its timeout) is
        left for ``pair`` to replace: the case meets the same failure in its own turn,
        and it is recorded there.
        The seconds go to the next case's price (``prewarm_s``).
        """
        began = time.perf_counter()
        self.pair()  # every side alive and past its hello before it is asked
        width = max(1, min(width, self.pairs))
        done = 0
        for first in range(0, len(asks), width):
            if time.perf_counter() - began >= budget_s:
                log.info("prewarm stopped at its budget (%.0f s): %d of %d cases left to "
                         "their own set-ups", budget_s, len(asks) - done, len(asks))  # fmt: skip
                break
            round_began = time.perf_counter()
            batch = asks[first : first + width]
            busy: list[Side] = []
            for sides in self.sides.values():
                for side, ask in zip(sides, batch, strict=False):
                    with contextlib.suppress(SideDied):
                        side.send(ask)
                        busy.append(side)
            failed: list[str] = []
            for side in busy:  # a hung side is killed by its timeout (``Side.receive``)
                try:
                    side.receive("setup", timeout_s)
                except (SideError, SideDied, SideTimeout) as exc:
                    failed.append(f"{side.name}: {type(exc).__name__}")
            self.release()
            done += len(batch)
            log.info("prewarm round: %d cases in %.1f s%s", len(batch),
                     time.perf_counter() - round_began,
                     f", failed {failed}" if failed else "")  # fmt: skip
        log.info("prewarmed %d cases in %.1f s", done, time.perf_counter() - began)
        self._add("prewarm_s", time.perf_counter() - began)

    def pair(self) -> tuple[list[Side], list[Side]]:
        for role, sides in self.sides.items():
            for i, side in enumerate(sides):
                if not side.alive():
                    side.close()
                    sides[i] = self._fresh(role, side.name)
        self._wait_with_spares([s for sides in self.sides.values() for s in sides])
        return self.sides["A"], self.sides["B"]

    def close(self, grace_s: float = 10.0) -> None:
        """Every side and spare asked to quit at once, then reaped against one shared
        deadline."""
        pool = {role: self.sides[role] + self._spare.get(role, []) for role in self.sides}
        self._close(pool, grace_s)

    @staticmethod
    def _close(pool: dict[str, list[Side]], grace_s: float = 10.0) -> None:
        every = [side for sides in pool.values() for side in sides]
        for side in every:
            side.request_quit()
        deadline = time.monotonic() + grace_s
        for side in every:
            side.reap(deadline)


def unmeasured(
    spec: CaseSpec, suite: str, cid: str, backend: str, budget_s: float | None
) -> dict[str, Any]:
    """The record of a case the run's GPU budget left unmeasured: inconclusive, said so.

    It keeps the run honest: the case is not dropped, it counts as undecided (the run
    ends ``neutral``), and the note names the budget that ran out.
    """
    record = blank_record(spec, suite, cid, backend)
    record.status = SKIP_STATUS
    record.error = f"{NOTE_UNMEASURED} ({budget_s:g} s)"
    paired = PairedSection(verdict=str(CaseVerdict.INCONCLUSIVE), note=record.error)
    return _as_dict(record, paired)


def _priced(record: dict[str, Any], pool: dict[str, float], wall_s: float) -> None:
    """The case's GPU seconds and their breakdown (``PairedSection.gpu_s`` / ``cost``).

    The card is held for the whole wall time of the case, start-up waits included, so
    that is its price; the breakdown adds the pool's start-up seconds it waited for
    to the stages' own (``PairedStage.costs``).
    """
    paired = record.setdefault("paired", {})
    cost: dict[str, float] = dict(paired.get("cost") or {})
    for key, value in pool.items():
        cost[key] = cost.get(key, 0.0) + value
    cost["wall_s"] = wall_s
    paired["cost"] = {k: round(v, COST_DIGITS) for k, v in cost.items()}
    paired["gpu_s"] = round(wall_s, COST_DIGITS)


def measure_case(
    sides: _Sides,
    spec: CaseSpec,
    suite: str,
    cid: str,
    backend: str,
    params: dict[str, Any],
    cfg: PairedConfig,
    retries: int,
    fresh_processes: bool = False,
    seed: int | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """One case to one candidate record with a ``paired`` section.

    Stage 1 measures (with up to ``retries`` re-measures while inconclusive, each a
    new set-up, in new processes with ``fresh_processes``); a flaky baseline check is
    re-checked once in fresh processes first. A stage-1 change (regression,
    less_accurate, improvement) is confirmed by an independent stage: fresh
    processes, new inputs, its own groups; if it disagrees the case is inconclusive
    (``verdict.confirm``, ``verdict.confirm_accuracy``).
    """
    record = blank_record(spec, suite, cid, backend)
    paired = PairedSection(verdict="error")
    seed = random_seed() if seed is None else seed
    paired.seed = seed
    stage = functools.partial(measure_stage, sides, FACTORY, params, cfg, retries, fresh_processes)
    try:
        first, pairs = _first_stage(sides, stage, seed, deadline, paired)
        paired.attempts = first.attempts
        if first.result.stop_reason == UNSTEADY:
            paired.note = UNSTEADY_NOTE
        second: Outcome | None = None
        final = first.verdict
        confirming = time.perf_counter()
        if final in CONFIRMED and deadline is not None and confirming >= deadline:
            final = CaseVerdict.INCONCLUSIVE  # unconfirmed: never a change on one stage
            paired.note = "not confirmed: the run's GPU budget was spent"
        elif final in CONFIRMED:
            # independent: new processes, new inputs, new set-ups, its own groups
            try:
                # more re-measures than stage 1: it runs only for stage-1 changes, and a
                # true regression left inconclusive here is a miss (power = p1 x p2)
                second = confirmation_stage(
                    sides,
                    FACTORY,
                    params,
                    cfg,
                    retries + CONFIRMATION_EXTRA_RETRIES,
                    next_seed(seed),
                    pairs,
                )
                final = confirmed(first, second)
                if second.result.stop_reason == UNSTEADY:
                    paired.note = f"confirmation {UNSTEADY_NOTE}"
            except SideError as exc:
                if not (_broken(exc) and _role(exc.side) == "A"):
                    raise
                final = CaseVerdict.INCONCLUSIVE  # the baseline broke on the new inputs
                paired.note = f"confirmation: baseline was broken: {exc.remote}"
            paired.cost["confirmation_s"] = time.perf_counter() - confirming
    except SideError as exc:
        return _side_failed(record, paired, exc)
    except (SideDied, SideTimeout) as exc:  # crash or hang: recorded, the sides restart
        record.error = str(exc)
        return _as_dict(record, paired)
    record, section = _passed(record, paired, first, second, final, cfg, pairs)
    section.cost = {**first.costs, **paired.cost}
    return _as_dict(record, section)


def _first_stage(
    sides: _Sides,
    stage: Callable[..., Outcome],
    seed: int,
    deadline: float | None,
    paired: PairedSection,
) -> tuple[Outcome, int]:
    """Stage 1 and the pairs it used, past two failures that are not the case's answer.

    - A side out of GPU memory (2m processes each holding a large case did not fit
      the card, as FP8 grouped GEMMs did not on the H200): every side gives its memory
      back and the stage runs again with half the pairs, down to one.
    - One failed baseline check may be a flake (a race, a sick process): checked again
      in fresh processes on the same inputs before the baseline is taken for broken.
    """
    pairs = sides.pairs
    rechecked = False
    while True:
        try:
            return stage(seed, deadline, max_pairs=pairs), pairs
        except SideError as exc:
            if _out_of_memory(exc) and pairs > 1:
                pairs //= 2
                sides.release()
                paired.note = (
                    f"measured with {pairs} pair{'s' if pairs > 1 else ''}: "
                    f"{2 * sides.pairs} sides' inputs did not fit the GPU's memory at once"
                )
            elif _broken(exc) and _role(exc.side) == "A" and not rechecked:
                rechecked = True
                sides.restart()
                paired.note = f"baseline check failed once, re-checked: {exc.remote}"
            else:
                raise


def _passed(
    record: ResultRecord,
    paired: PairedSection,
    first: Outcome,
    second: Outcome | None,
    final: CaseVerdict,
    cfg: PairedConfig,
    pairs: int,
) -> tuple[ResultRecord, PairedSection]:
    """The record of a case both sides ran correctly: stage 1's timing, the final verdict."""
    result = first.result
    record.status = "pass"
    record.timing = _candidate_timing(result)
    record.correctness = first.candidate
    # the store reads ``reliable`` from the device section (db/store.py)
    record.device = {
        **result.device_b,  # name, class, UUID of the card both sides ran on
        "paired_describe": result.describe_b,
        "reliable": first.reliable,
        "throttled_blocks": first.throttled_blocks,
    }
    decision = decide(result.ratio, result.ci_low, result.ci_high, cfg.min_effect,
                      reliable=first.reliable)  # fmt: skip
    paired = PairedSection(
        verdict=str(final),
        attempts=first.attempts,
        ratio=result.ratio,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        confidence=cfg.confidence,
        min_effect=cfg.min_effect,
        groups=result.groups,
        seconds=result.seconds,
        stop_reason=result.stop_reason,
        baseline_median=result.a_median,
        candidate_median=result.b_median,
        group_ratios=list(result.group_ratios),
        pairs=pairs,
        group_pairs=list(result.pairs),
        baseline_blocks=list(result.a_blocks),
        clocks=list(result.clocks),
        note=paired.note,
        seed=first.seed,
        reliable=first.reliable,
        throttled_blocks=first.throttled_blocks,
        timing_verdict=str(first.timing),
        accuracy_verdict=str(first.accuracy.verdict),
        accuracy_detail=first.accuracy.detail,
        baseline_correctness=first.baseline,
        excluded_effect=excluded_effect(result.ci_low, result.ci_high),
        detail=decision.detail,
        stage1=first.section(),
        confirmation=second.section() if second is not None else None,
        baseline_host_launch_s=result.host_launch_a,
        candidate_host_launch_s=result.host_launch_b,
        launch_note=launch_note(result.launch_a, result.launch_b, result.b_median),
    )
    return record, paired


def _out_of_memory(exc: SideError) -> bool:
    return exc.remote.startswith(("OutOfMemoryError", "torch.OutOfMemoryError"))


def _broken(exc: SideError) -> bool:
    return exc.remote.startswith("BrokenCase")


def _role(side: str) -> str:
    """``A``/``B`` of a side named ``A``, ``B`` or, with several pairs, ``A3``, ``B0``."""
    return side[:1]


def _side_failed(record: ResultRecord, paired: PairedSection, exc: SideError) -> dict[str, Any]:
    """Turn a side's error reply into the case's outcome (see the module docstring); the
    verdict is the one judgement's (``verdict.judge_case``) for those two statuses."""
    remote, role = exc.remote, _role(exc.side)
    baseline = PASS_STATUS
    if remote.startswith("Unavailable"):
        record.status = SKIP_STATUS
        record.error = remote.split(":", 1)[-1].strip()
    elif _broken(exc) and role == "B":
        record.status = FAIL_STATUS
        record.error = remote.split(":", 1)[-1].strip()
        record.correctness = correctness_of(exc.details)
        # the baseline failed the same check on the same inputs: how broken it was
        # decides whether the candidate broke anything (``verdict.still_broken``)
        also = [o for o in exc.also if _broken(o) and _role(o.side) == "A"]
        if also:
            paired.baseline_correctness = correctness_of(also[0].details)
            baseline = FAIL_STATUS
    elif _broken(exc):
        record.status = PASS_STATUS  # no timing: a fix is not a time comparison
        paired.baseline_correctness = correctness_of(exc.details)
        baseline = FAIL_STATUS
        paired.note = f"baseline was broken: {remote}"
    else:
        record.status = ERROR_STATUS
        record.error = f"{role_of(exc.side)}: {remote}"
    errors = (check_errors(paired.baseline_correctness), check_errors(record.correctness))
    judged = judge_case(record.status, baseline, errors=errors)
    paired.verdict = str(judged.verdict) if judged.verdict is not None else None
    if judged.detail == NOTE_STILL_BROKEN:
        paired.note = NOTE_STILL_BROKEN
    return _as_dict(record, paired)


def _candidate_timing(result: PairedResult) -> Timing | None:
    """The candidate's blocks as the record's timing; None where no group was timed
    (an unsteady screen, ``paired.compare``)."""
    blocks = result.b_blocks
    if not blocks:
        return None
    lo, hi = stats.median_ci(blocks, 0.95) if len(blocks) > 1 else (blocks[0], blocks[0])
    describe = result.describe_b
    return Timing(
        unit="s",
        samples=blocks,
        median=stats.median(blocks),
        ci_low=lo,
        ci_high=hi,
        n=len(blocks),
        cold_l2=True,
        cuda_graph=bool(describe.get("cuda_graph", False)),
        stop_reason=f"paired:{result.stop_reason}",
        timer="cuda_event" if "steady_sm_mhz" in describe else "host_cpu",
        calls_per_sample=int(describe.get("calls_per_sample", 1)),
        total_s=result.seconds,
    )


def _as_dict(record: ResultRecord, paired: PairedSection) -> dict[str, Any]:
    record.paired = paired
    data: dict[str, Any] = json.loads(record.to_json())
    return data


def entry() -> None:
    raise SystemExit(main())


if __name__ == "__main__":
    entry()
