"""A run the judgement asks for measures its commit alone, with that commit's recipe."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.outbox import PendingSend
from kernelwatch.jobs.judging.compose import Authority, authority, source_label
from kernelwatch.jobs.judging.follow_up import plan_follow_up
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import runs_of_commit
from tests.jobs.judging.test_remeasure_rule import BASE, HEAD, measured


def test_a_follow_up_keeps_the_recipe_and_drops_where_its_model_came_from(
    session: Session,
) -> None:
    like = measured(session, BASE, 1.0e-4)
    like.options = like.options.with_(
        paired=True, pr=7, gate=True, bench_args=["--kernel", "softmax"], impl="lib.ops",
        judged_late=True, requeues=2, confirmation=99, baseline_run_id=3,
    )  # fmt: skip
    waiting = measured(session, HEAD, 1.0e-4, device_class="h200")
    waiting.queue = "gpu.h200"
    again = plan_follow_up(session, like, waiting, ["basic", "layers"], confirms=waiting.id)
    kept = again.options
    assert (kept.bench_args, kept.impl, kept.confirms) == (
        ["--kernel", "softmax"], "lib.ops", waiting.id
    )  # fmt: skip
    assert not (kept.paired or kept.gate or kept.judged_late)
    assert (kept.pr, kept.confirmation, kept.baseline_run_id) == (None, None, None)
    assert kept.requeues == 0
    assert (again.commit_id, again.trigger, again.baseline_sha) == (like.commit_id, "manual", None)
    assert (again.queue, again.suites, again.status) == ("gpu.h200", ["basic", "layers"], "queued")
    assert session.scalars(select(PendingSend.run_id)).all() == [again.id]


def test_a_follow_up_never_gives_its_commits_answer(session: Session) -> None:
    """design.md: confirmation re-measures never change a commit's gate."""
    like = measured(session, BASE, 1.0e-4)
    waiting = measured(session, HEAD, 1.0e-4)
    again = plan_follow_up(session, like, waiting, ["basic"], baseline_for=waiting.id)
    confirming = plan_follow_up(session, waiting, waiting, ["basic"], confirms=waiting.id)
    assert authority(again) == authority(confirming) == Authority.BISECTION
    assert [r.id for r in runs_of_commit(session, [like.repository_id], BASE)] == [like.id]
    assert [r.id for r in runs_of_commit(session, [like.repository_id], HEAD)] == [waiting.id]
    assert source_label(again) == f"baseline re-measure {again.id}"
    assert source_label(confirming) == f"confirmation re-measure {confirming.id}"


def test_show_names_what_a_follow_up_is_for(session: Session) -> None:
    like = measured(session, BASE, 1.0e-4)
    waiting = measured(session, HEAD, 1.0e-4)
    again = plan_follow_up(session, like, waiting, ["basic"], baseline_for=waiting.id)
    confirming = plan_follow_up(session, waiting, waiting, ["basic"], confirms=waiting.id)
    shown = format_run(run_summary(session, again))
    assert f"the baseline of run {waiting.id}, measured again in its environment" in shown
    summary = run_summary(session, confirming)
    assert summary["follow_up"] == {"kind": "confirmation", "of_run": waiting.id}
    assert "would-be regressions, measured again to confirm them" in format_run(summary)
