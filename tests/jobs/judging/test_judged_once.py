"""A run waiting for its judgement is judged once, with what it waits for, whoever ends
the run it waits for, and never left unjudged.

Three ways it went wrong: another run of the baseline commit ending while a late
regression's confirmation measured judged it on one comparison; two runs of the
baseline commit ending at once on two cards each saw the other still measuring and
left the waiting run unjudged for ever; and two processes judging the same waiting run
at once each planned a follow-up.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.models import Run
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.judging.analysis import analyze, analyze_ready
from kernelwatch.jobs.planning.reconcile import judge_stranded
from tests.jobs.judging.test_confirmation import _confirmed, _late
from tests.jobs.judging.test_remeasure_rule import BASE, HEAD, SETTINGS, measured


def test_a_baseline_run_ending_during_the_confirmation_does_not_judge_it(
    session: Session,
) -> None:
    head = _late(session, 1.5e-4)
    asked = head.options.confirmation
    assert head.verdict is None and asked is not None
    # another run of the baseline commit ends meanwhile (a manual run, a bisection step,
    # another push's baseline re-measure): it judges the runs waiting for that commit
    other = measured(session, BASE, 1.0e-4)
    analyze_ready(session, other, SETTINGS)
    session.flush()
    (result,) = head.results
    assert head.verdict is None and result.verdict is None  # still confirming
    assert head.options.confirmation == asked
    assert _confirmations(session) == [asked]  # asked once
    _confirmed(session, head, 1.5e-4)
    assert (result.verdict, head.verdict) == ("regression", "fail")


def _confirmations(session: Session) -> list[int]:
    """The ids of every confirmation run planned."""
    return [r.id for r in session.scalars(select(Run).order_by(Run.id)) if r.options.confirms]


@pytest.fixture
def factory(db_url: str) -> Iterator[sessionmaker[Session]]:
    yield sessionmaker(bind=engine_for(db_url), expire_on_commit=False)


def _waiting(factory: sessionmaker[Session], head_median: float) -> tuple[int, int]:
    """BASE measuring, HEAD ended and waiting for it (committed); their ids."""
    with factory() as session, session.begin():
        base = measured(session, BASE, 1.0e-4)
        base.status = "running"
        head = measured(session, HEAD, head_median)
        head.finished = datetime.now(UTC)
        assert not analyze(session, head, SETTINGS)
        return base.id, head.id


def test_a_run_both_baseline_runs_left_waiting_is_judged_by_the_reconciler(
    factory: sessionmaker[Session],
) -> None:
    base_id, head_id = _waiting(factory, 1.0e-4)
    later = datetime.now(UTC) + timedelta(minutes=1)
    # its baseline still measuring: the pass leaves it waiting
    assert judge_stranded(factory, SETTINGS, after_s=10, now=later) == []
    with factory() as session, session.begin():
        # the baseline run ended in a transaction that saw another run of its commit
        # still measuring (ended at the same moment on another card): nobody judged HEAD
        base = session.get(Run, base_id)
        assert base is not None
        base.status, base.finished = "succeeded", datetime.now(UTC)
    assert judge_stranded(factory, SETTINGS, after_s=10) == []  # not before the grace
    assert sorted(judge_stranded(factory, SETTINGS, after_s=10, now=later)) == [base_id, head_id]
    with factory() as session:
        head = session.get(Run, head_id)
        assert head is not None and head.verdict == "pass"
        assert head.results[0].verdict == "unchanged"
    assert judge_stranded(factory, SETTINGS, after_s=10, now=later) == []  # judged once


def test_two_processes_judging_one_waiting_run_plan_one_confirmation(
    pg_url: str,
) -> None:
    """PostgreSQL: the second process waits for the first's judgement and sees it."""
    from tests.conftest import _truncate

    _truncate(pg_url)
    factory = sessionmaker(bind=engine_for(pg_url), expire_on_commit=False)
    base_id, head_id = _waiting(factory, 1.5e-4)
    with factory() as session, session.begin():
        base = session.get(Run, base_id)
        assert base is not None
        base.status = "succeeded"
        second = measured(session, BASE, 1.0e-4)  # another run of BASE, ending too
        second_id = second.id
    first_judged = threading.Event()
    release = threading.Event()
    seen: dict[str, list[int]] = {}

    def end(name: str, run_id: int, hold: bool) -> None:
        with factory() as session, session.begin():
            run = session.get(Run, run_id)
            assert run is not None
            seen[name] = [r.id for r in analyze_ready(session, run, SETTINGS)]
            if hold:
                first_judged.set()
                release.wait(30)

    first = threading.Thread(target=end, args=("first", base_id, True))
    first.start()
    assert first_judged.wait(30)
    other = threading.Thread(target=end, args=("second", second_id, False))
    other.start()
    other.join(2)
    assert other.is_alive()  # waiting for the first's lock on HEAD, not judging beside it
    release.set()
    first.join(30)
    other.join(30)
    assert head_id not in seen["second"] and head_id not in seen["first"]  # confirming
    with factory() as session:
        head = session.get(Run, head_id)
        assert head is not None and head.verdict is None
        assert _confirmations(session) == [head.options.confirmation]  # one, the one it names


def test_a_run_that_cannot_be_judged_does_not_strand_the_others(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelwatch.jobs.planning import reconcile

    base_id, head_id = _waiting(factory, 1.0e-4)
    with factory() as session, session.begin():
        base = session.get(Run, base_id)
        assert base is not None
        base.status, base.finished = "succeeded", datetime.now(UTC)
    real = reconcile.analyze_ready

    def flaky(session: Session, run: Run, settings: object) -> list[Run]:
        if run.id == base_id:
            raise RuntimeError("a bug in one run's judgement")
        return real(session, run, SETTINGS)

    monkeypatch.setattr(reconcile, "analyze_ready", flaky)
    later = datetime.now(UTC) + timedelta(minutes=1)
    assert judge_stranded(factory, SETTINGS, after_s=10, now=later) == [head_id]
