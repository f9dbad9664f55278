"""The rule of an unpaired run's re-measure (``worker/remeasure.py`` makes it): a
regression stands only where the re-measure, compared with the same baseline, says so too."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case, Result, Run
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.judging.analysis import analyze, would_regress
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.kernels.verdict import NOTE_UNCONFIRMED

BASE, HEAD = "a" * 40, "b" * 40
SETTINGS = Settings(cpu_timing_gates=True)


def _samples(median: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, 0.002)) for _ in range(24)]


def _timing(median: float) -> dict[str, Any]:
    samples = _samples(median, 99)
    return {"unit": "s", "samples": samples, "median": median, "ci_low": median,
            "ci_high": median, "n": len(samples), "cold_l2": True, "cuda_graph": False,
            "stop_reason": "budget", "timer": "host_cpu"}  # fmt: skip


def measured(
    session: Session,
    sha: str,
    median: float,
    extra: dict[str, Any] | None = None,
    device_class: str = "h200",
) -> Run:
    """A finished push run of ``sha`` (its parent BASE) with one softmax result, unjudged."""
    repo = get_or_create_repository(session, "remlib", "/src/remlib")
    upsert_commit(session, repo, BASE, [], "base", generation=1)
    commit = upsert_commit(session, repo, sha, [BASE] if sha == HEAD else [], "c")
    if session.get(Case, "c-soft") is None:
        session.add(Case(id="c-soft", suite="basic", kernel="softmax", backend="lib",
                         params={}, label="rows=4096"))  # fmt: skip
    run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"], trigger="push",
              status="succeeded", device_class=device_class,
              baseline_sha=BASE if sha == HEAD else None)  # fmt: skip
    session.add(run)
    session.flush()
    record = {"suite": "basic", "kernel": "softmax", **(extra or {})}
    session.add(Result(run_id=run.id, case_id="c-soft", status="pass", median_s=median,
                       samples=_samples(median, run.id), record=record))  # fmt: skip
    session.flush()
    session.expire(run)
    return run


@pytest.mark.parametrize(
    ("remeasure", "verdict", "run_verdict"),
    [
        (None, "regression", "fail"),  # no re-measure (an import, an older run): one comparison
        ({"status": "pass", "timing": _timing(1.5e-4)}, "regression", "fail"),
        ({"status": "pass", "timing": _timing(1.0e-4)}, "inconclusive", "neutral"),
        ({"status": "error", "error": "Segmentation fault\nat ..."}, "inconclusive", "neutral"),
    ],
)
def test_a_regression_stands_only_where_its_re_measure_repeats_it(
    session: Session, remeasure: dict[str, Any] | None, verdict: str, run_verdict: str
) -> None:
    assert analyze(session, measured(session, BASE, 1.0e-4), SETTINGS)
    head = measured(session, HEAD, 1.5e-4, None if remeasure is None else {"remeasure": remeasure})
    assert would_regress(session, head, SETTINGS) == ["c-soft"]  # what the worker re-measures
    assert analyze(session, head, SETTINGS)
    (result,) = head.results
    assert (result.verdict, head.verdict) == (verdict, run_verdict)
    shown = format_run(run_summary(session, head))
    assert (NOTE_UNCONFIRMED in shown) == (verdict == "inconclusive")


def test_only_counting_regressions_are_re_measured(session: Session) -> None:
    assert analyze(session, measured(session, BASE, 1.0e-4, device_class="cpu"), SETTINGS)
    slower = measured(session, HEAD, 1.5e-4, device_class="cpu")
    assert would_regress(session, slower, SETTINGS) == ["c-soft"]
    # CPU timings that do not gate (the default) never fail a run: nothing to confirm
    assert would_regress(session, slower, Settings(cpu_timing_gates=False)) == []
    assert analyze(session, measured(session, BASE, 1.0e-4), SETTINGS)
    assert would_regress(session, measured(session, HEAD, 1.0e-4), SETTINGS) == []
