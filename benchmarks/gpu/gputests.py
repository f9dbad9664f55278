"""``gputests``: the ``@pytest.mark.gpu`` tests, with JUnit XML and a JSON summary.

Runs ``tests/kernels/test_gpu_kernels.py``, ``test_gpu_adapters.py`` and
``test_gpu_cutlass_dsl.py`` (or ``--file``) with ``-m gpu`` in the device python,
bounded by the deadline. Libraries under test join the path: ``--flashinfer VERSION``
installs the carried wheel, ``--with-path DIR`` adds a built library (an FA3 build
from ``libraries``; ``cutlass-dsl`` passes the CuTe DSL's folders this way). The
carried CuTe DSL examples join the path by themselves (``carried_examples``).
Without a GPU every test skips (``tests/conftest.py``), which is what ``--cpu``
shows: the plumbing, not the kernels.

``--sandbox bwrap`` runs pytest inside the worker's own sandbox (``Sandbox.wrap``: the
user the code under test runs as, the ``/dev/nvidia*`` binds, the allow-listed
environment, the memory and process limits), with bubblewrap from the carried ``.deb``.
A sandboxed suite has only ever run through the service; this shows the timer, NVML
telemetry and the paired sides' processes work confined as they do bare (issue 26).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.gpu import debs, host

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
    p.add_argument(
        "--sandbox",
        choices=("none", "bwrap"),
        default="none",
        help="run pytest inside the worker's sandbox (bubblewrap from the carried .deb)",
    )


def arguments(**given: Any) -> argparse.Namespace:
    """This sub-command's arguments for another that runs it as a step (``cutlass-dsl``):
    the parser's defaults, ``given`` over them, so a new option needs no second home."""
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p)
    ns = p.parse_args([])
    unknown = set(given) - set(vars(ns))
    if unknown:
        raise TypeError(f"gputests has no option {sorted(unknown)}")
    vars(ns).update(given)
    return ns


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


def _sandbox_setup(ctx: host.Context, mode: str) -> dict[str, Any]:
    """bubblewrap from the carried ``.deb``, kernelwatch importable from a clean
    environment (``host.site_namespace``), and a scratch folder whose ``out/`` the box
    may write; ``error`` where the sandbox cannot start here (it fails closed).

    The service's wheels first: the worker's sandbox module reads recipes (pydantic)
    and mirrors (SQLAlchemy), which a bare GPU image lacks (H100, 2026-12-06:
    ``No module named 'sqlalchemy'`` before any test ran)."""
    found: dict[str, Any] = {"mode": mode, "service_wheels": host.service_wheels(ctx)}
    from kernelwatch.worker.sandbox import Sandbox, SandboxUnavailable

    found["debs"] = debs.install(ctx).get("versions")
    found["namespace"] = host.site_namespace()
    os.environ["KW_SANDBOX"] = mode
    sandbox = Sandbox.from_env()
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        return {**found, "error": f"unavailable: {exc}"}
    scratch = Path(tempfile.mkdtemp(prefix="kw-gputests-box-"))
    out = scratch / "out"
    out.mkdir()
    sandbox.owner([out], within=scratch)
    found.update(scratch=str(scratch), out=str(out), uid=sandbox.uid)
    return found


def _boxed(
    argv: list[str], env: dict[str, str], extra: list[str], box: dict[str, Any]
) -> tuple[list[str], dict[str, str]]:
    """``argv`` wrapped as the worker wraps a suite: the tree and the libraries under
    test read-only, only ``out/`` writable, the environment allow-listed."""
    from kernelwatch.worker.sandbox import Sandbox, clean_env

    sandbox = Sandbox.from_env()
    scratch, out = Path(box["scratch"]), Path(box["out"])
    inner = clean_env({**env, "PYTHONDONTWRITEBYTECODE": "1"})
    return sandbox.wrap(
        argv,
        cwd=host.ROOT,
        env=inner,
        scratch=sandbox.scratch(scratch),
        writable=[out],
        readonly=[host.ROOT, *(Path(p) for p in extra)],
    )


def carried_examples(src: Path, given: list[str]) -> list[str]:
    """The carried CuTe DSL examples (``.src/cutedsl`` or ``.dsl/examples``), where
    ``--with-path`` did not name them: the DSL's GPU tests skip without them, as they
    did in a sandboxed H100 run of 2026-12-06 whose call carried ``.src`` but no flag."""
    from benchmarks.gpu.service import dsl_examples

    folder = dsl_examples(src)
    if folder is None or any(Path(g).resolve() == folder.resolve() for g in given):
        return []
    return [str(folder.resolve())]


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    extra = list(args.with_path)
    notes: list[str] = []
    for folder in carried_examples(host.SOURCES, extra):
        extra.append(folder)
        notes.append(f"the carried CuTe DSL examples on the path: {folder}")
    if args.flashinfer:
        path, why = host.flashinfer(ctx, args.flashinfer)
        notes.append(why)
        if path:
            extra.append(path)
    box: dict[str, Any] = {}
    junit = ctx.logs / "gputests.xml"
    if args.sandbox != "none":
        box = _sandbox_setup(ctx, args.sandbox)
        if "error" in box:
            return {"sandbox": box, "notes": notes}, [f"sandbox: {box['error']}"]
        junit = Path(box["out"]) / "gputests.xml"
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", *(args.file or FILES)]
    argv += ["-q", "-rs", "-p", "no:cacheprovider", "-o", "addopts=", f"--junitxml={junit}"]
    argv += [f"--timeout={int(args.test_timeout)}"]
    if args.keyword:
        argv += ["-k", args.keyword]
    env = {}
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([os.environ.get("PYTHONPATH", ""), *extra])
    if box:
        argv, env = _boxed(argv, env, extra, box)
    step = ctx.run("pytest", argv, ctx.left(), reserve=5, env=env)
    summary = parse_junit(junit)
    if box:
        with contextlib.suppress(OSError):  # the logs archive carries it home
            shutil.copy(junit, ctx.logs / "gputests.xml")
    result = {"rc": step.rc, "timed_out": step.timed_out, "junit": junit.name, **summary}
    result["notes"] = notes
    if box:
        result["sandbox"] = {k: v for k, v in box.items() if k not in ("out", "scratch")}
    counts = summary.get("counts", {})
    where = f" (inside {args.sandbox}, uid {box.get('uid')})" if box else ""
    table = [
        ("  ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no tests ran") + where,
        f"pytest rc {step.rc}{' (timed out)' if step.timed_out else ''} in {step.seconds:.0f} s",
    ]
    for c in summary.get("cases", []):
        if c["outcome"] in ("failed", "error"):
            table.append(f"  {c['outcome']:<7} {c['test'][:90]}  {c['message'][:80]}")
    return result, table
