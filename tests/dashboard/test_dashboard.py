"""Dashboard pages through Streamlit's AppTest, on an empty and on a populated database.

The populated database is written through the models by ``conftest_dashboard``
(one repository, four commits on H100, a slowdown confined to one corner of the
attention shape grid, a broken GEMM, a running and a queued run). Each test gets
its own copy of a database migrated once per module.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import streamlit as st
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest

from kernelwatch.dashboard import auth, compare_stats, fmt, nav, queries
from kernelwatch.db.bisect import Bisection
from kernelwatch.db.config import get_settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Regression
from kernelwatch.db.session import engine_for, make_engine, session_factory
from kernelwatch.db.triage import TriageEvent, history
from tests.conftest import create_pg_database, drop_pg_database
from tests.dashboard.conftest import (
    RELEASE_STEP,
    RELEASES,
    History,
    add_release_history,
    fill,
    make_database,
)

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
DEMO_DB = Path("/tmp/kwdemo1/kernelwatch.db")
PAGES = ("runs", "trend", "regressions", "compare", "fleet", "roofline")
TITLES = {
    "runs": "Runs",
    "trend": "Trends",
    "regressions": "Regressions",
    "compare": "Compare",
    "fleet": "Fleet",
    "roofline": "Roofline",
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, History | None]]:
    """Migrated databases built once: empty, and holding the factory history."""
    root = tmp_path_factory.mktemp("dashboard-templates")
    empty = root / "empty.db"
    upgrade(f"sqlite:///{empty}")
    _, hist = make_database(root / "history.db")
    return {"empty": (empty, None), "history": (root / "history.db", hist)}


def _use(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{path}"
    monkeypatch.setenv("KW_DATABASE_URL", url)
    monkeypatch.setenv("KW_DATA_DIR", str(path.parent))
    monkeypatch.delenv("KW_DASHBOARD_PASSWORD", raising=False)
    monkeypatch.delenv("KW_DASHBOARD_TRUSTED_HEADER", raising=False)
    get_settings.cache_clear()
    return url


@pytest.fixture
def empty_db(
    templates: dict[str, tuple[Path, History | None]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    path = tmp_path / "kernelwatch.db"
    shutil.copy(templates["empty"][0], path)
    yield _use(path, monkeypatch)
    get_settings.cache_clear()


@pytest.fixture
def db(
    templates: dict[str, tuple[Path, History | None]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[str, History]]:
    path = tmp_path / "kernelwatch.db"
    shutil.copy(templates["history"][0], path)
    hist = templates["history"][1]
    assert hist is not None
    yield _use(path, monkeypatch), hist
    get_settings.cache_clear()


def open_page(page: str, **params: object) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["page"] = page
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    """Every piece of text the page shows, for 'is it on the page' assertions."""
    parts: list[str] = []
    for kind in (
        "title",
        "subheader",
        "markdown",
        "caption",
        "info",
        "warning",
        "error",
        "success",
        "code",
    ):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


def frames(at: AppTest) -> list[object]:
    return [d.value for d in at.dataframe]


# --------------------------------------------------------------------------- empty database


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_an_empty_database(empty_db: str, page: str) -> None:
    at = open_page(page)
    assert [t.value for t in at.title] == [TITLES[page]]
    assert not at.error


def test_unmigrated_database_says_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "blank.db"
    sqlite3.connect(path).close()
    _use(path, monkeypatch)
    at = open_page("runs")
    assert "kernelwatch db upgrade" in at.error[0].value


# --------------------------------------------------------------------------- runs


def test_runs_lists_queue_and_history(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("runs")
    table = frames(at)[0]
    assert len(table) == 6  # four measured runs, one running, one queued
    assert set(table["state"]) == {"succeeded", "running", "queued"}
    assert {"gpu-h100-01@node3", "gpu-h200-02@node7"} <= set(table["worker"])
    assert table["open"].iloc[0] == f"?page=run&run={h.queued_run_id}"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Queued"] == "1" and metrics["Running"] == "1"


def test_runs_filter_by_state_is_in_the_address(db: tuple[str, History]) -> None:
    at = open_page("runs", state="running")
    assert list(frames(at)[0]["state"]) == ["running"]
    assert at.query_params["state"] == "running"


def test_run_view_shows_cases_logs_and_telemetry(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("run", run=h.run_ids[3])
    assert at.title[0].value.startswith(f"Run #{h.run_ids[3]} · flash-attn-mini @ ")
    cases, telemetry = frames(at)
    assert len(cases) == 7
    broken = cases[cases["kernel"] == "gemm"].iloc[0]
    assert (broken["status"], broken["verdict"]) == ("fail", "broken")
    assert "Broken: gemm" in at.error[0].value
    assert "rel L2 error 0.41" in texts(at)  # per-case log
    assert "Successfully installed flash-attn-mini" in texts(at)  # build log
    assert set(telemetry["sm_mhz_median"]) == {1980}
    assert f"compare with baseline run #{h.run_ids[2]}" in texts(at)


HOSTILE = "see ![px](https://evil.example/t.png) and [log in](https://evil.example) @acme/sec"


def test_run_view_shows_repository_and_kernel_text_inert(db: tuple[str, History]) -> None:
    """A commit message and a kernel's error are the repository's words: shown, never a
    link, an image (loaded in every viewer's browser) or a mention."""
    url, h = db
    run_id = h.run_ids[3]
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE commits SET message = ? WHERE id = (SELECT commit_id FROM runs "
                     "WHERE id = ?)", (HOSTILE, run_id))  # fmt: skip
        conn.execute("UPDATE results SET error = ? WHERE run_id = ? AND status = 'fail'",
                     (HOSTILE, run_id))  # fmt: skip
    at = open_page("run", run=run_id)
    shown = "\n".join(str(e.value) for e in [*at.caption, *at.error])
    assert "evil.example" in shown  # said, not hidden
    for live in ("![", "[log in](", "](https://", "@acme"):
        assert live not in shown, shown


def test_run_view_marks_throttled_measurements(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("run", run=h.run_ids[1])
    telemetry = frames(at)[1]
    throttled = telemetry[~telemetry["reliable"]]
    assert list(throttled["throttle reasons"]) == ["hw_slowdown"]
    assert "throttled or unsteady GPU" in at.warning[0].value


def test_unknown_run_is_a_warning_not_a_traceback(db: tuple[str, History]) -> None:
    at = open_page("run", run=999)
    assert "no run #999" in at.warning[0].value


# --------------------------------------------------------------------------- trends


def test_trend_of_one_case_marks_the_regression(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("trend", repo=h.repository_id, device="h100", case=h.corner_case)
    assert "seq=2048" in at.subheader[0].value and "batch=4" in at.subheader[0].value
    points = frames(at)[0]
    assert list(points["seq"]) == [1, 2, 3, 4]
    assert list(points["point"]) == ["ok", "ok", "regression", "ok"]
    assert points.columns[5] == "median [µs]"
    assert at.get("vega_lite_chart")
    assert at.query_params["case"] == h.corner_case


def test_trend_marks_broken_and_throttled_points(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("trend", repo=h.repository_id, device="h100", case=h.gemm_case)
    assert list(frames(at)[0]["point"]) == ["ok", "ok", "ok", "broken"]
    at = open_page("trend", repo=h.repository_id, device="h100", case=h.other_case, metric="tflops")
    points = frames(at)[0]
    assert list(points["point"]) == ["ok", "throttled", "ok", "ok"]
    assert points.columns[5] == "median [TFLOP/s]"


def test_trend_draws_the_error_against_the_reference_beside_time(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("trend", repo=h.repository_id, device="h100", case=h.gemm_case, metric="error")
    points = frames(at)[0]
    assert points.columns[5] == "median [rel. L2]"
    # the records' correctness.errors.rel_l2: 1e-3 while correct, 0.4 at the broken commit
    assert list(points["median [rel. L2]"]) == pytest.approx([1e-3, 1e-3, 1e-3, 0.4])
    assert list(points["point"]) == ["ok", "ok", "ok", "broken"]


def test_trend_slice_of_the_shape_grid(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page(
        "trend",
        repo=h.repository_id,
        device="h100",
        suite="attention",
        kernel="attention",
        p_seq="2048",
        p_batch="(all)",
    )
    assert at.subheader[0].value == "attention · 2 cases"
    assert len(frames(at)[0]) == 8
    assert "case" not in at.query_params


def test_trend_over_released_versions_with_a_change_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "releases.db"
    upgrade(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}")
    with session_factory(engine)() as session, session.begin():
        repo, case = add_release_history(session)
    engine.dispose()
    _use(path, monkeypatch)
    at = open_page("trend", repo=repo, device="h200", case=case)
    points = frames(at)[0]
    assert list(points["commit"]) == RELEASES  # release order: 0.10.0 after 0.9.0
    assert at.get("vega_lite_chart")
    shown = texts(at)
    assert f"{RELEASE_STEP}: regression +25" in shown  # the detector's change point
    at = open_page("trend", repo=repo, device="h200", case=case, metric="pct")
    assert frames(at)[0].columns[5] == "median [% of peak]"


# --------------------------------------------------------------------------- regressions


def test_regressions_list_open_ones_newest_first(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("regressions")
    table = frames(at)[0]
    assert list(table["kind"]) == ["broken", "regression"]
    # issue 18: one unit convention on every page and in the CLI (was "+30.0 % [+27.0, +33.0]")
    assert table["magnitude"].iloc[1] == "1.300× [1.270, 1.330] (+30.0 %)"
    assert table["magnitude"].iloc[0].startswith("broken: rel L2 error")
    assert table["suspect range"].iloc[1] == f"{h.shas[1][:10]}..{h.shas[2][:10]}"
    assert table["compare"].iloc[1] == (
        f"?page=compare&a={h.run_ids[1]}&b={h.run_ids[2]}&kernel=attention"
    )


def test_regression_detail_has_links_and_repro(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("regressions", regression=h.regression_id)
    code = at.code[0].value
    # both sides of the case in one run (issue 23: the old command compared nothing when the
    # baseline's newest run had not measured the case)
    assert (
        f"kernelwatch run https://github.com/example/flash-attn-mini.git --commit "
        f"{h.shas[2]} --baseline {h.shas[1]} --suite attention"
    ) in code
    assert f"--kernel attention --case {h.corner_case} --paired --device-class" in code
    assert "kernelwatch bench --suite attention --kernel attention --case" in code
    assert f"?page=run&run={h.run_ids[2]}" in texts(at)


def test_a_regression_names_the_bisection_it_started_and_its_culprit(
    db: tuple[str, History],
) -> None:
    url, h = db
    at = open_page("regressions", regression=h.regression_id)
    text = texts(at)
    assert "No bisection of this regression yet." in text
    assert "kernelwatch bisect" not in text  # its range is one commit: that commit did it
    with session_factory(engine_for(url))() as s, s.begin():
        reg = s.get(Regression, h.regression_id)
        assert reg is not None
        reg.baseline_run_id = h.run_ids[0]  # two commits back: a search to make
    st.cache_data.clear()  # the list is cached for a while; the bisection panel is live
    code = "\n".join(c.value for c in open_page("regressions", regression=h.regression_id).code)
    assert f"--good {h.shas[0]} --bad {h.shas[2]} --case {h.corner_case} --wait" in code
    with session_factory(engine_for(url))() as s, s.begin():
        row = Bisection(
            repository_id=h.repository_id,
            good_sha=h.shas[0],
            bad_sha=h.shas[3],
            commits=h.shas[:4],
            case_pattern=h.corner_case,
            status="found",
            culprit_sha=h.shas[2],
            culprit_parent=h.shas[1],
            culprit_ratio=1.2,
            culprit_verdict="regression",
            origin_run_id=h.run_ids[2],
            gpu_seconds=73.0,
        )
        s.add(row)
        s.flush()
        bid = row.id
    text = texts(open_page("regressions", regression=h.regression_id))
    assert f"?page=bisect&id={bid}" in text and f"culprit `{h.shas[2][:12]}` regression" in text
    assert "1.200× (+20.0 %)" in text and "73 device s" in text


def test_triage_is_disabled_without_login_configuration(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("regressions", regression=h.regression_id)
    assert "Triage is disabled" in texts(at)
    assert not at.get("form")
    assert not [b for b in at.button if "Record" in str(b.label)]


def test_triage_needs_the_password_and_is_recorded(
    db: tuple[str, History], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, h = db
    monkeypatch.setenv("KW_DASHBOARD_PASSWORD", "s3cret")
    at = open_page("regressions", regression=h.regression_id)
    assert "Sign in (sidebar) to triage." in texts(at)
    assert not [b for b in at.button if "Record" in str(b.label)]

    at.text_input(key="kw_login_name").input("alice")
    at.text_input(key="kw_login_password").input("wrong")
    _submit(at, "Sign in to triage")
    assert any("Wrong password" in e.value for e in at.error)
    assert _events(url, h.regression_id) == []

    at.text_input(key="kw_login_name").input("alice")
    at.text_input(key="kw_login_password").input("s3cret")
    _submit(at, "Sign in to triage")
    assert not at.exception
    decision = next(s for s in at.selectbox if s.label == "Decision")
    decision.set_value("expected")
    next(t for t in at.text_area if t.label == "Note").input("new tiling trades 2048×4 for 8k")
    _submit(at, "Record as alice")
    assert not at.exception
    assert any("expected by alice" in s.value for s in at.success)

    assert _events(url, h.regression_id) == [
        ("alice", "expected", "open", "expected", "new tiling trades 2048×4 for 8k")
    ]
    assert list(frames(at)[0]["kind"]) == ["broken"]  # expected: no longer wants attention
    everything = frames(open_page("regressions", state="any"))[0]
    assert list(everything["state"]) == ["open", "expected"]
    with _session(url) as session:
        assert session.get(Regression, h.regression_id).state == "expected"  # type: ignore[union-attr]


def _submit(at: AppTest, label: str) -> None:
    button = next(b for b in at.button if b.label == label)
    button.click().run()


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def _session(url: str) -> Iterator[Session]:
    with _engine(url) as engine, session_factory(engine)() as session:
        yield session


def _events(url: str, regression_id: int) -> list[tuple[str, str, str, str, str]]:
    with _session(url) as session:
        return [
            (e.who, e.action, e.from_state, e.to_state, e.note)
            for e in history(session, regression_id)
        ]


def test_trusted_header_identifies_the_user() -> None:
    config = auth.auth_config({"KW_DASHBOARD_TRUSTED_HEADER": "X-Forwarded-User"})
    assert config.enabled
    assert auth.user_from_headers(config, {"x-forwarded-user": "bob@example.com"}) == (
        "bob@example.com"
    )
    assert auth.user_from_headers(config, {"X-Other": "mallory"}) is None
    assert auth.user_from_headers(auth.auth_config({}), {"X-Forwarded-User": "bob"}) is None
    assert not auth.check_password(auth.auth_config({}), "")
    assert auth.check_password(auth.auth_config({"KW_DASHBOARD_PASSWORD": "pw"}), "pw")


def test_triage_rows_are_an_audit_trail(db: tuple[str, History]) -> None:
    url, h = db
    from kernelwatch.db.session import transaction
    from kernelwatch.db.triage import TriageError, triage

    with _engine(url) as engine:
        factory = session_factory(engine)
        with transaction(factory) as session:
            triage(session, h.broken_id, "acknowledged", "carol", "bisecting")
        with transaction(factory) as session:
            triage(session, h.broken_id, "fixed", "dave", "fixed in abc123")
        with pytest.raises(TriageError), transaction(factory) as session:
            triage(session, h.broken_id, "ignored", "eve")
        with pytest.raises(TriageError), transaction(factory) as session:
            triage(session, h.broken_id, "fixed", "  ")
        with factory() as session:
            rows = session.scalars(select(TriageEvent).order_by(TriageEvent.id)).all()
            assert [(r.who, r.from_state, r.to_state) for r in rows] == [
                ("carol", "open", "acknowledged"),
                ("dave", "acknowledged", "fixed"),
            ]


# --------------------------------------------------------------------------- compare


def test_compare_shows_per_case_ratios_and_the_corner(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("compare", a=h.run_ids[1], b=h.run_ids[2])
    table = frames(at)[0]
    assert len(table) == 7
    worst = table.iloc[0]
    assert worst["verdict"] == "regression" and worst["analysed verdict"] == "regression"
    assert 1.25 < worst["ratio B/A"] < 1.35 and worst["CI low"] > 1.2
    assert set(table["verdict"].iloc[1:]) == {"unchanged"}
    assert "**6** unchanged · **1** regression" in texts(at)
    assert at.query_params["x"] == "batch" and at.query_params["y"] == "seq"
    assert len(at.get("vega_lite_chart")) == 1


def test_compare_accepts_commit_shas_and_reports_broken(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("compare", a=h.shas[2][:8], b=h.shas[3][:12])
    table = frames(at)[0]
    gemm = table[table["kernel"] == "gemm"].iloc[0]
    assert gemm["verdict"] == "broken" and gemm["status B"] == "fail"


def test_compare_unknown_run_warns(db: tuple[str, History]) -> None:
    at = open_page("compare", a=1, b=12345)
    assert "No run found for B = '12345'" in at.warning[0].value


def test_numbers_no_id_can_be_are_no_run_not_a_traceback(db: tuple[str, History]) -> None:
    # 25 digits raised OverflowError in the query and "²" ValueError: tracebacks on the
    # page, server paths in them (an audit, 2026-12-05); open_page fails on an exception
    huge = "9" * 25
    assert "Runs" in texts(open_page("run", run=huge))  # no such id: the list
    open_page("roofline", run=huge)
    for ref in (huge, "²"):
        at = open_page("compare", a=ref, b=1)
        assert f"No run found for A = '{ref}'" in at.warning[0].value


def test_heatmap_keeps_a_slow_corner_visible() -> None:
    rows = []
    for seq in (512, 1024, 2048):
        for batch in (1, 4):
            slow = (seq, batch) == (2048, 4)
            rows.append(
                {
                    "params": {"seq": seq, "batch": batch},
                    "ratio": 1.3 if slow else 1.0,
                    "ratio_low": 1.25 if slow else 0.99,
                    "ratio_high": 1.35 if slow else 1.01,
                    "verdict": "regression" if slow else "unchanged",
                    "label": f"seq={seq}, batch={batch}",
                }
            )
    import pandas as pd

    cells = compare_stats.heatmap(pd.DataFrame(rows), "batch", "seq")
    assert len(cells) == 6
    corner = cells[(cells["x"] == "4") & (cells["y"] == "2048")].iloc[0]
    assert corner["ratio"] == 1.3 and corner["verdict"] == "regression"
    assert (cells[cells["verdict"] == "unchanged"]["ratio"] == 1.0).all()


def test_bootstrap_interval_covers_the_true_ratio() -> None:
    base = [1.0 + 0.01 * (i % 5) for i in range(30)]
    cand = [1.2 * x for x in base]
    ratio, low, high = compare_stats.bootstrap_ratio(base, cand)  # type: ignore[misc]
    assert abs(ratio - 1.2) < 1e-9 and low <= 1.2 <= high
    assert compare_stats.verdict("pass", "pass", ratio, low, high, 0.05) == "regression"
    assert compare_stats.verdict("pass", "fail", 1.0, 1.0, 1.0, 0.05) == "broken"


# --------------------------------------------------------------------------- fleet, roofline


def test_fleet_shows_workers_queue_and_running_runs(db: tuple[str, History]) -> None:
    url, h = db
    at = open_page("fleet")
    assert "The heartbeat table is empty." in texts(at)
    assert len(frames(at)) == 4  # queue depth, finished runs (expander), workers, running
    from kernelwatch.db.fleet import beat

    with _engine(url) as engine, Session(engine) as session:
        beat(
            session,
            "gpu-h200-02@node7",
            host="node7",
            device_class="h200",
            gpu_name="NVIDIA H200",
            state="busy",
            current_run_id=h.running_run_id,
            sm_mhz=1980,
        )
        session.commit()
    st.cache_data.clear()
    at = open_page("fleet")
    queue, finished, workers, running, beats = frames(at)
    # issue 27: "Queue depth" showed runs by final state; it is what waits and runs now
    assert list(queue.columns) == ["queue", "queued", "running"]
    assert queue.set_index("queue").loc["gpu.h200"].tolist() == [1, 1]
    assert "succeeded" in finished.columns and "queued" not in finished.columns
    assert list(workers["worker"]) == ["gpu-h200-02@node7", "gpu-h100-01@node3"]
    assert list(workers["running now"]) == [1, 0]
    assert list(running["open"]) == [f"?page=run&run={h.running_run_id}"]
    assert list(beats["worker"]) == ["gpu-h200-02@node7"]
    assert list(beats["state"]) == ["busy"] and list(beats["SM MHz"]) == ["1980"]
    assert list(beats["run"]) == [f"?page=run&run={h.running_run_id}"]
    # words for headers and a dash where nothing is known (no raw None, no snake_case)
    assert not [c for c in beats.columns if "_" in c]
    assert list(beats["GPU UUID"]) == ["–"] and list(beats["stopped"]) == ["–"]


def test_roofline_draws_points_and_ceilings(db: tuple[str, History]) -> None:
    _, h = db
    at = open_page("roofline", run=h.run_ids[2])
    assert "989 TFLOP/s · 3350 GB/s" in texts(at)
    assert len(frames(at)[0]) == 7
    assert at.query_params["repo"] == str(h.repository_id)


# --------------------------------------------------------------------------- helpers, demo


def test_links_and_formatting() -> None:
    assert nav.link("compare", a=3, b=4) == "?page=compare&a=3&b=4"
    assert nav.page_key("run") == "runs" and nav.page_key("nope") == "runs"
    assert fmt.change(1.123, 1.081, 1.16) == "+12.3 % [+8.1, +16.0]"
    assert fmt.seconds(2.5e-5) == "25 µs" and fmt.duration(125) == "2 m 05 s"


def test_queries_on_the_history(db: tuple[str, History]) -> None:
    url, h = db
    with _engine(url) as engine:
        assert queries.resolve_run(engine, h.shas[0][:7]) == h.run_ids[0]
        assert queries.resolve_run(engine, h.shas[3][:7], "h100") == h.run_ids[3]
        assert queries.resolve_run(engine, "zzzz") is None
        assert len(queries.cases_for(engine, h.repository_id, "h100")) == 7
        state = queries.schema_state(engine)
        assert state == {"core": True, "triage": True, "heartbeats": True}


@pytest.mark.postgres
def test_pages_and_triage_on_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    url = create_pg_database("kw_dash")
    try:
        h = fill(url)
        monkeypatch.setenv("KW_DATABASE_URL", url)
        monkeypatch.setenv("KW_DASHBOARD_TRUSTED_HEADER", "X-Forwarded-User")
        get_settings.cache_clear()
        assert len(frames(open_page("runs"))[0]) == 6
        at = open_page("trend", repo=h.repository_id, device="h100", case=h.corner_case)
        assert list(frames(at)[0]["point"]) == ["ok", "ok", "regression", "ok"]
        at = open_page("compare", a=h.run_ids[1], b=h.run_ids[2])
        assert frames(at)[0].iloc[0]["verdict"] == "regression"
        assert len(frames(open_page("regressions"))[0]) == 2
        assert len(frames(open_page("fleet"))[2]) == 2  # the workers table
        assert len(frames(open_page("roofline", run=h.run_ids[2]))[0]) == 7
        # AppTest sends no headers: the proxy user is missing, so triage stays closed.
        at = open_page("regressions", regression=h.regression_id)
        assert "no `X-Forwarded-User` header" in "\n".join(c.value for c in at.sidebar.caption)
        assert not [b for b in at.button if "Record" in str(b.label)]
        from kernelwatch.dashboard.cached import record_triage

        record_triage(url, h.regression_id, "acknowledged", "proxy-user", "on it")
        assert _events(url, h.regression_id) == [
            ("proxy-user", "acknowledged", "open", "acknowledged", "on it")
        ]
    finally:
        from kernelwatch.db.session import engine_for

        engine_for(url).dispose()
        drop_pg_database(url)


@pytest.mark.skipif(not DEMO_DB.exists(), reason="no `kernelwatch demo` database at /tmp/kwdemo1")
def test_real_demo_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kernelwatch.db"
    shutil.copy(DEMO_DB, path)
    url = _use(path, monkeypatch)
    upgrade(url)
    at = open_page("regressions")
    table = frames(at)[0]
    assert set(table["kind"]) == {"regression", "broken"}
    runs = open_page("runs")
    last = int(frames(runs)[0]["open"].iloc[0].rsplit("=", 1)[1])
    at = open_page("run", run=last)
    assert "Broken: softmax" in at.error[0].value


def test_a_history_changepoint_reads_as_its_detail() -> None:
    from kernelwatch.dashboard.page_regressions import magnitude

    detail = "history: level +4.0 % from 00000000000a on (change point over 18 commits)"
    row = {"kind": "changepoint", "ratio": 1.04, "ratio_ci_low": None, "ratio_ci_high": None}
    row["detail"] = detail
    assert magnitude(row).startswith("history: level +4.0 %")


def test_a_source_url_with_a_token_is_shown_without_it(sqlite_url: str) -> None:
    # a server may fetch over https://x-access-token:TOKEN@...; the pages show the source
    # (the repositories list, a run, the repro command of a regression): never the token
    from kernelwatch.db.models import Repository

    with _session(sqlite_url) as session:
        session.add(Repository(name="kern", source="https://bot:ghp_TOKEN@git.example.com/a/k"))
        session.commit()
    with _engine(sqlite_url) as engine:
        repos = queries.repositories(engine)
    assert list(repos["source"]) == ["https://git.example.com/a/k"]
