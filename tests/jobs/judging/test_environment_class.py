"""A comparison stays inside its series (design.md): the environment class.

A series is (library, suite, case, GPU class, environment class). A worker upgraded
from one torch to another between a baseline run and a candidate run moves every case
by what torch changed, not the library; the unpaired comparison took the baseline's
samples all the same and called that the library's regression.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Result, Run
from kernelwatch.db.outbox import PendingSend
from kernelwatch.jobs.judging.analysis import analyze, analyze_ready
from kernelwatch.jobs.judging.verdicts import (
    CommitVerdict,
    class_verdict,
    commit_verdict,
    runs_of_commit,
)
from kernelwatch.kernels.record import environment_class, same_environment
from tests.jobs.judging.test_remeasure_rule import BASE, HEAD, SETTINGS, _samples, _timing, measured

TORCH_OLD = {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0"}
UPGRADED = {**TORCH_OLD, "torch": "2.13.0+cu130"}


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


def _answer(session: Session, base: Run) -> CommitVerdict:
    """The baseline commit's composed answer, as ``show`` and the PR comment read it."""
    return commit_verdict(
        session, "remlib", BASE, runs_of_commit(session, [base.repository_id], BASE)
    )


def _ended(session: Session, run_id: int | None, median: float | None, env: dict[str, Any]) -> Run:
    """A follow-up run the judgement asked for, ended as a worker would: measured in
    ``env`` (``median``), or failed (None); then judged as the worker ends a run."""
    again = session.get(Run, run_id)
    assert again is not None
    again.status = "succeeded" if median is not None else "failed"
    if median is not None:
        record = {"suite": "basic", "kernel": "softmax", "status": "pass", "environment": env,
                  "timing": _timing(median)}  # fmt: skip
        session.add(Result(run_id=again.id, case_id="c-soft", status="pass", median_s=median,
                           samples=_samples(median, 7), record=record))  # fmt: skip
    session.flush()
    session.expire(again)
    analyze_ready(session, again, SETTINGS)
    session.flush()
    return again


def _remeasure_done(session: Session, head: Run, median: float | None, env: dict[str, Any]) -> Run:
    """The re-measure of the baseline ``head`` asked for, ended (``_ended``)."""
    return _ended(session, head.options.baseline_remeasure, median, env)


def test_a_torch_upgrade_between_the_runs_is_not_called_the_librarys_regression(
    session: Session,
) -> None:
    base = _run(session, BASE, 1.0e-4, TORCH_OLD)
    head = measured(session, HEAD, 1.2e-4, {"environment": UPGRADED})
    # 20 % slower: torch's doing, not the commit's; nothing to compare with in its class,
    # so it waits for its baseline commit measured again where it was measured
    assert not analyze(session, head, SETTINGS)
    (result,) = head.results
    assert result.verdict is None and result.baseline_result_id is None
    again = session.get(Run, head.options.baseline_remeasure)
    assert again is not None and (again.status, again.trigger) == ("queued", "manual")
    assert again.commit_id == base.commit_id and again.baseline_sha is None
    assert again.options.baseline_for == head.id and again.queue == head.queue
    assert session.scalars(select(PendingSend.run_id)).all() == [
        again.id
    ]  # the reconciler sends it
    view = class_verdict(session, head)
    assert view.state == "pending" and f"measured again in this environment (run {again.id})" in (
        view.description
    )
    _remeasure_done(session, head, 1.0e-4, UPGRADED)
    # judged after its job ended: its regression is measured again before it counts
    confirming = session.get(Run, head.options.confirmation)
    assert head.verdict is None and confirming is not None
    assert confirming.options.confirms == head.id and confirming.commit_id == head.commit_id
    assert "--case=c-soft" in confirming.options.bench_args
    assert "confirming its regressions" in class_verdict(session, head).description
    _ended(session, confirming.id, 1.2e-4, UPGRADED)
    (result,) = head.results
    assert head.verdict == "fail" and result.verdict == "regression"
    assert result.baseline_result_id == again.results[0].id


def test_an_unchanged_commit_after_the_upgrade_reads_unchanged(session: Session) -> None:
    base = _run(session, BASE, 1.0e-4, TORCH_OLD)
    answer = _answer(session, base)
    head = measured(session, HEAD, 1.2e-4, {"environment": UPGRADED})
    assert not analyze(session, head, SETTINGS)
    again = _remeasure_done(session, head, 1.2e-4, UPGRADED)
    assert head.verdict == "pass" and head.results[0].verdict == "unchanged"
    assert again.verdict is not None  # judged (nothing to compare with), never waiting
    # the re-measure is a manual run: the baseline commit's own answer is its gate run's
    after = _answer(session, base)
    assert [(c.state, c.description, c.runs) for c in after.classes] == [
        (c.state, c.description, c.runs) for c in answer.classes
    ]


def test_a_failed_re_measure_is_asked_once_and_said(session: Session) -> None:
    _run(session, BASE, 1.0e-4, TORCH_OLD)
    head = measured(session, HEAD, 1.2e-4, {"environment": UPGRADED})
    assert not analyze(session, head, SETTINGS)
    again = _remeasure_done(session, head, None, UPGRADED)
    assert head.verdict is not None and head.options.baseline_remeasure == again.id
    assert session.scalars(select(func.count()).select_from(Run)).one() == 3  # no second ask
    view = class_verdict(session, head)
    assert (
        view.state == "error"
        and (
            f"no good measurement in this class and environment (measured again in run {again.id}: "
            "failed)"
        )
        in view.description
    )


def test_imported_records_never_ask(session: Session) -> None:
    _run(session, BASE, 1.0e-4, TORCH_OLD)
    head = measured(session, HEAD, 1.2e-4, {"environment": UPGRADED})
    head.options = head.options.with_(imported_from="h200.jsonl")
    assert analyze(session, head, SETTINGS)
    assert head.options.baseline_remeasure is None
    assert session.scalars(select(func.count()).select_from(Run)).one() == 2


def test_the_same_environment_and_an_unnamed_one_still_compare(session: Session) -> None:
    _run(session, BASE, 1.0e-4, None)  # a baseline recorded before environments were
    head = _run(session, HEAD, 1.2e-4, TORCH_OLD)
    (result,) = head.results
    assert result.verdict == "regression" and result.baseline_result_id is not None
