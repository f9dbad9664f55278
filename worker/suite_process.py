"""Running the suite runner in a subprocess, one crash or hang costing one case.

The runner writes a ``KW-CASE-START <id>`` line to stderr before each case and a
record to its JSON-lines file after it. We watch both: a case that runs past
``case_timeout_s`` is killed with its whole process group; a process that dies
(segfault, CUDA error, out of memory) mid-case loses only that case. Either way
the case is recorded as ``error`` with the log tail, and the runner restarts
with the finished and failed cases skipped, until every case has a record.

Every line the runner writes is parsed with ``ResultRecord.from_dict`` before it
is handed on: a line of another schema (a runner newer or older than this
worker) or of no known shape becomes an ``error`` record that says why, so it is
neither stored as if it were understood nor allowed to crash the run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from kernelwatch.kernels.exits import describe_exit
from kernelwatch.kernels.record import (
    COST_DIGITS,
    RecordError,
    ResultRecord,
    case_id,
    library_fields,
)
from kernelwatch.kernels.runner import CASE_MARKER, PLAN_SUFFIX
from kernelwatch.kernels.verdict import NOTE_UNREACHED, SKIP_STATUS
from kernelwatch.worker.process import POLL_S, Supervised, open_regular, read_tail
from kernelwatch.worker.sandbox import Sandbox
from kernelwatch.worker.venvs import copy_jit_seed

MAX_RESTARTS = 50
# A result record is a few kB (a paired one, with its screen, tens of kB); a longer line
# of the records file is not one, and the worker never holds more of it than this. The
# code under test can write the file: 600 MB without a newline once took the worker from
# 0.2 to 2 GB, read whole at every poll.
RECORD_LINE_MAX = 8 * 2**20
RECORDS_MAX = 256 * 10**6  # of the whole file, read at the end of a pass
LOG_TAIL_BYTES = 200_000  # of each pass's log file, the part kept in memory and the database
# of the runner's plan (``<case file>.plan``: a JSON line per case, ~300 bytes): the code
# under test can write it, so the worker reads no more, and records no more unreached cases
PLAN_MAX_BYTES = 8 * 2**20
UNREACHED_MAX = 20_000


@dataclass
class SuiteRequest:
    python: str
    pythonpath: tuple[str, ...]
    env: dict[str, str]
    workdir: Path
    suites: list[str]
    impl: str | None
    backend: str | None
    library: dict[str, Any]
    case_timeout_s: float
    suite_timeout_s: float
    extra_args: list[str] = field(default_factory=list)
    # the paired mode's coordinator (kernels/paired_suite.py) speaks the same protocol
    module: str = "kernelwatch.kernels.runner"
    # environments the runner reads (bound read-only in the sandbox besides pythonpath)
    readonly: tuple[str, ...] = ()
    sandbox: Sandbox | None = None  # None: Sandbox.from_env()
    # the environment's JIT cache (``venvs.jit_home``), ``$HOME/.cache`` in the sandbox;
    # None: a fresh home only. Never one a paired run's two sides would share
    jit_cache: Path | None = None
    # a kept JIT cache copied once per run (``venvs.copy_jit_seed``) to a directory of the
    # run's own, which is then this run's ``jit_cache``; never written back, removed at
    # the end: a paired run's baseline builds
    jit_seed: Path | None = None


@dataclass
class SuiteOutcome:
    records: list[ResultRecord]
    log: str
    aborted: str = ""  # reason the whole suite stopped early, if it did


def run_suite(
    req: SuiteRequest, on_record: Callable[[ResultRecord], None] | None = None
) -> SuiteOutcome:
    req.workdir.mkdir(parents=True, exist_ok=True)
    out_path = req.workdir / "records.jsonl"
    out_path.unlink(missing_ok=True)
    # a resumed run's plan goes; within the run, a pass killed before it listed its cases
    # leaves the pass before's, a superset of them (``unreached`` skips what is recorded)
    _plan_file(req).unlink(missing_ok=True)
    deadline = time.monotonic() + req.suite_timeout_s
    seeded = _seeded_cache(req)
    try:
        outcome = _passes(replace(req, jit_cache=seeded) if seeded else req, on_record,
                          out_path, deadline)  # fmt: skip
    finally:
        if seeded is not None:
            shutil.rmtree(seeded, ignore_errors=True)
    if outcome.aborted and time.monotonic() >= deadline:
        why = f"{NOTE_UNREACHED} after {req.suite_timeout_s:.0f}s"
        for rec in unreached(req, {r.case_id for r in outcome.records}, why):
            outcome.records.append(rec)
            if on_record:
                on_record(rec)
    return outcome


def unreached(req: SuiteRequest, recorded: set[str], why: str) -> list[ResultRecord]:
    """The cases of the runner's last plan (``runner.note_plan``) that have no record,
    each a ``skip`` saying ``why``: a run its suite timeout ended names what it did not
    measure, where those cases would otherwise be missing without a word.

    The plan is written where the code under test can write too: it is read through
    :func:`open_regular` up to :data:`PLAN_MAX_BYTES`, and a line of another shape, a
    case whose id is not its kernel's, backend's and parameters' (``record.case_id``: a
    row cannot name another case), a case already recorded and anything past
    :data:`UNREACHED_MAX` cases are passed over. At worst a tampered plan names cases of
    its own library that the suite does not have as not reached.
    """
    try:
        with open_regular(_plan_file(req)) as fh:
            text = fh.read(PLAN_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    seen, out = set(recorded), []
    backend, library = _backend(req), library_fields(req.library)
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        suite, cid, kernel, params = (row.get(k) for k in ("suite", "case_id", "kernel", "params"))
        if not (isinstance(suite, str) and isinstance(cid, str) and isinstance(kernel, str)
                and isinstance(params, dict)) or cid in seen:  # fmt: skip
            continue
        try:
            if cid != case_id(kernel, backend, params):
                continue
        except (TypeError, ValueError):  # parameters that are no case's
            continue
        seen.add(cid)
        record = ResultRecord.for_case(suite, cid, kernel, backend, params)
        record.status = SKIP_STATUS
        record.library = library
        record.error = why
        out.append(record)
        if len(out) >= UNREACHED_MAX:
            break
    return out


def _seeded_cache(req: SuiteRequest) -> Path | None:
    """The run's own copy of ``req.jit_seed`` (made once, not per restarted pass), or None."""
    if req.jit_seed is None or req.jit_cache is not None:
        return None
    copy = req.workdir.parent / "jit-seed"
    shutil.rmtree(copy, ignore_errors=True)  # a resumed run's earlier copy
    copy_jit_seed(req.jit_seed, copy)
    return copy


