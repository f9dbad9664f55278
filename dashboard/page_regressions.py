"""Regressions: flagged cases across repositories, newest first, and their triage.

``?page=regressions&state=open,acknowledged&repo=1`` filters the list;
``&regression=7`` opens one with its suspect commit range, deep links, the
commands that reproduce it, the bisections that name its culprit (or the command that
starts one), its triage trail and (signed in) the triage form.

A row is one problem (repository, GPU class, case, culprit range), never one per run:
the runs that found it again (re-runs, bisection steps, confirmation re-measures, the
history's change point) are its evidence, listed under it. A CPU timing row says
"plumbing only" wherever it is listed: CPU times prove the plumbing, not a slowdown.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import auth, cached, fmt, nav, queries
from kernelwatch.db.run_options import RunOptions
from kernelwatch.db.triage import ACTIVE_STATES, TRIAGE_ACTIONS
from kernelwatch.jobs.judging.history import CHANGEPOINT
from kernelwatch.jobs.judging.inert_text import inert
from kernelwatch.kernels.verdict import PLUMBING_ONLY, CaseVerdict

STATES = ("open", "acknowledged", "expected", "false_positive", "fixed")


FLASH = "kw_triage_flash"


def render(url: str) -> None:
    st.title("Regressions")
    flash = st.session_state.pop(FLASH, None)
    if flash:
        st.success(flash)
    repos = cached.repositories(url)
    c1, c2 = st.columns([3, 2])
    # No parameter: the states that want attention; ``state=any``: no filter.
    wanted = [s for s in (nav.param("state") or ",".join(ACTIVE_STATES)).split(",") if s in STATES]
    states = c1.multiselect("State (none selected: any)", list(STATES), default=wanted)
    repo_ids: list[int | None] = [None, *[int(r) for r in repos["id"]]]
    names = dict(zip(repos["id"], repos["name"], strict=True))
    repo = c2.selectbox(
        "Repository",
        repo_ids,
        index=nav.index_of(repo_ids, nav.int_param("repo")),
        format_func=lambda r: "all repositories" if r is None else names.get(r, str(r)),
    )
    nav.set_params({"state": ",".join(states) or "any", "repo": repo})

    df = cached.regressions(url, tuple(states or STATES), repo)
    if df.empty:
        st.success("No regressions in these states.")
        return
    st.caption(
        f"{len(df)} problem(s), newest first, one row each however many runs found it "
        "(evidence). Magnitude is the slowdown of the candidate against its baseline with "
        "the confidence interval; CPU timings are plumbing only."
    )
    st.dataframe(
        fmt.highlight(regression_table(df), "kind"),
        hide_index=True,
        column_config={
            "open": st.column_config.LinkColumn("id", display_text=r"regression=(\d+)"),
            "compare": st.column_config.LinkColumn("compare", display_text="compare"),
            "run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)"),
            "trend": st.column_config.LinkColumn("trend", display_text="trend"),
            "flagged": st.column_config.DatetimeColumn("flagged", format="YYYY-MM-DD HH:mm"),
            "case": st.column_config.TextColumn(width="medium"),
        },
    )

    ids = [int(i) for i in df["id"]]
    labels = {
        int(r.id): f"#{r.id} {r.kernel} · {r.label} ({r.repository}, {r.kind})"
        for r in df.itertuples()
    }
    current = nav.int_param("regression")
    options: list[int | None] = [None, *ids]
    choice = st.selectbox(
        "Details and triage",
        options,
        index=nav.index_of(options, current),
        format_func=lambda i: "choose a regression…" if i is None else labels.get(i, f"#{i}"),
    )
    nav.set_params({"regression": choice})
    if choice is not None:
        row = df[df["id"] == choice].iloc[0].to_dict()
        detail(url, row)


def regression_table(df: pd.DataFrame) -> pd.DataFrame:
    records = df.to_dict("records")
    return pd.DataFrame(
        {
            "open": [
                nav.link("regressions", regression=int(i), state=s)
                for i, s in zip(df["id"], df["state"], strict=True)
            ],
            "flagged": df["created"],
            "kind": [kind_label(r) for r in records],
            "magnitude": [magnitude(r) for r in records],
            "evidence": df.get("evidence", 1),
            "kernel": df["kernel"],
            "case": df["label"],
            "suspect range": [suspect_range(r) for r in records],
            "repository": df["repository"],
            "device": df["device_class"],
            "state": df["state"],
            "compare": [compare_link(r) for r in records],
            "run": [nav.link("run", run=int(r)) for r in df["run_id"]],
            "trend": [trend_link(r) for r in records],
        }
    )


def kind_label(r: dict[str, Any]) -> str:
    """The row's kind, with ``(CPU: plumbing only)`` for a CPU timing."""
    kind = str(r["kind"])
    return f"{kind} (CPU: {PLUMBING_ONLY})" if r.get("plumbing_only") else kind


