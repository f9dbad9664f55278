"""Roofline: achieved TFLOP/s against arithmetic intensity for the cases of one run.

FLOP and byte counts come from each record's ``throughput``; ceilings are drawn
when the records carry the device's measured peaks (``device.peaks`` with
``bf16_tflops`` and ``copy_gbps``, from ``kernels/peaks.py``) or when
``pct_of_peak`` with ``bound_by`` lets them be derived. Without either, only the
points are shown.
``?page=roofline&repo=1&run=12``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import cached, charts, fmt, nav, queries

# ``device.peaks`` as kernels/peaks.py writes it (measured bf16 GEMM rate, copy bandwidth).
PEAK_KEYS = {
    "tflops": ("bf16_tflops", "tflops", "peak_tflops"),
    "gbps": ("copy_gbps", "gbps", "peak_gbps"),
}


def render(url: str) -> None:
    st.title("Roofline")
    repos = cached.repositories(url)
    if repos.empty:
        st.info("No repositories yet: nothing to plot.")
        return
    run_param = nav.int_param("run")
    repo_param = nav.int_param("repo")
    if run_param is not None and repo_param is None:
        detail = cached.run_detail(url, run_param)
        repo_param = int(detail["repository_id"]) if detail else None
    if repo_param is None:  # the repository being measured, not the first by name
        repo_param = queries.busiest_repository(repos)
    c1, c2 = st.columns([1, 2])
    ids = [int(i) for i in repos["id"]]
    names = dict(zip(repos["id"], repos["name"], strict=True))
    repo = c1.selectbox(
        "Repository",
        ids,
        index=nav.index_of(ids, repo_param),
        format_func=lambda r: names.get(r, str(r)),
    )
    recent = cached.runs(url, repo, ("succeeded",), None, 50)
    options = [int(i) for i in recent["id"]]
    if run_param is not None and run_param not in options:
        options.insert(0, run_param)
    if not options:
        st.info("This repository has no finished runs yet.")
        nav.set_params({"repo": repo, "run": None})
        return
    label = {
        int(r.id): f"#{r.id} {fmt.short_sha(r.sha) or r.version_spec} · {r.device_class}"
        for r in recent.itertuples()
    }
    run_id = c2.selectbox(
        "Run",
        options,
        index=nav.index_of(options, run_param),
        format_func=lambda i: label.get(i, f"#{i}"),
    )
    nav.set_params({"repo": repo, "run": run_id})
    if run_id is None:
        return
    df = cached.roofline(url, int(run_id))
    usable = df[df["intensity"].notna() & (df["tflops"].fillna(0) > 0)] if len(df) else df
    if usable.empty:
        st.info("No case of this run has FLOP and byte counts with a passing timing.")
        return
    peak_tflops, peak_gbps = peaks(df)
    if peak_tflops or peak_gbps:
        st.caption(
            "Ceilings: "
            + " · ".join(
                t
                for t in (
                    f"{peak_tflops:.4g} TFLOP/s" if peak_tflops else "",
                    f"{peak_gbps:.4g} GB/s" if peak_gbps else "",
                )
                if t
            )
        )
    else:
        st.caption("The records carry no device peaks: points only, no ceilings.")
    st.altair_chart(charts.roofline_chart(df, peak_tflops, peak_gbps), width="stretch")
    st.dataframe(
        pd.DataFrame(
            {
                "kernel": usable["kernel"],
                "case": usable["label"],
                "FLOP/byte": usable["intensity"],
                "TFLOP/s": usable["tflops"],
                "GB/s": usable["gbps"],
                "% of peak": usable["pct_of_peak"],
                "bound by": usable["bound_by"],
                "reliable": usable["reliable"],
            }
        ),
        hide_index=True,
        column_config={
            "FLOP/byte": st.column_config.NumberColumn(format="%.3g"),
            "TFLOP/s": st.column_config.NumberColumn(format="%.4g"),
            "GB/s": st.column_config.NumberColumn(format="%.4g"),
        },
    )


def peaks(df: pd.DataFrame) -> tuple[float | None, float | None]:
    """Device ceilings from the records: explicit ``device.peaks``, else from pct_of_peak."""
    found: dict[str, float] = {}
    for p in df["peaks"]:
        if isinstance(p, dict):
            for name, keys in PEAK_KEYS.items():
                for k in keys:
                    if fmt.is_num(p.get(k)) and p[k] > 0:
                        found.setdefault(name, float(p[k]))
    for r in df.to_dict("records"):
        _derive(found, r)
    return found.get("tflops"), found.get("gbps")


def _derive(found: dict[str, float], r: dict[str, Any]) -> None:
    pct = r.get("pct_of_peak")
    if not isinstance(pct, int | float) or not pct > 0:
        return
    if r.get("bound_by") == "compute" and fmt.is_num(r.get("tflops")):
        found.setdefault("tflops", r["tflops"] * 100 / pct)
    elif r.get("bound_by") == "memory" and fmt.is_num(r.get("gbps")):
        found.setdefault("gbps", r["gbps"] * 100 / pct)
