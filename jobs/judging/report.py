"""Run summaries for people (tables) and for programs (JSON).

``run_summary``/``format_run``: one run with every case (``kernelwatch show``, the REST
API). ``run_brief``/``format_briefs``: what a list of runs found, each with its moved and
broken cases, ratio and interval: the closing report of ``kernelwatch run --wait`` and of
the demo, one format for both. A case that could not be compared says why in words.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from kernelwatch.db.bisect import Bisection
from kernelwatch.db.build_log import EnvironmentBuild, environments, environments_text
from kernelwatch.db.config import get_settings
from kernelwatch.db.models import Case, Result, Run
from kernelwatch.db.run_options import run_subject
from kernelwatch.jobs.judging.analysis import case_threshold, run_thresholds
from kernelwatch.jobs.judging.verdicts import (
    answer_for,
    moved_text,
    plumbing_only,
    verdict_label,
)
from kernelwatch.kernels.record import (
    accuracy_of,
    launch_notes,
    price_of,
    remeasure_of,
    telemetry_counts,
    telemetry_of,
)
from kernelwatch.kernels.verdict import (
    FAIL_STATUS,
    MOVED,
    NOTE_BASELINE_BROKEN,
    NOTE_STILL_BROKEN,
    NOTE_UNCONFIRMED,
    PASS_STATUS,
    CaseVerdict,
)

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


def ratio_ci(result: Result) -> list[float | None] | None:
    """A compared case's ratio interval as ``[low, high]``; None where nothing was compared."""
    return [result.ratio_ci_low, result.ratio_ci_high] if result.ratio is not None else None


def run_summary(session: Session, run: Run, *, all_cases: bool = True) -> dict[str, Any]:
    base = aliased(Result)
    rows = session.execute(
        select(Result, Case, base.status, base.run_id)
        .join(Case, Result.case_id == Case.id)
        .outerjoin(base, base.id == Result.baseline_result_id)
        .where(Result.run_id == run.id)
        .order_by(Case.kernel, Case.label)
    ).all()
    cases = []
    telemetry = telemetry_counts([row[0].record for row in rows])
    thresholds = run_thresholds(run, get_settings())
    for result, case, base_status, base_run in rows:
        if not all_cases and result.verdict not in MOVED:
            continue
        accuracy = accuracy_of(result.record)
        cases.append(
            {
                "case_id": case.id,
                "kernel": case.kernel,
                "backend": case.backend,
                "label": case.label,
                "params": case.params,
                "status": result.status,
                "verdict": result.verdict,
                "median_s": result.median_s,
                "ratio": result.ratio,
                "ratio_ci": ratio_ci(result),
                # what a less_accurate case lost ("error grew beyond 1.25x: ..."), "" if none
                "accuracy": accuracy.detail,
                "accuracy_growth": accuracy.growth,
                "tflops": result.tflops,
                "gbps": result.gbps,
                "telemetry": telemetry_of(result.record),
                "error": result.error,
                "baseline_run": base_run,
                "note": _note(run, result, base_status),
                # the minimum effect the case is judged at (``.kernelwatch.toml``, default)
                "min_effect": case_threshold(thresholds, result),
            }
        )
    commit = run.commit
    judged = run.options.judged_with
    extra: dict[str, Any] = {}
    if run.options.bisection_id is not None:  # a step of a bisection names it
        extra["bisection"] = _bisection(session, run.options.bisection_id)
    if run.options.follow_up:  # a run the judgement of another asked for names that run
        extra["follow_up"] = {
            "kind": "baseline_remeasure"
            if run.options.baseline_for is not None
            else "confirmation",
            "of_run": run.options.baseline_for or run.options.confirms,
        }
    answer = answer_for(session, run)
    if answer is not None:  # the commit's composed answer, which this run may be part of
        extra["commit_answer"] = {
            "state": answer.state,
            "description": answer.description,
            "runs": list(answer.runs),
            "in_flight": list(answer.in_flight),
            "this_run": run.id in answer.runs,
        }
    return {
        **extra,
        "id": run.id,
        "repository": run.repository.name,
        "commit": commit.sha if commit else None,
        "message": (
            run_subject(run.options, commit.message if commit else None).splitlines() or [""]
        )[0],
        "baseline": run.baseline_sha,
        "status": run.status,
        "verdict": run.verdict,
        "worker": run.worker,
        "device_class": run.device_class,
        # whether CPU timings gated where the run was judged (None: not recorded)
        "cpu_timings_gate": judged.cpu_timings_gate if judged is not None else None,
        "trigger": run.trigger,
        "min_effect": thresholds.default,
        # the run's own runner arguments (--kernel, --case): what selected its cases
        "selection": list(run.options.bench_args),
        "error": run.error,
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
        # GPU timings NVML watched (live) or not (off); both 0 on a CPU run
        "telemetry": telemetry,
        # the run's coverage and GPU seconds (kernels.record.Price: a paired run's cases
        # decided, an unpaired run's cases measured), else None
        "price": _price(rows, run.device_class),
        # each commit environment the run used: built (seconds) or from the cache
        "environments": [asdict(b) for b in environments(run.build_log or "")],
        # cases whose host launch changed enough to report, never judged (kernels/launch.py)
        "launch": launch_notes(row[0].record for row in rows),
        "cases": cases,
    }


