"""The result record: the wire format between the suite runner, the worker and the database.

One record per (case, measurement). The schema is versioned; consumers reject a
schema they do not know instead of guessing. Field meanings are the contract in
``design.md`` ("Result record"); every timing keeps its raw samples so that any
later analysis can be redone from the record alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from typing import Any, Literal, TypeVar, get_args, get_origin

from kernelwatch.kernels.devclass import processor

SCHEMA_VERSION = 1

Status = Literal["pass", "fail", "error", "skip"]

# Whether NVML watched a GPU timing (``ResultRecord.telemetry``). ``live``: clocks,
# temperature and throttle reasons were read while it ran, so the clock floor and the
# throttle guard were on and ``reliable`` means something. ``off``: timed on a GPU with
# no telemetry (nvidia-ml-py missing, NVML failing): nothing could mark it unreliable.
TelemetryState = Literal["live", "off"]

# The parameters that identify a case (``{"rows": 4, "dtype": "float16"}``): JSON
# values by name, hashed into the case id. The one alias for them, here because the
# record carries them and this module is free of torch; ``suite.CaseSpec`` is a case
# of a suite (parameters plus the callables that run it) and ``db.models.Case`` is
# the stored row of a case id: different things, different names.
CaseParams = dict[str, Any]


class RecordError(ValueError):
    """A result record that does not have this schema's shape; the message names the field."""


def canonical_params(params: CaseParams) -> str:
    """Parameters as a canonical JSON string: sorted keys, no whitespace.

    Two spellings of the same case (key order, ``1`` vs ``1``) must hash alike.
    """
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def case_label(params: Mapping[str, Any]) -> str:
    """A case's readable label, ``k=v`` by sorted key: what ``Case.label`` stores and what a
    bisection's or a threshold rule's case pattern is matched against."""
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def case_id(kernel: str, backend: str, params: CaseParams) -> str:
    """Stable id of a case: the first 16 hex digits of sha256(kernel|backend|params)."""
    text = f"{kernel}|{backend}|{canonical_params(params)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Correctness:
    """How the output compared with a high-precision reference.

    errors: named error measures (``max_abs``, ``rel_l2``, ...) of the output.
    bound: the largest ``rel_l2`` accepted for this dtype (see ``correctness.py``).
    passed: every output element was written, finite and within the bound.
    detail: a readable reason when ``passed`` is false.
    k: the factor over PyTorch's own low-precision error that the bound allowed
       (``correctness.K_FACTOR``: 2 attention, 3 KV-cache paths, 4 FP8; 0 unknown).
    """

    errors: dict[str, float]
    bound: float
    passed: bool
    detail: str = ""
    k: float = 0.0


@dataclass
class Timing:
    """Time per call of the kernel under test. Lower is better.

    unit: ``"s"``; samples are seconds per call, every raw sample kept (after
    discarding throttled ones, counted in ``discarded``).
    median, ci_low, ci_high: the median and its confidence interval (``ci_level``).
    n: number of samples kept. cold_l2: L2 flushed before each sample.
    cuda_graph: samples replay a CUDA graph of ``calls_per_sample`` calls.
    stop_reason: what ended sampling (``"converged"``, ``"budget"``, ``"max_samples"``).
    timer: ``"cuda_event"`` on a GPU, ``"host_cpu"`` (process CPU time) on the CPU path.
    host_launch_s: the host's median seconds to queue one call (the Python wrapper and
    the driver's launch), not in ``median``: the samples time the GPU only (the host
    guard queues a spin first). An eager caller waits on it where it exceeds the GPU
    time; None on the CPU path, where the host's time is what is timed.
    """

    unit: str
    samples: list[float]
    median: float
    ci_low: float
    ci_high: float
    n: int
    cold_l2: bool
    cuda_graph: bool
    stop_reason: str
    timer: str
    calls_per_sample: int = 1
    ci_level: float = 0.95
    discarded: int = 0
    warmup_s: float = 0.0
    total_s: float = 0.0
    host_launch_s: float | None = None


