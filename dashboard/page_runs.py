"""Runs: the queue and history, and one run in full (cases, logs, GPU telemetry).

``?page=runs&repo=1&state=queued,running&device=h100`` filters the list;
``?page=run&run=12`` opens run 12.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, fmt, nav
from kernelwatch.db.models import RUN_STATES
from kernelwatch.db.run_options import RunOptions
from kernelwatch.jobs.judging.inert_text import inert
from kernelwatch.kernels.verdict import CaseVerdict

LOG_TAIL_CHARS = 20_000
TELEMETRY_FIELDS = (
    "steady_sm_mhz",
    "sm_mhz_min",
    "sm_mhz_median",
    "mem_mhz",
    "temp_c_max",
    "power_w_max",
)


def render(url: str) -> None:
    run_id = nav.int_param("run")
    if run_id is not None:
        render_run(url, run_id)
    else:
        render_list(url)


# --------------------------------------------------------------------------- list


def render_list(url: str) -> None:
    st.title("Runs")
    repos = cached.repositories(url)
    counts = cached.run_counts(url)
    by_state = counts.groupby("status")["runs"].sum() if len(counts) else pd.Series(dtype=int)
    cols = st.columns(4)
    cols[0].metric("Queued", int(by_state.get("queued", 0)))
    cols[1].metric("Running", int(by_state.get("running", 0)))
    cols[2].metric("Finished", int(sum(by_state.get(s, 0) for s in ("succeeded", "failed"))))
    cols[3].metric("Errors", int(by_state.get("error", 0)))

    f1, f2, f3, f4 = st.columns([2, 3, 1, 1])
    repo_ids: list[int | None] = [None, *[int(r) for r in repos["id"]]]
    names = dict(zip(repos["id"], repos["name"], strict=True))
    repo = f1.selectbox(
        "Repository",
        repo_ids,
        index=nav.index_of(repo_ids, nav.int_param("repo")),
        format_func=lambda r: "all repositories" if r is None else names.get(r, str(r)),
    )
    wanted = [s for s in (nav.param("state") or "").split(",") if s in RUN_STATES]
    states = f2.multiselect("State", list(RUN_STATES), default=wanted)
    devices = ["", *cached.device_classes(url)]
    device = f3.selectbox(
        "Device class",
        devices,
        index=nav.index_of(devices, nav.param("device")),
        format_func=lambda d: d or "all",
    )
    started_by = ["", *(["scheduled"] if set(fmt.SCHEDULED) & set(cached.triggers(url)) else []),
                  *cached.triggers(url)]  # fmt: skip
    trigger = f4.selectbox(
        "Trigger",
        started_by,
        index=nav.index_of(started_by, nav.param("trigger")),
        format_func=lambda t: (
            "all" if not t else "scheduled (beat)" if t == "scheduled" else fmt.trigger(t)
        ),
    )
    nav.set_params({"repo": repo, "state": ",".join(states), "device": device, "trigger": trigger})
    wanted_triggers = fmt.SCHEDULED if trigger == "scheduled" else (trigger,) if trigger else ()

    df = cached.runs(url, repo, tuple(states), device or None, triggers=wanted_triggers)
    if df.empty:
        st.info(
            "No runs yet. Start one with `kernelwatch run <source> --commit <sha>` "
            "or `kernelwatch demo`."
        )
        return
    st.caption(f"Newest {len(df)} runs. Open one for its cases, logs and GPU telemetry.")
    st.dataframe(
        run_table(df),
        hide_index=True,
        column_config={
            "open": st.column_config.LinkColumn("run", display_text=r"run=(\d+)"),
            "created": st.column_config.DatetimeColumn("queued at", format="YYYY-MM-DD HH:mm:ss"),
        },
    )
    choice = st.selectbox(
        "Open run",
        [None, *[int(i) for i in df["id"]]],
        format_func=lambda i: "choose a run…" if i is None else f"#{i}",
    )
    if choice is not None:
        st.query_params["run"] = str(choice)
        st.rerun()


def run_table(df: pd.DataFrame) -> pd.DataFrame:
    """The run list: what a person scans first on the left (a wide table scrolls, and the
    trigger and repository used to be the columns it hid, issue 27)."""
    return pd.DataFrame(
        {
            "open": [nav.link("run", run=int(i)) for i in df["id"]],
            "state": df["status"],
            "verdict": df["verdict"].fillna(""),
            "trigger": df["trigger"].map(fmt.trigger),
            "repository": df["repository"],
            "commit": [
                fmt.short_sha(s) if isinstance(s, str) else (v or "")
                for s, v in zip(df["sha"], df["version_spec"], strict=True)
            ],
            "device class": df["device_class"],
            "moved": df.get("moved", ""),
            "message": df["message"].map(lambda m: fmt.first_line(m, 60)),
            "worker": df["worker"].fillna(""),
            "created": df["created"],
            "wait": df["wait_s"].map(fmt.duration),
            "duration": df["duration_s"].map(fmt.duration),
            "attempts": df["attempts"],
        }
    )


# --------------------------------------------------------------------------- one run


def render_run(url: str, run_id: int) -> None:
    run = cached.run_detail(url, run_id)
    st.markdown(f"[← all runs]({nav.link('runs')})")
    if run is None:
        st.title(f"Run #{run_id}")
        st.warning(f"There is no run #{run_id}.")
        return
    what = fmt.short_sha(run["sha"]) if isinstance(run["sha"], str) else run["version_spec"]
    st.title(f"Run #{run_id} · {run['repository']} @ {what}")
    subject = fmt.first_line(run["message"], 200)
    if subject:
        st.caption(inert(subject))  # a commit message: the repository's words
    st.markdown(
        f"{badge(run['status'])} {badge(run['verdict'] or 'not judged')} · "
        f"**{run['device_class']}** on `{run['worker'] or 'no worker yet'}` · "
        f"queue `{run['queue']}` · waited {fmt.duration(run['wait_s'])} · "
        f"ran {fmt.duration(run['duration_s'])}"
    )
    facts = [
        f"**Commit** `{run['sha'] or run['version_spec'] or '–'}`",
        f"**Suites** {', '.join(run['suites'] or []) or '–'}",
        f"**Trigger** {fmt.trigger(run['trigger'])}",
        f"**Attempts** {run['attempts']}",
    ]
    if run["baseline_sha"] or pd.notna(run["baseline_run_id"]):
        base = fmt.short_sha(run["baseline_sha"]) or "–"
        facts.append(f"**Baseline** `{base}`")
        if pd.notna(run["baseline_run_id"]):
            facts.append(
                f"[compare with baseline run #{int(run['baseline_run_id'])}]"
                f"({nav.link('compare', a=int(run['baseline_run_id']), b=run_id)})"
            )
    st.markdown(" · ".join(facts))
    answer = cached.commit_answer(url, run_id)
    if answer is not None:
        st.caption(commit_answer_line(answer, run_id, str(run["device_class"])))
    if run["error"]:
        show_error(run["error"])
    if run["device_class"] == "cpu":
        st.caption(
            "CPU run: timings prove the plumbing only (threads pinned, see the README); "
            "correctness verdicts are real."
        )

    results = cached.run_results(url, run_id)
    tabs = st.tabs(["Cases", "Build log", "Case logs", "GPU telemetry"])
    with tabs[0]:
        cases_tab(results, run)
    with tabs[1]:
        log = run["build_log"] or ""
        runner = RunOptions.parse(run["options"]).runner_log_tail
        if not log and not runner:
            st.caption("No build log stored.")
        if log:
            st.caption(f"Build log (last {LOG_TAIL_CHARS:,} characters)")
            st.code(log[-LOG_TAIL_CHARS:], language=None)
        if runner:
            st.caption("Suite runner log (tail)")
            st.code(str(runner)[-LOG_TAIL_CHARS:], language=None)
    with tabs[2]:
        logs_tab(results)
    with tabs[3]:
        telemetry_tab(results)


BADGE_COLORS = {
    "succeeded": "green",
    "pass": "green",
    "running": "blue",
    "queued": "gray",
    "failed": "red",
    "fail": "red",
    "error": "orange",
    "cancelled": "gray",
}


def show_error(text: str) -> None:
    """An error as its first line, then the whole text preformatted when there is more
    (a traceback or pip's message flattened into a paragraph is unreadable, issue 18)."""
    text = str(text).strip()
    first = text.splitlines()[0] if text else ""
    st.error(inert(first))  # code under test's words: never a link or an image
    if text != first:
        st.code(text, language=None)


def badge(word: str) -> str:
    return f":{BADGE_COLORS.get(word, 'gray')}-badge[{word}]"


def commit_answer_line(answer: dict[str, Any], run_id: int, device_class: str) -> str:
    """What the commit's composed answer on this class is, and whether this run is in it."""
    runs = [int(i) for i in answer["runs"]]
    source = (
        "from this run"
        if runs == [run_id]
        else "from runs "
        + ", ".join(f"#{i}" for i in runs)
        + ("" if run_id in runs else " (not this one)")
    )
    return (
        f"The commit's answer on {device_class}: **{answer['state']}**: "
        f"{answer['description']} — {source}. A commit's answer is composed per case from "
        "its most authoritative runs (gate runs, then manual --gate, then manual)."
    )


def cases_tab(results: pd.DataFrame, run: dict[str, Any]) -> None:
    if results.empty:
        st.info("This run stored no results.")
        return
    verdicts = results["verdict"].fillna(results["status"]).value_counts()
    st.markdown(" · ".join(f"**{n}** {v}" for v, n in verdicts.items()))
    broken = results[(results["status"] == "fail") | (results["verdict"] == CaseVerdict.BROKEN)]
    if len(broken):
        st.error(
            "Broken: "
            + "; ".join(
                inert(f"{r.kernel} ({r.label}): ")
                + inert(fmt.first_line(r.error, 120) or "correctness failed")
                for r in broken.itertuples()
            )
        )
    st.dataframe(
        fmt.highlight(case_table(results, run)),
        hide_index=True,
        column_config={
            "trend": st.column_config.LinkColumn("trend", display_text="trend"),
            "params": st.column_config.TextColumn(width="medium"),
            "TFLOP/s": st.column_config.NumberColumn(format="%.4g"),
            "GB/s": st.column_config.NumberColumn(format="%.4g"),
        },
    )


def case_table(results: pd.DataFrame, run: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "kernel": results["kernel"],
            "params": results["label"],
            "status": results["status"],
            "verdict": results["verdict"].fillna(""),
            "median": results["median_s"].map(fmt.seconds),
            "CI": [
                f"{fmt.seconds(lo)} – {fmt.seconds(hi)}" if fmt.is_num(lo) else "–"
                for lo, hi in zip(results["ci_low_s"], results["ci_high_s"], strict=True)
            ],
            "ratio vs baseline": [
                fmt.ratio(r, lo, hi)
                for r, lo, hi in zip(
                    results["ratio"], results["ratio_ci_low"], results["ratio_ci_high"], strict=True
                )
            ],
            "TFLOP/s": results["tflops"],
            "GB/s": results["gbps"],
            "n": results["n_samples"],
            "reliable": results["reliable"],
            "trend": [
                nav.link("trend", repo=run["repository_id"], device=run["device_class"], case=c)
                for c in results["case_id"]
            ],
        }
    )


