"""Verdicts as text: the terminal table of ``kernelwatch gate`` and the PR comment.

Both are pure functions of a :class:`~kernelwatch.jobs.judging.verdicts.CommitVerdict`, so
tests pin them with golden files. Nothing here touches the database or GitHub.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kernelwatch.jobs.cli.exit_codes import for_answer
from kernelwatch.jobs.judging.gate_answer import GateAnswer, gate_table
from kernelwatch.jobs.judging.inert_text import code_span, inert
from kernelwatch.jobs.judging.report import error_lines, no_telemetry_text
from kernelwatch.jobs.judging.verdicts import (
    ClassVerdict,
    CommitVerdict,
    MovedCase,
    moved_cells,
    moved_note,
    verdict_label,
)
from kernelwatch.kernels.devclass import processor
from kernelwatch.kernels.units import seconds_text
from kernelwatch.kernels.verdict import BLOCKING, ORDER, CaseVerdict, RunVerdict

COMMENT_MARKER = "<!-- kernelwatch:pr-comment -->"
_ICON = {"success": "✅", "failure": "❌", "neutral": "⚪", "error": "⚠️", "pending": "⏳"}
_CASE_ICON: dict[str, str] = {
    CaseVerdict.REGRESSION: "🔴",
    CaseVerdict.LESS_ACCURATE: "🟠",
    CaseVerdict.BROKEN: "💥",
    CaseVerdict.ERROR: "⚠️",
    CaseVerdict.INCONCLUSIVE: "⚪",
    CaseVerdict.IMPROVEMENT: "🟢",
}


# the PR comment names this many cases whose host launch changed; the run lists all
LAUNCH_SHOWN = 5


def fmt_time(seconds: float | None) -> str:
    return seconds_text(seconds)


def fmt_ratio(case: MovedCase) -> str:
    """The ratio with its change, in the one unit convention (``kernels/units.py``); a
    ``less_accurate`` case's error growth instead (``verdicts.moved_cells``)."""
    return moved_cells(case)[0]


def fmt_interval(case: MovedCase) -> str:
    return moved_cells(case)[1]