@dataclass
class Remeasure:
    """An unpaired run's independent re-measure of a case (design.md: a run-level
    ``fail`` needs the blocking case confirmed). The worker measures a case whose
    comparison with its baseline came out a regression once more, in a fresh runner
    process, before it ends the job; the rule keeps ``regression`` only where the
    re-measure's comparison says so too (``verdict.confirm``).

    status: the re-measure's record status (``pass`` with a timing, else why not).
    """

    status: str
    timing: Timing | None = None
    error: str = ""


@dataclass
class Throughput:
    """Achieved rates from the case's FLOP and byte counts over the median time.

    pct_of_peak is against the device's measured ceiling (``peaks``), not a datasheet.
    """

    flops: float
    bytes: float
    tflops: float
    gbps: float
    pct_of_peak: float | None = None
    bound_by: str | None = None


@dataclass
class PairedStage:
    """One stage of a paired verdict (``PairedSection.stage1`` / ``confirmation``).

    Stage 1 is the measurement with its re-measures; a stage-1 verdict that would
    block is confirmed by a second, independent stage (fresh processes, new inputs
    from its own ``seed``, its own groups). verdict: the stage's word (accuracy
    first, then time); timing_verdict: the interval rule's; accuracy_verdict:
    ``less_accurate`` or ``unchanged`` with ``accuracy_growth`` (candidate error
    over baseline error per measure). excluded_effect: a relative change beyond
    ±this is ruled out by the interval. reliable: no block ran throttled
    (``throttled_blocks`` did). baseline_errors/candidate_errors: each side's
    check on this stage's inputs (``correctness.check`` errors). costs: seconds by
    where they went (setup_s, check_s, screen_s, blocks_s; ``paired.PairedResult``).
    resetups / respawns / excluded_pairs / screen: the screen's work (sides set up
    again, of those in a new process, pairs left out, and each side's deviation from
    its role's lower quartile per round).
    """

    verdict: str
    timing_verdict: str
    accuracy_verdict: str
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    excluded_effect: float | None = None
    groups: int = 0
    attempts: int = 0
    seconds: float | None = None
    seed: int | None = None
    reliable: bool = True
    throttled_blocks: int = 0
    accuracy_growth: dict[str, float | None] = field(default_factory=dict)
    baseline_errors: dict[str, float | None] = field(default_factory=dict)
    candidate_errors: dict[str, float | None] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    resetups: int = 0
    respawns: int = 0
    excluded_pairs: int = 0
    screen: list[dict[str, Any]] = field(default_factory=list)
    # timed samples the host queued after their start event fired (timing.HostGuard):
    # taken again with a longer spin, or kept at the spin's cap (host time inside)
    host_late_retaken: int = 0
    host_late_kept: int = 0
    # groups left out of the verdict for such kept samples (``paired.on_time_groups``)
    host_late_groups: int = 0