def _passes(
    req: SuiteRequest,
    on_record: Callable[[ResultRecord], None] | None,
    out_path: Path,
    deadline: float,
) -> SuiteOutcome:
    """Runner passes until the suite is done, each restarted past a case that killed it."""
    records: dict[str, ResultRecord] = {}
    skip: set[str] = set()
    logs: list[str] = []
    for attempt in range(MAX_RESTARTS):
        log_path = req.workdir / f"runner-{attempt}.log"
        code, current, why, blamed, case_s = _one_pass(req, out_path, log_path, skip, deadline)
        log_text = read_tail(log_path, LOG_TAIL_BYTES)
        logs.append(log_text)
        read, unread = _read_records(out_path, req)
        for rec in read:
            if blamed and current is not None and rec.case_id == current[0]:
                continue  # its own record does not outweigh what it did
            if rec.case_id not in records:
                records[rec.case_id] = rec
                if on_record:
                    on_record(rec)
        if current is None or current[0] in records:
            # the stderr marker may be lost (redirected, or glued to the kernel's own
            # unended output): the runner noted the case in its file too
            noted = _noted_case(_case_file(req))
            if noted is not None and noted[0] not in records:
                current, case_s = noted, None  # when it began is not known
        if code == 0 and not why:
            if current is None or current[0] in records:
                return SuiteOutcome(list(records.values()), _join(logs), aborted=unread)
            # the process ended "cleanly" inside a case (os._exit(0), sys.exit(0) in a
            # kernel): the case is an error and the rest of the suite still runs
            why = "the runner exited with code 0 inside the case (the code under test ended it)"
        if current is None or current[0] in records:
            # Died outside a case (import error, bad arguments): nothing to skip past.
            said = f"suite runner {why or describe_exit(code)}\n{_tail(log_text, 3000)}"
            return SuiteOutcome(
                list(records.values()),
                _join(logs),
                aborted=f"{said}\n{unread}" if unread else said,
            )
        cid, kernel, params = current
        rec = _error_record(
            req, cid, kernel, params, why or f"runner {describe_exit(code)}", log_text
        )
        if case_s is not None:
            # what the case held the GPU for before it crashed or was killed: a run's
            # price counts it like any case's wall time (``record.Price``)
            rec.cost = {"wall_s": round(case_s, COST_DIGITS)}
        records[cid] = rec
        if on_record:
            on_record(rec)
        skip |= set(records)
        if time.monotonic() >= deadline:
            return SuiteOutcome(
                list(records.values()),
                _join(logs),
                aborted=f"suite timed out after {req.suite_timeout_s:.0f}s",
            )
    return SuiteOutcome(list(records.values()), _join(logs), aborted="too many runner restarts")


