"""Bisections: which commit did it. The list, and one bisection's steps and culprit.

``?page=bisect&id=3`` opens one bisection (the culprit's GitHub comment links here):
its range, status, the culprit with its effect against its parent (ratio and
interval of the confirmation run), every step (commit, against which build, what it
showed, skipped or not, device seconds, its run) and the device time spent. Read
live, not cached: a running bisection moves every few seconds.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, nav, queries


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
        line += f". Culprit **{row['culprit_verdict']}**"
        if pd.notna(lo) and pd.notna(hi):
            line += f", interval {lo:.3f}–{hi:.3f} against its parent"
    st.markdown(line)
    if row["reason"]:
        st.caption(str(row["reason"]))