@dataclass
class PairedSection:
    """The paired mode's comparison with the baseline (``kernels/paired_suite.py``).

    The baseline and this candidate were measured interleaved on one GPU; the
    ratio is candidate/baseline time (above 1: slower), with its interval at
    ``confidence`` over ``groups`` groups. It is the shape ``paired_suite`` writes,
    not ``paired.PairedResult`` (that is one attempt's raw outcome): a section also
    exists, with ``verdict`` and ``note`` only, when no time comparison was made
    (a side broke, crashed or could not run the case).

    verdict: regression | less_accurate | improvement | unchanged | inconclusive |
        broken | error, None for a skipped case. attempts: measurements made (re-measures included).
    min_effect: the threshold the verdict was judged at (analysis re-judges the
        interval when the case's threshold differs).
    baseline_median, candidate_median: seconds per call of each side's blocks.
    group_ratios: the ratio of each group; group_pairs: the process pair of each;
        pairs: process pairs per role. baseline_blocks: the baseline's block medians.
    clocks: SM clocks seen (MHz). note: why no comparison was made, when none was.
    baseline_library: {name, version, commit} of the baseline side.
    baseline_environment: the baseline side's {python, torch, triton, ...} (the record's
        ``environment`` is the candidate side's).
    """

    verdict: str | None = None
    attempts: int = 0
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    min_effect: float | None = None
    groups: int | None = None
    seconds: float | None = None
    stop_reason: str | None = None
    baseline_median: float | None = None
    candidate_median: float | None = None
    group_ratios: list[float | None] = field(default_factory=list)
    pairs: int | None = None
    group_pairs: list[int] = field(default_factory=list)
    baseline_blocks: list[float | None] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)
    note: str = ""
    baseline_library: dict[str, Any] = field(default_factory=dict)
    baseline_environment: dict[str, Any] = field(default_factory=dict)
    # Accuracy, telemetry and the two stages (issue 13). seed: of both sides' inputs
    # in stage 1. reliable: no block ran throttled (else at worst inconclusive).
    # timing_verdict / accuracy_verdict: stage 1's two findings behind ``verdict``
    # (``less_accurate``: error grew beyond the margin over the baseline's on the
    # same inputs, ``accuracy_detail`` says by how much). baseline_correctness: the
    # baseline's check (the candidate's is the record's ``correctness``).
    # excluded_effect/detail: what the interval rules out ("a change beyond ±2.1 %
    # is excluded"). stage1, confirmation: see ``PairedStage``.
    seed: int | None = None
    reliable: bool = True
    throttled_blocks: int = 0
    timing_verdict: str | None = None
    accuracy_verdict: str | None = None
    accuracy_detail: str = ""
    baseline_correctness: Correctness | None = None
    excluded_effect: float | None = None
    detail: str = ""
    stage1: PairedStage | None = None
    confirmation: PairedStage | None = None
    # The price (issue 25): gpu_s is the GPU wall time the case held the card, from
    # the end of the previous case to its record (side start-up it waited for, set-up,
    # check, screen, blocks, re-measures, confirmation); cost breaks it down:
    # process_start_s, cuda_context_s, restart_s, prewarm_s (the later cases set up
    # ahead, ``paired_suite._Sides.prewarm``), setup_s, check_s, screen_s, blocks_s,
    # confirmation_s, wall_s. A case the run's GPU budget left unmeasured is
    # ``inconclusive`` with a ``note`` that says so (``--gpu-budget``).
    gpu_s: float | None = None
    cost: dict[str, float] = field(default_factory=dict)
    # The host's time to queue one call, per role (stage 1's set-up, ``kernels/launch.py``),
    # and launch_note where it changed enough to matter beside the GPU time: reported,
    # never judged (the verdict is GPU time's).
    baseline_host_launch_s: float | None = None
    candidate_host_launch_s: float | None = None
    launch_note: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedSection:
        """Parse a stored or written section; NaN stored as null reads back as None."""
        return _parse(cls, data, "paired")


# Decimals of the seconds in a record's breakdowns (``ResultRecord.cost``,
# ``PairedSection.cost`` and ``gpu_s``): a tenth of a millisecond
COST_DIGITS = 4


LIBRARY_FIELDS = ("name", "version", "commit")


def library_fields(library: Mapping[str, Any]) -> dict[str, Any]:
    """A record's ``library`` with every field design.md names, None where unknown (a
    commit build has no release version, a release no commit): what each writer of a
    record (the runner, the paired coordinator, the worker's crash record) sets."""
    return {**dict.fromkeys(LIBRARY_FIELDS), **library}


# What makes two measurements one series beside the case and the GPU class (design.md:
# "a series is (library, suite, case id, device class, environment class)"): the
# interpreter's minor version, torch (its build names the CUDA it was built for) and Triton.
ENVIRONMENT_CLASS = ("python", "torch", "triton")


