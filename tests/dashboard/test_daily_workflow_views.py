"""The dashboard details of issue 27, item 6, and scheduled runs as their own trigger.

A new user's Chromium session (16 pages) found: the Trends page opening on the
alphabetically first repository whatever its size; tables wider than 1440 px hiding
the trigger and repository columns; the Bisections chart with fractional commit ticks,
no sha labels and no broken steps; the Fleet page's "Queue depth" showing runs by final
state; raw ``None``s and snake_case headers on Fleet and Bisections. Each is pinned here
through AppTest (the tables' values), then every page is opened in headless Chromium at
1440 px and screenshotted (``test-artifacts/dashboard-daily-*.png``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import streamlit as st

from kernelwatch.db.bisect import Bisection, BisectionStep
from kernelwatch.db.config import get_settings
from kernelwatch.db.fleet import WorkerHeartbeat
from kernelwatch.db.models import Commit, Result, Run
from kernelwatch.db.selftest import CardSelftest
from kernelwatch.db.session import make_engine, session_factory
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from tests.dashboard import browser
from tests.dashboard.conftest import History, make_database
from tests.dashboard.test_dashboard import open_page

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
NOW = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)


def add_daily_workflow(url: str, h: History) -> dict[str, int]:
    """On top of the factory history: a tiny repository named to sort first, scheduled
    runs, a bisection with a broken and a skipped step, two cards' self-tests (one
    flagged) and a heartbeat that knows little."""
    ids: dict[str, int] = {}
    engine = make_engine(url)  # disposed below: the copies the tests take see every row
    with session_factory(engine)() as s, s.begin():
        tiny = get_or_create_repository(s, "aaa-tiny", "/src/aaa-tiny")
        c = upsert_commit(s, tiny, "e" * 40, [], "one commit")
        s.add(Run(repository_id=tiny.id, commit_id=c.id, suites=["basic"], status="succeeded",
                  verdict="pass", trigger="manual", device_class="cpu", queue="cpu"))  # fmt: skip
        base = s.get(Run, h.run_ids[3])
        assert base is not None
        for trigger in ("nightly", "release"):
            run = Run(repository_id=h.repository_id, commit_id=base.commit_id, suites=["attention"],
                      status="succeeded", verdict="pass", trigger=trigger, device_class="h100",
                      queue="gpu.h100", worker="gpu-h100-01@node3")  # fmt: skip
            s.add(run)
            s.flush()
            ids[trigger] = run.id
        shas = list(h.shas)
        row = Bisection(
            repository_id=h.repository_id, good_sha=shas[0], bad_sha=shas[3], commits=shas,
            case_pattern="attention", status="found", culprit_sha=shas[2],
            culprit_parent=shas[1], culprit_ratio=1.31, culprit_ci_low=1.27,
            culprit_ci_high=1.35, culprit_verdict="regression", gpu_seconds=95.4,
            device_class="h100",
        )  # fmt: skip
        s.add(row)
        s.flush()
        ids["bisection"] = row.id
        steps = [(shas[3], "bad", "regression", 1.3), (shas[1], "skip", "failed", None),
                 (shas[2], "bad", "broken", None)]  # fmt: skip
        for i, (sha, outcome, verdict, ratio) in enumerate(steps):
            commit = s.query(Commit).filter_by(repository_id=h.repository_id, sha=sha).one()
            run = Run(repository_id=h.repository_id, commit_id=commit.id, suites=["attention"],
                      trigger="bisect", status="failed" if outcome == "skip" else "succeeded",
                      device_class="h100", queue="gpu.h100")  # fmt: skip
            s.add(run)
            s.flush()
            if ratio is not None:
                lo, hi = ratio - 0.03, ratio + 0.03
                s.add(Result(run_id=run.id, case_id=h.corner_case, status="pass", ratio=ratio,
                             verdict=verdict, ratio_ci_low=lo, ratio_ci_high=hi,
                             record={"kernel": "attention"}))  # fmt: skip
            s.add(BisectionStep(bisection_id=row.id, position=i, sha=sha, against_sha=shas[0],
                                purpose="search", run_id=run.id, outcome=outcome,
                                verdict=verdict, seconds=31.8))  # fmt: skip
        for night in range(6):
            at = NOW - timedelta(days=5 - night)
            for card, name, cv in (("GPU-11111111-aaaa", "NVIDIA H100", 0.004 + night * 1e-4),
                                   ("GPU-22222222-bbbb", "NVIDIA H100",
                                    0.022 if night == 5 else 0.005)):  # fmt: skip
                flagged = card.startswith("GPU-2") and night == 5
                s.add(CardSelftest(
                    card=card, device_class="h100", gpu_name=name, host="node3", worker="w",
                    kernel="torch.matmul", cv=cv, sample_cv=cv * 3, ratio=1.0, ci_low=0.996,
                    ci_high=1.004, median_s=1.1e-3, samples=4000, flagged=flagged,
                    baseline_cv=0.005 if flagged else None, reason="noise grew: cv 2.20 % "
                    "against 0.50 % over its last 5 nights" if flagged else "", error="",
                    detail={}, created=at,
                ))  # fmt: skip
        s.add(WorkerHeartbeat(name="cpu-01@node9", host="node9", queues="cpu", state="idle",
                              device_class="cpu", last_seen=datetime.now(UTC)))  # fmt: skip
    engine.dispose()
    return ids


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, History, dict[str, int]]:
    root = tmp_path_factory.mktemp("daily-workflow")
    url, h = make_database(root / "kernelwatch.db")
    return root / "kernelwatch.db", h, add_daily_workflow(url, h)


@pytest.fixture
def db(
    database: tuple[Path, History, dict[str, int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[History, dict[str, int]]]:
    path = tmp_path / "kernelwatch.db"
    shutil.copy(database[0], path)
    monkeypatch.setenv("KW_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.setenv("KW_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KW_DASHBOARD_PASSWORD", raising=False)
    monkeypatch.delenv("KW_DASHBOARD_TRUSTED_HEADER", raising=False)
    get_settings.cache_clear()
    st.cache_data.clear()
    yield database[1], database[2]
    get_settings.cache_clear()


def test_trends_open_on_the_repository_being_measured(db: tuple[History, dict[str, int]]) -> None:
    h, _ = db
    at = open_page("trend")
    [repo] = [s for s in at.selectbox if s.label == "Repository"]
    assert repo.value == h.repository_id  # flash-attn-mini, not "aaa-tiny" (first by name)
    assert at.query_params["repo"] in (str(h.repository_id), [str(h.repository_id)])
    # every point says what started the run that measured it (scheduled runs included)
    spec = json.dumps([json.loads(c.proto.spec) for c in at.get("vega_lite_chart")])
    assert '"field": "started by"' in spec and '"title": "trigger"' in spec


def test_the_run_list_puts_trigger_and_repository_before_the_wide_columns(
    db: tuple[History, dict[str, int]],
) -> None:
    _, ids = db
    at = open_page("runs")
    table = at.dataframe[0].value
    columns = list(table.columns)
    assert columns.index("trigger") < 4 and columns.index("repository") < 5
    assert columns.index("message") > columns.index("repository")
    shown = dict(zip(table["open"], table["trigger"], strict=True))
    assert shown[f"?page=run&run={ids['nightly']}"] == "scheduled: branch"
    assert shown[f"?page=run&run={ids['release']}"] == "scheduled: new release"
    # scheduled runs are a trigger of their own to filter on
    scheduled = open_page("runs", trigger="scheduled").dataframe[0].value
    assert set(scheduled["trigger"]) == {"scheduled: branch", "scheduled: new release"}
    release = open_page("runs", trigger="release").dataframe[0].value
    assert list(release["open"]) == [f"?page=run&run={ids['release']}"]


def test_fleet_queue_depth_is_what_waits_and_cards_have_a_noise_trend(
    db: tuple[History, dict[str, int]],
) -> None:
    at = open_page("fleet")
    depth = at.dataframe[0].value
    assert list(depth.columns) == ["queue", "queued", "running"]
    for frame in (d.value for d in at.dataframe):
        assert not [c for c in frame.columns if "_" in str(c)], list(frame.columns)
        assert "None" not in frame.astype(str).to_string()
    warnings = [w.value for w in at.warning]
    assert any("GPU-222222" in w and "noise grew: cv 2.20 %" in w for w in warnings), warnings
    cards = at.dataframe[-1].value
    assert list(cards["flagged"]) == ["no", "yes"]
    assert list(cards["noise (CV)"]) == ["0.45 %", "2.20 %"]
    charts = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert any("timer noise" in json.dumps(c) for c in charts)


# ----------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def server(
    database: tuple[Path, History, dict[str, int]],
) -> Iterator[tuple[str, History, dict[str, int]]]:
    path, h, ids = database
    with browser.dashboard_server(f"sqlite:///{path}", path.parent) as base:
        yield base, h, ids


WIDE = "--window-size=1440,1000"
PAGES = {
    "trend": ("page=trend", ["Trends", "flash-attn-mini"]),
    "runs": ("page=runs", ["Runs", "Trigger"]),
    "fleet": ("page=fleet", ["Queue depth", "Timer self-test", "noise grew"]),
    "bisect": ("page=bisect&id={bisection}", ["Bisections", "The range", "Steps (3)"]),
}


@pytest.mark.slow
@pytest.mark.skipif(browser.CHROMIUM is None, reason="chromium not installed")
@pytest.mark.parametrize("name", list(PAGES))
def test_the_pages_in_chromium_at_1440_px(
    server: tuple[str, History, dict[str, int]], name: str, tmp_path: Path
) -> None:
    base, _, ids = server
    query, expect = PAGES[name]
    url = f"{base}/?{query.format(**ids)}"
    flags = (*(f for f in browser.FLAGS if not f.startswith("--window-size")), WIDE)
    # a chart page is drawn once its chart is mounted too: wait for that as for the texts
    # (on the loaded CI host the trend page's texts came before its chart, 2026-12-05)
    drawn = [*expect, "vega-embed"] if name != "runs" else expect
    ARTIFACTS.mkdir(exist_ok=True)
    png = ARTIFACTS / f"dashboard-daily-{name}.png"
    dom, sd, took = browser.settled_page(url, png, tmp_path / "page", drawn, flags)
    assert 'data-testid="stException"' not in dom and "Traceback" not in dom
    missing = [e for e in expect if e not in dom]
    assert not missing, f"{name}: {missing} not in the page after {took:.0f} s"
    if name != "runs":
        assert "vega-embed" in dom  # the chart was mounted
    assert sd > browser.MIN_STDDEV, f"{name}: blank screenshot (grey stddev {sd:.1f})"


def test_the_bisection_chart_names_commits_and_draws_steps_without_timing(
    db: tuple[History, dict[str, int]],
) -> None:
    h, ids = db
    at = open_page("bisect", id=ids["bisection"])
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    layers = spec["layer"]
    assert [layer["mark"]["type"] for layer in layers] == ["rule", "rule", "point", "point", "rule"]
    axis = layers[2]["encoding"]["x"]["axis"]
    assert axis["values"] == [0, 1, 2, 3]  # good, the skip, the culprit (broken), bad
    for sha in h.shas:
        assert f"'{sha[:8]}'" in axis["labelExpr"]
    assert layers[3]["mark"]["shape"] == "cross"
    from kernelwatch.dashboard import cached, page_bisect, queries

    engine = cached.engine(os.environ["KW_DATABASE_URL"])
    steps_rows = queries.bisection_steps(engine, ids["bisection"])
    points = page_bisect.range_points(
        queries.bisection_step_cases(engine, ids["bisection"]), list(h.shas),
        queries.bisections(engine).iloc[0],
    )  # fmt: skip
    crosses = page_bisect.unmeasured_steps(steps_rows, list(h.shas), points)
    assert list(points["index"]) == [3]  # the measured step (bad) is a point
    assert sorted(zip(crosses["index"], crosses["verdict"], strict=True)) == [
        (1, "skipped"), (2, "broken")
    ]  # fmt: skip
    steps = at.dataframe[0].value
    assert list(steps["verdict"]) == ["regression", "failed", "broken"]
    assert "None" not in steps.astype(str).to_string()
