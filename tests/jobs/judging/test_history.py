"""The history signal: a step in a branch's series becomes one changepoint regression."""

from __future__ import annotations

import random

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.bisect import Bisection
from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case, Commit, Regression, Result, Run
from kernelwatch.db.store import get_or_create_repository
from kernelwatch.jobs.judging import bisect_trigger
from kernelwatch.jobs.judging.analysis import analyze, analyze_ready
from kernelwatch.jobs.judging.detect import detect
from kernelwatch.jobs.judging.history import scan_run


def _history(
    session: Session,
    medians: list[float],
    trigger: str = "push",
    cards: list[str] | None = None,
    every: int = 1,
    torches: list[str] | None = None,
) -> list[Run]:
    """One run per measured commit; ``every``: first-parent commits between measurements."""
    repo = get_or_create_repository(session, "lib", "/src/lib")
    session.add(Case(id="c1", suite="basic", kernel="softmax", backend="lib", params={}))
    runs = []
    for i, median in enumerate(medians):
        commit = Commit(repository_id=repo.id, sha=f"{i:040x}", sequence=every * i + 1)
        session.add(commit)
        session.flush()
        run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"],
                  status="succeeded", trigger=trigger, device_class="h100")  # fmt: skip
        session.add(run)
        session.flush()
        record: dict[str, object] = {"suite": "basic", "kernel": "softmax"}
        if cards is not None:
            record["device"] = {"name": "NVIDIA H100", "uuid": cards[i]}
        if torches is not None:
            record["environment"] = {"python": "3.12.3", "torch": torches[i]}
        session.add(Result(run_id=run.id, case_id="c1", status="pass", median_s=median,
                           record=record))  # fmt: skip
        runs.append(run)
    session.flush()
    for run in runs:
        session.refresh(run)
    return runs


def _levels(rng: random.Random, before: int, after: int, step: float) -> list[float]:
    noise = [rng.gauss(0, 0.003) for _ in range(before + after)]
    return [1e-4 * (1 + n) * (1 if i < before else 1 + step) for i, n in enumerate(noise)]


def test_a_step_on_main_is_recorded_once_at_the_commit_it_starts(session: Session) -> None:
    runs = _history(session, _levels(random.Random(3), 10, 8, 0.04))
    found = scan_run(session, runs[-1], min_effect=0.02)
    assert [(r.kind, r.run_id) for r in found] == [("changepoint", runs[10].id)]
    assert found[0].ratio is not None and 1.02 < found[0].ratio < 1.06
    assert "history: level +" in found[0].detail
    assert scan_run(session, runs[-1], min_effect=0.02) == []  # not twice
    # judging that run again leaves the history's row alone
    assert analyze(session, runs[10], Settings())
    kinds = session.scalars(select(Regression.kind).where(Regression.run_id == runs[10].id))
    assert list(kinds) == ["changepoint"]


def test_a_step_between_nightly_measurements_asks_for_an_establishing_bisection(
    session: Session,
) -> None:
    # nightly: 5 first-parent commits between measured ones, a +4 % step at run 10
    runs = _history(session, _levels(random.Random(3), 10, 8, 0.04), "nightly", every=5)
    (step,) = scan_run(session, runs[-1], min_effect=0.02)
    row = bisect_trigger.on_change_point(session, step)
    assert row is not None and row.trigger == "auto" and row.origin_run_id == runs[10].id
    assert (row.good_sha, row.bad_sha) == (runs[9].commit.sha, runs[10].commit.sha)  # type: ignore[union-attr]
    assert row.case_pattern == "c1" and row.bench_args == ["--kernel", "softmax"]
    assert row.establish  # seen across runs, not paired: bad against good comes first
    assert bisect_trigger.on_change_point(session, step).id == row.id  # type: ignore[union-attr]


def test_a_change_point_one_commit_after_the_last_measurement_needs_no_bisection(
    session: Session,
) -> None:
    runs = _history(session, _levels(random.Random(3), 10, 8, 0.04), "push", every=1)
    (step,) = scan_run(session, runs[-1], min_effect=0.02)
    assert step.run_id == runs[10].id
    assert bisect_trigger.on_change_point(session, step) is None  # that commit did it
    assert session.scalars(select(Bisection)).all() == []