def environment_class(record: Mapping[str, Any]) -> dict[str, str]:
    """The record's environment class: those of ``ENVIRONMENT_CLASS`` it names."""
    env = record.get("environment")
    if not isinstance(env, Mapping):
        return {}
    found = {k: str(env[k]) for k in ENVIRONMENT_CLASS if env.get(k)}
    if "python" in found:  # a patch release of the interpreter is the same class
        found["python"] = ".".join(found["python"].split(".")[:2])
    return found


def same_class(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Whether two environment classes are one: every part both name agrees (a record
    that does not name a part, an older one, is not told apart by it)."""
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def same_environment(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records are of one environment class (:func:`same_class`)."""
    return same_class(environment_class(a), environment_class(b))


# A record's free text, at most (characters): an exception's message is the kernel's to
# choose, and a 30 MB one made the record a line the worker does not read (an audit,
# 2026-12-05: the case vanished). The head of a message says what went wrong.
ERROR_MAX = 4000
LOG_TAIL_MAX = 64_000


def _capped(text: str, limit: int) -> str:
    """``text`` within ``limit``, and without NUL, which PostgreSQL's text and JSONB
    columns refuse (a kernel's exception message may hold one: its result was lost)."""
    text = text.replace("\x00", "\\0")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters cut]"


@dataclass
class ResultRecord:
    """One case's outcome: correctness first, then timing, with where it ran.

    A timing from a case whose correctness failed is kept for diagnosis but never
    used as a baseline or shown as a result. Build one with ``for_case`` (the
    runner's, the paired coordinator's and the worker's crash records alike) and
    read one with ``from_dict``, which checks every field against this schema.
    """

    suite: str
    case_id: str
    kernel: str
    backend: str
    params: CaseParams
    status: Status
    library: dict[str, Any] = field(default_factory=dict)
    correctness: Correctness | None = None
    timing: Timing | None = None
    throughput: Throughput | None = None
    device: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    log_tail: str = ""
    # paired mode only (kernels/paired_suite.py): the comparison with the baseline
    # measured interleaved with this candidate
    paired: PairedSection | None = None
    # ``live`` | ``off`` (``TelemetryState``) for a timing on a GPU; None where nothing
    # was timed on one (a CPU run, a case that failed before timing, an older record:
    # ``telemetry_of`` reads those from what they kept)
    telemetry: TelemetryState | None = None
    # unpaired runs only (worker/executor.py): the confirmation of a would-be regression
    remeasure: Remeasure | None = None
    # unpaired runs only (``runner.bench``; a paired record has ``paired.cost``): where
    # the case's seconds went. wall_s is the wall time the case held the card, from the
    # end of the previous case's record to its own (the first case's from the runner's
    # start of cases, so it includes loading its suite); the check's parts
    # (``runner.CHECK_PARTS``: check_load_s, check_inputs_s, check_call_s, the kernel's
    # first call with any JIT compile, check_reference_s, check_compare_s), those it
    # reached; timing_s, the measurement, where the case was timed. Empty in a crash
    # record (the worker's) and in older records. ``price_of`` adds up wall_s.
    cost: dict[str, float] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    @classmethod
    def for_case(
        cls, suite: str, cid: str, kernel: str, backend: str, params: CaseParams
    ) -> ResultRecord:
        """The case's record before anything ran: ``error`` until something better is known.

        The one constructor of a new record, so a record the worker writes for a
        case that crashed has the same fields as one the runner wrote.
        """
        return cls(
            suite=suite, case_id=cid, kernel=kernel, backend=backend, params=params, status="error"
        )

    def to_dict(self) -> dict[str, Any]:
        """The record as written and stored: ``error`` and ``log_tail`` cut to their caps."""
        data = asdict(self)
        data["error"] = _capped(self.error, ERROR_MAX)
        data["log_tail"] = _capped(self.log_tail, LOG_TAIL_MAX)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: Any) -> ResultRecord:
        """Parse a record, refusing schemas this code does not understand.

        Raises ``RecordError`` (a ``ValueError``) naming the first field that is
        missing, unknown or of the wrong type, so a consumer can store a readable
        error instead of a record it would misread.
        """
        if not isinstance(data, Mapping):
            raise RecordError(f"a result record is a JSON object, not {type(data).__name__}")
        if data.get("schema") != SCHEMA_VERSION:
            raise RecordError(
                f"unsupported result schema {data.get('schema')!r} "
                f"(this code reads {SCHEMA_VERSION})"
            )
        return _parse(cls, data, "record")


