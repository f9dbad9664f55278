"""Fleet: workers seen in runs, what they run now, and queue depth per queue and state.

Workers are known from ``runs.worker`` (the worker that took a run). When another
part adds a worker heartbeat table, its rows are shown too; without it, a worker
that took no run yet is invisible here.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, fmt, nav
from kernelwatch.dashboard.page_runs import run_table


def render(url: str) -> None:
    st.title("Fleet")
    counts = cached.run_counts(url)
    workers = cached.workers(url)
    running = cached.running_runs(url)
    by_state = counts.groupby("status")["runs"].sum() if len(counts) else pd.Series(dtype=int)
    c = st.columns(4)
    c[0].metric("Queued", int(by_state.get("queued", 0)))
    c[1].metric("Running", int(by_state.get("running", 0)))
    c[2].metric("Workers seen", len(workers))
    busy = int((workers["running"] > 0).sum()) if len(workers) else 0
    c[3].metric("Busy workers", busy)

    st.subheader("Queue depth")
    if counts.empty:
        st.caption("No runs yet.")
    else:
        pivot = counts.pivot_table(
            index="queue", columns="status", values="runs", aggfunc="sum", fill_value=0
        )
        st.dataframe(pivot, width="stretch")
        waiting = counts[counts["status"].isin(["queued", "running"])]
        if len(waiting):
            chart = (
                alt.Chart(waiting)
                .mark_bar()
                .encode(
                    x=alt.X("runs:Q", title="runs"),
                    y=alt.Y("queue:N", title="queue"),
                    color=alt.Color("status:N", scale=alt.Scale(domain=["queued", "running"])),
                    tooltip=["queue", "status", "runs"],
                )
                .properties(height=alt.Step(28))
            )
            st.altair_chart(chart, width="stretch")

    st.subheader("Workers")
    if workers.empty:
        st.caption("No worker has taken a run yet.")
    else:
        now = pd.Timestamp.now(tz="UTC")
        table = pd.DataFrame(
            {
                "worker": workers["worker"],
                "device class": workers["device_class"],
                "running now": workers["running"].astype(int),
                "runs": workers["runs"].astype(int),
                "last activity": workers["last_activity"],
                "idle for": [
                    fmt.duration((now - t).total_seconds()) if pd.notna(t) else "–"
                    for t in workers["last_activity"]
                ],
            }
        )
        st.dataframe(
            table,
            hide_index=True,
            column_config={
                "last activity": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            },
        )

    st.subheader("Running now")
    if running.empty:
        st.caption("Nothing is running.")
    else:
        st.dataframe(
            run_table(running),
            hide_index=True,
            column_config={
                "open": st.column_config.LinkColumn("run", display_text=r"run=(\d+)"),
            },
        )

    st.subheader("Heartbeats")
    beats = cached.heartbeats(url)
    if beats is None:
        st.caption(
            "No worker heartbeat table in this database yet; workers are known from "
            "the runs they took."
        )
    elif beats.empty:
        st.caption("The heartbeat table is empty.")
    else:
        st.dataframe(beats, hide_index=True)
    st.markdown(f"[Queue and history →]({nav.link('runs', state='queued,running')})")
