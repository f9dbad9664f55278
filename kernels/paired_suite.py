"""A whole suite in paired mode: baseline and candidate library, case by case.

This is the merge gate's measurement (``kernelwatch bench-paired``, run by the
worker for pull requests). Two side processes (``kernels/paired.py``), each with
one library on its ``PYTHONPATH``, set up the same case; each side checks its
result against the reference first (``runner.checked_case``), so a wrong result
is never timed; then blocks alternate ABBA/BAAB and the ratio candidate/baseline
gets an interval and a verdict. An *inconclusive* case is measured again, with
twice the budget, up to ``--retries`` times, and the groups of all its attempts
are judged together (clustered by attempt and placement); ``--fresh-sides``
starts new side processes for each re-measure, so an offset that belongs to one
process becomes noise in the interval rather than a bias. ``--pairs m`` does
that within one attempt: m process pairs, groups spread over them, the interval
taken over the pairs.

Every case ends as one result record (JSON line, ``record.py`` schema) for the
candidate, with a ``paired`` section holding the comparison:

- both sides correct: ``status=pass``, timing from the candidate's blocks,
  ``paired.verdict`` one of regression | improvement | unchanged | inconclusive;
- the candidate wrong: ``status=fail`` (verdict ``broken``), whatever the baseline;
- the baseline wrong and the candidate right: ``status=pass``, verdict
  ``unchanged`` with no ratio and a note (a fix is not a time comparison);
- a side that crashes, hangs (``--case-timeout``) or raises: ``status=error``
  with the side's message; the side is restarted and the next case goes on;
- a case a library cannot run (``Unavailable``): ``status=skip``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TextIO

import torch

from kernelwatch.kernels import stats
from kernelwatch.kernels.paired import (
    PairedConfig,
    PairedResult,
    Side,
    SideDied,
    SideError,
    SideTimeout,
    compare,
    judge,
)
from kernelwatch.kernels.plugins import resolve_impl
from kernelwatch.kernels.record import ResultRecord, Timing, case_id
from kernelwatch.kernels.runner import blank_record, checked_case, selected_cases
from kernelwatch.kernels.suite import CaseSpec, load_suite

FACTORY = "kernelwatch.kernels.paired_suite:case"
# Process pairs per comparison on a GPU. On the H200 each process carries a fixed
# offset (for an fp32 add: ±0.3 %, so pairs differ by 0 or ±0.6 %); over 8 pairs the
# ratio's run-to-run SD was 0.11-0.14 % (docs/measurement.md, run 11).
GPU_PAIRS = 8


class BrokenCase(RuntimeError):
    """The side's library computed a wrong result for this case."""


# --------------------------------------------------------------------------- side


def case(
    suite: str, size: str, case_id: str, impl: str, backend: str
) -> tuple[Callable[[Any], Any], Any]:
    """Side factory: the case ``case_id`` of ``suite``, checked, ready to time."""
    device = _device()
    spec = _find(load_suite(suite, size, device), case_id, backend)
    fn, inputs, correctness = checked_case(spec, resolve_impl(impl), device)
    if not correctness.passed:
        raise BrokenCase(correctness.detail or "correctness check failed")
    return (lambda i: spec.invoke(fn, i)), inputs


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
        action="store_true",
        help="new side processes for each re-measure (per-process offsets become noise)",
    )
    p.add_argument("--case-timeout", type=float, default=300.0, help="per set-up or block")
    p.add_argument("--library", default="{}", help="JSON of the candidate library")
    p.add_argument("--baseline-library", default="{}", help="JSON of the baseline library")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = _device()
    cpu = device.type == "cpu"
    if cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
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
    try:
        library, baseline_library = json.loads(args.library), json.loads(args.baseline_library)
        for suite, spec, cid in selected_cases(
            args.suite, size, device, backend, args.kernel, args.skip_case
        ):
            params = {"suite": suite, "size": size, "case_id": cid, "impl": args.impl,
                      "backend": backend}  # fmt: skip
            record = measure_case(
                sides, spec, suite, cid, backend, params, cfg, args.retries, args.fresh_sides
            )
            record["library"] = library
            record["paired"]["baseline_library"] = baseline_library
            # NaN stays NaN here, as in the runner's records: the store writes it as null
            out.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            out.flush()
    finally:
        sides.close()
        if out is not sys.stdout:
            out.close()
    return 0


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
        for name, sides in self.sides.items():
            for side in sides:
                side.close()
            self.sides[name] = self._start_all(name)

    def pair(self) -> tuple[list[Side], list[Side]]:
        for role, sides in self.sides.items():
            for i, side in enumerate(sides):
                if not side.alive():
                    side.close()
                    sides[i] = self._start(side.name, role)
        return self.sides["A"], self.sides["B"]

    def close(self) -> None:
        for sides in self.sides.values():
            for side in sides:
                side.close()


