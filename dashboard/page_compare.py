"""Compare: any two runs (or commits) case by case, with intervals, and a ratio heatmap.

``?page=compare&a=3&b=4`` compares run 4 (candidate) against run 3 (baseline);
``a``/``b`` may also be commit shas (their newest run). There is no single
summary number on purpose: the heatmap over two parameter axes shows whether a
change is confined to one corner of the shape grid.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, charts, compare_stats, fmt, nav
from kernelwatch.db.config import get_settings
from kernelwatch.db.run_options import RunOptions
from kernelwatch.jobs.judging.run_spread import GPU_FLOOR
from kernelwatch.kernels.verdict import CONFIDENCE

FIXED_ANY = "(worst over all)"


def render(url: str) -> None:
    st.title("Compare")
    a_ref, b_ref = nav.param("a"), nav.param("b")
    if not a_ref and not b_ref:
        a_ref, b_ref = _default_pair(url)
    c1, c2 = st.columns(2)
    a_text = c1.text_input("Baseline A (run id or commit sha)", value=a_ref or "")
    b_text = c2.text_input("Candidate B (run id or commit sha)", value=b_ref or "")
    nav.set_params({"a": a_text.strip(), "b": b_text.strip()})
    a_id = cached.resolve_run(url, a_text) if a_text else None
    a_run = cached.run_detail(url, a_id) if a_id is not None else None
    # A commit sha for B resolves to its run on A's device class when there is one.
    b_id = (
        cached.resolve_run(url, b_text, a_run["device_class"] if a_run else None)
        if b_text
        else None
    )
    if a_id is None or b_id is None:
        given = (("A", a_text, a_id), ("B", b_text, b_id))
        unresolved = [f"{n} = {t!r}" for n, t, i in given if t and i is None]
        if unresolved:
            st.warning(f"No run found for {' and '.join(unresolved)}.")
        else:
            st.info("Choose two runs: ids from the Runs page, or commit shas.")
        return
    run_a, run_b = cached.run_detail(url, a_id), cached.run_detail(url, b_id)
    if run_a is None or run_b is None:
        st.warning("One of the runs disappeared.")
        return
    c1.markdown(_describe(run_a))
    c2.markdown(_describe(run_b))
    if run_a["device_class"] != run_b["device_class"]:
        st.warning(
            f"Different device classes ({run_a['device_class']} vs "
            f"{run_b['device_class']}): ratios compare different hardware."
        )

    default_thr = RunOptions.parse(run_b.get("options")).regression_threshold
    default_thr = get_settings().regression_threshold if default_thr is None else default_thr
    threshold = st.number_input(
        "Minimum effect (relative)",
        min_value=0.001,
        max_value=5.0,
        value=default_thr,
        step=0.01,
        format="%.3f",
    )
    cmp = compare_stats.compare(
        cached.run_results(url, a_id, samples=True),
        cached.run_results(url, b_id, samples=True),
        threshold,
        cached.run_spreads(url, b_id),
    )
    if cmp.empty:
        st.info("Neither run stored results.")
        return
    analysed = pd.notna(run_b["baseline_run_id"]) and int(run_b["baseline_run_id"]) == a_id
    counts = cmp["verdict"].value_counts()
    st.markdown(" · ".join(f"**{n}** {v}" for v, n in counts.items()) + f" — {len(cmp)} cases")
    st.dataframe(
        compare_table(cmp, analysed, run_b),
        hide_index=True,
        column_config={
            "ratio B/A": st.column_config.NumberColumn(format="%.3f"),
            "CI low": st.column_config.NumberColumn(format="%.3f"),
            "CI high": st.column_config.NumberColumn(format="%.3f"),
            "change %": st.column_config.NumberColumn(format="%+.1f"),
            "case": st.column_config.TextColumn(width="medium"),
            "trend": st.column_config.LinkColumn("trend", display_text="trend"),
        },
    )
    st.caption(
        f"Ratio of medians B/A (> 1: B is slower) with a {CONFIDENCE * 100:g} % bootstrap "
        "interval over the stored samples of both runs, widened by how far each case's "
        f"median moves from run to run in B's history (at least {GPU_FLOOR:.1%} on a GPU); "
        "unpaired. Verdicts: the gate's rule "
        f"at this minimum effect (regression only when the interval reaches +{threshold:.1%}; "
        "unchanged only when it lies within ±it). "
        + (
            "The analysed verdict is the paired comparison the gate used."
            if analysed
            else "B was not analysed against A: no gate verdicts shown."
        )
    )
    heatmap_section(cmp)


def _default_pair(url: str) -> tuple[str | None, str | None]:
    recent = cached.runs(url, None, ("succeeded",), None, 50)
    with_base = recent[recent["baseline_run_id"].notna()]
    if with_base.empty:
        return None, None
    row = with_base.iloc[0]
    return str(int(row["baseline_run_id"])), str(int(row["id"]))


def _describe(run: dict[str, Any]) -> str:
    what = fmt.short_sha(run["sha"]) if isinstance(run["sha"], str) else run["version_spec"]
    return (
        f"[run #{run['id']}]({nav.link('run', run=int(run['id']))}) · {run['repository']} @ "
        f"`{what}` · {run['device_class']} · {run['status']}"
        f" — {fmt.first_line(run['message'], 60)}"
    )


def compare_table(cmp: pd.DataFrame, analysed: bool, run_b: dict[str, Any]) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "kernel": cmp["kernel"],
            "verdict": cmp["verdict"],
            "change %": cmp["change_pct"],
            "ratio B/A": cmp["ratio"],
            "CI low": cmp["ratio_low"],
            "CI high": cmp["ratio_high"],
            "case": cmp["label"],
            "median A": cmp["median_a_s"].map(fmt.seconds),
            "median B": cmp["median_b_s"].map(fmt.seconds),
            "status A": cmp["status_a"].fillna("–"),
            "status B": cmp["status_b"].fillna("–"),
            "reliable": cmp["reliable"],
            "trend": [
                nav.link(
                    "trend", repo=int(run_b["repository_id"]), device=run_b["device_class"], case=c
                )
                for c in cmp["case_id"]
            ],
        }
    )
    if analysed:
        table.insert(2, "analysed verdict", cmp["analysis_verdict"].fillna(""))
    return table.sort_values("ratio B/A", ascending=False, na_position="first")


def heatmap_section(cmp: pd.DataFrame) -> None:
    st.subheader("Ratio over the shape grid")
    kernels = sorted(cmp["kernel"].dropna().unique())
    if not kernels:
        return
    kernel = st.selectbox("Kernel", kernels, index=nav.index_of(kernels, nav.param("kernel")))
    of_kernel = cmp[cmp["kernel"] == kernel]
    axes = compare_stats.param_axes(of_kernel)
    if len(axes) < 2:
        nav.set_params({"kernel": kernel, "x": None, "y": None})
        st.caption(
            f"{kernel}: fewer than two parameters vary among its cases "
            f"({', '.join(axes) or 'none'}); the table above is the whole picture."
        )
        return
    c1, c2 = st.columns(2)
    x = c1.selectbox("x axis", axes, index=nav.index_of(axes, nav.param("x"), 0))
    y_options = [a for a in axes if a != x]
    y = c2.selectbox("y axis", y_options, index=nav.index_of(y_options, nav.param("y"), 0))
    nav.set_params({"kernel": kernel, "x": x, "y": y})
    fixed: dict[str, str] = {}
    others = [a for a in axes if a not in (x, y)]
    if others:
        cols = st.columns(min(len(others), 6))
        for i, name in enumerate(others):
            values = [FIXED_ANY, *compare_stats.param_values(of_kernel, name)]
            v = cols[i % len(cols)].selectbox(name, values)
            if v != FIXED_ANY:
                fixed[name] = v
    cells = compare_stats.heatmap(of_kernel, x, y, fixed)
    if cells.empty:
        st.info("No comparable cases in this slice.")
        return
    x_order = compare_stats.natural_order(list(cells["x"].unique()))
    y_order = compare_stats.natural_order(list(cells["y"].unique()))
    st.altair_chart(charts.heatmap_chart(cells, x, y, x_order, y_order), width="stretch")
    st.caption(
        "Colour: log2 of B/A (red: B slower, blue: B faster). A cell holding several "
        "cases (other parameters not fixed) shows its worst ratio."
    )
