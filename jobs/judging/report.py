"""Run summaries for people (tables) and for programs (JSON)."""

from __future__ import annotations

import textwrap
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.bisect import Bisection
from kernelwatch.db.models import Case, Result, Run
from kernelwatch.jobs.judging.verdicts import plumbing_only
from kernelwatch.kernels.record import telemetry_counts, telemetry_of
from kernelwatch.kernels.units import ratio_text
from kernelwatch.kernels.verdict import MOVED

# Width of wrapped error text: whole messages, never cut (issue 18: ~60 characters was).
WRAP = 100


def error_lines(text: str | None, indent: str = "    ") -> list[str]:
    """The whole of an error (a traceback, pip's message), each line wrapped to ``WRAP``.

    Blank lines are dropped; nothing is cut. ``show``, ``gate`` and the PR comment's
    details read errors through here.
    """
    out: list[str] = []
    for line in (text or "").strip().splitlines():
        if not line.strip():
            continue
        lead = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(
            line.strip(),
            WRAP,
            initial_indent=indent + lead,
            subsequent_indent=indent + lead + "  ",
            break_long_words=True,
            break_on_hyphens=False,
        )
    return out


def no_telemetry_text(off: int, timed: int) -> str:
    """What a GPU run timed without NVML means, for ``show`` and the PR comment alike."""
    return (
        f"GPU telemetry off for {off} of {timed} timed case{'s' if timed != 1 else ''}: "
        "NVML was not available to the suite (install kernelwatch[gpu], i.e. nvidia-ml-py), "
        "so no clock floor or throttle guard checked these timings"
    )


def run_summary(session: Session, run: Run, *, all_cases: bool = True) -> dict[str, Any]:
    rows = session.execute(
        select(Result, Case)
        .join(Case, Result.case_id == Case.id)
        .where(Result.run_id == run.id)
        .order_by(Case.kernel, Case.label)
    ).all()
    cases = []
    telemetry = telemetry_counts([result.record for result, _ in rows])
    for result, case in rows:
        if not all_cases and result.verdict not in MOVED:
            continue
        cases.append(
            {
                "case_id": case.id,
                "kernel": case.kernel,
                "backend": case.backend,
                "params": case.params,
                "status": result.status,
                "verdict": result.verdict,
                "median_s": result.median_s,
                "ratio": result.ratio,
                "ratio_ci": [result.ratio_ci_low, result.ratio_ci_high]
                if result.ratio is not None
                else None,
                "tflops": result.tflops,
                "gbps": result.gbps,
                "telemetry": telemetry_of(result.record),
                "error": result.error,
            }
        )
    commit = run.commit
    extra: dict[str, Any] = {}
    if run.options.bisection_id is not None:  # a step of a bisection names it
        extra["bisection"] = _bisection(session, run.options.bisection_id)
    return {
        **extra,
        "id": run.id,
        "repository": run.repository.name,
        "commit": commit.sha if commit else None,
        "message": (commit.message.splitlines() or [""])[0] if commit else "",
        "baseline": run.baseline_sha,
        "status": run.status,
        "verdict": run.verdict,
        "worker": run.worker,
        "device_class": run.device_class,
        "error": run.error,
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
        # GPU timings NVML watched (live) or not (off); both 0 on a CPU run
        "telemetry": telemetry,
        "cases": cases,
    }


def _bisection(session: Session, bisection_id: int) -> dict[str, Any]:
    """The bisection a step run belongs to, as ``show`` names it."""
    row = session.get(Bisection, bisection_id)
    if row is None:
        return {"id": bisection_id}
    return {
        "id": row.id,
        "status": row.status,
        "good": row.good_sha,
        "bad": row.bad_sha,
        "culprit": row.culprit_sha,
    }


def format_run(summary: dict[str, Any]) -> str:
    head = (
        f"run {summary['id']}  {summary['repository']}@{(summary['commit'] or '-')[:12]}  "
        f"status={summary['status']}  verdict={summary['verdict']}  worker={summary['worker']}"
    )
    lines = [head]
    b = summary.get("bisection")
    if b:
        lines.append(
            f"  step of bisection {b['id']} ({b.get('status', '?')}, "
            f"{str(b.get('good') or '')[:12]}..{str(b.get('bad') or '')[:12]}"
            + (f", culprit {str(b['culprit'])[:12]}" if b.get("culprit") else "")
            + "): never this commit's gate result"
        )
    if summary["message"]:
        lines.append(f"  {summary['message']}")
    tele = summary.get("telemetry") or {}
    if tele.get("off"):
        lines.append(f"  warning: {no_telemetry_text(tele['off'], tele['off'] + tele['live'])}")
    if summary["error"]:
        lines.append("  error:")
        lines += error_lines(summary["error"], "    ")
    if summary["cases"]:
        lines.append(f"  {'kernel':<10} {'status':<6} {'verdict':<12} {'median':>11}  ratio")
    for c in summary["cases"]:
        med = f"{c['median_s'] * 1e3:.3f} ms" if c["median_s"] else "-"
        lo, hi = c["ratio_ci"] or (None, None)
        ratio = ratio_text(c["ratio"], lo, hi) if c["ratio"] else "-"
        if c["ratio"] and plumbing_only(str(summary.get("device_class", "")), c["verdict"] or ""):
            ratio += "  CPU: plumbing only"
        lines.append(
            f"  {c['kernel']:<10} {c['status']:<6} {c['verdict'] or '-':<12} {med:>11}  {ratio}"
        )
        lines += error_lines(c["error"], "      ")
    return "\n".join(lines)
