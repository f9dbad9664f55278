"""A whole suite in paired mode: baseline and candidate library, case by case.

This is the merge gate's measurement (``kernelwatch bench-paired``, run by the
worker for pull requests). Side processes (``kernels/paired.py``), each with one
library on its ``PYTHONPATH``, set up the same case from the same seed (recorded,
``--seed`` to repeat it): identical inputs on both sides and in every process
pair. The first pair's two sides check their result against the reference
(``runner.checked_case``), once per role, so a wrong result is never timed and
the two errors can be compared; then blocks alternate ABBA/BAAB and the ratio
candidate/baseline gets an interval and a verdict (``kernels/verdict.py``).

- **Re-measures**: an *inconclusive* case is measured again, with twice the
  budget, up to ``--retries`` times, in fresh side processes (the process is the
  unit: an offset that belongs to one process becomes noise in the interval
  rather than a bias; ``--reuse-sides`` opts out), and the groups of all its
  attempts are judged together. ``--pairs m`` does that within one attempt.
- **Accuracy**: a candidate whose error grew beyond the margin over the
  baseline's on the same inputs is ``less_accurate``, even inside the bound.
- **Two stages**: a verdict that would block (regression, less_accurate) is
  confirmed by an independent stage (fresh processes, new inputs, its own
  groups); if it disagrees the case is ``inconclusive``. Both are recorded.
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
import json
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
from kernelwatch.kernels.paired import (
    PairedConfig,
    PairedResult,
    Side,
    SideDied,
    SideError,
    SideTimeout,
)
from kernelwatch.kernels.paired_stages import (
    Outcome,
    confirmed,
    correctness_of,
    measure_stage,
    next_seed,
)
from kernelwatch.kernels.plugins import resolve_impl
from kernelwatch.kernels.record import (
    Correctness,
    PairedSection,
    ResultRecord,
    Timing,
    case_id,
)
from kernelwatch.kernels.runner import (
    CASE_HELP,
    blank_record,
    checked_case,
    random_seed,
    selected_cases,
)
from kernelwatch.kernels.suite import CaseSpec, load_impl, load_suite
from kernelwatch.kernels.units import ratio_text, seconds_text
from kernelwatch.kernels.verdict import (
    BLOCKING,
    ERROR_STATUS,
    FAIL_STATUS,
    ORDER,
    PASS_STATUS,
    SKIP_STATUS,
    CaseVerdict,
    decide,
    excluded_effect,
    judge_case,
)

FACTORY = "kernelwatch.kernels.paired_suite:case"
# Process pairs per comparison on a GPU. On the H200 each process carries a fixed
# offset (for an fp32 add: ±0.3 %, so pairs differ by 0 or ±0.6 %); over 8 pairs the
# ratio's run-to-run SD was 0.11-0.14 % (docs/measurement.md, run 11).
GPU_PAIRS = 8


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
    spec = _find(load_suite(suite, size, device), case_id, backend)
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
    fn, inputs, correctness = checked_case(spec, resolve_impl(impl), device, seed)
    if not correctness.passed:
        raise BrokenCase(correctness.detail or "correctness check failed", correctness)
    info = {"correctness": asdict(correctness), **_timer_hints(spec)}
    return (lambda i: spec.invoke(fn, i)), inputs, info


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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="kernelwatch bench-paired", description=__doc__.splitlines()[0]
    )
    p.add_argument("--baseline-path", required=True, help="PYTHONPATH of the baseline library")
    p.add_argument("--candidate-path", required=True, help="PYTHONPATH of the candidate")
    p.add_argument("--baseline-python", default=sys.executable)
    p.add_argument("--candidate-python", default=sys.executable)
    p.add_argument("--suite", action="append", required=True)
    p.add_argument("--impl", required=True, help="module providing the kernels (both sides)")
    p.add_argument("--backend", default=None)
    p.add_argument("--size", default=None, help="default smoke on CPU, quick on GPU")
    p.add_argument("--out", required=True, help="JSON-lines file ('-' for stdout)")
    p.add_argument("--kernel", action="append", default=None)
    p.add_argument("--skip-case", action="append", default=[])
    p.add_argument("--case", default="", help=CASE_HELP)
    p.add_argument("--min-effect", type=float, default=PairedConfig.min_effect)
    p.add_argument("--confidence", type=float, default=PairedConfig.confidence)
    p.add_argument("--budget", type=float, default=None, help="seconds of blocks per attempt")
    p.add_argument("--retries", type=int, default=2, help="re-measures of an inconclusive case")
    p.add_argument("--placements", type=int, default=None)
    p.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="process pairs per comparison (default 8 on a GPU, 1 on the CPU): each "
        "process carries an offset of its own (docs/measurement.md, runs 8 and 11)",
    )
    p.add_argument(
        "--fresh-sides",
        dest="fresh_sides",
        action="store_true",
        default=True,
        help="new side processes for each re-measure and the confirmation (the default: "
        "the process is the unit, its own offset becomes noise in the interval)",
    )
    p.add_argument(
        "--reuse-sides",
        dest="fresh_sides",
        action="store_false",
        help="re-measure in the same side processes (faster set-up, but more groups "
        "cannot shrink the between-process error)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of every case's inputs (default: a new one per case, recorded)",
    )
    p.add_argument("--case-timeout", type=float, default=300.0, help="per set-up or block")
    p.add_argument("--library", default="{}", help="JSON of the candidate library")
    p.add_argument("--baseline-library", default="{}", help="JSON of the baseline library")
    args = p.parse_args(argv)
    if not args.min_effect > 0:
        p.error(f"--min-effect must be above 0 (a relative change), got {args.min_effect}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's entry (``python -m kernelwatch.kernels.paired_suite``): records only;
    ``kernelwatch bench-paired`` adds :func:`summary` and an exit code."""
    run(parse_args(argv))
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
    sides = _Sides(
        {"A": args.baseline_python, "B": args.candidate_python},
        {"A": args.baseline_path, "B": args.candidate_path},
        pairs,
    )
    out: TextIO = sys.stdout if args.out == "-" else open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    records: list[dict[str, Any]] = []
    try:
        library, baseline_library = json.loads(args.library), json.loads(args.baseline_library)
        for suite, spec, cid in selected_cases(
            args.suite, size, device, backend, args.kernel, args.skip_case, args.case
        ):
            params = {"suite": suite, "size": size, "case_id": cid, "impl": args.impl,
                      "backend": backend}  # fmt: skip
            record = measure_case(
                sides, spec, suite, cid, backend, params, cfg, args.retries, args.fresh_sides,
                args.seed,
            )  # fmt: skip
            record["library"] = library
            record["paired"]["baseline_library"] = baseline_library
            if threads is not None:
                record.setdefault("environment", {})["threads"] = threads
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