def _clip(text: str, n: int) -> str:
    """A table cell's share of an error (the whole text is in the gate and the dashboard)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _case_name(case: MovedCase) -> str:
    return f"{case.kernel} {case.label}".strip()


# --------------------------------------------------------------------------- terminal


def format_gate(verdict: CommitVerdict, dashboard_url: str = "") -> str:
    """The table ``kernelwatch gate`` prints."""
    lines = [
        f"{verdict.repository}@{verdict.sha[:12]}: {verdict.overall.upper()}",
        "",
        f"  {'gpu class':<12} {'state':<8} {'run':>6}  description",
    ]
    for c in verdict.classes:
        lines.append(f"  {c.device_class:<12} {c.state:<8} {c.run_id:>6}  {c.description}")
    for c in verdict.classes:
        if c.price.counted:  # the answer's coverage and GPU time, paired or not
            lines.append(f"  {c.device_class}: {c.price.text(c.device_class)}")
    for c in verdict.classes:
        if c.telemetry_off:
            lines.append(
                f"  {c.device_class}: {no_telemetry_text(c.telemetry_off, c.telemetry_timed)}"
            )
    for c in verdict.classes:
        if not c.moved:
            continue
        lines += ["", f"  {c.device_class}: cases that moved"]
        sources = sorted({m.source for m in c.moved if m.source})
        if len(sources) > 1:  # a composed answer: say which run each case came from
            lines.append(f"    from {', '.join(sources)}")
        words = [verdict_label(c.device_class, m.verdict, c.cpu_timings_gate) for m in c.moved]
        w = max(12, *(len(word) for word in words))  # CPU labels are longer
        lines.append(
            f"    {'verdict':<{w}} {'ratio':>18} {'interval':>16} "
            f"{'baseline':>10} {'now':>10} {'run':>6}  case"
        )
        for m, word in zip(c.moved, words, strict=True):
            note = moved_note(m)  # an accuracy detail (always under its row), an error
            short = bool(note) and note == m.error and "\n" not in note and len(note) <= 60
            lines.append(
                f"    {word:<{w}} {fmt_ratio(m):>18} "
                f"{fmt_interval(m):>16} "
                f"{fmt_time(m.baseline_median_s):>10} {fmt_time(m.median_s):>10} "
                f"{m.run_id or c.run_id:>6}  "
                f"{_case_name(m)}" + (f"  ({note})" if short else "")
            )
            if note and not short:  # the whole message, wrapped under its case
                lines += error_lines(note, "      ")
        if dashboard_url:
            lines.append(f"    {dashboard_url.rstrip('/')}{c.dashboard_path}")
    if not verdict.classes:
        lines.append("  (no runs of this commit)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- markdown


def _headline(verdict: CommitVerdict) -> str:
    totals: dict[str, int] = {}
    for c in verdict.classes:
        for key, n in c.counts.items():
            totals[key] = totals.get(key, 0) + n
    overall = verdict.overall
    bad = [
        f"{totals[k]} {k}" + ("s" if k == CaseVerdict.REGRESSION and totals[k] > 1 else "")
        for k in ORDER
        if k in BLOCKING and totals.get(k)
    ]
    if overall == RunVerdict.FAIL:
        return f"❌ {', '.join(bad)}"
    if overall == RunVerdict.ERROR:
        errored = totals.get(CaseVerdict.ERROR, 0)
        if errored:  # the code under test crashed, hung or ran out: not the service
            cases = f"{errored} case{'s' if errored > 1 else ''}"
            errors = f"⚠️ {cases} ended in an error (crash, timeout, out of memory): not judged"
            # an error outranks a failure in the run's verdict, but must not hide one:
            # FlashInfer 0.6.0 (H200, 2026-12-05) was "3 cases ended in an error" with 75
            # confirmed regressions among the others
            return f"{errors}; ❌ {', '.join(bad)} among the rest" if bad else errors
        return "⚠️ could not judge every GPU class"
    if overall == "pending":
        return "⏳ measuring"
    if overall == RunVerdict.NEUTRAL:
        n = totals.get(CaseVerdict.INCONCLUSIVE, 0)
        if not n:  # neutral with nothing open: a class that measured nothing says why
            said = [inert(c.description) for c in verdict.classes if c.state == "neutral"]
            return f"⚪ neutral: {'; '.join(said)}"
        return f"⚪ neutral: {n} inconclusive after re-measures, no regressions found"
    if overall == RunVerdict.PASS:
        return "✅ no regressions"
    return "no runs"


def render_comment(
    verdict: CommitVerdict,
    *,
    dashboard_url: str,
    paired: bool = False,
) -> str:
    """Markdown for the one PR comment kernelwatch keeps (updated in place); also the
    ``markdown`` of a gate answer, for any commit: the baseline is named as its runs
    know it (merge-base, parent or baseline: ``ClassVerdict.baseline_word``)."""
    base_url = dashboard_url.rstrip("/")
    baselines = sorted({c.baseline_sha for c in verdict.classes if c.baseline_sha})
    words = sorted({c.baseline_word for c in verdict.classes if c.baseline_sha})
    word = words[0] if len(words) == 1 else "baseline"
    against = f" against {word} {code_span(baselines[0][:12])}" if len(baselines) == 1 else ""
    out = [
        COMMENT_MARKER,
        f"### kernelwatch: {_headline(verdict)}",
        "",
        f"Commit {code_span(verdict.sha[:12])}{against}.",
        "",
        "| GPU class | result | summary | details |",
        "| --- | --- | --- | --- |",
    ]
    for c in verdict.classes:
        out.append(
            f"| {code_span(c.device_class)} | {_ICON.get(c.state, '')} {c.state} | "
            f"{inert(c.description)} | [run {c.run_id}]({base_url}{c.dashboard_path}) |"
        )
    priced = [c for c in verdict.classes if c.price.counted]
    if priced:
        out.append("")
        out += [
            f"{code_span(c.device_class)}: {inert(c.price.text(c.device_class))}." for c in priced
        ]
    for c in verdict.classes:
        if c.telemetry_off:
            text = no_telemetry_text(c.telemetry_off, c.telemetry_timed)
            out += ["", f"⚠️ {code_span(c.device_class)}: {inert(text)}."]
    for c in verdict.classes:
        if c.moved:
            out += ["", *_moved_table(c)]
    for c in verdict.classes:
        if c.launch_notes:  # reported beside the verdict, never judged (kernels/launch.py)
            out += ["", f"Host launch changed on {code_span(c.device_class)} (not gated):", ""]
            out += [f"- {inert(_clip(note, 300))}" for note in c.launch_notes[:LAUNCH_SHOWN]]
            if len(c.launch_notes) > LAUNCH_SHOWN:
                out.append(f"- and {len(c.launch_notes) - LAUNCH_SHOWN} more (see the run)")
    ignored = list(dict.fromkeys(note for c in verdict.classes for note in c.ignored_config))
    if ignored:
        out += [
            "",
            "⚠️ **Ignored from this pull request's `.kernelwatch.toml`**: a pull request is "
            "judged by its base branch's thresholds, suites and kernels, and may only tighten "
            "them.",
            "",
            *(f"- {inert(note)}" for note in ignored),
        ]
    levels = sorted({c.confidence for c in verdict.classes if c.confidence is not None})
    level = f"{levels[0] * 100:g} %" if len(levels) == 1 else "the configured"
    paired = paired or (bool(verdict.classes) and all(c.paired for c in verdict.classes))
    # a CPU class's runs held no GPU (the demo, a fleet without GPUs)
    units = {processor(c.device_class) for c in verdict.classes}
    unit = "CPU" if units == {"CPU"} else "GPU"
    how = (
        f"baseline and candidate interleaved on the same {unit} (paired A/B)"
        if paired
        else f"baseline and candidate measured in separate runs on the same {unit} class"
    )
    out += [
        "",
        f"<sub>ratio = candidate / baseline median time (above 1 is slower); interval: "
        f"{level} confidence. Measured: {how}. This comment is updated in place.</sub>",
    ]
    return "\n".join(out) + "\n"


def answer_view(answer: GateAnswer, dashboard_url: str = "") -> dict[str, Any]:
    """A commit's gate answer as JSON, in the one shape: ``GET /api/v1/verdicts`` answers
    it (``VerdictOut``) and ``gate --json`` prints it, whether it asked the API or the
    database (they printed different keys: an audit, 2026-12-05)."""
    verdict = answer.verdict
    base = dashboard_url.rstrip("/")
    classes = [
        {
            "device_class": c.device_class,
            "state": c.state,
            "description": c.description,
            "run_id": c.run_id,
            "baseline_sha": c.baseline_sha,
            "baseline_run_id": c.baseline_run_id,
            "target_url": base + c.dashboard_path,
            "counts": dict(c.counts),
            "moved": [asdict(m) for m in c.moved],
            "runs": list(c.runs),
            "in_flight": list(c.in_flight),
        }
        for c in verdict.classes
    ]
    return {
        "repository": verdict.repository,
        "sha": verdict.sha,
        "verdict": answer.overall,
        "exit_code": int(for_answer(answer.overall)),
        "in_flight": list(answer.in_flight),
        "dashboard_url": classes[0]["target_url"] if classes else base,
        "classes": classes,
        "table": gate_table(answer, dashboard_url),
        "markdown": render_comment(verdict, dashboard_url=dashboard_url),
    }


def _moved_table(c: ClassVerdict) -> list[str]:
    rows = [
        f"**{code_span(c.device_class)}: cases that moved**",
        "",
        "| case | verdict | ratio | interval | baseline | candidate |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    for m in c.moved[:50]:
        said = moved_note(m)  # an accuracy detail, an error
        note = f" ({inert(_clip(said, 300))})" if said else ""
        if m.run_id is not None and m.run_id != c.run_id:
            note += f" · from {inert(m.source or f'run {m.run_id}')}"
        word = verdict_label(c.device_class, m.verdict, c.cpu_timings_gate)
        rows.append(
            f"| {code_span(m.kernel)} {inert(m.label)} | {_CASE_ICON.get(m.verdict, '')} {word}"
            f"{note} | {fmt_ratio(m)} | {fmt_interval(m)} | "
            f"{fmt_time(m.baseline_median_s)} | {fmt_time(m.median_s)} |"
        )
    if len(c.moved) > 50:
        rows.append(f"| … {len(c.moved) - 50} more in the dashboard | | | | | |")
    return rows


__all__ = ["COMMENT_MARKER", "fmt_ratio", "fmt_time", "format_gate", "render_comment"]
