"""Fleet: workers seen in runs, what they run now, and queue depth per queue and state.

Workers are known from ``runs.worker`` (the worker that took a run). When another
part adds a worker heartbeat table, its rows are shown too; without it, a worker
that took no run yet is invisible here.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, charts, fmt, nav
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
    waiting = counts[counts["status"].isin(["queued", "running"])] if len(counts) else counts
    if waiting.empty:
        st.caption("Nothing is queued or running.")
    else:
        depth = (
            waiting.pivot_table(
                index="queue", columns="status", values="runs", aggfunc="sum", fill_value=0
            )
            .reindex(columns=["queued", "running"], fill_value=0)
            .astype(int)
            .reset_index()
        )
        st.dataframe(depth, hide_index=True)
        chart = (
            alt.Chart(waiting)
            .mark_bar()
            .encode(
                x=alt.X("runs:Q", title="runs", axis=alt.Axis(tickMinStep=1, format="d")),
                y=alt.Y("queue:N", title="queue"),
                color=alt.Color("status:N", scale=alt.Scale(domain=["queued", "running"])),
                tooltip=["queue", "status", "runs"],
            )
            .properties(height=alt.Step(28))
        )
        st.altair_chart(chart, width="stretch")
    finished = counts[~counts["status"].isin(["queued", "running"])] if len(counts) else counts
    if len(finished):
        with st.expander("Finished runs per queue and state"):
            done = finished.pivot_table(
                index="queue", columns="status", values="runs", aggfunc="sum", fill_value=0
            )
            st.dataframe(done.astype(int).reset_index(), hide_index=True)

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
        st.dataframe(
            heartbeat_table(beats),
            hide_index=True,
            column_config={
                "run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)"),
                "last seen": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                "started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            },
        )
    selftests(url)
    st.markdown(f"[Queue and history →]({nav.link('runs', state='queued,running')})")


def heartbeat_table(beats: pd.DataFrame) -> pd.DataFrame:
    """Heartbeats for people: words for headers, ``–`` where a value is missing."""
    return pd.DataFrame(
        {
            "worker": beats["name"],
            "host": beats["host"].map(fmt.text),
            "device class": beats["device_class"],
            "GPU": beats["gpu_name"].map(lambda v: v or "–"),
            "GPU UUID": beats["gpu_uuid"].map(lambda v: v or "–"),
            "state": beats["state"],
            "run": [
                nav.link("run", run=int(r)) if pd.notna(r) else "" for r in beats["current_run_id"]
            ],
            "SM MHz": beats["sm_mhz"].map(lambda v: f"{int(v)}" if pd.notna(v) else "–"),
            "last seen": pd.to_datetime(beats["last_seen"], utc=True),
            "started": pd.to_datetime(beats["started"], utc=True),
            "stopped": beats["stopped"].map(lambda v: str(v)[:19] if pd.notna(v) else "–"),
        }
    )


def selftests(url: str) -> None:
    """The nightly timer self-test of each card: its noise as a trend, flagged cards first."""
    st.subheader("Timer self-test")
    tests = cached.selftests(url)
    if tests is None or tests.empty:
        st.caption(
            "No self-test yet: `kernelwatch beat` runs an A/A test of a reference kernel on "
            "every live card each night (`[watch] selftest`)."
        )
        return
    tests = tests.assign(card_label=[card_label(r) for _, r in tests.iterrows()])
    latest = tests.groupby("card").tail(1)
    flagged = latest[latest["flagged"]]
    for _, row in flagged.iterrows():
        st.warning(f"Card {row['card_label']}: {row['reason']}")
    measured = tests[tests["cv"].notna()]
    if len(measured):
        st.altair_chart(charts.selftest_chart(measured), width="stretch")
    st.dataframe(
        pd.DataFrame(
            {
                "card": latest["card_label"],
                "class": latest["device_class"],
                "worker": latest["worker"],
                "last test": latest["created"],
                "noise (CV)": latest["cv"].map(
                    lambda v: f"{v * 100:.2f} %" if fmt.is_num(v) else "–"
                ),
                "its usual CV": latest["baseline_cv"].map(
                    lambda v: f"{v * 100:.2f} %" if fmt.is_num(v) else "–"
                ),
                "A/A ratio": [
                    fmt.ratio(r, lo, hi)
                    for r, lo, hi in zip(
                        latest["ratio"], latest["ci_low"], latest["ci_high"], strict=True
                    )
                ],
                "flagged": latest["flagged"].map(lambda f: "yes" if f else "no"),
                "why": [
                    r or e or "–" for r, e in zip(latest["reason"], latest["error"], strict=True)
                ],
            }
        ),
        hide_index=True,
        column_config={
            "last test": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
        },
    )


def card_label(row: pd.Series) -> str:
    """``NVIDIA H200 GPU-1a2b3c`` or ``cpu:host``: a card people can find."""
    card = str(row["card"])
    if card.startswith("cpu:"):
        return card
    return f"{row['gpu_name'] or 'GPU'} {card[:10]}"
