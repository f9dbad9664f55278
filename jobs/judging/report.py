"""Run summaries for people (tables) and for programs (JSON)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Result, Run

MOVED = ("regression", "improvement", "broken", "error")


def run_summary(session: Session, run: Run, *, all_cases: bool = True) -> dict[str, Any]:
    rows = session.execute(
        select(Result, Case)
        .join(Case, Result.case_id == Case.id)
        .where(Result.run_id == run.id)
        .order_by(Case.kernel, Case.label)
    ).all()
    cases = []
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
                "error": result.error,
            }
        )
    commit = run.commit
    return {
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
        "cases": cases,
    }


def format_run(summary: dict[str, Any]) -> str:
    head = (
        f"run {summary['id']}  {summary['repository']}@{(summary['commit'] or '-')[:12]}  "
        f"status={summary['status']}  verdict={summary['verdict']}  worker={summary['worker']}"
    )
    lines = [head]
    if summary["message"]:
        lines.append(f"  {summary['message']}")
    if summary["error"]:
        lines.append(f"  error: {summary['error'].splitlines()[0] if summary['error'] else ''}")
    if summary["cases"]:
        lines.append(f"  {'kernel':<10} {'status':<6} {'verdict':<12} {'median':>11} {'ratio':>7}")
    for c in summary["cases"]:
        med = f"{c['median_s'] * 1e3:.3f} ms" if c["median_s"] else "-"
        ratio = f"{c['ratio']:.3f}" if c["ratio"] else "-"
        extra = f"  {c['error'][:60]}" if c["error"] else ""
        lines.append(
            f"  {c['kernel']:<10} {c['status']:<6} {c['verdict'] or '-':<12} {med:>11} "
            f"{ratio:>7}{extra}"
        )
    return "\n".join(lines)
