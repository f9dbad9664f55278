"""Trends: one case (or a slice of the shape grid) over a repository's commits.

``?page=trend&repo=1&device=h100&case=<id>&metric=time`` opens one series; param
filters (``p_seq=4096``) select a slice when no single case is named. Points are
in first-parent commit order, one per commit: its composed answer (the most
authoritative run that measured the case, ``jobs/judging/compose.py``), with that run
named on hover and in the points table; the band is the median's confidence interval;
regressions, broken cases and throttled measurements are marked. The change points
drawn are the ones the service recorded (``jobs/judging/history.py``, at the
gate's minimum effect), never recomputed here: the chart shows what was flagged.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, charts, nav, queries
from kernelwatch.jobs.judging.history import CHANGEPOINT
from kernelwatch.kernels.verdict import CPU_CLASS, PLUMBING_ONLY, CaseVerdict

MAX_SERIES = 12
ANY = "(all)"


def render(url: str) -> None:
    st.title("Trends")
    repos = cached.repositories(url)
    if repos.empty:
        st.info("No repositories yet: nothing to plot.")
        return
    case_id = nav.param("case")
    case = cached.case_info(url, case_id) if case_id else None
    repo_param = nav.int_param("repo")
    if repo_param is None and case is not None:
        found = cached.case_repositories(url, case["case_id"])
        repo_param = found[0] if found else None
    if repo_param is None:  # the repository being measured, not the first by name
        repo_param = queries.busiest_repository(repos)

    c1, c2, c3 = st.columns(3)
    ids = [int(i) for i in repos["id"]]
    names = dict(zip(repos["id"], repos["name"], strict=True))
    repo = c1.selectbox(
        "Repository",
        ids,
        index=nav.index_of(ids, repo_param),
        format_func=lambda r: names.get(r, str(r)),
    )
    devices = cached.device_classes(url, repo)
    if not devices:
        st.info("This repository has no runs yet.")
        nav.set_params({"repo": repo})
        return
    device = c2.selectbox("Device class", devices, index=nav.index_of(devices, nav.param("device")))
    metric = c3.radio(
        "Metric",
        list(charts.METRICS),
        horizontal=True,
        index=nav.index_of(list(charts.METRICS), nav.param("metric")),
        format_func=lambda m: {
            "time": "time",
            "tflops": "TFLOP/s",
            "gbps": "GB/s",
            "pct": "% of peak",
            "error": "rel. L2 error",
        }[m],
    )
    cases = cached.cases_for(url, repo, device)
    if cases.empty:
        st.info("No cases measured recently in this repository on this device class.")
        nav.set_params({"repo": repo, "device": device})
        return

    c4, c5 = st.columns(2)
    suites = sorted(cases["suite"].unique())
    suite = c4.selectbox(
        "Suite", suites, index=nav.index_of(suites, nav.param("suite") or (case or {}).get("suite"))
    )
    in_suite = cases[cases["suite"] == suite]
    kernels = sorted(in_suite["kernel"].unique())
    kernel = c5.selectbox(
        "Kernel",
        kernels,
        index=nav.index_of(kernels, nav.param("kernel") or (case or {}).get("kernel")),
    )
    of_kernel = in_suite[in_suite["kernel"] == kernel]

    chosen, varying = _param_filters(of_kernel, case)
    matching = of_kernel[of_kernel["params"].map(lambda p: _matches(p, chosen))]
    single = matching["case_id"].iloc[0] if len(matching) == 1 else None
    stale = {k: None for k in st.query_params if k.startswith("p_")}
    slice_params = {f"p_{k}": None if single else chosen.get(k, ANY) for k in varying}
    nav.set_params(
        {
            "repo": repo,
            "device": device,
            "metric": metric,
            "suite": suite,
            "kernel": kernel,
            "case": single,
            **stale,
            **slice_params,
        }
    )
    if matching.empty:
        st.info("No case matches these parameters.")
        return
    if len(matching) > MAX_SERIES:
        st.warning(
            f"{len(matching)} cases match; showing the first {MAX_SERIES}. "
            "Fix more parameters to narrow the slice."
        )
        matching = matching.head(MAX_SERIES)

    data = cached.trend(url, tuple(matching["case_id"]), repo, device)
    if data.empty:
        st.info("No measurements of this case on this device class yet.")
        return
    is_version = data["sha"].map(lambda s: charts.version_of(s) is not None)
    if is_version.any() and not is_version.all():
        axes = ["commits", "released versions"]
        axis = st.radio(
            "x axis", axes, horizontal=True, index=nav.index_of(axes, nav.param("axis"))
        )
        nav.set_params({"axis": axis})
        data = data[is_version if axis == "released versions" else ~is_version]
        data = data.reset_index(drop=True)
    if single:
        st.subheader(f"{kernel} · {matching['label'].iloc[0]}")
    else:
        st.subheader(f"{kernel} · {len(matching)} cases")
    changes = change_points(data)
    st.altair_chart(charts.trend_chart(data, metric, changes), width="stretch")
    if len(changes):
        st.markdown(
            "**Change points:** "
            + " · ".join(
                f"{row.version or f'commit #{row.sequence}'}: {row.direction} "
                f"{row.magnitude * 100:+.1f} % ({row.label})"
                for row in changes.itertuples()
            )
        )
    if device == CPU_CLASS:
        st.caption(
            f"CPU timings: {PLUMBING_ONLY}. A loaded machine moves them by whole factors; "
            "their flags never block a merge (KW_CPU_TIMING_GATES)."
        )
    st.caption(
        "Band: confidence interval of the median. ◆ red: regression flagged at "
        "that commit · + black: broken (correctness failed or error), drawn at the last "
        "good value · ▲ orange: measured on a throttled GPU (never a regression) · "
        "purple line: a change point the service recorded in the history (a slowdown "
        "of at least the minimum effect, found by `kernelwatch detect`'s detector)."
    )
    _points_table(data, metric, repo)


def change_points(data: pd.DataFrame) -> pd.DataFrame:
    """The change points recorded at these points (``Regression`` rows of kind changepoint).

    History records the first point of each new, slower level; its ratio is the new
    level over the old one.
    """
    columns = ["case_id", "label", "sequence", "version", "direction", "magnitude"]
    if data.empty or "regression" not in data:
        return pd.DataFrame(columns=columns)
    at = data[data["regression"] == CHANGEPOINT]
    rows = [
        {
            "case_id": row["case_id"],
            "label": row["label"],
            "sequence": row["sequence"],
            "version": charts.version_of(row["sha"]),
            "direction": CaseVerdict.REGRESSION,
            "magnitude": float(row["regression_ratio"]) - 1
            if pd.notna(row.get("regression_ratio"))
            else float("nan"),
        }
        for _, row in at.iterrows()
    ]
    return pd.DataFrame(rows, columns=columns)


def _param_filters(
    of_kernel: pd.DataFrame, case: dict[str, Any] | None
) -> tuple[dict[str, str], list[str]]:
    """A selectbox per parameter that varies among the kernel's cases: (chosen, varying)."""
    values: dict[str, set[str]] = {}
    for p in of_kernel["params"]:
        for k, v in (p or {}).items():
            values.setdefault(k, set()).add(str(v))
    varying = sorted(k for k, vs in values.items() if len(vs) > 1)
    if not varying:
        return {}, []
    chosen: dict[str, str] = {}
    cols = st.columns(min(len(varying), 6))
    for i, name in enumerate(varying):
        options = [ANY, *sorted(values[name], key=_natural)]
        default = nav.param(f"p_{name}")
        if case is not None and case["kernel"] == of_kernel["kernel"].iloc[0]:
            default = str((case["params"] or {}).get(name, default))
        value = cols[i % len(cols)].selectbox(
            name, options, index=nav.index_of(options, default, default=1)
        )
        if value != ANY:
            chosen[name] = str(value)
    return chosen, varying


def _matches(params: Any, chosen: dict[str, str]) -> bool:
    p = params or {}
    return all(str(p.get(k)) == v for k, v in chosen.items())


def _natural(v: str) -> tuple[int, float, str]:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def _points_table(data: pd.DataFrame, metric: str, repo: int) -> None:
    frame, unit = charts.trend_frame(data, metric)
    flagged = frame[frame["marker"] != "ok"]
    with st.expander(f"Points ({len(frame)}; {len(flagged)} flagged)", expanded=len(flagged) > 0):
        table = pd.DataFrame(
            {
                "seq": frame["sequence"],
                "commit": [
                    v if isinstance(v, str) else c
                    for v, c in zip(frame["version"], frame["short_sha"], strict=True)
                ],
                "message": frame["subject"],
                "date": frame["when"],
                "case": frame["label"],
                f"median [{unit}]": frame["value"],
                "CI low": frame["low"],
                "CI high": frame["high"],
                "point": frame["marker"],
                "verdict": frame["verdict"].fillna(""),
                "run": [nav.link("run", run=int(r)) for r in frame["run_id"]],
                "from": frame["source"],
            }
        )
        st.dataframe(
            table,
            hide_index=True,
            column_config={
                "run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)"),
            },
        )
