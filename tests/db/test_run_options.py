"""``Run.options`` is a typed RunOptions on the way in and on the way out."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.orm import Session

from kernelwatch.db.models import Run
from kernelwatch.db.run_options import GithubOrigin, RunOptions
from kernelwatch.db.store import get_or_create_repository, upsert_commit


def _run(session: Session, **options: object) -> Run:
    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, "a" * 40, [])
    run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"], options=options)
    session.add(run)
    session.flush()
    return run


def test_options_round_trip_through_the_database(session: Session) -> None:
    run = _run(
        session,
        paired=True,
        pr="7",  # a webhook's number as text is still the PR's number
        bench_args=["--kernel", "softmax"],
        case_timeout_s=60,
        github={"repository": "org/lib", "event": "pull_request", "pr": 7},
    )
    session.commit()
    run_id = run.id
    session.expunge_all()
    back = session.get(Run, run_id)
    assert back is not None
    assert isinstance(back.options, RunOptions)
    assert back.options.paired is True and back.options.pr == 7
    assert back.options.bench_args == ["--kernel", "softmax"]
    assert back.options.case_timeout_s == 60.0
    assert back.options.github == GithubOrigin(repository="org/lib", event="pull_request", pr=7)
    assert back.options.confidence is None and back.options.requeues == 0  # defaults
    # only what differs from a default is stored: the JSON is what it was before the type
    stored = session.execute(text("SELECT options FROM runs WHERE id = :i"), {"i": run_id})
    raw = stored.scalar_one()
    assert (raw if isinstance(raw, dict) else json.loads(raw)) == {
        "paired": True,
        "pr": 7,
        "bench_args": ["--kernel", "softmax"],
        "case_timeout_s": 60.0,
        "github": {"repository": "org/lib", "event": "pull_request", "pr": 7},
    }


def test_an_unknown_key_is_refused_where_it_is_written(session: Session) -> None:
    with pytest.raises(ValidationError, match="regresion_threshold"):
        _run(session, regresion_threshold=0.05)  # misspelt
    with pytest.raises(ValidationError, match="extra"):
        RunOptions.parse({"size": "quick"})
    with pytest.raises(ValidationError, match="case_timeout_s"):
        RunOptions(case_timeout_s="soon")  # type: ignore[arg-type]


def test_with_validates_and_leaves_the_original_alone(session: Session) -> None:
    run = _run(session, bench_args=["--x"])
    before = run.options
    run.options = run.options.with_(requeues=before.requeues + 1, requeued_at="2026-12-01T09:00")
    assert before.requeues == 0 and run.options.requeues == 1
    assert run.options.bench_args == ["--x"]
    with pytest.raises(ValidationError):
        run.options.with_(joined="not a list")
    with pytest.raises(ValidationError):
        before.paired = True  # type: ignore[misc]  # frozen: changes go through with_()


def test_measurement_options_are_the_ones_dedup_compares() -> None:
    opts = RunOptions(bench_args=["--x"], paired=True, pr=3, confidence=0.9)
    # how a run is judged is part of it too: a PR judged by its base branch's thresholds
    # never joins a run judged by other ones (issue 24)
    assert opts.measurement() == {"bench_args": ["--x"], "paired": True, "confidence": 0.9}
    assert RunOptions().measurement() == {}


def test_a_stored_key_this_version_does_not_know_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        opts = RunOptions.from_stored({"paired": True, "retired_option": 1})
    assert opts == RunOptions(paired=True)
    assert "retired_option" in caplog.text
