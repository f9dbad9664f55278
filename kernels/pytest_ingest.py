"""A library's own pytest suite as a kernelwatch correctness suite, one record per test.

Why: FlashAttention's and FlashInfer's test suites encode years of edge cases
(odd lengths, softcap, sliding windows) that no external grid repeats. Running
them at each commit or version, and storing every test as a result record,
turns "the tests pass" into per-test history: which test broke at which commit,
on which GPU, next to the performance series.

pytest runs in a subprocess (a crash in a CUDA test must not take the runner
down) with ``--junitxml``; each ``<testcase>`` becomes a ``ResultRecord`` with
status ``pass | fail | error | skip`` and the failure message as the reason.
The case id hashes the test's node id, so a parametrized test keeps its series
across runs. A run that dies before writing its report gives one ``error``
record with the log tail. Timing is not recorded: a test's duration is not a
kernel measurement.

Command line: ``python -m kernelwatch.kernels.pytest_ingest --out F [--suite NAME]
[--library JSON] -- PYTEST_ARGS...``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelwatch.kernels.record import Correctness, ResultRecord, Status, case_id

BACKEND = "pytest"


def run_pytest(
    args: Sequence[str],
    *,
    cwd: Path,
    suite: str = "pytest",
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
    library: dict[str, Any] | None = None,
) -> list[ResultRecord]:
    """Run ``pytest ARGS`` in ``cwd`` and return one record per test case."""
    with tempfile.TemporaryDirectory(prefix="kw-pytest-") as tmp:
        report = Path(tmp) / "junit.xml"
        argv = [python, "-m", "pytest", f"--junitxml={report}", "-o", "junit_family=xunit1"]
        argv += ["-p", "no:cacheprovider", *args]
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=env if env is not None else dict(os.environ),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            log, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            log, code = out + f"\npytest timed out after {timeout:.0f}s", -1
        if not report.exists():
            return [_run_error(suite, code, log, library)]
        return parse_junit(report.read_text(encoding="utf-8"), suite, library)


def parse_junit(
    text: str, suite: str = "pytest", library: dict[str, Any] | None = None
) -> list[ResultRecord]:
    """Records of a JUnit XML report (pytest's, xunit1 or xunit2 flavour)."""
    root = ET.fromstring(text)
    return [_record(tc, suite, library or {}) for tc in root.iter("testcase")]


STATUS: dict[str, Status] = {"failure": "fail", "error": "error", "skipped": "skip"}


def _record(tc: ET.Element, suite: str, library: dict[str, Any]) -> ResultRecord:
    node = nodeid(tc)
    outcome = next((child for child in tc if child.tag in STATUS), None)
    status: Status = "pass" if outcome is None else STATUS[outcome.tag]
    text = "" if outcome is None else outcome.text or ""
    detail = ""
    if outcome is not None:
        detail = outcome.get("message") or (text.strip().splitlines() or [""])[0]
    params = {"nodeid": node}
    return ResultRecord(
        suite=suite,
        case_id=case_id(node, BACKEND, params),
        kernel=tc.get("name", "?"),
        backend=BACKEND,
        params=params,
        status=status,
        library=dict(library),
        correctness=Correctness({}, 0.0, status in ("pass", "skip"), detail[:500]),
        error="" if status == "pass" else detail[:2000],
        log_tail=text[-4000:],
    )


def nodeid(tc: ET.Element) -> str:
    """pytest's node id from a testcase: ``path/test_x.py::Class::test_y[param]``.

    Exact with xunit1 reports (they carry ``file``); xunit2 ones only give a dotted
    class name, turned into a path as well as it can be.
    """
    name = tc.get("name", "")
    classname = tc.get("classname", "")
    file = tc.get("file")
    if file:
        module = file.removesuffix(".py").replace("/", ".")
        rest = classname.removeprefix(module).strip(".")
        parts = [file, *([rest.replace(".", "::")] if rest else []), name]
        return "::".join(parts)
    return "::".join(p for p in (classname.replace(".", "/"), name) if p)


def _run_error(suite: str, code: int, log: str, library: dict[str, Any] | None) -> ResultRecord:
    params = {"nodeid": "<session>"}
    why = f"pytest exited with code {code} without writing a report"
    return ResultRecord(
        suite=suite,
        case_id=case_id("<session>", BACKEND, params),
        kernel="<session>",
        backend=BACKEND,
        params=params,
        status="error",
        library=dict(library or {}),
        error=why,
        log_tail=log[-4000:],
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernelwatch.kernels.pytest_ingest")
    p.add_argument("--out", required=True, help="JSON-lines file to append to ('-': stdout)")
    p.add_argument("--suite", default="pytest")
    p.add_argument("--library", default="{}", help="JSON: {name, version, commit}")
    p.add_argument("--cwd", type=Path, default=Path.cwd())
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    rest = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    records = run_pytest(
        rest,
        cwd=args.cwd,
        suite=args.suite,
        timeout=args.timeout,
        library=json.loads(args.library),
    )
    lines = "".join(r.to_json() + "\n" for r in records)
    if args.out == "-":
        sys.stdout.write(lines)
    else:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(lines)
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(json.dumps(counts), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
