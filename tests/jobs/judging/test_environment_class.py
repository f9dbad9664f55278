"""A comparison stays inside its series (design.md): the environment class.

A series is (library, suite, case, GPU class, environment class). A worker upgraded
from one torch to another between a baseline run and a candidate run moves every case
by what torch changed, not the library; the unpaired comparison took the baseline's
samples all the same and called that the library's regression.
"""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Case, Result, Run
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.verdicts import class_verdict
from kernelwatch.kernels.record import environment_class, same_environment

BASE, HEAD = "1" * 40, "2" * 40
TORCH_OLD = {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0"}


def _samples(median: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, 0.002)) for _ in range(24)]


def _run(session: Session, sha: str, median: float, env: dict[str, Any] | None) -> Run:
    repo = get_or_create_repository(session, "envlib", "/src/envlib")
    upsert_commit(session, repo, BASE, [], "base", generation=1)
    commit = upsert_commit(session, repo, sha, [BASE] if sha == HEAD else [], "c")
    if session.get(Case, "c-norm") is None:
        session.add(Case(id="c-norm", suite="basic", kernel="rmsnorm", backend="lib",
                         params={}, label="rows=4096"))  # fmt: skip
    run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"], trigger="push",
              status="succeeded", device_class="h200",
              baseline_sha=BASE if sha == HEAD else None)  # fmt: skip
    session.add(run)
    session.flush()
    record: dict[str, Any] = {"suite": "basic", "kernel": "rmsnorm"}
    if env is not None:
        record["environment"] = env
    session.add(Result(run_id=run.id, case_id="c-norm", status="pass", median_s=median,
                       samples=_samples(median, run.id), record=record))  # fmt: skip
    session.flush()
    session.expire(run)
    assert analyze(session, run, Settings(cpu_timing_gates=True))
    session.flush()
    return run


def test_the_class_is_python_minor_torch_and_triton() -> None:
    env = {"environment": {**TORCH_OLD, "threads": 8, "platform": "Linux"}}
    assert environment_class(env) == {"python": "3.12", "torch": "2.11.0+cu130",
                                      "triton": "3.6.0"}  # fmt: skip
    patch = {"environment": {**TORCH_OLD, "python": "3.12.9", "threads": 2}}
    assert same_environment(env, patch)  # threads and the patch release do not split it
    assert not same_environment(env, {"environment": {**TORCH_OLD, "torch": "2.13.0+cu130"}})
    # an older record that does not name Triton is not told apart by it
    assert same_environment(env, {"environment": {"python": "3.12.1", "torch": "2.11.0+cu130"}})
    assert same_environment(env, {}) and environment_class({"environment": "x"}) == {}


def test_a_torch_upgrade_between_the_runs_is_not_called_the_librarys_regression(
    session: Session,
) -> None:
    _run(session, BASE, 1.0e-4, TORCH_OLD)
    upgraded = {**TORCH_OLD, "torch": "2.13.0+cu130"}
    head = _run(session, HEAD, 1.2e-4, upgraded)  # 20 % slower: torch's doing, not the commit's
    (result,) = head.results
    assert result.verdict is None and result.baseline_result_id is None
    view = class_verdict(session, head)
    assert view.state == "error" and "no good measurement in this class and environment" in (
        view.description
    )


def test_the_same_environment_and_an_unnamed_one_still_compare(session: Session) -> None:
    _run(session, BASE, 1.0e-4, None)  # a baseline recorded before environments were
    head = _run(session, HEAD, 1.2e-4, TORCH_OLD)
    (result,) = head.results
    assert result.verdict == "regression" and result.baseline_result_id is not None