def paired_section(record: Mapping[str, Any] | None) -> PairedSection | None:
    """The paired section of a record as stored (``results.record``); None if unpaired.

    Stored records have NaN and infinities as null (``db.store.json_safe``), which
    the section's optional numbers accept, so this reads old rows as well.
    """
    data = (record or {}).get("paired")
    return None if data is None else PairedSection.from_dict(data)


def launch_notes(records: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """``"kernel label: note"`` for each paired record whose host launch changed enough
    to report (``PairedSection.launch_note``, ``kernels/launch.py``): never judged, shown
    beside the verdict by ``show`` and the PR comment."""
    out = []
    for record in records:
        section = paired_section(record)
        if section is not None and section.launch_note and record is not None:
            name = f"{record.get('kernel', '?')} {case_label(record.get('params') or {})}"
            out.append(f"{name.strip()}: {section.launch_note}")
    return out


@dataclass(frozen=True)
class AccuracyLoss:
    """What a case lost in accuracy against its baseline on the same inputs, from its
    paired section: ``detail`` as the check worded it ("error grew beyond 1.25x: rel_l2
    0.000377 vs 0.000287 (1.32x)"), ``growth`` the largest candidate-over-baseline error
    of stage 1's measures (None where not recorded)."""

    detail: str = ""
    growth: float | None = None


def accuracy_of(record: Mapping[str, Any] | None) -> AccuracyLoss:
    """The accuracy a case's record says it lost (``less_accurate``: ``accuracy_detail``
    of its paired section); empty where the record has none (unpaired, or no loss)."""
    section = paired_section(record)
    if section is None or not section.accuracy_detail:
        return AccuracyLoss()
    stage = section.stage1
    grown = [
        float(g)
        for g in (stage.accuracy_growth.values() if stage is not None else ())
        if isinstance(g, int | float) and math.isfinite(g)
    ]
    return AccuracyLoss(section.accuracy_detail, max(grown) if grown else None)


def check_errors(correctness: Correctness | Mapping[str, Any] | None) -> dict[str, float]:
    """A check's error measures (``Correctness.errors``) as numbers; a stored null (a NaN
    or an infinity, ``db.store.json_safe``) reads as NaN, an error that is not finite."""
    if isinstance(correctness, Correctness):
        errors: Any = correctness.errors
    else:
        errors = (correctness or {}).get("errors")
    if not isinstance(errors, Mapping):
        return {}
    out: dict[str, float] = {}
    for name, value in errors.items():
        if value is None:
            out[str(name)] = math.nan
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


def remeasure_of(record: Mapping[str, Any] | None) -> Remeasure | None:
    """An unpaired record's re-measure as stored; None where the worker made none."""
    data = (record or {}).get("remeasure")
    if data is None:
        return None
    try:
        return _parse(Remeasure, data, "remeasure")
    except RecordError as exc:  # a NaN stored as null in its timing: not a confirmation
        return Remeasure(status="error", error=f"unreadable re-measure: {exc}")


def remeasure_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """A case's record (as stored, JSON) as the re-measure of that case in another run:
    its status, its timing where it passed, its error (``Remeasure``'s stored form)."""
    status = str(record.get("status") or "error")
    timing = record.get("timing") if status == "pass" else None
    return {"status": status, "timing": timing, "error": str(record.get("error") or "")[:ERROR_MAX]}


def telemetry_of(record: Mapping[str, Any] | None) -> TelemetryState | None:
    """Whether a stored record's GPU timing was watched by NVML; None if it had none.

    The record's ``telemetry`` field where it has one. Else what the record kept says
    it: a runner's GPU timing carries ``device.nvml``; a paired comparison its candidate
    side's ``device.paired_describe.telemetry`` or, in records older than that, the SM
    clocks its blocks read (none: NVML was off). The store fills the field from here,
    so every stored record states it.
    """
    rec = record or {}
    states = get_args(TelemetryState)
    stated = rec.get("telemetry")
    if stated in states:
        return typing.cast(TelemetryState, stated)
    timing = rec.get("timing") or {}
    if timing.get("timer") != "cuda_event":
        return None
    device = rec.get("device") or {}
    if "nvml" in device:
        return "live" if device["nvml"] else "off"
    side = (device.get("paired_describe") or {}).get("telemetry")
    if side in states:
        return typing.cast(TelemetryState, side)
    paired = rec.get("paired") or {}
    if paired.get("ratio") is not None:
        return "live" if paired.get("clocks") else "off"
    return None


def telemetry_counts(records: Iterable[Mapping[str, Any] | None]) -> dict[str, int]:
    """How many records' GPU timings NVML watched (``live``) and how many it did not (``off``)."""
    counts = {"live": 0, "off": 0}
    for record in records:
        state = telemetry_of(record)
        if state is not None:
            counts[state] += 1
    return counts


@dataclass(frozen=True)
class Price:
    """What a set of cases cost and how many it decided (issue 25: a PR's price).

    cases: cases compared in paired mode, measured or left unmeasured by the run's GPU
    budget; undecided: those ``inconclusive`` (a neutral run), unmeasured ones included;
    unmeasured: left by the budget (``paired_suite.unmeasured``); gpu_s: the GPU wall
    seconds the cases held the card (``PairedSection.gpu_s``, start-up and both stages
    included), over those that recorded it.

    measured, measured_s: the unpaired cases that recorded the wall time they held the
    card (``ResultRecord.cost["wall_s"]``: checked, and timed where correct; whatever
    their status but a skip, as a paired skip is not counted either) and those seconds.
    unreached: cases a suite timeout ended the run before (a ``skip`` noted
    ``verdict.NOTE_UNREACHED``, ``worker/suite_process.unreached``), paired or not.
    An unpaired run decides nothing by itself (its cases are compared with another
    run's), so its price is what it measured and what that cost.
    """

    cases: int = 0
    undecided: int = 0
    unmeasured: int = 0
    gpu_s: float = 0.0
    measured: int = 0
    measured_s: float = 0.0
    unreached: int = 0

    @property
    def decided(self) -> int:
        return self.cases - self.undecided

    @property
    def counted(self) -> int:
        """Every case this price speaks of, paired or not: 0 says there is nothing to show."""
        return self.cases + self.measured + self.unreached

    def text(self, device_class: str = "") -> str:
        """``41 of 43 cases decided, 2 neutral; GPU time 1.2 min (1.7 s a case)`` for
        paired cases, ``204 cases measured; GPU time 4.2 min (1.2 s a case)`` for unpaired
        ones (both, ``; ``-joined, where a class's answer drew on both kinds of run); on
        the ``cpu`` class the time is the CPU's (no GPU was held)."""
        parts = []
        if self.cases:
            out = f"{self.decided} of {self.cases} cases decided"
            if self.undecided:
                out += f", {self.undecided} neutral"
                if self.unmeasured:
                    out += f" ({self.unmeasured} not measured: GPU budget spent)"
            parts.append(out + _held(self.gpu_s, self.cases, device_class))
        if self.measured:
            n = self.measured
            what = f"{n} {'unpaired ' if self.cases else ''}case{'s' if n != 1 else ''} measured"
            parts.append(what + _held(self.measured_s, n, device_class))
        if self.unreached:
            parts.append(f"{self.unreached} not reached: suite timed out")
        return "; ".join(parts)


def _held(seconds: float, cases: int, device_class: str) -> str:
    """``; GPU time 1.2 min (1.7 s a case)`` (CPU time on the ``cpu`` class); '' for none."""
    if not seconds:
        return ""
    total = f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"
    return f"; {processor(device_class)} time {total} ({seconds / cases:.1f} s a case)"


def price_of(records: Iterable[Mapping[str, Any] | None]) -> Price:
    """The :class:`Price` of ``records``: their paired cases (``paired.gpu_s``) and their
    unpaired ones that recorded their wall time (``cost.wall_s``); others are not counted."""
    from kernelwatch.kernels.verdict import NOTE_UNREACHED, SKIP_STATUS, CaseVerdict

    cases = undecided = unmeasured = measured = unreached = 0
    gpu_s = measured_s = 0.0
    for record in records:
        rec = record or {}
        if rec.get("status") == SKIP_STATUS and str(rec.get("error") or "").startswith(
            NOTE_UNREACHED
        ):
            unreached += 1
            continue
        data = rec.get("paired")
        if data is None:
            cost = rec.get("cost")
            wall = _seconds(cost.get("wall_s")) if isinstance(cost, Mapping) else None
            if rec.get("status") != SKIP_STATUS and wall is not None:
                measured += 1
                measured_s += wall
            continue
        if not isinstance(data, Mapping) or data.get("verdict") is None:
            continue  # a case a library could not run (skip)
        cases += 1
        if data.get("verdict") == CaseVerdict.INCONCLUSIVE:
            undecided += 1
            unmeasured += int(rec.get("status") == SKIP_STATUS)
        gpu_s += _seconds(data.get("gpu_s")) or 0.0
    return Price(cases, undecided, unmeasured, gpu_s, measured, measured_s, unreached)


def _seconds(value: Any) -> float | None:
    """A stored price field as seconds; None where it is none (null, a flag or text) or
    none could be (negative, NaN, infinite): records are written inside the sandbox, so
    a kernel's code could forge them, and its PR's price must not read "-3 s a case"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# --------------------------------------------------------------------------- validation

_D = TypeVar("_D")


_TYPE_HINTS: dict[object, dict[str, Any]] = {}


def _type_hints(cls: object) -> dict[str, Any]:
    """A record class's resolved field types, once per class: resolving them evaluates
    every annotation's string again (a third of ``kernelwatch import``'s parsing)."""
    hints = _TYPE_HINTS.get(cls)
    if hints is None:
        hints = _TYPE_HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _parse(cls: type[_D], data: Any, where: str) -> _D:
    """Build dataclass ``cls`` from ``data``, checking keys and types on the way."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _type_hints(cls)
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise RecordError(f"{where}: unknown field {unknown[0]!r}")
    values: dict[str, Any] = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise RecordError(f"{where}: missing field {name!r}")
            continue
        values[name] = _value(hints[name], data[name], f"{where}.{name}")
    return cls(**values)


