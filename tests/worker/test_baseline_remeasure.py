"""After the workers' torch moved, a push's baseline is measured again where it was.

A real Celery worker measures a library's commit; its results are then made to name
an older torch (as if the workers were upgraded since). The next push finds no
baseline in its environment class; before, it read ``error`` ("nothing compared")
until someone re-measured the parent by hand. Now its judgement asks for a run of the
baseline commit, the worker's own reconciler sends it, the worker measures it, and the
push is compared with that measurement. The baseline commit's own answer stays its
push run's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from kernelwatch.db.models import Result, Run
from kernelwatch.jobs.judging.verdicts import commit_verdict, runs_of_commit
from kernelwatch.jobs.planning.plan import RunRequest, plan
from tests.helpers import library_files, make_repo
from tests.jobs.cli.test_pipeline import GOOD_INIT, Env, worker_env
from tests.worker.test_remeasure import EVERY_PROCESS

pytestmark = [pytest.mark.slow, pytest.mark.crowd]

OLD_TORCH = "1.0.0+before-the-upgrade"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # the worker's reconciler sends the re-measure's outbox note: every second here
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KW_RECONCILE_INTERVAL_S", "1")
        patch.setenv("KW_RECONCILE_UNSENT_AFTER_S", "0.5")
        # CPU timings gate here, as in test_remeasure.py: the slow commit's regression
        # counts, so its late judgement must be confirmed
        yield from worker_env(tmp_path_factory, "baseline-remeasure", cpu_timing_gates=True)


def _push(env: Env, src: Path, sha: str, options: dict[str, object]) -> list[int]:
    req = RunRequest(source=str(src), commits=[sha], measure_baseline=False, trigger="push",
                     options=options)  # fmt: skip
    return [p.id for p in plan(env.factory, env.settings, env.app, req)]


def _judged(env: Env, run_id: int, timeout: float = 300) -> Run:
    """The run once judged (a run waiting for its baseline is succeeded, unjudged)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with env.factory() as s:
            run = s.get(Run, run_id)
            assert run is not None
            if run.verdict is not None:
                return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} was not judged in {timeout} s")


def _upgraded(env: Env, src: Path, change: dict[str, str]) -> tuple[Run, Run, str]:
    """The baseline's push run (its records rewritten to an older torch) and the push of
    ``change`` on top of it, finished; and the baseline's sha."""
    base = make_repo(src, library_files("upglib", GOOD_INIT))
    head = make_repo(src, change, "change")
    args = {"bench_args": ["--kernel", "softmax"]}
    (first,) = env.wait(_push(env, src, base, args))
    assert first.status == "succeeded", first.error
    with env.factory() as s, s.begin():  # the workers ran an older torch back then
        for result in s.scalars(select(Result).where(Result.run_id == first.id)):
            record = dict(result.record)
            record["environment"] = {**record["environment"], "torch": OLD_TORCH}
            result.record = record
    (second,) = env.wait(_push(env, src, head, args))
    return first, second, base


def test_a_push_after_a_torch_upgrade_is_compared_with_its_baseline_measured_again(
    env: Env, tmp_path: Path
) -> None:
    src = tmp_path / "lib"
    first, second, base = _upgraded(env, src, {"README.md": "docs only\n"})
    assert second.status == "succeeded", second.error
    run = _judged(env, second.id)
    with env.factory() as s:
        again = s.get(Run, run.options.baseline_remeasure)
        assert again is not None, "no re-measure of the baseline was asked for"
        assert (again.status, again.trigger, again.options.baseline_for) == (
            "succeeded", "manual", second.id
        )  # fmt: skip
        assert again.commit is not None and again.commit.sha == base
        ours = s.scalars(select(Result).where(Result.run_id == second.id)).all()
        assert ours and all(r.baseline_result_id is not None for r in ours)
        bases = {s.get(Result, r.baseline_result_id).run_id for r in ours}  # type: ignore[union-attr]
        assert bases == {again.id}  # compared with the new measurement, not the stale one
    assert run.verdict != "error"
    with env.factory() as s:  # the baseline commit's own answer is still its push run's
        answer = commit_verdict(s, "upglib", base, runs_of_commit(s, [first.repository_id], base))
        assert [c.runs for c in answer.classes] == [(first.id,)]


def test_a_slow_push_judged_late_is_failed_only_after_its_confirmation_run(
    env: Env, tmp_path: Path
) -> None:
    """Judged when its re-measured baseline ends, after its own job: the worker could not
    re-measure its regression then, so a confirmation run of its commit does."""
    src = tmp_path / "lib"
    _, second, _ = _upgraded(env, src, {"upglib/__init__.py": EVERY_PROCESS})
    run = _judged(env, second.id)
    with env.factory() as s:
        confirming = s.get(Run, run.options.confirmation)
        assert confirming is not None, "the late regression was not confirmed"
        assert (confirming.status, confirming.options.confirms) == ("succeeded", second.id)
        assert confirming.commit_id == run.commit_id
        softmax = s.scalars(select(Result).where(Result.run_id == second.id)).one()
        assert softmax.record["remeasure"]["status"] == "pass"
        assert softmax.verdict == "regression"
    assert run.verdict == "fail"
