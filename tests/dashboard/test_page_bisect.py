"""The Bisections page: the culprit, its effect, the steps and the device time."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from kernelwatch.dashboard import page_bisect, queries
from kernelwatch.db.bisect import Bisection, BisectionStep
from kernelwatch.db.config import get_settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Case, Result, Run
from kernelwatch.db.session import engine_for, session_factory
from kernelwatch.db.store import get_or_create_repository, upsert_commit

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
GOOD, BAD, CULPRIT, PARENT = "a" * 40, "b" * 40, "c" * 40, "d" * 40


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    url = f"sqlite:///{tmp_path / 'kernelwatch.db'}"
    upgrade(url)
    with session_factory(engine_for(url))() as s, s.begin():
        repo = get_or_create_repository(s, "slowkern", "/src/slowkern")
        row = Bisection(
            repository_id=repo.id,
            good_sha=GOOD,
            bad_sha=BAD,
            commits=[GOOD, PARENT, CULPRIT, BAD],
            case_pattern="softmax",
            status="found",
            culprit_sha=CULPRIT,
            culprit_parent=PARENT,
            culprit_ratio=3.04,
            culprit_ci_low=2.81,
            culprit_ci_high=3.3,
            culprit_verdict="regression",
            gpu_seconds=412.0,
        )
        s.add(row)
        s.flush()
        s.add(Case(id="sm1", suite="basic", kernel="softmax", backend="lib", params={}))
        s.add(Case(id="mm1", suite="basic", kernel="matmul", backend="lib", params={}))
        for i, (sha, outcome, verdict, ratio) in enumerate(
            [
                (BAD, "bad", "regression", 3.1),
                (PARENT, "skip", "failed", None),
                (CULPRIT, "bad", "regression", 3.04),
            ]
        ):
            run = Run(
                repository_id=repo.id,
                commit_id=upsert_commit(s, repo, sha, []).id,
                suites=["basic"],
                trigger="bisect",
                status="succeeded" if ratio else "failed",
            )
            s.add(run)
            s.flush()
            if ratio:
                for case, r in (("sm1", ratio), ("mm1", 1.0)):  # only softmax is followed
                    kernel = {"sm1": "softmax", "mm1": "matmul"}[case]
                    s.add(Result(run_id=run.id, case_id=case, status="pass", verdict=verdict,
                                 ratio=r, ratio_ci_low=r * 0.95, ratio_ci_high=r * 1.05,
                                 record={"kernel": kernel}))  # fmt: skip
            s.add(
                BisectionStep(
                    bisection_id=row.id,
                    position=i,
                    sha=sha,
                    against_sha=GOOD,
                    purpose="search",
                    run_id=run.id,
                    outcome=outcome,
                    verdict=verdict,
                    seconds=100.0,
                )
            )
        bid = row.id
    monkeypatch.setenv("KW_DATABASE_URL", url)
    monkeypatch.setenv("KW_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KW_DASHBOARD_PASSWORD", raising=False)
    monkeypatch.delenv("KW_DASHBOARD_TRUSTED_HEADER", raising=False)
    get_settings.cache_clear()
    return bid


def test_the_bisection_page_shows_culprit_effect_steps_and_device_seconds(db: int) -> None:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["page"] = "bisect"
    at.query_params["id"] = str(db)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Bisections"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {
        "Status": "found",
        "Culprit": CULPRIT[:12],
        "Effect": "3.040× (+204.0 %)",
        "Device time": "6 m 52 s",
    }
    steps, listing = (d.value for d in at.dataframe)
    assert list(steps["commit"]) == [BAD[:12], PARENT[:12], CULPRIT[:12]]
    assert list(steps["skipped"]) == ["no", "yes", "no"]
    # issue 27: snake_case headers and raw None in the list of bisections
    assert list(listing.columns) == ["bisection", "repository", "device class", "range",
                                     "status", "culprit", "effect", "device time"]  # fmt: skip
    assert "None" not in listing.astype(str).to_string()
    assert "interval 2.810–3.300" in " ".join(m.value for m in at.markdown)
    # the range's trend: the followed case's ratio at each measured step, the failed
    # build drawn as a cross (it was left out), culprit marked
    (chart,) = at.get("vega_lite_chart")
    layers = json.loads(chart.proto.spec)["layer"]
    assert [layer["mark"]["type"] for layer in layers] == ["rule", "rule", "point", "point", "rule"]
    assert layers[3]["mark"]["shape"] == "cross"
    axis = layers[2]["encoding"]["x"]["axis"]
    assert all(isinstance(v, int) for v in axis["values"])  # whole commits, never 1.5
    assert f"'{CULPRIT[:8]}'" in axis["labelExpr"] and f"'{PARENT[:8]}'" in axis["labelExpr"]
    with session_factory(engine_for(os.environ["KW_DATABASE_URL"]))() as s:
        row = s.get(Bisection, db)
        assert row is not None
        pattern, commits = row.case_pattern, list(row.commits)
    cases = queries.bisection_step_cases(engine_for(os.environ["KW_DATABASE_URL"]), db)
    points = page_bisect.range_points(cases, commits, pd.Series({"case_pattern": pattern}))
    # softmax only (the pattern), the failed build has no point, each at its place
    assert sorted(zip(points["index"], points["ratio"], strict=True)) == [(2, 3.04), (3, 3.1)]
    assert "?page=trend" in " ".join(m.value for m in at.markdown) and "case=sm1" in " ".join(
        m.value for m in at.markdown
    )


def test_no_bisections_says_how_to_start_one(
    db: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    monkeypatch.setenv("KW_DATABASE_URL", url)
    get_settings.cache_clear()
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["page"] = "bisections"
    at.run()
    assert not at.exception and not at.error
    assert "kernelwatch bisect" in " ".join(c.value for c in at.caption)