def _value(tp: Any, value: Any, where: str) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _value(arg, value, where)
            except RecordError as exc:
                errors.append(str(exc))
        raise RecordError(errors[0] if errors else f"{where}: must not be null")
    if origin is Literal:
        if value not in args:
            allowed = ", ".join(map(str, args))
            raise RecordError(f"{where}: {value!r} is not one of {allowed}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        if args[0] is float:  # samples and clocks: thousands a record, checked inline
            return [_number(v, where, i) for i, v in enumerate(value)]
        return [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise RecordError(f"{where}: expected an object, got {type(value).__name__}")
        return {k: _value(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if is_dataclass(tp):
        return _parse(tp, value, where)  # type: ignore[arg-type]
    if tp is float:
        return _number(value, where)
    if tp in (int, str, bool):
        if isinstance(value, bool) != (tp is bool) or not isinstance(value, tp):
            raise RecordError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise RecordError(f"{where}: no rule for type {tp!r}")  # a field type this code forgot


def _number(value: Any, where: str, index: int | None = None) -> float:
    """A JSON number as a float (not a bool); ``where`` gets ``[index]`` only for the
    error, so a list of samples builds no path string per element."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        at = where if index is None else f"{where}[{index}]"
        raise RecordError(f"{at}: expected a number, got {value!r}")
    return float(value)
