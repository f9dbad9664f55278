"""Running the suite runner in a subprocess, one crash or hang costing one case.

The runner writes a ``KW-CASE-START <id>`` line to stderr before each case and a
record to its JSON-lines file after it. We watch both: a case that runs past
``case_timeout_s`` is killed with its whole process group; a process that dies
(segfault, CUDA error, out of memory) mid-case loses only that case. Either way
the case is recorded as ``error`` with the log tail, and the runner restarts
with the finished and failed cases skipped, until every case has a record.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.kernels.runner import CASE_MARKER
from kernelwatch.worker.process import describe_exit, die_with_parent, kill_group

MAX_RESTARTS = 50


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


@dataclass
class SuiteOutcome:
    records: list[dict[str, Any]]
    log: str
    aborted: str = ""  # reason the whole suite stopped early, if it did


def run_suite(
    req: SuiteRequest, on_record: Callable[[dict[str, Any]], None] | None = None
) -> SuiteOutcome:
    req.workdir.mkdir(parents=True, exist_ok=True)
    out_path = req.workdir / "records.jsonl"
    out_path.unlink(missing_ok=True)
    records: dict[str, dict[str, Any]] = {}
    skip: set[str] = set()
    logs: list[str] = []
    deadline = time.monotonic() + req.suite_timeout_s
    for attempt in range(MAX_RESTARTS):
        log_path = req.workdir / f"runner-{attempt}.log"
        code, current, why = _one_pass(req, out_path, log_path, skip, deadline)
        log_text = log_path.read_text(errors="replace")
        logs.append(log_text)
        for rec in _read_records(out_path):
            if rec["case_id"] not in records:
                records[rec["case_id"]] = rec
                if on_record:
                    on_record(rec)
        if code == 0 and not why:
            return SuiteOutcome(list(records.values()), _join(logs))
        if current is None or current[0] in records:
            # Died outside a case (import error, bad arguments): nothing to skip past.
            return SuiteOutcome(
                list(records.values()),
                _join(logs),
                aborted=f"suite runner {why or describe_exit(code)}\n{_tail(log_text, 3000)}",
            )
        cid, kernel, params = current
        rec = _error_record(
            req, cid, kernel, params, why or f"runner {describe_exit(code)}", log_text
        )
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


def _one_pass(
    req: SuiteRequest, out_path: Path, log_path: Path, skip: set[str], deadline: float
) -> tuple[int, tuple[str, str, str] | None, str]:
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
    argv += req.extra_args
    env = dict(req.env)
    if req.pythonpath:
        env["PYTHONPATH"] = ":".join(req.pythonpath)
    current: tuple[str, str, str] | None = None
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            argv,
            cwd=req.workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        pos = 0
        why = ""
        while True:
            code = proc.poll()
            text, pos = _read_from(log_path, pos)
            for line in text.splitlines():
                if line.startswith(CASE_MARKER):
                    parts = line.split(maxsplit=3)
                    current = (
                        parts[1],
                        parts[2] if len(parts) > 2 else "?",
                        parts[3] if len(parts) > 3 else "{}",
                    )
                    started = time.monotonic()
            if code is not None:
                break
            now = time.monotonic()
            if current is not None and now - started > req.case_timeout_s:
                why = f"case timed out after {req.case_timeout_s:.0f}s; killed"
            elif now > deadline:
                why = f"suite timed out after {req.suite_timeout_s:.0f}s; killed"
            if why:
                kill_group(proc)
                break
            time.sleep(0.1)
    return proc.returncode if proc.returncode is not None else -9, current, why


def _read_from(path: Path, pos: int) -> tuple[str, int]:
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(pos)
        text = fh.read()
    # only hand back complete lines
    cut = text.rfind("\n") + 1
    return text[:cut], pos + len(text[:cut].encode("utf-8", errors="replace"))


def _read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a crash
    return out


def _error_record(
    req: SuiteRequest, cid: str, kernel: str, params: str, why: str, log: str
) -> dict[str, Any]:
    try:
        parsed = json.loads(params)
    except json.JSONDecodeError:
        parsed = {}
    return {
        "schema": 1,
        "suite": req.suites[0] if req.suites else "",
        "case_id": cid,
        "kernel": kernel,
        "backend": req.backend or req.impl or "",
        "params": parsed,
        "status": "error",
        "library": req.library,
        "correctness": None,
        "timing": None,
        "throughput": None,
        "device": {},
        "environment": {},
        "error": why,
        "log_tail": _tail(log, 4000),
    }


def _tail(text: str, n: int) -> str:
    return text[-n:]


def _join(logs: list[str]) -> str:
    return "\n".join(f"--- runner pass {i} ---\n{t}" for i, t in enumerate(logs))[-200_000:]
