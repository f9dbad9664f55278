"""``fi-repro``: FlashInfer's standalone reproductions, per carried release.

``docs/repro/flashinfer_fp8.py`` needs torch and FlashInfer only, no kernelwatch: it is
what a FlashInfer developer would run. The next sessions had it as a shell loop beside
the driver (``for v in 0.5.3 0.6.0; do PYTHONPATH=/tmp/fi-$v python3 ...``), whose
output lived only in the call's text. Here each release is installed from its carried
wheel (``host.flashinfer``, as ``prelude --flashinfer``), the script runs with that
release on its path, and every JSON line it printed (one per finding, printed as soon
as measured, so a run cut short keeps what it found) goes to ``fi-repro.json``; the
table shows the findings side by side.

    python -m benchmarks.gpu --deadline-s 300 prelude + fi-repro --flashinfer 0.6.0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "fi-repro"
HELP = "FlashInfer's standalone reproductions (docs/repro/) under each carried release"

SCRIPT = host.ROOT / "docs" / "repro" / "flashinfer_fp8.py"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flashinfer", metavar="VERSION", action="append",
                   help="a carried release (repeatable; default: every carried wheel)")  # fmt: skip
    p.add_argument("--script", type=Path, default=SCRIPT, help="the reproduction to run")
    p.add_argument("--version-timeout", type=float, default=240.0,
                   help="seconds per release (its first calls JIT-compile)")  # fmt: skip


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    versions = args.flashinfer or carried_versions()
    results: list[dict[str, Any]] = []
    for version in versions or [None]:
        path, why = host.flashinfer(ctx, version)
        label = version or "any"
        if path is None:
            results.append({"version": label, "skipped": why})
            continue
        env = {"PYTHONPATH": path} if path else {}
        step = ctx.run(f"repro-{label}", [sys.executable, str(args.script)],
                       args.version_timeout, env=env)  # fmt: skip
        results.append({"version": label, "install": why, "rc": step.rc,
                        "timed_out": step.timed_out, "skipped_step": step.skipped,
                        "findings": findings(Path(step.log)), "tail": step.tail})  # fmt: skip
    return {"script": str(args.script), "versions": results}, table(results)


def carried_versions() -> list[str]:
    """The releases of the FlashInfer wheels carried in ``.whl/``, oldest name first."""
    return sorted({w.name.split("-")[1] for w in host.WHEELS.glob("flashinfer_python-*.whl")})


def findings(log: Path) -> list[dict[str, Any]]:
    """The JSON objects the script printed, in order (``host.read_jsonl``: other lines,
    and a log the deadline left unwritten, pass)."""
    return [row for row in host.read_jsonl(log) if isinstance(row, dict)]


def table(results: list[dict[str, Any]]) -> list[str]:
    """Per release: each prefill finding's errors and each decode variant's time."""
    lines = []
    for r in results:
        if "skipped" in r:
            lines.append(f"flashinfer {r['version']}: skipped ({r['skipped']})")
            continue
        end = r["skipped_step"] or ("TIMED OUT" if r["timed_out"] else f"rc {r['rc']}")
        lines.append(f"flashinfer {r['version']}: {len(r['findings'])} finding(s), {end}")
        for f in r["findings"]:
            if "prefill" in f:
                p = f["prefill"]
                fp8 = p.get("rel_l2_fp8_vs_fp32_ref", float("nan"))
                fp16 = p.get("rel_l2_fp16_kernel_vs_fp32_ref", float("nan"))
                lines.append(f"  prefill seq {p.get('seq')} heads {p.get('heads')}: "
                             f"rel L2 fp8 {fp8:.3f}, fp16 kernel {fp16:.4f}")  # fmt: skip
            for variant, t in (f.get("decode") or {}).get("times", {}).items():
                said = f"{t['us']:.1f} us" if "us" in t else str(t.get("error", ""))[:120]
                lines.append(f"  decode {variant}: {said}")
        if not r["findings"] and r.get("tail"):
            lines.append(f"  {' '.join(r['tail'])[-300:]}")
    return lines