class PassEnd(NamedTuple):
    """How one runner pass ended: its exit code, the case it was in, and why it was
    stopped; ``blamed`` where the case caused the stop whether or not it got to write
    its record (a log flood), so the error stands in place of that record; ``case_s``
    the seconds from the case's marker to the pass's end, where that is known."""

    code: int
    current: tuple[str, str, str] | None
    why: str
    blamed: bool = False
    case_s: float | None = None


def _one_pass(
    req: SuiteRequest, out_path: Path, log_path: Path, skip: set[str], deadline: float
) -> PassEnd:
    argv = [
        req.python,
        "-m",
        req.module,
        "--out",
        str(out_path),
        "--library",
        json.dumps(req.library),
    ]
    for s in req.suites:
        argv += ["--suite", s]
    if req.impl:
        argv += ["--impl", req.impl]
    if req.backend:
        argv += ["--backend", req.backend]
    for cid in sorted(skip):
        argv += ["--skip-case", cid]
    noted = _case_file(req)
    noted.unlink(missing_ok=True)  # a link planted there goes, not what it names
    argv += ["--case-file", str(noted), *req.extra_args]
    env = dict(req.env)
    if req.pythonpath:
        env["PYTHONPATH"] = ":".join(req.pythonpath)
    box = req.sandbox or Sandbox.from_env()
    box.check()
    box.owner([req.workdir], within=req.workdir.parent)
    cache = req.jit_cache
    if cache is not None:
        box.owner([cache], within=cache.parent)
    scratch = box.scratch(req.workdir.parent)
    readonly = [Path(p) for p in (*req.readonly, *req.pythonpath) if p]
    argv, env = box.wrap(
        argv,
        cwd=req.workdir,
        env=env,
        scratch=scratch,
        writable=[req.workdir],
        readonly=readonly,
        cache=cache,
    )
    marker: list[tuple[str, str, str]] = []

    def on_marker(line: str) -> None:
        case = _marker_case(line)
        if case is not None:
            marker.append(case)

    current: tuple[str, str, str] | None = None
    started = time.monotonic()
    why = ""
    written = _RecordWatch(out_path)
    try:
        child = Supervised(
            argv,
            cwd=req.workdir,
            env=env,
            log_path=log_path,
            log_cap=box.log_cap_bytes,
            guard=box.guard([req.workdir, scratch, *([cache] if cache else [])]),
            watch=CASE_MARKER + " ",
            on_line=on_marker,
            signal_codes=box.confined,
            kill_on_cap=True,  # killed by the pump itself, before it reads on
        )
        while True:
            code = child.poll()
            while marker:
                current = marker.pop(0)
                started = time.monotonic()
            if current is not None and current[0] in written.new_case_ids():
                # the case has its record: what follows (the next marker, closing the
                # paired mode's side processes) is not this case's time
                current = None
            if code is not None:
                break
            now = time.monotonic()
            if current is not None and now - started > req.case_timeout_s:
                why = f"case timed out after {req.case_timeout_s:.0f}s; killed"
            elif now > deadline:
                why = f"suite timed out after {req.suite_timeout_s:.0f}s; killed"
            if why:
                child.kill()
                break
            time.sleep(POLL_S)
        code = child.finish()
        while marker:  # markers the pump read after the last poll: begun since it
            current = marker.pop(0)
            started = time.monotonic()
        if child.sink.capped:
            # the case that was printing when the log passed the cap, not the one the
            # polls last saw: the flood, its record and later cases may all have
            # come and gone between two polls
            why = f"log over the {box.log_cap_bytes / 1e6:g} MB cap; runner killed"
            flooder = _marker_case(child.sink.before_cap or "")
            if flooder is not None:
                return PassEnd(code, flooder, why, blamed=True)
        if child.stopped and not why:
            why = f"{child.stopped}; runner killed"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return PassEnd(code, current, why, case_s=time.monotonic() - started if current else None)