def measure_case(
    sides: _Sides,
    spec: CaseSpec,
    suite: str,
    cid: str,
    backend: str,
    params: dict[str, Any],
    cfg: PairedConfig,
    retries: int,
    fresh_sides: bool = False,
) -> dict[str, Any]:
    """One case to one candidate record with a ``paired`` section."""
    record = blank_record(spec, suite, cid, backend)
    paired: dict[str, Any] = {"verdict": "error", "attempts": 0}
    budget = cfg.budget_s
    result: PairedResult | None = None
    logs: list[float] = []
    clusters: list[int] = []
    try:
        for attempt in range(retries + 1):
            if attempt and fresh_sides:
                sides.restart()  # a process's own offset becomes noise across attempts
            a, b = sides.pair()
            paired["attempts"] = attempt + 1
            result = compare(a, b, FACTORY, params, params, _with_budget(cfg, budget))
            # Every attempt's groups count: a re-measure adds to the evidence instead of
            # replacing it. compare() names the unit of its interval (process pair or
            # placement); only processes kept from the last attempt are the same unit again.
            logs += [math.log(r) for r in result.group_ratios]
            same_unit = sides.pairs > 1 and not fresh_sides
            units = result.clusters or []
            clusters += [c if same_unit else attempt * 1000 + c for c in units]
            if attempt:
                judged_by = clusters if result.clusters is not None else None
                ratio, lo, hi, verdict = judge(logs, cfg, judged_by)
                result.ratio, result.ci_low, result.ci_high = ratio, lo, hi
                result.verdict, result.groups = verdict, len(logs)
            if result.verdict != "inconclusive":
                break
            budget *= 2
    except SideError as exc:
        return _side_failed(record, paired, exc)
    except (SideDied, SideTimeout) as exc:  # crash or hang: recorded, the sides restart
        record.error = str(exc)
        return _as_dict(record, paired)
    assert result is not None
    record.status = "pass"
    record.timing = _candidate_timing(result)
    record.device = {"paired_describe": result.describe_b}
    paired.update(
        verdict=result.verdict,
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
        group_ratios=result.group_ratios,
        pairs=sides.pairs,
        group_pairs=result.pairs,
        baseline_blocks=result.a_blocks,
        clocks=result.clocks,
    )
    return _as_dict(record, paired)


def _side_failed(record: ResultRecord, paired: dict[str, Any], exc: SideError) -> dict[str, Any]:
    """Turn a side's error reply into the case's outcome (see the module docstring)."""
    remote, side = exc.remote, exc.side
    if remote.startswith("Unavailable"):
        record.status = "skip"
        record.error = remote.split(":", 1)[-1].strip()
        paired["verdict"] = None
    elif remote.startswith("BrokenCase") and side == "B":
        record.status = "fail"
        record.error = remote.split(":", 1)[-1].strip()
        paired["verdict"] = "broken"
    elif remote.startswith("BrokenCase"):
        record.status = "pass"  # no timing: a fix is not a time comparison
        paired.update(verdict="unchanged", note=f"baseline was broken: {remote}")
    else:
        record.error = f"{'candidate' if side == 'B' else 'baseline'}: {remote}"
    return _as_dict(record, paired)


def _with_budget(cfg: PairedConfig, budget: float) -> PairedConfig:
    return PairedConfig(**{**asdict(cfg), "budget_s": budget})


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


def _as_dict(record: ResultRecord, paired: dict[str, Any]) -> dict[str, Any]:
    record.paired = paired
    data: dict[str, Any] = json.loads(record.to_json())
    return data


def entry() -> None:
    raise SystemExit(main())


if __name__ == "__main__":
    entry()
