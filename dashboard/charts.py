"""Altair charts of the dashboard: trend series, ratio heatmap, roofline.

Builders take prepared DataFrames and return charts; they do not query.
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import numpy as np
import pandas as pd
from packaging.version import InvalidVersion, Version

from kernelwatch.dashboard import fmt
from kernelwatch.jobs.judging.history import CHANGEPOINT
from kernelwatch.kernels.verdict import CaseVerdict

# What the builders return: a layered chart (``.properties`` widens it to this union).
ChartSpec = alt.LayerChart | alt.FacetChart

METRICS = {
    "time": "time per call (lower is better)",
    "tflops": "TFLOP/s (higher is better)",
    "gbps": "GB/s (higher is better)",
    "pct": "% of the GPU's measured peak (higher is better)",
    # accuracy beside time (issue 13): the output's error against the fp32 reference
    "error": "relative L2 error against the reference (lower is better)",
}
VERSION_PREFIX = "version:"  # released versions are stored as pseudo-commits (jobs/planning/plan)


def version_of(sha: str) -> str | None:
    """``version:flashinfer-python==0.5.3`` -> ``0.5.3``; None for a real commit."""
    if not isinstance(sha, str) or not sha.startswith(VERSION_PREFIX):
        return None
    return sha[len(VERSION_PREFIX) :].split("==", 1)[-1]


def version_key(v: str) -> tuple[Any, ...]:
    """Release order (PEP 440 where it parses: 0.10 after 0.9, rc before final)."""
    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


# Point kinds, least to most severe; the last three are named after the verdicts.
MARKERS = [
    "ok",
    "throttled",
    CaseVerdict.IMPROVEMENT.value,
    CaseVerdict.REGRESSION.value,
    CaseVerdict.BROKEN.value,
    # not measured: skipped, or the library has no such kernel at that commit (issue 18:
    # drawn as broken before); not a severity, so never flagged
    "missing",
]
MARKER_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#000000", "#bbbbbb"]
MARKER_SHAPES = ["circle", "triangle-up", "square", "diamond", "cross", "stroke"]
# An error that means "this kernel is not in the library", not "the kernel is wrong".
ABSENT = "has no kernel"


def missing(row: Any) -> bool:
    """Whether a point is a kernel that was not measured rather than one that broke."""
    if row["status"] == "skip":
        return True
    error = row.get("error") if hasattr(row, "get") else None
    return row["status"] == "error" and isinstance(error, str) and ABSENT in error


def marker(row: Any) -> str:
    """What a trend point is: missing, else broken beats regression beats throttled beats ok."""
    if missing(row):
        return MARKERS[5]
    if (
        row["status"] in ("fail", "error")
        or row["verdict"] == CaseVerdict.BROKEN
        or (row["regression"] == CaseVerdict.BROKEN)
    ):
        return MARKERS[4]
    if row["regression"] in (CaseVerdict.REGRESSION, CHANGEPOINT) or (
        row["verdict"] == CaseVerdict.REGRESSION
    ):
        return MARKERS[3]
    if not bool(row["reliable"]):
        return MARKERS[1]
    if row["verdict"] == CaseVerdict.IMPROVEMENT:
        return MARKERS[2]
    return MARKERS[0]


def trend_frame(df: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, str]:
    """Plot columns (value, low, high, y, marker) for ``metric``; returns (frame, unit)."""
    out = df.copy()
    med = out["median_s"].astype(float)
    lo_s = out["ci_low_s"].astype(float)
    hi_s = out["ci_high_s"].astype(float)
    if metric in ("tflops", "gbps", "pct"):
        column = "pct_of_peak" if metric == "pct" else metric
        rate = (out[column] if column in out else pd.Series(np.nan, index=out.index)).astype(float)
        out["value"] = rate
        # Throughput is work / time: the time interval maps inverted onto the rate.
        out["low"] = rate * med / hi_s
        out["high"] = rate * med / lo_s
        unit = {"tflops": "TFLOP/s", "gbps": "GB/s", "pct": "% of peak"}[metric]
    elif metric == "error":
        error = out["rel_l2"] if "rel_l2" in out else pd.Series(np.nan, index=out.index)
        out["value"] = error.astype(float)
        # one check per point: no interval, the band collapses onto the line
        out["low"] = out["high"] = out["value"]
        unit = "rel. L2"
    else:
        typical = float(np.nanmedian(med)) if med.notna().any() else math.nan
        unit, factor = fmt.time_unit(typical)
        out["value"] = med * factor
        out["low"] = lo_s * factor
        out["high"] = hi_s * factor
    for col in ("status", "verdict", "regression"):
        out[col] = out[col].astype(object).where(out[col].notna(), None)
    out["marker"] = out.apply(marker, axis=1) if len(out) else pd.Series(dtype=str)
    # Points without a number (broken) sit at the case's last good value.
    out["y"] = out.groupby("case_id")["value"].transform(lambda s: s.ffill().bfill())
    out["short_sha"] = out["sha"].map(fmt.short_sha)
    out["subject"] = out["message"].map(fmt.first_line)
    # the x axis names commits (short SHA and subject), not their sequence numbers
    out["commit"] = [
        f"{fmt.short_sha(s, 8)} {fmt.first_line(m, 28)}".strip()
        for s, m in zip(out["sha"], out["message"], strict=True)
    ]
    # who measured the point: a push, a scheduled run (nightly, release), a manual run
    out["started by"] = (
        out["trigger"] if "trigger" in out else pd.Series("", index=out.index)
    ).map(fmt.trigger)
    out["when"] = out["committed_at"].map(
        lambda t: t.strftime("%Y-%m-%d %H:%M") if pd.notna(t) else ""
    )
    out["version"] = out["sha"].map(version_of)
    if "source" not in out:  # which run a point came from (queries.trend composes it)
        out["source"] = ""
    return out, unit


def version_axis(data: pd.DataFrame) -> list[str] | None:
    """The released versions of the points in release order, if every point is a version."""
    versions = data["version"] if "version" in data else pd.Series(dtype=object)
    if len(data) == 0 or versions.isna().any():
        return None
    return sorted({str(v) for v in versions}, key=version_key)


def trend_chart(df: pd.DataFrame, metric: str, changes: pd.DataFrame | None = None) -> ChartSpec:
    """Median with its interval band per case, flagged points, and change points.

    x is the commit's first-parent position, or, when every point is a released
    version, the version in release order. ``changes``: rows of (case_id, label,
    sequence, version, direction, magnitude): the change points history recorded.
    """
    data, unit = trend_frame(df, metric)
    versions = version_axis(data)
    data = data[
        [
            "sequence",
            "case_id",
            "label",
            "value",
            "low",
            "high",
            "y",
            "marker",
            "short_sha",
            "sha",
            "commit",
            "subject",
            "when",
            "status",
            "verdict",
            "run_id",
            "started by",
            "source",
            "error",
            "version",
        ]
    ]
    several = data["case_id"].nunique() > 1
    x: Any
    if versions is not None:
        x = alt.X("version:O", title="released version", sort=versions)
        x_field = "version:O"
    else:
        # Commits in first-parent order, each named by its short SHA and subject (the
        # full SHA is in the tooltip); an ordinal axis, so change points (recorded by
        # sequence) are placed by the same names.
        order = data.drop_duplicates("sequence").sort_values("sequence")
        names = dict(zip(order["sequence"], order["commit"], strict=True))
        x = alt.X(
            "commit:O",
            title="commit (first-parent order)",
            sort=list(order["commit"]),
            axis=alt.Axis(labelAngle=-40, labelLimit=220),
        )
        x_field = x  # the same sort in every layer: a union of ordinal domains drops it
        if changes is not None and len(changes) and "sequence" in changes:
            changes = changes.assign(commit=changes["sequence"].map(names)).dropna(
                subset=["commit"]
            )
    y_title = f"{METRICS.get(metric, metric).split(' (')[0]} [{unit}]"
    series = alt.Color("label:N", title="case") if several else alt.value("#4c78a8")
    tooltip = [
        alt.Tooltip("sha:N", title="commit"),
        alt.Tooltip("subject:N", title="message"),
        alt.Tooltip("when:N", title="date"),
        alt.Tooltip("label:N", title="case"),
        alt.Tooltip("value:Q", title=f"median [{unit}]", format=".4g"),
        alt.Tooltip("low:Q", title="CI low", format=".4g"),
        alt.Tooltip("high:Q", title="CI high", format=".4g"),
        alt.Tooltip("marker:N", title="point"),
        alt.Tooltip("verdict:N"),
        alt.Tooltip("run_id:Q", title="run"),
        alt.Tooltip("started by:N", title="trigger"),
        alt.Tooltip("source:N", title="from"),
    ]
    base = alt.Chart(data).encode(x=x)
    band = base.mark_area(opacity=0.18).encode(
        y=alt.Y("low:Q", title=y_title, scale=alt.Scale(zero=False)),
        y2="high:Q",
        color=series,
    )
    line = base.mark_line(strokeWidth=1.5).encode(y="value:Q", color=series, detail="case_id:N")
    points = base.mark_point(filled=True, size=70).encode(
        y="y:Q",
        shape=alt.Shape(
            "marker:N", scale=alt.Scale(domain=MARKERS, range=MARKER_SHAPES), title="point"
        ),
        color=(
            series
            if several
            else alt.Color(
                "marker:N", scale=alt.Scale(domain=MARKERS, range=MARKER_COLORS), title="point"
            )
        ),
        size=alt.condition(alt.datum.marker == "ok", alt.value(30), alt.value(140)),
        tooltip=tooltip,
    )
    flagged = data[data["marker"].isin(MARKERS[3:5])]
    layers: list[Any] = [band, line, points]
    if len(flagged):
        rules = (
            alt.Chart(flagged)
            .mark_rule(strokeDash=[4, 3], opacity=0.6)
            .encode(
                x=x_field,
                color=alt.condition(
                    alt.datum.marker == MARKERS[4],
                    alt.value(MARKER_COLORS[4]),
                    alt.value(MARKER_COLORS[3]),
                ),
                tooltip=tooltip,
            )
        )
        layers.insert(0, rules)
    if changes is not None and len(changes):
        marks = changes.assign(
            change=[
                f"{d} {m * 100:+.1f} %"
                for d, m in zip(changes["direction"], changes["magnitude"], strict=True)
            ]
        )
        layers.insert(
            0,
            alt.Chart(marks)
            .mark_rule(strokeWidth=2, opacity=0.5, color=CHANGE_COLOR)
            .encode(
                x=x_field,
                tooltip=[
                    alt.Tooltip("label:N", title="case"),
                    alt.Tooltip("change:N", title="change point"),
                ],
            ),
        )
    return alt.layer(*layers).properties(height=380)


CHANGE_COLOR = "#9467bd"


def bisection_range_chart(
    points: pd.DataFrame,
    commits: int,
    culprit: int | None,
    unmeasured: pd.DataFrame | None = None,
    labels: dict[int, str] | None = None,
) -> ChartSpec:
    """The range's trend as the bisection measured it: each step's paired ratio against
    its reference build, with its interval, at the step commit's place in the range.

    ``points``: rows of (index, short_sha, case, purpose, ratio, low, high, verdict);
    ``commits``: how many commits the range holds (good is 0); ``culprit``: its index;
    ``unmeasured``: steps with no ratio (a broken build, a skipped commit: index,
    short_sha, purpose, verdict), drawn as crosses on the 1.0 line; ``labels``: the short
    sha of each index to name on the axis (ticks only there: never a fractional commit).
    """
    data = points.copy()
    data["interval"] = [
        fmt.ratio(r, lo, hi)
        for r, lo, hi in zip(data["ratio"], data["low"], data["high"], strict=True)
    ]
    names = dict(labels or {})
    for frame in (points, unmeasured):
        if frame is not None and len(frame):
            names.update({int(i): str(s) for i, s in zip(frame["index"], frame["short_sha"],
                                                          strict=True)})  # fmt: skip
    ticks = sorted(names)
    label = " : ".join(f"datum.value == {i} ? '{names[i][:8]}'" for i in ticks) + " : ''"
    x = alt.X(
        "index:Q",
        title="commit in the range (good on the left)",
        scale=alt.Scale(domain=[0, max(1, commits - 1)]),
        axis=alt.Axis(values=ticks, labelExpr=label if ticks else "''", labelAngle=-40),
    )
    y = alt.Y("ratio:Q", title="time against the reference build", scale=alt.Scale(type="log"))
    tooltip = [
        alt.Tooltip("short_sha:N", title="commit"),
        alt.Tooltip("case:N"),
        alt.Tooltip("purpose:N", title="step"),
        alt.Tooltip("interval:N", title="ratio [CI]"),
        alt.Tooltip("verdict:N"),
    ]
    base = alt.Chart(data).encode(x=x)
    bars = base.mark_rule().encode(y="low:Q", y2="high:Q", color=alt.Color("verdict:N"))
    dots = base.mark_point(filled=True, size=70).encode(
        y=y, color=alt.Color("verdict:N"), shape=alt.Shape("case:N"), tooltip=tooltip
    )
    one = alt.Chart(pd.DataFrame({"ratio": [1.0]})).mark_rule(strokeDash=[4, 4]).encode(y="ratio:Q")
    layers: list[Any] = [one, bars, dots]
    if unmeasured is not None and len(unmeasured):
        marks = unmeasured.assign(ratio=1.0)
        layers.append(
            alt.Chart(marks)
            .mark_point(shape="cross", size=160, filled=True)
            .encode(
                x=x,
                y=y,
                color=alt.Color("verdict:N"),
                tooltip=[
                    alt.Tooltip("short_sha:N", title="commit"),
                    alt.Tooltip("purpose:N", title="step"),
                    alt.Tooltip("verdict:N", title="no timing"),
                ],
            )
        )
    if culprit is not None:
        mark = pd.DataFrame({"index": [culprit], "what": ["culprit"]})
        layers.append(alt.Chart(mark).mark_rule(color="firebrick").encode(x=x, tooltip=["what:N"]))
    return alt.layer(*layers).properties(height=260)


def heatmap_chart(
    cells: pd.DataFrame, x: str, y: str, x_order: list[str], y_order: list[str]
) -> ChartSpec:
    data = cells.copy()
    data["text"] = data["ratio"].map(lambda r: f"{r:.2f}" if fmt.is_num(r) else "–")
    data["interval"] = [
        fmt.ratio(r, lo, hi)
        for r, lo, hi in zip(data["ratio"], data["ratio_low"], data["ratio_high"], strict=True)
    ]
    finite = data["log2_ratio"].replace([np.inf, -np.inf], np.nan).abs()
    extent = max(0.1, float(finite.max())) if finite.notna().any() else 1.0
    base = alt.Chart(data).encode(
        x=alt.X("x:N", title=x, sort=x_order),
        y=alt.Y("y:N", title=y, sort=list(reversed(y_order))),
    )
    tooltip = [
        alt.Tooltip("x:N", title=x),
        alt.Tooltip("y:N", title=y),
        alt.Tooltip("interval:N", title="ratio B/A [CI]"),
        alt.Tooltip("verdict:N"),
        alt.Tooltip("cases:Q", title="cases in cell"),
        alt.Tooltip("label:N", title="worst case"),
    ]
    rect = base.mark_rect().encode(
        color=alt.Color(
            "log2_ratio:Q",
            title="log2(B/A)",
            scale=alt.Scale(scheme="redblue", reverse=True, domain=[-extent, extent], domainMid=0),
        ),
        tooltip=tooltip,
    )
    text = base.mark_text(fontSize=11).encode(text="text:N", tooltip=tooltip)
    return alt.layer(rect, text).properties(height=max(160, 36 * len(y_order)))


def roofline_chart(
    df: pd.DataFrame, peak_tflops: float | None, peak_gbps: float | None
) -> ChartSpec:
    data = df[df["intensity"].notna() & (df["tflops"].fillna(0) > 0)].copy()
    data["reliable_text"] = data["reliable"].map(lambda r: "yes" if r else "no (throttled)")
    x = alt.X("intensity:Q", title="arithmetic intensity [FLOP/byte]", scale=alt.Scale(type="log"))
    yscale = alt.Scale(type="log")
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=80)
        .encode(
            x=x,
            y=alt.Y("tflops:Q", title="achieved TFLOP/s", scale=yscale),
            color=alt.Color("kernel:N"),
            shape=alt.Shape("reliable_text:N", title="reliable"),
            tooltip=[
                alt.Tooltip("kernel:N"),
                alt.Tooltip("label:N", title="case"),
                alt.Tooltip("intensity:Q", format=".3g"),
                alt.Tooltip("tflops:Q", format=".4g"),
                alt.Tooltip("gbps:Q", format=".4g", title="GB/s"),
                alt.Tooltip("pct_of_peak:Q", format=".1f", title="% of peak"),
                alt.Tooltip("reliable_text:N", title="reliable"),
            ],
        )
    )
    layers: list[Any] = [points]
    if (peak_tflops or peak_gbps) and len(data):
        lo = float(data["intensity"].min()) / 4
        hi = float(data["intensity"].max()) * 4
        if peak_tflops and peak_gbps:
            ridge = peak_tflops * 1000 / peak_gbps
            lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
        grid = np.geomspace(lo, hi, 64)
        roof = []
        for ai in grid:
            caps = []
            if peak_gbps:
                caps.append(ai * peak_gbps / 1000)  # FLOP/byte × GB/s → GFLOP/s → TFLOP/s
            if peak_tflops:
                caps.append(peak_tflops)
            roof.append({"intensity": float(ai), "tflops": float(min(caps))})
        ceiling = (
            alt.Chart(pd.DataFrame(roof))
            .mark_line(color="#888", strokeDash=[6, 3])
            .encode(x=x, y=alt.Y("tflops:Q", scale=yscale))
        )
        layers.insert(0, ceiling)
    return alt.layer(*layers).properties(height=420)


def selftest_chart(tests: pd.DataFrame) -> ChartSpec:
    """The cards' timer noise night after night (``cv`` in %), a flagged night marked red."""
    data = tests.copy()
    data["cv %"] = data["cv"] * 100
    data["A/A ratio"] = [
        fmt.ratio(r, lo, hi)
        for r, lo, hi in zip(data["ratio"], data["ci_low"], data["ci_high"], strict=True)
    ]
    data["flag"] = data["flagged"].map(lambda f: "flagged" if f else "ok")
    data["why"] = data["reason"].fillna("")
    x = alt.X("created:T", title="night")
    y = alt.Y("cv %:Q", title="timer noise (CV, %)")
    tooltip = [
        alt.Tooltip("card_label:N", title="card"),
        alt.Tooltip("created:T", title="tested", format="%Y-%m-%d %H:%M"),
        alt.Tooltip("cv %:Q", format=".3f"),
        alt.Tooltip("A/A ratio:N"),
        alt.Tooltip("why:N"),
    ]
    card = alt.Color("card_label:N", title="card")
    lines = alt.Chart(data).mark_line().encode(x=x, y=y, color=card)
    dots = (
        alt.Chart(data)
        .mark_point(filled=True, size=60)
        .encode(
            x=x,
            y=y,
            color=card,
            shape=alt.Shape(
                "flag:N", scale=alt.Scale(domain=["ok", "flagged"], range=["circle", "triangle-up"])
            ),
            tooltip=tooltip,
        )
    )
    red = (
        alt.Chart(data[data["flagged"]])
        .mark_point(size=220, color="firebrick", strokeWidth=2)
        .encode(x=x, y=y, tooltip=tooltip)
    )
    return alt.layer(lines, dots, red).properties(height=240)
