"""Bisections: which commit did it. The list, and one bisection's steps and culprit.

``?page=bisect&id=3`` opens one bisection (the culprit's GitHub comment links here):
its range, status, the culprit with its effect against its parent (ratio and
interval of the confirmation run), the range's trend as the steps measured it (each
step's paired ratio against its reference build, at its place in the range, with the
culprit marked, and links to the followed cases' history), every step (commit,
against which build, what it showed, skipped or not, device seconds, its run) and the
device time spent. Read live, not cached: a running bisection moves every few seconds.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, charts, fmt, nav, queries
from kernelwatch.jobs.judging.inert_text import code_span
from kernelwatch.jobs.judging.verdicts import verdict_label
from kernelwatch.kernels.casepattern import case_names, matches
from kernelwatch.kernels.verdict import CaseVerdict


def render(url: str) -> None:
    st.title("Bisections")
    engine = cached.engine(url)
    table = queries.bisections(engine)
    if table.empty:
        st.caption("No bisections yet: `kernelwatch bisect SOURCE --good A --bad B`.")
        return
    chosen = nav.int_param("id")
    if chosen is None or chosen not in set(table["id"].astype(int)):
        chosen = int(table["id"].iloc[0])
    ids = [int(i) for i in table["id"]]
    pick = st.selectbox("Bisection", ids, index=nav.index_of(ids, chosen))
    if pick is not None and pick != chosen:
        chosen = int(pick)
    nav.set_params({"id": chosen})
    row = table[table["id"] == chosen].iloc[0]
    _summary(row)
    steps = queries.bisection_steps(engine, chosen)
    _range(engine, chosen, row, steps)
    st.subheader(f"Steps ({len(steps)})")
    if steps.empty:
        st.caption("No step taken yet.")
    else:
        st.dataframe(
            step_table(steps),
            width="stretch",
            hide_index=True,
            column_config={"run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)")},
        )
    st.subheader("All bisections")
    st.dataframe(listing_table(table), width="stretch", hide_index=True)


def step_table(steps: pd.DataFrame) -> pd.DataFrame:
    """One bisection's steps for people: words, never ``None``."""
    return pd.DataFrame(
        {
            "step": steps["position"],
            "purpose": steps["purpose"],
            "commit": steps["sha"].str[:12],
            "against": steps["against_sha"].str[:12],
            "verdict": [
                v if isinstance(v, str) and v else "running" if o is None or o != o else "–"
                for v, o in zip(steps["verdict"], steps["outcome"], strict=True)
            ],
            "skipped": (steps["outcome"] == "skip").map(lambda s: "yes" if s else "no"),
            "device time": steps["seconds"].map(fmt.duration),
            "run": [nav.link("run", run=int(r)) if pd.notna(r) else "" for r in steps["run_id"]],
        }
    )


def listing_table(table: pd.DataFrame) -> pd.DataFrame:
    """Every bisection, newest first, with words for headers and ``–`` where none."""
    return pd.DataFrame(
        {
            "bisection": table["id"].astype(int),
            "repository": table["repository"],
            "device class": table["device_class"],
            "range": [
                f"{str(g)[:10]}..{str(b)[:10]}"
                for g, b in zip(table["good_sha"], table["bad_sha"], strict=True)
            ],
            "status": table["status"],
            "culprit": table["culprit_sha"].map(lambda c: c[:12] if isinstance(c, str) else "–"),
            "effect": [
                fmt.ratio(r, lo, hi) if fmt.is_num(r) else "–"
                for r, lo, hi in zip(
                    table["culprit_ratio"],
                    table["culprit_ci_low"],
                    table["culprit_ci_high"],
                    strict=True,
                )
            ],  # fmt: skip
            "device time": table["gpu_seconds"].map(fmt.duration),
        }
    )