def logs_tab(results: pd.DataFrame) -> None:
    noisy = results[(results["error"].fillna("") != "") | (results["log_tail"].fillna("") != "")]
    if noisy.empty:
        st.caption("No case logged an error or output.")
        return
    for r in noisy.itertuples():
        with st.expander(f"{r.kernel} · {r.label} · {r.status}", expanded=r.status != "pass"):
            if r.error:
                show_error(r.error)
            if r.log_tail:
                st.code(str(r.log_tail)[-LOG_TAIL_CHARS:], language=None)


def telemetry_tab(results: pd.DataFrame) -> None:
    if results.empty:
        st.caption("No results, no telemetry.")
        return
    rows = []
    for r in results.itertuples():
        dev: dict[str, Any] = r.device if isinstance(r.device, dict) else {}
        row: dict[str, Any] = {
            "kernel": r.kernel,
            "params": r.label,
            "device": dev.get("name", r.device_name),
        }
        for f in TELEMETRY_FIELDS:
            row[f] = dev.get(f)
        reasons = dev.get("throttle_reasons") or []
        row["throttle reasons"] = ", ".join(reasons) if reasons else ""
        row["reliable"] = bool(dev.get("reliable", r.reliable))
        row["nvml"] = bool(dev.get("nvml", False))
        rows.append(row)
    table = pd.DataFrame(rows)
    unreliable = int((~table["reliable"]).sum())
    if unreliable:
        st.warning(
            f"{unreliable} case(s) measured on a throttled or unsteady GPU: "
            "their timings are kept but never flagged as regressions."
        )
    if not table["nvml"].any():
        st.info(
            "No NVML telemetry in these records (CPU run or no nvidia-ml-py): "
            "clocks and throttle reasons are unknown."
        )
    first = results["device"].dropna()
    if len(first) and isinstance(first.iloc[0], dict):
        dev0 = first.iloc[0]
        ident = {
            k: dev0.get(k)
            for k in (
                "name",
                "uuid",
                "compute_capability",
                "driver",
                "cuda",
                "sm_count",
                "memory_gb",
            )
            if dev0.get(k)
        }
        if ident:
            st.markdown(" · ".join(f"**{k}** {v}" for k, v in ident.items()))
    st.dataframe(table, hide_index=True)
