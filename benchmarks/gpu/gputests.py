"""``gputests``: the ``@pytest.mark.gpu`` tests, with JUnit XML and a JSON summary.

Runs ``tests/kernels/test_gpu_kernels.py``, ``test_gpu_adapters.py`` and
``test_gpu_cutlass_dsl.py`` (or ``--file``) with ``-m gpu`` in the device python,
bounded by the deadline. Libraries under test join the path: ``--flashinfer VERSION``
installs the carried wheel, ``--with-path DIR`` adds a built library (an FA3 build
from ``libraries``; ``cutlass-dsl`` passes the CuTe DSL's folders this way).
Without a GPU every test skips (``tests/conftest.py``), which is what ``--cpu``
shows: the plumbing, not the kernels.
"""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "gputests"
HELP = "the @pytest.mark.gpu tests (JUnit XML + JSON)"
FILES = (
    "tests/kernels/test_gpu_kernels.py",
    "tests/kernels/test_gpu_adapters.py",
    "tests/kernels/test_gpu_cutlass_dsl.py",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", action="append", help=f"test files (default {' '.join(FILES)})")
    p.add_argument("-k", dest="keyword", help="pytest -k expression")
    p.add_argument("--flashinfer", metavar="VERSION", help="carried FlashInfer on the path")
    p.add_argument("--with-path", action="append", default=[], help="more PYTHONPATH entries")
    p.add_argument("--test-timeout", type=float, default=150, help="seconds per test")


def parse_junit(path: Path) -> dict[str, Any]:
    """Counts and one entry per test case from a JUnit XML file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        return {"error": f"no JUnit XML: {exc}", "cases": []}
    cases: list[dict[str, Any]] = []
    for tc in root.iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "")[:300]
                break
        cases.append(
            {
                "test": f"{tc.get('classname')}::{tc.get('name')}",
                "outcome": outcome,
                "seconds": float(tc.get("time") or 0),
                "message": message,
            }
        )
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    return {"counts": counts, "cases": cases}


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    extra = list(args.with_path)
    notes: list[str] = []
    if args.flashinfer:
        path, why = host.flashinfer(ctx, args.flashinfer)
        notes.append(why)
        if path:
            extra.append(path)
    junit = ctx.logs / "gputests.xml"
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", *(args.file or FILES)]
    argv += ["-q", "-rs", "-p", "no:cacheprovider", "-o", "addopts=", f"--junitxml={junit}"]
    argv += [f"--timeout={int(args.test_timeout)}"]
    if args.keyword:
        argv += ["-k", args.keyword]
    env = {}
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([os.environ.get("PYTHONPATH", ""), *extra])
    step = ctx.run("pytest", argv, ctx.left(), reserve=5, env=env)
    summary = parse_junit(junit)
    result = {"rc": step.rc, "timed_out": step.timed_out, "junit": junit.name, **summary}
    result["notes"] = notes
    counts = summary.get("counts", {})
    table = [
        "  ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no tests ran",
        f"pytest rc {step.rc}{' (timed out)' if step.timed_out else ''} in {step.seconds:.0f} s",
    ]
    for c in summary.get("cases", []):
        if c["outcome"] in ("failed", "error"):
            table.append(f"  {c['outcome']:<7} {c['test'][:90]}  {c['message'][:80]}")
    return result, table