def magnitude(r: dict[str, Any]) -> str:
    if r["kind"] == CaseVerdict.BROKEN:
        return f"broken: {fmt.first_line(r['detail'], 80) or 'correctness failed'}"
    if r["kind"] == CHANGEPOINT:  # from the history detector: no pairwise interval
        return fmt.first_line(r["detail"], 80)
    return fmt.ratio(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"])


def suspect_range(r: dict[str, Any]) -> str:
    head = fmt.short_sha(r["sha"]) or "?"
    base = fmt.short_sha(r["baseline_sha"])
    return f"{base}..{head}" if base else head


def compare_link(r: dict[str, Any]) -> str | None:
    base = r.get("baseline_run_id")
    if base is None or pd.isna(base):
        return None
    return f"{nav.link('compare', a=int(base), b=int(r['run_id']), kernel=r['kernel'])}"


def trend_link(r: dict[str, Any]) -> str:
    link: str = nav.link(
        "trend", repo=int(r["repository_id"]), device=r["device_class"], case=r["case_id"]
    )
    return link


def measured_impl(r: dict[str, Any]) -> str:
    """The module whose kernels the run measured: the run's ``--impl``, else what the
    commit's ``.kernelwatch.toml`` named, else the case's backend label. Without it a
    repro ``bench`` measures kernelwatch's own kernels (issue 18)."""
    options = RunOptions.from_stored(r.get("run_options") or {})
    module = options.impl or (options.config.module if options.config else None)
    return str(module or r["backend"])


def repro_commands(r: dict[str, Any]) -> str:
    """A command that measures exactly the flagged case on both sides: the culprit commit
    against the good one, interleaved in one run (``--paired``: both sides built and
    measured, so it never depends on which earlier run of the baseline measured what),
    with the suite, module, case and build profile of the run that found it."""
    options = RunOptions.from_stored(r.get("run_options") or {})
    impl = measured_impl(r)
    run = ["kernelwatch", "run", str(r["source"])]
    if r["sha"]:
        run += ["--commit", str(r["sha"])]
    if r["baseline_sha"]:
        run += ["--baseline", str(r["baseline_sha"])]
    run += ["--suite", str(r["suite"]), "--impl", impl]
    run += ["--kernel", str(r["kernel"]), "--case", str(r["case_id"])]
    if options.profile:
        run += ["--profile", options.profile]
    if r["baseline_sha"]:
        run += ["--paired"]
    run += ["--device-class", str(r["device_class"]), "--wait"]
    bench = ["kernelwatch", "bench", "--suite", str(r["suite"]), "--kernel", str(r["kernel"])]
    bench += ["--case", str(r["case_id"]), "--out", "results.jsonl", "--impl", impl]
    return (
        "# measure the case at the suspect commit against the good one, both sides in one\n"
        "# run on a worker (its answer joins the commit's as a manual run; add --gate to rank\n"
        "# it above other manual runs)\n"
        f"{shlex.join(run)}\n"
        "# or, in a checkout of the suspect commit with the library installed\n"
        f"{shlex.join(bench)}"
    )


def detail(url: str, r: dict[str, Any]) -> None:
    st.subheader(f"#{r['id']} " + inert(f"{r['kernel']} · {r['label']}"))
    if r.get("plumbing_only"):
        st.warning(
            f"CPU timing: {PLUMBING_ONLY}. A loaded machine moves CPU times by whole factors; "
            "this row never blocks a merge (KW_CPU_TIMING_GATES)."
        )
    st.markdown(
        f"**{kind_label(r)}** in **{r['repository']}** on **{r['device_class']}** · "
        f"{magnitude(r)}"
        + (f" · p = {r['p_value']:.2g}" if fmt.is_num(r["p_value"]) else "")
        + f" · state **{r['state']}**"
    )
    if r["detail"]:
        st.caption(inert(str(r["detail"])))
    message = inert(fmt.first_line(r["message"], 120))  # a commit message: untrusted
    st.markdown(f"Suspect range `{suspect_range(r)}` — {message}")
    links = [
        f"[run #{int(r['run_id'])}]({nav.link('run', run=int(r['run_id']))})",
        f"[trend]({trend_link(r)})",
    ]
    cmp = compare_link(r)
    if cmp:
        links.insert(1, f"[compare with baseline]({cmp})")
    st.markdown(" · ".join(links))
    evidence_panel(url, r)
    st.markdown("**Reproduce**")
    st.code(repro_commands(r), language="bash", wrap_lines=True)
    bisection_panel(url, r)
    triage_panel(url, r)


def evidence_panel(url: str, r: dict[str, Any]) -> None:
    """The runs that found this problem: the first, re-runs, bisection steps, re-measures."""
    rows = queries.regression_evidence(cached.engine(url), int(r["id"]))
    st.markdown(f"**Evidence** ({len(rows)} run{'s' if len(rows) != 1 else ''})")
    if rows.empty:
        return
    table = pd.DataFrame(
        {
            "run": [nav.link("run", run=int(i)) for i in rows["run_id"]],
            "found": rows["kind"],
            "by": [
                f"{src} ({trig})" for src, trig in zip(rows["source"], rows["trigger"], strict=True)
            ],
            "range": [
                f"{fmt.short_sha(g) or '?'}..{fmt.short_sha(b) or '?'}"
                for g, b in zip(rows["good_sha"], rows["bad_sha"], strict=True)
            ],
            "magnitude": [
                fmt.ratio(x, lo, hi)
                for x, lo, hi in zip(
                    rows["ratio"], rows["ratio_ci_low"], rows["ratio_ci_high"], strict=True
                )
            ],
            "detail": rows["detail"].map(lambda d: fmt.first_line(d, 100)),
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        column_config={"run": st.column_config.LinkColumn("run", display_text=r"run=(\d+)")},
    )


def bisection_panel(url: str, r: dict[str, Any]) -> None:
    """The bisections this regression started or that end at its commit, each with its
    culprit; without one, the command that starts one over the suspect range."""
    found = queries.bisections_of(
        cached.engine(url), int(r["repository_id"]), int(r["run_id"]), str(r["sha"] or "")
    )
    st.markdown("**Which commit did it**")
    if found.empty:
        st.caption("No bisection of this regression yet.")
        head, base = r.get("sequence"), r.get("baseline_sequence")
        # commits from baseline to head (NaN when either is unknown: no command)
        span = float(head) - float(base) if head is not None and base is not None else math.nan
        if span > 1 and r["sha"] and r["baseline_sha"]:  # one commit: that commit did it
            command = ["kernelwatch", "bisect", str(r["source"]), "--good", str(r["baseline_sha"])]
            command += ["--bad", str(r["sha"]), "--case", str(r["case_id"]), "--wait"]
            st.code(shlex.join(command), language="bash", wrap_lines=True)
        return
    for b in found.to_dict("records"):
        line = f"[bisection #{int(b['id'])}]({nav.link('bisect', id=int(b['id']))}): {b['status']}"
        if isinstance(b["culprit_sha"], str):
            line += f" · culprit `{b['culprit_sha'][:12]}` {b['culprit_verdict']}"
            if fmt.is_num(b["culprit_ratio"]):
                line += f" {fmt.ratio(b['culprit_ratio'], None, None)}"
        line += f" · {float(b['gpu_seconds'] or 0):.0f} device s"
        st.markdown(line)


def triage_panel(url: str, r: dict[str, Any]) -> None:
    st.markdown("**Triage**")
    state = cached.schema_state(url)
    if not state["triage"]:
        st.warning("Triage needs migration 0002: run `kernelwatch db upgrade`.")
        return
    events = cached.triage_events(url, (int(r["id"]),))
    if events.empty:
        st.caption("No triage yet.")
    else:
        st.dataframe(events.drop(columns=["regression_id"]), hide_index=True)
    config = auth.auth_config()
    user = auth.current_user(config)
    if not config.enabled:
        st.info(
            "Triage is disabled: the dashboard is read-only. Set KW_DASHBOARD_PASSWORD or "
            "KW_DASHBOARD_TRUSTED_HEADER to enable it."
        )
        return
    if user is None:
        st.info("Sign in (sidebar) to triage.")
        return
    with st.form(f"triage_{r['id']}", clear_on_submit=True):
        actions = [a for a in TRIAGE_ACTIONS if a != r["state"]]
        action = st.selectbox("Decision", actions, format_func=lambda a: a.replace("_", " "))
        note = st.text_area("Note", placeholder="why: link to the PR, issue or discussion")
        if st.form_submit_button(f"Record as {user}"):
            cached.record_triage(url, int(r["id"]), str(action), user, note)
            st.session_state[FLASH] = f"Recorded on #{r['id']}: {action} by {user}."
            st.rerun()