def _price(rows: Sequence[Any], device_class: str) -> dict[str, Any] | None:
    price = price_of(row[0].record for row in rows)
    if not price.counted:
        return None
    return {**asdict(price), "decided": price.decided, "text": price.text(device_class)}


def _note(run: Run, result: Result, base_status: str | None) -> str:
    """Why a measured case has no comparison (or what its verdict rests on), in words."""
    if result.status == FAIL_STATUS and result.verdict == CaseVerdict.UNCHANGED:
        return NOTE_STILL_BROKEN  # failed as its baseline did (``verdict.still_broken``)
    if result.status != PASS_STATUS or run.options.paired:
        return ""
    if result.verdict == CaseVerdict.UNCHANGED and base_status == "fail":
        return NOTE_BASELINE_BROKEN
    again = remeasure_of(result.record)
    if result.verdict == CaseVerdict.INCONCLUSIVE and again is not None:
        if again.status != PASS_STATUS or again.timing is None:
            why = again.error.splitlines()[0][:200] if again.error else "no timing"
            return f"{NOTE_UNCONFIRMED}: its re-measure ended {again.status} ({why})"
        return f"{NOTE_UNCONFIRMED}: its re-measure in a fresh process did not repeat it"
    if result.verdict is not None:
        return ""
    if not run.baseline_sha:
        return "not compared: its run had no baseline commit (a range's first, or a baseline)"
    if base_status is None:
        return (
            f"no run of the baseline {run.baseline_sha[:12]} measured this case: nothing to "
            "compare with"
        )
    return f"the baseline's measurement of this case is {base_status}: nothing to compare with"


def _pct(effect: float) -> str:
    """``1 %``, ``0.5 %``, ``100 %``: a minimum effect as people write it."""
    return f"{effect * 100:.3g} %"


def _other_effects(summary: dict[str, Any]) -> str:
    """`` (some cases at 2 %, 5 %)`` where per-suite or per-case thresholds differ."""
    effects = {c["min_effect"] for c in summary["cases"] if c.get("min_effect") is not None}
    others = sorted(effects - {summary["min_effect"]})
    return f" (some cases at {', '.join(_pct(e) for e in others)})" if others else ""


def run_brief(session: Session, run: Run) -> dict[str, Any]:
    """One run as ``run --wait`` and the demo report it: status, verdict, and the cases that
    moved or broke (ratio, interval, error), plus every case in brief (``--json``)."""
    summary = run_summary(session, run)
    dc = run.device_class
    gates = summary["cpu_timings_gate"]
    cases = [
        {
            "case_id": c["case_id"],
            "kernel": c["kernel"],
            "label": c["label"],
            "status": c["status"],
            "verdict": c["verdict"],
            "ratio": c["ratio"],
            "interval": c["ratio_ci"],
            "accuracy": c["accuracy"],
            "accuracy_growth": c["accuracy_growth"],
            "median_s": c["median_s"],
            "error": c["error"],
            "note": c["note"],
            "plumbing_only": plumbing_only(dc, c["verdict"] or "", gates),
        }
        for c in summary["cases"]
    ]
    rank = {v.value: i for i, v in enumerate(MOVED)}
    moved = sorted(
        (c for c in cases if c["verdict"] in rank),
        key=lambda c: (rank[c["verdict"]], -abs((c["ratio"] or 1) - 1), c["kernel"], c["label"]),
    )
    return {
        "id": run.id,
        "commit": summary["commit"],
        "message": summary["message"],
        "status": run.status,
        "verdict": run.verdict,
        "device_class": dc,
        "cpu_timings_gate": gates,
        "error": run.error or "",
        "moved": moved,
        "cases": cases,
    }


def format_briefs(briefs: list[dict[str, Any]]) -> str:
    """Per run one line, then its moved and broken cases with ratio and interval."""
    lines: list[str] = []
    for b in briefs:
        lines.append(
            f"run {b['id']:>5}  {str(b['commit'] or '')[:10]}  {b['status']:<10} "
            f"{b['verdict'] or '-':<8} {b['message'][:60]}"
        )
        lines += moved_lines(b["moved"], b["device_class"], b["cpu_timings_gate"])
        if b["error"] and b["status"] != "succeeded":
            lines += error_lines(b["error"], "      ")
    return "\n".join(lines)