def test_the_judging_of_a_run_turns_its_history_step_into_a_bisection(session: Session) -> None:
    runs = _history(session, _levels(random.Random(3), 10, 8, 0.04), "push", every=3)
    assert analyze_ready(session, runs[-1], Settings(regression_threshold=0.02))
    (row,) = session.scalars(select(Bisection)).all()
    assert (row.good_sha, row.bad_sha) == (runs[9].commit.sha, runs[10].commit.sha)  # type: ignore[union-attr]


def test_flat_history_and_pull_requests_give_nothing(session: Session) -> None:
    runs = _history(session, _levels(random.Random(4), 18, 0, 0.0))
    assert scan_run(session, runs[-1], min_effect=0.02) == []
    pr = runs[-1]
    pr.trigger = "pull_request"
    assert scan_run(session, pr, min_effect=0.0) == []


def _uneven_cards(n: int) -> list[str]:
    """Card A for the first half of the history, card B for the second, but for one
    point of the other card in every six (so each block of the fit sees both)."""
    return [
        ("GPU-b" if i % 6 == 2 else "GPU-a") if i < n // 2 else ("GPU-a" if i % 6 == 4 else "GPU-b")
        for i in range(n)
    ]


def test_a_slower_card_taking_over_the_history_is_not_a_step(session: Session) -> None:
    rng = random.Random(5)
    cards = _uneven_cards(48)
    flat = _levels(rng, 48, 0, 0.0)
    medians = [m * (1.03 if c == "GPU-b" else 1.0) for m, c in zip(flat, cards, strict=True)]
    # read raw, the drift from card A to a card 3 % slower is a step of the gate's size
    assert [cp.direction for cp in detect(medians, lower_is_better=True, min_effect=0.01)] == [
        "regression"
    ]
    runs = _history(session, medians, cards=cards)
    assert scan_run(session, runs[-1], min_effect=0.01) == []


def test_a_real_step_is_still_found_across_cards(session: Session) -> None:
    rng = random.Random(6)
    cards = [rng.choice(["GPU-a", "GPU-b"]) for _ in range(24)]
    steps = _levels(rng, 12, 12, 0.04)
    medians = [m * (1.03 if c == "GPU-b" else 1.0) for m, c in zip(steps, cards, strict=True)]
    runs = _history(session, medians, cards=cards)
    found = scan_run(session, runs[-1], min_effect=0.01)
    assert [(r.kind, r.run_id) for r in found] == [("changepoint", runs[12].id)]
    assert found[0].ratio is not None and 1.02 < found[0].ratio < 1.06


def test_a_torch_upgrade_on_the_workers_is_not_a_step_of_the_library(session: Session) -> None:
    """A series is one environment class (design.md): 12 commits under torch 2.11, then 12
    under 2.13, which runs the kernel 4 % slower. Read as one series that was a step at the
    upgrade; the library did not change."""
    rng = random.Random(7)
    torches = ["2.11.0+cu130"] * 12 + ["2.13.0+cu130"] * 12
    runs = _history(session, _levels(rng, 12, 12, 0.04), torches=torches)
    assert scan_run(session, runs[-1], min_effect=0.01) == []


def test_the_same_step_inside_one_environment_is_found(session: Session) -> None:
    torches = ["2.13.0+cu130"] * 24
    runs = _history(session, _levels(random.Random(7), 12, 12, 0.04), torches=torches)
    found = scan_run(session, runs[-1], min_effect=0.01)
    assert [(r.kind, r.run_id) for r in found] == [("changepoint", runs[12].id)]


def test_a_run_judged_after_its_baseline_ended_is_scanned_too(session: Session) -> None:
    """The run that completes a step's evidence waited for its baseline: it is scanned
    when it is judged, not left for the next run to find the step."""
    # with these draws the step at run 10 is found from the 7th point after it on
    runs = _history(session, _levels(random.Random(3), 10, 7, 0.04))
    last, before = runs[-1], runs[-2]
    assert before.commit is not None
    last.baseline_sha = before.commit.sha
    before.status = "running"  # still measuring when the last run ended
    session.flush()
    assert analyze_ready(session, last, Settings()) == []  # waits, nothing scanned
    assert session.scalars(select(Regression)).all() == []
    before.status = "succeeded"
    session.flush()
    assert last in analyze_ready(session, before, Settings())
    found = [tuple(row) for row in session.execute(select(Regression.kind, Regression.run_id))]
    assert found == [("changepoint", runs[10].id)]
