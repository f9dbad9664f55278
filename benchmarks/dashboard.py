"""Time the dashboard on a seeded database: each page's queries, then each full page render.

    python benchmarks/seed.py postgresql+psycopg://postgres@127.0.0.1:5432/kw_dash_bench
    python benchmarks/dashboard.py postgresql+psycopg://postgres@127.0.0.1:5432/kw_dash_bench

Queries are timed uncached (``kernelwatch.dashboard.queries``, what a cache miss
costs): the first call (cold PostgreSQL buffers for that data), then ``--repeat``
times; pages are full AppTest runs of
``dashboard/app.py`` with the Streamlit cache cleared first (cold) and then again
(warm). Targets: < 1 s per query, < 2 s per page. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from kernelwatch.dashboard import compare_stats, queries
from kernelwatch.db.models import Regression, Result, Run
from kernelwatch.db.session import make_engine
from kernelwatch.kernels.verdict import CaseVerdict

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
QUERY_TARGET_S = 1.0
PAGE_TARGET_S = 2.0


def pick(engine: Engine) -> dict[str, Any]:
    """Realistic arguments: the newest analysed run, its baseline, a regressed case."""
    with engine.connect() as conn:
        run_id, base_id, repo, device = conn.execute(
            select(Run.id, Run.baseline_run_id, Run.repository_id, Run.device_class)
            .where(Run.status == "succeeded", Run.baseline_run_id.is_not(None))
            .order_by(Run.id.desc())
            .limit(1)
        ).one()
        reg = conn.execute(
            select(Regression.id, Regression.case_id)
            .join(Run, Regression.run_id == Run.id)
            .where(Run.repository_id == repo, Regression.kind == CaseVerdict.REGRESSION)
            .order_by(Regression.id.desc())
            .limit(1)
        ).first()
        case = (
            reg[1]
            if reg
            else conn.scalar(select(Result.case_id).where(Result.run_id == run_id).limit(1))
        )
        counts = {
            "runs": conn.scalar(select(func.count()).select_from(Run)),
            "results": conn.scalar(select(func.count()).select_from(Result)),
            "regressions": conn.scalar(select(func.count()).select_from(Regression)),
        }
    return {
        "run": run_id,
        "base": base_id,
        "repo": repo,
        "device": device,
        "case": case,
        "regression": reg[0] if reg else None,
        "counts": counts,
    }


def query_plan(engine: Engine, a: dict[str, Any]) -> list[tuple[str, str, Callable[[], Any]]]:
    """(page, query, call) for every query a page makes on a cache miss."""
    run, base, repo, device, case = a["run"], a["base"], a["repo"], a["device"], a["case"]
    return [
        ("all", "schema_state", lambda: queries.schema_state(engine)),
        ("all", "repositories", lambda: queries.repositories(engine)),
        ("runs", "run_counts", lambda: queries.run_counts(engine)),
        ("runs", "device_classes", lambda: queries.device_classes(engine)),
        ("runs", "runs (newest 200)", lambda: queries.runs(engine)),
        (
            "runs",
            "runs (repo, state filter)",
            lambda: queries.runs(engine, repo, ("succeeded", "failed"), device),
        ),
        ("run", "run_detail", lambda: queries.run_detail(engine, run)),
        ("run", "run_results (+telemetry)", lambda: queries.run_results(engine, run)),
        ("trend", "device_classes(repo)", lambda: queries.device_classes(engine, repo)),
        ("trend", "cases_for", lambda: queries.cases_for(engine, repo, device)),
        ("trend", "case_info", lambda: queries.case_info(engine, case)),
        ("trend", "trend (1 case)", lambda: queries.trend(engine, (case,), repo, device)),
        (
            "trend",
            "trend (12 cases)",
            lambda: queries.trend(
                engine, tuple(queries.cases_for(engine, repo, device)["case_id"][:12]), repo, device
            ),
        ),
        ("regressions", "regressions (open)", lambda: queries.regressions(engine, ("open",))),
        ("regressions", "regressions (all states)", lambda: queries.regressions(engine, ())),
        ("regressions", "triage_events", lambda: queries.triage_events(engine, (1, 2, 3))),
        ("compare", "resolve_run (sha)", lambda: queries.resolve_run(engine, "abcd")),
        (
            "compare",
            "run_results A+B (+samples)",
            lambda: (
                queries.run_results(engine, base, samples=True),
                queries.run_results(engine, run, samples=True),
            ),
        ),
        (
            "compare",
            "compare (bootstrap, all cases)",
            lambda: compare_stats.compare(
                queries.run_results(engine, base, samples=True),
                queries.run_results(engine, run, samples=True),
            ),
        ),
        ("fleet", "workers", lambda: queries.workers(engine)),
        ("fleet", "running_runs", lambda: queries.running_runs(engine)),
        ("fleet", "heartbeats", lambda: queries.heartbeats(engine)),
        (
            "roofline",
            "runs (repo, succeeded)",
            lambda: queries.runs(engine, repo, ("succeeded",), None, 50),
        ),
        ("roofline", "roofline", lambda: queries.roofline(engine, run)),
    ]


def time_queries(engine: Engine, a: dict[str, Any], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for page, name, call in query_plan(engine, a):
        t = time.perf_counter()
        call()  # first call: connection, plan cache, pages not yet in shared buffers
        first = time.perf_counter() - t
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        rows.append(
            {
                "page": page,
                "query": name,
                "first_s": first,
                "median_s": statistics.median(times),
                "max_s": max(times),
            }
        )
    return rows


def page_params(a: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    return [
        ("runs", {"page": "runs"}),
        ("run", {"page": "run", "run": str(a["run"])}),
        (
            "trend",
            {"page": "trend", "repo": str(a["repo"]), "device": a["device"], "case": a["case"]},
        ),
        (
            "regressions",
            {
                "page": "regressions",
                **({"regression": str(a["regression"])} if a["regression"] else {}),
            },
        ),
        ("compare", {"page": "compare", "a": str(a["base"]), "b": str(a["run"])}),
        ("fleet", {"page": "fleet"}),
        ("roofline", {"page": "roofline", "run": str(a["run"])}),
    ]


def time_pages(url: str, a: dict[str, Any]) -> list[dict[str, Any]]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from kernelwatch.db.config import get_settings

    os.environ["KW_DATABASE_URL"] = url
    get_settings.cache_clear()
    AppTest.from_file(str(APP), default_timeout=120).run()  # imports, first connection
    rows = []
    for name, params in page_params(a):
        timings = []
        for cold in (True, False):
            if cold:
                st.cache_data.clear()
            at = AppTest.from_file(str(APP), default_timeout=120)
            for k, v in params.items():
                at.query_params[k] = v
            t = time.perf_counter()
            at.run()
            timings.append(time.perf_counter() - t)
            if at.exception:
                raise SystemExit(f"{name}: {at.exception[0].value}")
        rows.append({"page": name, "cold_s": timings[0], "warm_s": timings[1]})
    return rows


def report(url: str, a: dict[str, Any], q: list[dict[str, Any]], p: list[dict[str, Any]]) -> str:
    c = a["counts"]
    lines = [
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC · machine: {platform.node()} "
        f"({os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}) · database: {url.split('@')[-1]}",
        f"Data: {c['runs']:,} runs, {c['results']:,} results, {c['regressions']:,} regressions",
        "",
        "| page | query (uncached) | first call | median | max | < 1 s |",
        "|---|---|---:|---:|---:|:-:|",
    ]
    for r in q:
        ok = "yes" if max(r["max_s"], r["first_s"]) < QUERY_TARGET_S else "**no**"
        lines.append(
            f"| {r['page']} | {r['query']} | {r['first_s'] * 1e3:.1f} ms | "
            f"{r['median_s'] * 1e3:.1f} ms | {r['max_s'] * 1e3:.1f} ms | {ok} |"
        )
    lines += [
        "",
        "| page | render, cold cache | render, warm cache | < 2 s |",
        "|---|---:|---:|:-:|",
    ]
    for r in p:
        ok = "yes" if r["cold_s"] < PAGE_TARGET_S else "**no**"
        lines.append(
            f"| {r['page']} | {r['cold_s'] * 1e3:.0f} ms | {r['warm_s'] * 1e3:.0f} ms | {ok} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url", help="SQLAlchemy URL of a seeded database")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", help="also write the raw figures to this file")
    p.add_argument("--no-pages", action="store_true", help="time the queries only")
    args = p.parse_args(argv)
    engine = make_engine(args.url)
    a = pick(engine)
    q = time_queries(engine, a, args.repeat)
    pages = [] if args.no_pages else time_pages(args.url, a)
    print(report(args.url, a, q, pages))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"args": {k: v for k, v in a.items()}, "queries": q, "pages": pages}, default=str
            )
        )
    slow = [r for r in q if max(r["max_s"], r["first_s"]) >= QUERY_TARGET_S]
    slow += [r for r in pages if r["cold_s"] >= PAGE_TARGET_S]
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