class _Sides:
    """The side processes, ``pairs`` per role, restarted after a crash or a hang."""

    def __init__(self, pythons: dict[str, str], paths: dict[str, str], pairs: int = 1) -> None:
        self.pythons, self.paths, self.pairs = pythons, paths, pairs
        self.sides = {name: self._start_all(name) for name in self.paths}

    def _start_all(self, name: str) -> list[Side]:
        return [
            self._start(f"{name}{i}" if self.pairs > 1 else name, name) for i in range(self.pairs)
        ]

    def _start(self, label: str, role: str) -> Side:
        """A side: its own library first on the path, then what the coordinator has."""
        own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        path = os.pathsep.join([p for p in self.paths[role].split(os.pathsep) if p] + own)
        return Side(label, python=self.pythons[role], env={"PYTHONPATH": path})

    def restart(self) -> None:
        self.close()
        for name in self.sides:
            self.sides[name] = self._start_all(name)

    def pair(self) -> tuple[list[Side], list[Side]]:
        for role, sides in self.sides.items():
            for i, side in enumerate(sides):
                if not side.alive():
                    side.close()
                    sides[i] = self._start(side.name, role)
        return self.sides["A"], self.sides["B"]

    def close(self, grace_s: float = 10.0) -> None:
        """Every side asked to quit at once, then reaped against one shared deadline."""
        every = [side for sides in self.sides.values() for side in sides]
        for side in every:
            side.request_quit()
        deadline = time.monotonic() + grace_s
        for side in every:
            side.reap(deadline)


def measure_case(
    sides: _Sides,
    spec: CaseSpec,
    suite: str,
    cid: str,
    backend: str,
    params: dict[str, Any],
    cfg: PairedConfig,
    retries: int,
    fresh_sides: bool = True,
    seed: int | None = None,
) -> dict[str, Any]:
    """One case to one candidate record with a ``paired`` section.

    Stage 1 measures (with up to ``retries`` re-measures while inconclusive, in
    fresh side processes unless ``fresh_sides`` is off); a flaky baseline check is
    re-checked once in fresh processes first. A stage-1 verdict that would block
    (regression, less_accurate) is confirmed by an independent stage: fresh
    processes, new inputs, its own groups; if it disagrees the case is inconclusive
    (``verdict.confirm``, ``verdict.confirm_accuracy``).
    """
    record = blank_record(spec, suite, cid, backend)
    paired = PairedSection(verdict="error")
    seed = random_seed() if seed is None else seed
    paired.seed = seed
    try:
        try:
            first = measure_stage(sides, FACTORY, params, cfg, retries, fresh_sides, seed)
        except SideError as exc:
            if not (_broken(exc) and _role(exc.side) == "A"):
                raise
            # One failed baseline check may be a flake (a race, a sick process): check
            # again in fresh processes on the same inputs before calling it broken.
            sides.restart()
            paired.note = f"baseline check failed once, re-checked: {exc.remote}"
            first = measure_stage(sides, FACTORY, params, cfg, retries, fresh_sides, seed)
        paired.attempts = first.attempts
        second: Outcome | None = None
        final = first.verdict
        if final in BLOCKING:
            sides.restart()  # independent: new processes, new inputs, its own groups
            try:
                second = measure_stage(
                    sides, FACTORY, params, cfg, retries, fresh_sides, next_seed(seed)
                )
                final = confirmed(first, second)
            except SideError as exc:
                if not (_broken(exc) and _role(exc.side) == "A"):
                    raise
                final = CaseVerdict.INCONCLUSIVE  # the baseline broke on the new inputs
                paired.note = f"confirmation: baseline was broken: {exc.remote}"
    except SideError as exc:
        return _side_failed(record, paired, exc)
    except (SideDied, SideTimeout) as exc:  # crash or hang: recorded, the sides restart
        record.error = str(exc)
        return _as_dict(record, paired)
    return _as_dict(*_passed(record, paired, first, second, final, cfg, sides.pairs))


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
    )
    return record, paired


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
    elif _broken(exc):
        record.status = PASS_STATUS  # no timing: a fix is not a time comparison
        paired.baseline_correctness = correctness_of(exc.details)
        baseline = FAIL_STATUS
        paired.note = f"baseline was broken: {remote}"
    else:
        record.status = ERROR_STATUS
        record.error = f"{'candidate' if role == 'B' else 'baseline'}: {remote}"
    judged = judge_case(record.status, baseline)
    paired.verdict = str(judged.verdict) if judged.verdict is not None else None
    return _as_dict(record, paired)


def _candidate_timing(result: PairedResult) -> Timing:
    blocks = result.b_blocks
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
