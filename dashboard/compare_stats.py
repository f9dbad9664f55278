"""Comparison of two runs from their stored results: per-case ratios with intervals.

The Compare view lets a person put any two runs side by side, not only a run and
its analysed baseline, so the numbers are computed here from what is stored:
the ratio of medians (candidate / baseline, > 1 is slower) with the service's
bootstrap interval over the raw samples of both runs
(``kernelwatch.jobs.judging.bootstrap``, at the rule's confidence). When the
samples are missing, the interval falls back to the conservative quotient of the
stored median intervals. The verdict is the service's rule
(``kernelwatch.kernels.verdict``): the same interval gets the same word here as
at the gate and in the PR comment.

These are unpaired comparisons of two separate runs; the verdicts the gate
posts come from paired, interleaved measurements (``kernelwatch.jobs``) and are
shown beside these when the candidate was analysed against this baseline.
There is deliberately no summary over cases (no geomean): a regression confined
to one corner of the shape grid must stay visible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kernelwatch.jobs.judging.bootstrap import bootstrap_many, bootstrap_ratio
from kernelwatch.jobs.judging.run_spread import widen
from kernelwatch.kernels.verdict import MIN_EFFECT, judge_case

# What a case present in one run only is called (not verdicts: there is no comparison).
MISSING_IN_B = "missing in B"
NEW_IN_B = "new in B"


def verdict(
    status_a: str | None,
    status_b: str | None,
    ratio: float,
    low: float,
    high: float,
    threshold: float,
    *,
    reliable: bool = True,
) -> str:
    """Case verdict: the service's one judgement (``verdict.judge_case``) of the two runs'
    statuses and the ratio interval, or why there is none (``missing in B``, ``new in B``,
    and the judgement's own words for a baseline without a time).
    """
    if status_b is None:
        return MISSING_IN_B
    if status_a is None:
        return NEW_IN_B
    judged = judge_case(status_b, status_a, ratio, low, high, threshold, reliable=reliable)
    return str(judged.verdict) if judged.verdict is not None else judged.detail


def _samples(value: Any) -> list[float]:
    return list(value) if isinstance(value, list | tuple | np.ndarray) else []


def compare(
    a: pd.DataFrame,
    b: pd.DataFrame,
    threshold: float = MIN_EFFECT,
    spreads: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Per-case comparison of run ``a`` (baseline) and run ``b`` (candidate).

    Both frames come from ``queries.run_results(..., samples=True)``. Cases present
    in only one run are kept with an empty ratio, so a case that disappeared shows.
    ``spreads``: each case's run-to-run spread (``queries.run_spreads`` of ``b``), by
    which the interval is widened as the analysis widens it.
    """
    keep = [
        "case_id",
        "suite",
        "kernel",
        "label",
        "params",
        "status",
        "median_s",
        "ci_low_s",
        "ci_high_s",
        "samples",
        "verdict",
        "ratio",
        "reliable",
    ]
    left = a.reindex(columns=keep)
    right = b.reindex(columns=keep)
    m = left.merge(right, on="case_id", how="outer", suffixes=("_a", "_b"))
    boots = bootstrap_many(
        [(_samples(a), _samples(b)) for a, b in zip(m["samples_a"], m["samples_b"], strict=True)]
    )
    rows: list[dict[str, Any]] = []
    for (_, r), stats in zip(m.iterrows(), boots, strict=True):
        med_a, med_b = r["median_s_a"], r["median_s_b"]
        if stats is None and _finite(med_a) and _finite(med_b) and med_a > 0:
            ratio = med_b / med_a
            low = _div(r["ci_low_s_b"], r["ci_high_s_a"])
            high = _div(r["ci_high_s_b"], r["ci_low_s_a"])
        elif stats is not None:
            ratio, low, high = stats
        else:
            ratio = low = high = math.nan
        if _finite(ratio) and _finite(low) and _finite(high):
            ratio, low, high = widen((ratio, low, high), (spreads or {}).get(r["case_id"], 0.0))
        status_a = _str(r["status_a"])
        status_b = _str(r["status_b"])
        reliable = bool(_first(r["reliable_b"], True)) and bool(_first(r["reliable_a"], True))
        rows.append(
            {
                "case_id": r["case_id"],
                "suite": _first(r["suite_a"], r["suite_b"]),
                "kernel": _first(r["kernel_a"], r["kernel_b"]),
                "label": _first(r["label_a"], r["label_b"]),
                "params": _first(r["params_a"], r["params_b"]),
                "status_a": status_a,
                "status_b": status_b,
                "median_a_s": med_a,
                "median_b_s": med_b,
                "ratio": ratio,
                "ratio_low": low,
                "ratio_high": high,
                "change_pct": (ratio - 1) * 100 if _finite(ratio) else math.nan,
                "verdict": verdict(
                    status_a, status_b, ratio, low, high, threshold, reliable=reliable
                ),
                "analysis_verdict": _str(r["verdict_b"]),
                "reliable": reliable,
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return out.sort_values(["kernel", "label"]).reset_index(drop=True)


def param_axes(cmp: pd.DataFrame) -> list[str]:
    """Parameter names that vary among the compared cases (candidate heatmap axes)."""
    values: dict[str, set[str]] = {}
    for params in cmp.get("params", pd.Series(dtype=object)):
        if isinstance(params, dict):
            for k, v in params.items():
                values.setdefault(k, set()).add(str(v))
    return sorted(k for k, vs in values.items() if len(vs) > 1)


def param_values(cmp: pd.DataFrame, name: str) -> list[str]:
    vals = {str(p[name]) for p in cmp["params"] if isinstance(p, dict) and name in p}
    return sorted(vals, key=_natural)


def heatmap(cmp: pd.DataFrame, x: str, y: str, fixed: dict[str, str] | None = None) -> pd.DataFrame:
    """Cells (x value, y value) → ratio, for the cases matching ``fixed`` params.

    Every case that matches lands in exactly one cell; when other parameters still
    vary, a cell keeps its worst (largest) ratio and says how many cases it holds,
    so a slow corner is never averaged away.
    """
    rows = []
    for _, r in cmp.iterrows():
        p = r["params"]
        if not isinstance(p, dict) or x not in p or y not in p:
            continue
        if fixed and any(str(p.get(k)) != v for k, v in fixed.items()):
            continue
        rows.append(
            {
                "x": str(p[x]),
                "y": str(p[y]),
                "ratio": r["ratio"],
                "ratio_low": r["ratio_low"],
                "ratio_high": r["ratio_high"],
                "verdict": r["verdict"],
                "label": r["label"],
            }
        )
    cells = pd.DataFrame(
        rows, columns=["x", "y", "ratio", "ratio_low", "ratio_high", "verdict", "label"]
    )
    if cells.empty:
        return cells.assign(cases=pd.Series(dtype=int), log2_ratio=pd.Series(dtype=float))
    cells["cases"] = cells.groupby(["x", "y"])["label"].transform("count")
    cells = (
        cells.sort_values("ratio", ascending=False, na_position="last")
        .drop_duplicates(subset=["x", "y"], keep="first")
        .reset_index(drop=True)
    )
    cells["log2_ratio"] = np.log2(cells["ratio"].where(cells["ratio"] > 0))
    return cells


def _natural(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def natural_order(values: Sequence[str]) -> list[str]:
    return sorted(values, key=_natural)


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def _div(n: Any, d: Any) -> float:
    return float(n) / float(d) if _finite(n) and _finite(d) and d > 0 else math.nan


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _first(*values: Any) -> Any:
    for v in values:
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            return v
    return None


__all__ = [
    "bootstrap_many",  # re-exported: the service's one bootstrap
    "bootstrap_ratio",
    "compare",
    "heatmap",
    "natural_order",
    "param_axes",
    "param_values",
    "verdict",
]
