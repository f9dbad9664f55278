"""The short tables of ``liger``: each run, each case's median across commits, what moved.

Pure functions of the sub-command's result (``liger.py``), so a test can check them on
a recorded result and a reader of the JSON can rebuild them. Commits are named by
their upstream (Liger-Kernel) sha; the replayed sha is in the JSON.
"""

from __future__ import annotations

import re
from typing import Any

# verdicts of a case against its baseline (kernels/verdict.py), as one-letter marks
MARKS = {
    "regression": "R",
    "improvement": "I",
    "broken": "B",
    "less_accurate": "A",
    "error": "E",
    "inconclusive": "?",
}
_BUILT = re.compile(r"(?:built|installed) in (\d+(?:\.\d+)?) s|(cached environment)")
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def case_label(kernel: str, params: dict[str, Any]) -> str:
    """``rmsnorm 16384x4096 bf16``: the kernel, its shape and dtype."""
    shape = "x".join(str(params[k]) for k in ("rows", "cols") if k in params)
    dtype = _DTYPES.get(str(params.get("dtype")), str(params.get("dtype", "")))
    return " ".join(x for x in (kernel, shape, dtype) if x)


def build_seconds(log: str) -> str:
    """How the run got its environment, from its build log: ``3 s`` built (or a release
    installed), or ``cached``."""
    found = _BUILT.findall(log or "")
    if not found:
        return "-"
    secs, cached = found[-1]
    return "cached" if cached else f"{float(secs):.0f} s"


def cell(case: dict[str, Any]) -> str:
    """One case in one run: its median in µs and verdict mark, or its status."""
    status = case.get("status")
    if status != "pass" or case.get("median_s") is None:
        return str(status or "-")
    mark = MARKS.get(str(case.get("verdict")), "")
    return f"{case['median_s'] * 1e6:.1f}{mark}"


def _counts(cases: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for c in cases:
        counts[str(c.get("status"))] = counts.get(str(c.get("status")), 0) + 1
    return " ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no cases"


def moved(runs: list[dict[str, Any]]) -> list[str]:
    """Every case that moved: a blocking or sized verdict, or a status other than before."""
    lines: list[str] = []
    before: dict[str, str] = {}
    for r in runs:
        for c in r.get("cases") or []:
            label = case_label(str(c.get("kernel")), c.get("params") or {})
            status, verdict = str(c.get("status")), c.get("verdict")
            what = ""
            if verdict in MARKS and verdict != "error":
                ci = c.get("ratio_ci") or [None, None]
                what = f"{verdict} {_num(c.get('ratio'))} [{_num(ci[0])}, {_num(ci[1])}]"
            was = before.get(label, status)
            if status != was or status in ("error", "fail"):
                error = " ".join(str(c.get("error") or "").split())[:110]
                change = status if status == was else f"{was} -> {status}"
                what = (what + "; " if what else "") + change + (f": {error}" if error else "")
            before[label] = status
            if what:
                lines.append(f"  {r['upstream'][:8]} {label}: {what}")
    return lines


def _num(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, float) else "-"


def skips(runs: list[dict[str, Any]]) -> list[str]:
    """Each distinct skip reason once, with the kernels and commits it covers."""
    seen: dict[str, tuple[set[str], list[str]]] = {}
    for r in runs:
        for c in r.get("cases") or []:
            if c.get("status") == "skip":
                why = " ".join(str(c.get("error") or "").split())[:140]
                kernels, commits = seen.setdefault(why, (set(), []))
                kernels.add(str(c.get("kernel")))
                if r["upstream"][:8] not in commits:
                    commits.append(r["upstream"][:8])
    return [
        f"  skip {','.join(sorted(k))} at {len(c)} commit(s) ({c[0]}..{c[-1]}): {why}"
        for why, (k, c) in seen.items()
    ]


def table(result: dict[str, Any]) -> list[str]:
    runs: list[dict[str, Any]] = result.get("runs") or []
    lines = [
        f"liger-kernel: {len(result.get('commits') or [])} commits replayed from "
        f"{result.get('upstream')}; kernelwatch run rc {result.get('run_rc')} in "
        f"{result.get('run_s')} s; worker {result.get('worker_stop', '-')}",
        f"  install: recipe {result.get('recipe', '?')} of {result.get('config', '?')}, "
        f"KW_OFFLINE=1; KW_SANDBOX={(result.get('settings') or {}).get('KW_SANDBOX', '?')}; "
        f"device {result.get('device')}",
    ]
    if result.get("error"):
        lines.append(f"  ERROR: {result['error']}")
    lines.append(f"{'commit':<9} {'run':>4} {'status':<10} {'verdict':<9} {'build':<7} "
                 f"{'cases':<22} subject")  # fmt: skip
    for r in runs:
        lines.append(
            f"{r['upstream'][:8]:<9} {('#' + str(r['id'])) if r.get('id') else '-':>4} "
            f"{str(r.get('status')):<10} {str(r.get('verdict') or '-'):<9} "
            f"{build_seconds(r.get('build_log_tail', '')):<7} "
            f"{_counts(r.get('cases') or []):<22} {str(r.get('subject', ''))[:56]}"
        )
    labels: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    for r in runs:
        for c in r.get("cases") or []:
            label = case_label(str(c.get("kernel")), c.get("params") or {})
            if label not in labels:
                labels.append(label)
            cells[(label, r["upstream"])] = cell(c)
    if labels:
        lines.append("median us per commit (R regression, I improvement, B broken, "
                     "A less accurate, ? inconclusive against the commit before)")  # fmt: skip
        width = max(len(x) for x in labels)
        lines.append(" " * width + "".join(f" {r['upstream'][:8]:>8}" for r in runs))
        for label in labels:
            row = "".join(f" {cells.get((label, r['upstream']), '-')[:8]:>8}" for r in runs)
            lines.append(f"{label:<{width}}{row}")
    lines += ["moved:", *(moved(runs) or ["  nothing"])]
    lines += skips(runs)
    return lines


__all__ = ["build_seconds", "case_label", "cell", "moved", "skips", "table"]
