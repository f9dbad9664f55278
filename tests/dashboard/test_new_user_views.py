"""What a new user saw wrong on the dashboard (issue 18, item 6), each pinned.

One unit convention (``kernels/units.py``), an unknown ``?page=`` said out loud, repro
commands that name the measured module and kernel, moved kernels in the run list,
moved rows highlighted, tracebacks preformatted, commits (not sequence numbers) on
the trend's x axis, and a kernel that is not there drawn as missing, not broken.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine, update

from kernelwatch.dashboard import charts, fmt, nav, page_regressions, queries
from kernelwatch.db.models import Run
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.judging.report import format_run
from kernelwatch.kernels import units
from tests.dashboard import test_dashboard as pages
from tests.dashboard.conftest import History
from tests.dashboard.test_dashboard import open_page, texts

# the populated-database fixtures of the page tests, shared (pytest finds them by name)
db = pages.db
templates = pages.templates
ROOT = Path(__file__).resolve().parents[2]


def test_one_unit_convention_for_pages_and_cli() -> None:
    assert units.ratio_text(1.063, 1.041, 1.085) == "1.063× [1.041, 1.085] (+6.3 %)"
    assert fmt.ratio(1.063, 1.041, 1.085) == units.ratio_text(1.063, 1.041, 1.085)
    assert units.ratio_text(0.75) == "0.750× (-25.0 %)"
    assert units.ratio_text(None) == "–"
    summary = {
        "id": 1, "repository": "lib", "commit": "a" * 40, "message": "", "status": "succeeded",
        "verdict": "fail", "worker": "w", "error": None, "device_class": "h100",
        "cases": [{"kernel": "softmax", "status": "pass", "verdict": "regression",
                   "median_s": 1e-3, "ratio": 1.063, "ratio_ci": [1.041, 1.085], "error": ""}],
    }  # fmt: skip
    assert "1.063× [1.041, 1.085] (+6.3 %)" in format_run(summary)


def test_the_units_module_is_standard_library_only() -> None:
    tree = ast.parse((ROOT / "kernels" / "units.py").read_text())
    imported = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported <= {"__future__", "math"}, imported


def test_an_unknown_page_is_an_error_not_a_silent_runs_page(db: tuple[str, History]) -> None:
    assert nav.unknown_page("nope") == "nope" and nav.unknown_page("trends") is None
    at = open_page("nope")
    errors = [str(e.value) for e in at.error]
    assert any("no page 'nope'" in e for e in errors), errors


def _set_run(engine: Engine, run_id: int, **values: object) -> None:
    """Columns of one run of the history, set as a later stage of the service would."""
    with engine.begin() as conn:
        conn.execute(update(Run).where(Run.id == run_id).values(**values))


def test_repro_command_names_module_kernel_commit_and_baseline(db: tuple[str, History]) -> None:
    url, h = db
    engine = make_engine(url)
    config = {"config": {"module": "fa_mini", "suites": ["attention"]}}
    _set_run(engine, h.run_ids[2], options=config)
    df = queries.regressions(engine, ("open", "triaged", "expected", "fixed", "wontfix"))
    row = df[df["id"] == h.regression_id].iloc[0].to_dict()
    code = page_regressions.repro_commands(row)
    assert (
        f"--commit {h.shas[2]} --baseline {h.shas[1]} --suite attention --impl fa_mini "
        "--kernel attention"
    ) in code
    assert "--out results.jsonl --impl fa_mini" in code
    at = open_page("regressions", regression=h.regression_id)
    assert "--impl fa_mini" in texts(at)


def test_the_run_list_names_the_kernels_that_moved(db: tuple[str, History]) -> None:
    url, h = db
    df = queries.runs(make_engine(url))
    moved = dict(zip(df["id"], df["moved"], strict=True))
    assert "attention regression" in moved[h.run_ids[2]]
    assert "gemm broken" in moved[h.run_ids[3]]
    assert moved[h.run_ids[0]] == ""


def test_an_imported_runs_note_is_its_subject_in_the_list_and_the_run_view(
    db: tuple[str, History],
) -> None:
    """Two imported files of one release share its commit, whose message the first wrote:
    each run reads its own note; a run without one keeps its commit's message."""
    url, h = db
    engine = make_engine(url)
    note = {"imported_from": "suite.jsonl", "note": "the whole suite"}
    _set_run(engine, h.run_ids[1], options=note, trigger="import")
    df = queries.runs(engine)
    subject = dict(zip(df["id"], df["message"], strict=True))
    assert subject[h.run_ids[1]] == "the whole suite"
    assert subject[h.run_ids[0]] and subject[h.run_ids[0]] != "the whole suite"
    assert "options" not in df.columns
    detail = queries.run_detail(engine, h.run_ids[1])
    assert detail is not None and detail["message"] == "the whole suite"


def test_moved_rows_are_highlighted() -> None:
    table = pd.DataFrame({"kernel": ["a", "b", "c"], "verdict": ["regression", "", "broken"]})
    styles = fmt.highlight(table)._compute().ctx
    assert styles[(0, 0)] and styles[(2, 1)]
    assert not styles.get((1, 0))


def test_a_traceback_is_shown_preformatted(db: tuple[str, History]) -> None:
    url, h = db
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom'
    with make_engine(url).begin() as conn:
        conn.execute(update(Run).where(Run.id == h.run_ids[0]).values(error=trace))
    at = open_page("run", run=h.run_ids[0])
    assert trace in [str(c.value) for c in at.code]
    assert "Traceback (most recent call last):" in [str(e.value) for e in at.error]


def test_a_missing_kernel_is_not_drawn_as_broken() -> None:
    base = {"verdict": None, "regression": None, "reliable": True}
    assert charts.marker(pd.Series({**base, "status": "skip", "error": "no GPU"})) == "missing"
    absent = "AttributeError: implementation module 'lib' has no kernel 'rmsnorm'"
    assert charts.marker(pd.Series({**base, "status": "error", "error": absent})) == "missing"
    assert charts.marker(pd.Series({**base, "status": "fail", "error": "bound"})) == "broken"


def test_the_trend_axis_names_commits(db: tuple[str, History]) -> None:
    url, h = db
    df = queries.trend(make_engine(url), [h.corner_case], h.repository_id, "h100")
    spec = charts.trend_chart(df, "time").to_dict()
    layers = spec["layer"]
    xs = [layer["encoding"]["x"] for layer in layers if "x" in layer.get("encoding", {})]
    assert all(x["field"] == "commit" and x["type"] == "ordinal" for x in xs)
    x = xs[0]
    assert x["sort"][0].startswith(h.shas[0][:8])
    shas = {v.get("sha") for values in spec["datasets"].values() for v in values}
    assert shas >= set(h.shas)  # the full SHA travels with each point, for the tooltip
    tips = [t["field"] for layer in layers for t in layer.get("encoding", {}).get("tooltip", [])]
    assert "sha" in tips