def _case_file(req: SuiteRequest) -> Path:
    """Where the runner notes each case as it starts (its ``--case-file``)."""
    return req.workdir / "current-case"


def _plan_file(req: SuiteRequest) -> Path:
    """Where the runner lists the cases of its pass (``runner.note_plan``)."""
    return req.workdir / f"current-case{PLAN_SUFFIX}"


def _marker_case(line: str) -> tuple[str, str, str] | None:
    """(case id, kernel, params JSON) of a marker line; None where it names no case."""
    parts = line.split(maxsplit=3)
    if len(parts) < 2 or parts[0] != CASE_MARKER:  # the prefix alone: not a marker
        return None
    return parts[1], parts[2] if len(parts) > 2 else "?", parts[3] if len(parts) > 3 else "{}"


def _noted_case(path: Path) -> tuple[str, str, str] | None:
    """The case the runner noted last in its file, if any (read bounded, never through
    a link: the code under test can write the work directory)."""
    try:
        fh = open_regular(path)
    except OSError:
        return None
    with fh:
        text = fh.read(64 * 1024).decode("utf-8", errors="replace")
    lines = text.strip().splitlines()
    return _marker_case(lines[-1]) if lines else None


class _RecordWatch:
    """The case ids of the records appended to the runner's file since the last look.

    Read from where the last look stopped, whole lines only, so a poll costs a
    ``stat`` while nothing new was written.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = _size(path)
        self.skipping = False  # inside a line longer than RECORD_LINE_MAX: not a record

    def new_case_ids(self) -> set[str]:
        if _size(self.path) <= self.offset:
            return set()
        try:  # O_NOFOLLOW: the code under test writes this directory
            fh = open_regular(self.path)
        except OSError:
            return set()
        with fh:
            fh.seek(self.offset)
            chunk = fh.read(RECORD_LINE_MAX)
        end = chunk.rfind(b"\n") + 1
        if end == 0:
            if len(chunk) == RECORD_LINE_MAX:  # no line end in a whole read: pass it by
                self.offset += len(chunk)
                self.skipping = True
            return set()
        self.offset += end
        lines = chunk[:end].splitlines()
        if self.skipping:  # the first line's end belongs to the long line passed by
            lines, self.skipping = lines[1:], False
        ids = set()
        for line in lines:
            try:
                data = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and isinstance(data.get("case_id"), str):
                ids.add(data["case_id"])
        return ids


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _read_records(path: Path, req: SuiteRequest) -> tuple[list[ResultRecord], str]:
    """The records written so far, each validated, and what of the file was not read
    (``_lines``); a line cut short by a crash is skipped."""
    if not path.exists():
        return [], ""
    out = []
    lines, unread = _lines(path)
    for line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        out.append(_validated(req, data, line))
    return out, unread


def _lines(path: Path) -> tuple[list[str], str]:
    """The file's lines up to ``RECORDS_MAX`` bytes, and what was not read, in words (""
    when all was): the code under test can write the file, so it may be a flood, or one
    line without an end. No more than ``RECORD_LINE_MAX`` bytes of a line are held."""
    limit, line_max = RECORDS_MAX, RECORD_LINE_MAX
    out: list[str] = []
    used = long_lines = 0
    try:  # O_NOFOLLOW: the code under test writes this directory
        fh = open_regular(path)
    except OSError:
        return out, ""
    with fh:
        while used <= limit:
            raw = fh.readline(line_max + 1)
            if not raw:
                break
            used += len(raw)
            if len(raw) <= line_max:
                out.append(raw.decode("utf-8", errors="replace").rstrip("\n"))
                continue
            long_lines += 1  # not a record: read past it, a piece at a time
            while raw and not raw.endswith(b"\n") and used <= limit:
                raw = fh.readline(line_max)
                used += len(raw)
    unread = []
    if long_lines:
        unread.append(f"{long_lines} line(s) over {line_max / 2**20:g} MiB, not records")
    if used > limit:
        unread.append(f"the file passed {limit / 1e6:g} MB and the rest was not read")
    return out, ("records file: " + "; ".join(unread)) if unread else ""


def _validated(req: SuiteRequest, data: Any, line: str) -> ResultRecord:
    """``data`` as a record, or an ``error`` record of its case saying what was wrong.

    A record without a usable case id is filed under an id made from the line, so
    it still shows up (as an error of kernel ``invalid-record``) instead of vanishing.
    """
    try:
        return ResultRecord.from_dict(data)
    except RecordError as exc:
        why = f"invalid result record from the runner: {exc}"
    fields = data if isinstance(data, dict) else {}
    cid = fields.get("case_id")
    if not isinstance(cid, str) or not cid:
        cid = "invalid-" + hashlib.sha256(line.encode()).hexdigest()[:8]
    kernel = fields.get("kernel")
    params = fields.get("params")
    return _error_record(
        req,
        cid,
        kernel if isinstance(kernel, str) and kernel else "invalid-record",
        json.dumps(params) if isinstance(params, dict) else "{}",
        why,
        line,
    )


def _error_record(
    req: SuiteRequest, cid: str, kernel: str, params: str, why: str, log: str
) -> ResultRecord:
    """The record of a case the runner could not report itself (crash, hang, bad line)."""
    try:
        parsed = json.loads(params)
    except json.JSONDecodeError:
        parsed = {}
    suite = req.suites[0] if req.suites else ""
    params_ = parsed if isinstance(parsed, dict) else {}
    record = ResultRecord.for_case(suite, cid, kernel, _backend(req), params_)
    record.library = library_fields(req.library)
    record.error = why
    record.log_tail = _tail(log, 4000)
    return record


def _backend(req: SuiteRequest) -> str:
    """The backend label the runner files its cases under (its ``--backend``, else
    ``--impl``), so the worker's own records hash to the same case ids."""
    return req.backend or req.impl or ""


def _tail(text: str, n: int) -> str:
    return text[-n:]


def _join(logs: list[str]) -> str:
    return "\n".join(f"--- runner pass {i} ---\n{t}" for i, t in enumerate(logs))[-200_000:]
