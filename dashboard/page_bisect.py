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

from kernelwatch.dashboard import cached, charts, nav, queries
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
    _range(engine, chosen, row)
    steps = queries.bisection_steps(engine, chosen)
    st.subheader(f"Steps ({len(steps)})")
    if steps.empty:
        st.caption("No step taken yet.")
    else:
        view = pd.DataFrame(
            {
                "step": steps["position"],
                "purpose": steps["purpose"],
                "commit": steps["sha"].str[:12],
                "against": steps["against_sha"].str[:12],
                "verdict": steps["verdict"].fillna("running"),
                "skipped": steps["outcome"] == "skip",
                "device s": steps["seconds"].round(1),
                "run": [nav.link("run", run=r) if pd.notna(r) else "" for r in steps["run_id"]],
            }
        )
        st.dataframe(
            view,
            width="stretch",
            hide_index=True,
            column_config={"run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)")},
        )
    st.subheader("All bisections")
    listing = table[["id", "repository", "status", "culprit_sha", "gpu_seconds"]].copy()
    listing["culprit_sha"] = listing["culprit_sha"].fillna("").str[:12]
    st.dataframe(listing, width="stretch", hide_index=True)


def _range(engine: Any, bisection_id: int, row: pd.Series) -> None:
    """The range's trend as the steps measured it, and each followed case's history."""
    commits = [str(c) for c in (row["commits"] if isinstance(row["commits"], list) else [])]
    points = range_points(queries.bisection_step_cases(engine, bisection_id), commits, row)
    st.subheader("The range")
    if points.empty:
        st.caption("No step has a measured case yet.")
    else:
        culprit = row["culprit_sha"]
        at = commits.index(culprit) if isinstance(culprit, str) and culprit in commits else None
        st.altair_chart(charts.bisection_range_chart(points, len(commits), at), width="stretch")
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


def _summary(row: pd.Series) -> None:
    c = st.columns(4)
    c[0].metric("Status", str(row["status"]))
    culprit = row["culprit_sha"]
    c[1].metric("Culprit", str(culprit)[:12] if isinstance(culprit, str) else "-")
    ratio = row["culprit_ratio"]
    c[2].metric("Effect", f"{ratio:.2f}x" if pd.notna(ratio) else "-")
    c[3].metric("Device seconds", f"{float(row['gpu_seconds']):.0f}")
    lo, hi = row["culprit_ci_low"], row["culprit_ci_high"]
    line = (
        f"`{str(row['good_sha'])[:12]}..{str(row['bad_sha'])[:12]}` of {row['repository']} "
        f"on `{row['device_class']}`"
    )
    if row["case_pattern"]:
        line += f", cases `{row['case_pattern']}`"
    if isinstance(culprit, str):
        word = verdict_label(str(row["device_class"]), str(row["culprit_verdict"]))
        line += f". Culprit **{word}**"
        if pd.notna(lo) and pd.notna(hi):
            line += f", interval {lo:.3f}–{hi:.3f} against its parent"
    st.markdown(line)
    if row["reason"]:
        st.caption(str(row["reason"]))