def moved_lines(
    moved: list[dict[str, Any]], device_class: str, gates: bool | None = None
) -> list[str]:
    """``regression  rmsnorm  1.942× [1.900, 1.980] (+94.2 %)  rows=4096`` per moved case
    (``gates``: whether CPU timings gated where the run was judged, ``plumbing_only``)."""
    words = [verdict_label(device_class, m["verdict"], gates) for m in moved]
    width = max([12, *(len(w) for w in words)])
    out = []
    for m, word in zip(moved, words, strict=True):
        lo, hi = m["interval"] or (None, None)
        how = moved_text(m["verdict"], m["ratio"] or None, lo, hi, m.get("accuracy"))
        out.append(f"      {word:<{width}} {m['kernel']:<10} {how:<34} {m['label']}".rstrip())
        if m["error"]:
            out += error_lines(m["error"], "        ")
    return out


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
        f"status={summary['status']}  verdict={summary['verdict'] or '-'}  "
        f"worker={summary['worker'] or '-'}"
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
    f = summary.get("follow_up")
    if f:
        what = (
            f"the baseline of run {f['of_run']}, measured again in its environment"
            if f["kind"] == "baseline_remeasure"
            else f"run {f['of_run']}'s would-be regressions, measured again to confirm them"
        )
        lines.append(f"  {what}: never this commit's gate result")
    if summary["message"]:
        lines.append(f"  {summary['message']}")
    price = summary.get("price")
    if price:  # a run is paired or not: its price is of one kind
        lines.append(f"  {'paired' if price['cases'] else 'unpaired'}: {price['text']}")
    builds = [EnvironmentBuild(**b) for b in summary.get("environments") or []]
    if builds:
        lines.append(f"  environments: {environments_text(builds)}")
    tele = summary.get("telemetry") or {}
    if tele.get("off"):
        lines.append(f"  warning: {no_telemetry_text(tele['off'], tele['off'] + tele['live'])}")
    a = summary.get("commit_answer")
    if a:
        runs = ", ".join(str(i) for i in a["runs"])
        if not a["this_run"]:
            runs = ("runs " if len(a["runs"]) > 1 else "run ") + runs
            part = f" (from {runs}; this run is not part of it)"
        else:  # several runs: the description names them
            part = "" if len(a["runs"]) > 1 else " (from this run)"
        said = f"{a['state']}: {a['description']}"
        lines.append(f"  the commit's answer on {summary['device_class']}: {said}{part}")
    if summary["error"]:
        lines.append("  error:")
        lines += error_lines(summary["error"], "    ")
    if summary["cases"]:
        # a verdict is read against its threshold: ``unchanged`` at 1.22x is right at 100 %
        if summary.get("min_effect") is not None:
            lines.append(f"  judged at a minimum effect of {_pct(summary['min_effect'])}"
                         + _other_effects(summary))  # fmt: skip
        lines.append(f"  {'kernel':<10} {'status':<6} {'verdict':<12} {'median':>11}  ratio")
    elif summary["status"] == "succeeded":  # a --case or --kernel that matched nothing
        picked = " ".join(summary.get("selection") or []) or "none"
        lines.append(f"  no cases measured: the suites selected none (its selection: {picked})")
    # once, not per case: the class and the judging setting every row's label reads
    dc, gates = str(summary.get("device_class", "")), summary.get("cpu_timings_gate")
    for c in summary["cases"]:
        med = f"{c['median_s'] * 1e3:.3f} ms" if c["median_s"] else "-"
        lo, hi = c["ratio_ci"] or (None, None)
        ratio = moved_text(c["verdict"], c["ratio"] or None, lo, hi, c.get("accuracy")) or "-"
        if c["ratio"] and plumbing_only(dc, c["verdict"] or "", gates):
            ratio += "  CPU: plumbing only"
        if c["ratio"] and c.get("min_effect", summary.get("min_effect")) != summary.get(
            "min_effect"
        ):
            ratio += f"  (at {_pct(c['min_effect'])})"
        lines.append(
            f"  {c['kernel']:<10} {c['status']:<6} {c['verdict'] or '-':<12} {med:>11}  {ratio}"
        )
        lines += error_lines(c["error"], "      ")
        if c.get("note"):
            lines.append(f"      ({c['note']})")
    if summary.get("launch"):
        lines.append("  host launch changed (reported, not gated):")
        lines += [f"    {note}" for note in summary["launch"]]
    return "\n".join(lines)
