"""The suite runner behind ``kernelwatch bench``: cases in, result records (JSON lines) out.

For each case: fresh random inputs, output poisoned, one checked call against a
high-precision reference, then (only if correct) timing. Each record is written
and flushed as soon as its case ends, so a crash or hang in a later case loses
nothing before it. Before each case a marker line ``KW-CASE-START <id>`` goes to
stderr: the worker reads it to name the case that crashed or hung.

Without a GPU, Triton kernels run under ``TRITON_INTERPRET=1`` and timings use
the host clock; they prove the plumbing, not performance.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

import torch

from kernelwatch.kernels.adapters import Unavailable, build_profile_skips
from kernelwatch.kernels.casepattern import matches, names_of
from kernelwatch.kernels.correctness import check, compute_dtype, poison_
from kernelwatch.kernels.device import describe_device, describe_environment, pin_cpu_threads
from kernelwatch.kernels.peaks import device_peaks, pct_of_peak
from kernelwatch.kernels.plugins import resolve_impl
from kernelwatch.kernels.record import (
    COST_DIGITS,
    Correctness,
    ResultRecord,
    Throughput,
    case_id,
    library_fields,
)
from kernelwatch.kernels.suite import CaseSpec, load_impl, load_suite, suite_names, unknown_suites
from kernelwatch.kernels.timing import TimerConfig, measure

CASE_MARKER = "KW-CASE-START"
CASE_FILE_HELP = (
    "a file to note each case in as it starts (the worker's, beside stderr); the cases "
    "the run will take are listed beside it first (PLAN_SUFFIX)"
)
# ``<case file>.plan``: every case of the run, one JSON line each, before the first starts
PLAN_SUFFIX = ".plan"
# The marker lines are a protocol with the worker (``worker/suite_process.py``), which runs
# ``python -m kernelwatch.kernels.runner`` (or ``.paired_suite``): on by default there.
# ``kernelwatch bench`` and ``bench-paired`` at a terminal turn them off (issue 27: a
# person read them as output); :func:`quiet_case_markers`.
_case_markers = True
# The file the worker names (``--case-file``) for each case's marker too (``_announce``)
_case_file: str | None = None
CASE_HELP = (
    "only the cases matching this pattern: comma-separated globs over the kernel, "
    "'kernel label' (k=v by key) and the case id (kernels/casepattern.py)"
)
BUILTIN_IMPL = "kernelwatch.kernels.triton_kernels"


def build_parser() -> argparse.ArgumentParser:
    """The options of ``kernelwatch bench`` (and of the worker's ``python -m`` entry)."""
    p = argparse.ArgumentParser(
        prog="kernelwatch bench",
        description="Run suites in this environment, no database: each case checked against "
        "a high-precision reference, then timed; one JSON record per case to --out, then a "
        "table. Exit 0 all passed or skipped, 1 a wrong result, 2 an error.",
    )
    p.add_argument("--suite", action="append", help="suite name (repeatable); default: basic")
    p.add_argument("--out", help="JSON-lines file the records are appended to (the worker "
                   "resumes into it; '-' for stdout); required to run")  # fmt: skip
    p.add_argument("--impl", default=BUILTIN_IMPL, help="module providing the kernels under test")
    p.add_argument("--backend", default=None, help="backend label (default: the impl module)")
    p.add_argument(
        "--size",
        default=None,
        help="shape grid (smoke, quick, full; suites may define more); "
        "default smoke on CPU, full on GPU",
    )
    p.add_argument("--device", default=None, help="cpu or cuda[:N]; default cuda if available")
    p.add_argument("--kernel", action="append", default=None, help="only these kernels")
    p.add_argument("--skip-case", action="append", default=[], help="case ids to skip")
    p.add_argument("--case-file", default=None, help=CASE_FILE_HELP)
    p.add_argument("--case", default="", help=CASE_HELP)
    p.add_argument("--budget", type=float, default=None, help="sampling seconds per case")
    p.add_argument("--target", type=float, default=0.005, help="relative CI half-width target")
    p.add_argument("--warm-l2", action="store_true", help="do not flush L2 between samples")
    p.add_argument(
        "--cuda-graph",
        choices=["auto", "on", "off"],
        default="auto",
        help="time through a captured CUDA graph (auto: where the case allows it)",
    )
    p.add_argument("--library", default="{}", help="JSON: {name, version, commit} of the library")
    p.add_argument("--list", action="store_true", help="list suites and exit")
    p.add_argument("--no-peaks", action="store_true", help="skip the roofline peak probe")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if not args.list and not args.out:
        p.error("the following arguments are required: --out (or --list)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's entry (``python -m kernelwatch.kernels.runner``).

    Exits 0 whenever the suite ran to its end, whatever its cases found: the records
    say that, and the worker reads a non-zero exit as a crash of the runner.
    ``kernelwatch bench`` turns the records into an exit code and a summary instead.
    """
    args = parse_args(argv)
    if args.list:
        print("\n".join(suite_names()))
        return 0
    # a suite a library's .kernelwatch.toml names may be a plugin of that library, known
    # only here, in its environment: an unknown one is one line, not a KeyError traceback
    unknown = unknown_suites(args.suite or [])
    if unknown:
        print(f"kernelwatch runner: {unknown}", file=sys.stderr)
        return 2
    bench(args)
    return 0


def device_problem(requested: str | None) -> str:
    """Why ``--device`` cannot be used here ('' when it can): asked for ``cuda`` on a
    machine without one, ``bench`` died in an assertion deep in torch."""
    if requested is None:
        return ""
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError):
        return f"--device {requested!r} is not a device: give cpu, cuda or cuda:N"
    if device.type == "cpu":
        return ""
    if device.type != "cuda":
        return f"--device {requested!r}: kernelwatch measures on cpu or cuda"
    if not torch.cuda.is_available():
        return f"--device {requested}: this torch ({torch.__version__}) sees no CUDA GPU"
    if (device.index or 0) >= torch.cuda.device_count():
        return f"--device {requested}: this machine has {torch.cuda.device_count()} GPU(s)"
    return ""


def bench(args: argparse.Namespace) -> list[ResultRecord]:
    """Run the selected cases, writing each record as it ends; every record, in order."""
    global _case_file
    _case_file = args.case_file
    records: list[ResultRecord] = []
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        # Must be set before any @triton.jit decorator runs (i.e. before kernel imports).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    pin_cpu_threads(device)  # commit and released-version runs alike: the runner does it
    size = args.size or ("smoke" if device.type == "cpu" else "full")
    config = TimerConfig(
        cold_l2=not args.warm_l2,
        cuda_graph={"auto": None, "on": True, "off": False}[args.cuda_graph],
        budget_s=args.budget
        if args.budget is not None
        else (2.0 if device.type == "cuda" else 0.5),
        target_rel_ci=args.target,
        min_samples=20 if device.type == "cuda" else 10,
    )
    library = library_fields(json.loads(args.library))
    impl = resolve_impl(args.impl)
    backend = args.backend or args.impl
    out: TextIO = sys.stdout if args.out == "-" else open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    try:
        dev_info = describe_device(device)
        env_info = describe_environment()
        peaks = _peaks(device, dev_info, args.no_peaks)
        # Each case's wall time (``ResultRecord.cost["wall_s"]``) runs from the end of the
        # previous case's record to its own: selecting it (the first case of a suite
        # loads that suite: its module and case grid), its check and timing, and writing
        # the record before it. The first case's starts here, so it holds its suite's
        # loading but not the process's start (interpreter, torch, the CUDA context), the
        # device description or the peak probe above: those are the run's, not a case's.
        suites = args.suite or ["basic"]
        ahead = selected_cases(suites, size, device, backend, args.kernel, args.skip_case,
                               args.case, announce=False)  # fmt: skip
        note_plan(args.case_file, ahead)
        since = time.perf_counter()
        for suite, spec, cid in selected_cases(
            suites, size, device, backend, args.kernel, args.skip_case, args.case
        ):
            record = run_case(spec, suite, cid, backend, impl, device, config)
            if record.throughput is not None and peaks:
                pct, bound = pct_of_peak(
                    record.throughput.tflops,
                    record.throughput.gbps,
                    record.throughput.flops,
                    record.throughput.bytes,
                    peaks,
                    spec.params.get("dtype"),
                )
                record.throughput.pct_of_peak, record.throughput.bound_by = pct, bound
            record.library = library
            record.device = {**dev_info, **record.device}
            record.environment = env_info
            record.cost["wall_s"] = round(time.perf_counter() - since, COST_DIGITS)
            out.write(record.to_json() + "\n")
            out.flush()
            since = time.perf_counter()
            records.append(record)
    finally:
        if out is not sys.stdout:
            out.close()
    return records


def summary(records: Sequence[ResultRecord]) -> str:
    """A short table for people, one line a case, then the count and each case's error.

    Medians in microseconds and throughput as measured; the JSON lines stay the
    machine output, this is only what a person reads after them.
    """
    if not records:
        return "no cases selected"
    lines = [f"{'kernel':<12} {'status':<6} {'median':>12} {'TFLOP/s':>8} {'GB/s':>8}  params"]
    for r in records:
        median = f"{r.timing.median * 1e6:.2f} us" if r.timing is not None else "-"
        tflops = f"{r.throughput.tflops:.2f}" if r.throughput is not None else "-"
        gbps = f"{r.throughput.gbps:.1f}" if r.throughput is not None else "-"
        params = json.dumps(r.params, sort_keys=True)
        lines.append(f"{r.kernel:<12} {r.status:<6} {median:>12} {tflops:>8} {gbps:>8}  {params}")
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    order = ("pass", "fail", "error", "skip")
    lines.append(
        f"{len(records)} case{'s' if len(records) != 1 else ''}: "
        + ", ".join(f"{counts[k]} {k}" for k in order if k in counts)
    )
    for r in records:
        if r.status in ("fail", "error") and r.error:
            lines.append(f"  {r.status} {r.kernel} {r.case_id}: {r.error}")
    return "\n".join(lines)


def run_case(
    spec: CaseSpec,
    suite: str,
    cid: str,
    backend: str,
    impl: str,
    device: torch.device,
    config: TimerConfig,
) -> ResultRecord:
    """Check one case, then time it if it is correct. Exceptions become ``error`` records.

    A case tagged ``cuda_graph: False`` (NCCL across devices, which is not captured in
    a graph here) is timed without a CUDA graph whatever ``config`` says.

    The record's ``cost`` gets where the case's seconds went, whatever its outcome: the
    check's parts it reached (``CHECK_PARTS``) and ``timing_s``, the measurement's wall
    time (warm-up, calibration and graph capture included), where it was timed. On the
    H100 (FlashInfer 0.6.0's decode suite through the worker) 152 cases took 300 s and
    their timings 62 s, and nothing said where the rest went. ``bench`` adds the case's
    ``wall_s``.
    """
    if spec.tags.get("cuda_graph") is False:
        config = dataclasses.replace(config, cuda_graph=False)
    record = blank_record(spec, suite, cid, backend)
    spent: dict[str, float] = {}
    try:
        fn, inputs, record.correctness = checked_case(spec, impl, device, spent=spent)
        if not record.correctness.passed:
            record.status = "fail"
            record.error = record.correctness.detail
            return record
        began = time.perf_counter()
        m = measure(lambda i: spec.invoke(fn, i), inputs, config)
        spent["timing_s"] = time.perf_counter() - began
        record.timing = m.timing
        record.device = dict(m.telemetry)
        record.telemetry = m.telemetry_state
        record.throughput = throughput(spec.flops, spec.bytes, m.timing.median)
        record.status = "pass"
    except Unavailable as exc:  # library or device missing for this case: a skip, with why
        record.status = "skip"
        record.error = str(exc)
    except Exception as exc:  # a kernel that raises is a recorded error, not a crash
        record.status = "error"
        record.error = f"{type(exc).__name__}: {exc}"
        record.log_tail = _tail(traceback.format_exc())
    finally:  # the parts it reached, whatever ended it
        record.cost = {k: round(v, COST_DIGITS) for k, v in spent.items()}
    return record


def selected_cases(
    suites: Sequence[str],
    size: str,
    device: torch.device,
    backend: str,
    kernels: Sequence[str] | None,
    skip: Sequence[str],
    pattern: str = "",
    announce: bool = True,
) -> Iterator[tuple[str, CaseSpec, str]]:
    """(suite, spec, case id) of every case to run, announced on stderr first.

    ``pattern``: a case pattern (``kernels/casepattern.py``); empty selects every case.
    ``announce=False``: no markers (a look ahead at the cases, not their run).

    The ``KW-CASE-START`` marker names the case a crash or hang belongs to
    (``worker/suite_process.py``); the runner and the paired coordinator share it.
    ``kernelwatch bench`` turns it off (:func:`quiet_case_markers`).
    """
    for suite in suites:
        for spec in load_suite(suite, size, device):
            if kernels and spec.kernel not in kernels:
                continue
            cid = case_id(spec.kernel, backend, spec.params)
            if cid in skip or not matches(names_of(spec.kernel, spec.params, cid), pattern):
                continue
            if _case_markers and announce:
                params = json.dumps(spec.params, sort_keys=True)
                _announce(f"{CASE_MARKER} {cid} {spec.kernel} {params}")
            yield suite, spec, cid


def note_plan(case_file: str | None, cases: Iterable[tuple[str, CaseSpec, str]]) -> None:
    """Every case this pass will take (``cases``: :func:`selected_cases` with
    ``announce=False``), one JSON line each (suite, case id, kernel, params) in
    ``<case_file>.plan``, before the first starts.

    Why: a suite the worker's timeout ends loses the cases it did not reach from the run
    without a trace (FlashInfer 0.6.0 on the H200, 2026-12-05: 48 of 204 cases); with
    the plan the worker records each as a ``skip`` that says so
    (``worker/suite_process.py``). No plan (no case file, or a suite that cannot be
    listed: its error comes from the run itself) leaves the run as it was.
    """
    if not case_file:
        return
    try:
        listed = list(cases)  # a suite that cannot load raises here, before the file
        with open(case_file + PLAN_SUFFIX, "w", encoding="utf-8") as fh:
            for suite, spec, cid in listed:
                row = {"suite": suite, "case_id": cid, "kernel": spec.kernel,
                       "params": spec.params}  # fmt: skip
                fh.write(json.dumps(row, sort_keys=True, default=str) + "\n")
    except Exception:
        return


def _announce(marker: str) -> None:
    """The worker's case marker: on stderr, on a line of its own even after output that
    did not end its line (a progress bar, C's ``printf``), and in the file the worker
    names (``--case-file``), which the case's code cannot redirect away as it can
    stderr. The worker then knows which case a dying runner was in (an audit,
    2026-12-05: a marker glued to a kernel's partial line, or sent to ``/dev/null``,
    made a segfault end the whole run)."""
    print(f"\n{marker}", file=sys.stderr, flush=True)
    if _case_file:
        with contextlib.suppress(OSError), open(_case_file, "w", encoding="utf-8") as fh:
            fh.write(marker + "\n")


def quiet_case_markers() -> None:
    """No ``KW-CASE-START`` lines from this process: it runs for a person, not the worker."""
    global _case_markers
    _case_markers = False


def blank_record(spec: CaseSpec, suite: str, cid: str, backend: str) -> ResultRecord:
    """The case's record before anything ran: ``error`` until something better is known."""
    return ResultRecord.for_case(suite, cid, spec.kernel, backend, spec.params)


def checked_case(
    spec: CaseSpec,
    impl: str,
    device: torch.device,
    seed: int | None = None,
    spent: dict[str, float] | None = None,
) -> tuple[Any, dict[str, Any], Correctness]:
    """The implementation, fresh inputs, and one checked call against the reference.

    Fresh random inputs (a new seed each time unless ``seed`` is given: the paired
    mode gives both sides, and every process pair, the same one, so their errors
    are on identical inputs and can be compared), the output poisoned before the
    call, the error against a float32 (float64 on the CPU) reference bounded by
    the low-precision reference's own error at the floor of the dtype the case
    computes in (``correctness.py``). Shared by the runner and the paired mode, so
    both refuse to time a wrong result alike.

    ``spent``, when given, receives where the check's seconds went (``CHECK_PARTS``):
    on the H200 (2026-12-04) SDPA prefill's check was 1.7 s of a 4.6 s case at the
    median, and only its total was known.
    """
    clock = _PartClock(device, spent)
    fn = load_impl(impl, spec.kernel)
    gen = torch.Generator(device=device)
    if seed is None:
        seed = random_seed()
    gen.manual_seed(seed)
    clock.lap("check_load_s")
    inputs = spec.make_inputs(gen, device)
    poison_(inputs["out"])
    clock.lap("check_inputs_s")
    with build_profile_skips():
        spec.invoke(fn, inputs)
    clock.lap("check_call_s")
    hi = torch.float64 if device.type == "cpu" else torch.float32
    ref = spec.reference(inputs, hi)
    lowp = spec.reference(inputs, spec.dtype) if spec.dtype not in (hi,) else None
    clock.lap("check_reference_s")
    dtype = compute_dtype(spec.dtype, inputs)
    correctness = check(inputs["out"], ref, lowp, dtype, spec.tolerance_kind)
    clock.lap("check_compare_s")
    return fn, inputs, correctness


# Where a correctness check's seconds go, in the order it spends them: the library's
# import, the inputs, the kernel's first call, the two references, the comparison.
CHECK_PARTS = (
    "check_load_s",
    "check_inputs_s",
    "check_call_s",
    "check_reference_s",
    "check_compare_s",
)


class _PartClock:
    """Laps of a check, each ended by a device sync so GPU work lands in its own part."""

    def __init__(self, device: torch.device, spent: dict[str, float] | None) -> None:
        self.device = device
        self.spent = spent
        self.last = time.perf_counter()

    def lap(self, part: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the kernel's call always was; cheap after
        now = time.perf_counter()
        if self.spent is not None:
            self.spent[part] = self.spent.get(part, 0.0) + now - self.last
        self.last = now


# Seeds of case inputs: 31 bits, exact in JSON (records carry them) and in any reader.
SEED_SPACE = 2**31


def random_seed() -> int:
    """A fresh seed for a case's inputs."""
    return int.from_bytes(os.urandom(8), "little") % SEED_SPACE


def _peaks(device: torch.device, dev_info: dict[str, Any], skip: bool) -> dict[str, Any] | None:
    """Measured ceilings of this GPU (probed once, cached by UUID); None on the CPU."""
    if device.type != "cuda" or skip:
        return None
    peaks = device_peaks(device, str(dev_info.get("uuid") or dev_info.get("name")))
    dev_info["peaks"] = {
        k: peaks[k] for k in ("copy_gbps", "bf16_tflops", "fp8_tflops") if k in peaks
    }
    return peaks


def throughput(flops: float, nbytes: float, seconds: float) -> Throughput:
    return Throughput(
        flops=flops, bytes=nbytes, tflops=flops / seconds / 1e12, gbps=nbytes / seconds / 1e9
    )


def _tail(text: str, limit: int = 4000) -> str:
    return text[-limit:]


def entry() -> None:
    raise SystemExit(main())


if __name__ == "__main__":
    entry()


__all__: list[Any] = [
    "CASE_MARKER",
    "CHECK_PARTS",
    "bench",
    "build_parser",
    "checked_case",
    "device_problem",
    "main",
    "quiet_case_markers",
    "run_case",
    "summary",
]