def _range(engine: Any, bisection_id: int, row: pd.Series, steps: pd.DataFrame) -> None:
    """The range's trend as the steps measured it, and each followed case's history."""
    commits = [str(c) for c in (row["commits"] if isinstance(row["commits"], list) else [])]
    points = range_points(queries.bisection_step_cases(engine, bisection_id), commits, row)
    marks = unmeasured_steps(steps, commits, points)
    st.subheader("The range")
    if points.empty and marks.empty:
        st.caption("No step has a measured case yet.")
    else:
        culprit = row["culprit_sha"]
        at = commits.index(culprit) if isinstance(culprit, str) and culprit in commits else None
        ends = {0: commits[0][:12]} if commits else {}
        if at is not None:
            ends[at] = commits[at][:12]
        st.altair_chart(
            charts.bisection_range_chart(points, len(commits), at, marks, ends), width="stretch"
        )
    cases = points.drop_duplicates("case_id") if not points.empty else points
    repo, device = int(row["repository_id"]), row["device_class"]
    links = [
        f"[{c['case']}]({nav.link('trend', repo=repo, device=device, case=c['case_id'])})"
        for _, c in cases.iterrows()
    ]
    if links:
        st.markdown("History of the followed cases: " + " · ".join(links))


def range_points(cases: pd.DataFrame, commits: list[str], row: pd.Series) -> pd.DataFrame:
    """The step results the bisection follows (its case pattern), placed in the range."""
    columns = ["index", "short_sha", "case_id", "case", "purpose", "ratio", "low", "high"]
    if cases.empty or not commits:
        return pd.DataFrame(columns=[*columns, "verdict"])
    pattern = str(row["case_pattern"] or "")
    place = {sha: i for i, sha in enumerate(commits)}
    kept = []
    for _, c in cases.iterrows():
        kernel, label = str(c["kernel"] or ""), str(c["label"] or "")
        if c["status"] == "skip" or not pd.notna(c["ratio"]) or c["sha"] not in place:
            continue
        if not matches(case_names(kernel, label, str(c["case_id"])), pattern):
            continue
        kept.append(
            {
                "index": place[c["sha"]],
                "short_sha": str(c["sha"])[:12],
                "case_id": c["case_id"],
                "case": f"{kernel} {label}".strip(),
                "purpose": c["purpose"],
                "ratio": float(c["ratio"]),
                "low": c["ratio_ci_low"],
                "high": c["ratio_ci_high"],
                "verdict": c["verdict"] or CaseVerdict.UNCHANGED.value,
            }
        )
    return pd.DataFrame(kept, columns=[*columns, "verdict"])


def unmeasured_steps(steps: pd.DataFrame, commits: list[str], points: pd.DataFrame) -> pd.DataFrame:
    """Steps that ended without a ratio to draw (a broken build, a skip, an error), placed
    in the range: the chart draws them as crosses instead of leaving a hole (issue 27)."""
    columns = ["index", "short_sha", "purpose", "verdict"]
    if steps.empty or not commits:
        return pd.DataFrame(columns=columns)
    place = {sha: i for i, sha in enumerate(commits)}
    drawn = set(points["short_sha"]) if len(points) else set()
    rows = []
    for _, st_row in steps.iterrows():
        sha = str(st_row["sha"])
        done = isinstance(st_row["outcome"], str)
        if not done or sha not in place or sha[:12] in drawn:
            continue
        word = st_row["verdict"] if isinstance(st_row["verdict"], str) else st_row["outcome"]
        rows.append({"index": place[sha], "short_sha": sha[:12], "purpose": st_row["purpose"],
                     "verdict": "skipped" if st_row["outcome"] == "skip" else word})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def _summary(row: pd.Series) -> None:
    c = st.columns(4)
    c[0].metric("Status", str(row["status"]))
    culprit = row["culprit_sha"]
    c[1].metric("Culprit", str(culprit)[:12] if isinstance(culprit, str) else "–")
    ratio = row["culprit_ratio"]
    c[2].metric("Effect", fmt.ratio(ratio) if pd.notna(ratio) else "–")
    c[3].metric("Device time", fmt.duration(float(row["gpu_seconds"])))
    lo, hi = row["culprit_ci_low"], row["culprit_ci_high"]
    line = (
        f"`{str(row['good_sha'])[:12]}..{str(row['bad_sha'])[:12]}` of {row['repository']} "
        f"on `{row['device_class']}`"
    )
    if row["case_pattern"]:
        line += f", cases {code_span(str(row['case_pattern']))}"
    if isinstance(culprit, str):
        word = verdict_label(str(row["device_class"]), str(row["culprit_verdict"]))
        line += f". Culprit **{word}**"
        if pd.notna(lo) and pd.notna(hi):
            line += f", interval {lo:.3f}–{hi:.3f} against its parent"
    st.markdown(line)
    if row["reason"]:
        st.caption(str(row["reason"]))
