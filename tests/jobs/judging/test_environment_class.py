"""A comparison stays inside its series (design.md): the environment class.

A series is (library, suite, case, GPU class, environment class). A worker upgraded
from one torch to another between a baseline run and a candidate run moves every case
by what torch changed, not the library; the unpaired comparison took the baseline's
samples all the same and called that the library's regression.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from kernelwatch.db.models import Run
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.verdicts import class_verdict
from kernelwatch.kernels.record import environment_class, same_environment
from tests.jobs.judging.test_remeasure_rule import BASE, HEAD, SETTINGS, measured

TORCH_OLD = {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0"}


def _run(session: Session, sha: str, median: float, env: dict[str, Any] | None) -> Run:
    run = measured(session, sha, median, None if env is None else {"environment": env})
    assert analyze(session, run, SETTINGS)
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
