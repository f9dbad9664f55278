"""Manual runs never change a commit's gate result unless asked, and a mistyped ``run``
leaves nothing behind (issue 18, item 4)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Repository, Result, Run
from kernelwatch.db.store import get_or_create_repository, upsert_commit
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import commit_verdict, runs_of_commit
from tests.conftest import run_cli
from tests.helpers import library_files, make_repo

SHA = "a" * 40


def _run(
    session: Session,
    trigger: str,
    status: str,
    verdict: str | None,
    cases: dict[str, str | None] | None = None,
    **opts: object,
) -> Run:
    """A run of SHA on h200 with ``cases`` (case id → verdict) as passing results."""
    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, SHA, [])
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=["basic"],
        trigger=trigger,
        status=status,
        verdict=verdict,
        device_class="h200",
        baseline_sha="b" * 40,
        options=dict(opts),
    )
    session.add(run)
    session.flush()
    run.baseline_run_id = run.id  # compared with something (the case rows say what)
    for case_id, case_verdict in (cases or {}).items():
        if session.get(Case, case_id) is None:
            session.add(Case(id=case_id, suite="basic", kernel=case_id, backend="lib", params={}))
            session.flush()
        session.add(
            Result(run_id=run.id, case_id=case_id, status="pass", verdict=case_verdict, ratio=1.0)
        )
    session.flush()
    return run


def _overall(session: Session) -> tuple[str, list[int]]:
    repo = get_or_create_repository(session, "lib", "/src/lib")
    runs = runs_of_commit(session, [repo.id], SHA)
    (cls,) = commit_verdict(session, "lib", SHA, runs).classes
    return commit_verdict(session, "lib", SHA, runs).overall, list(cls.runs)


def test_a_manual_run_does_not_override_the_push_verdict(session: Session) -> None:
    push = _run(session, "push", "succeeded", "pass", {"softmax": "unchanged"})
    _run(session, "manual", "error", "error")  # e.g. a build that failed
    _run(session, "manual", "succeeded", "fail", {"softmax": "regression"})  # a noisy re-run
    _run(session, "manual", "queued", None)  # a re-run in flight
    overall, ids = _overall(session)
    assert ids == [push.id] and overall == "pass"


def test_a_manual_run_with_gate_outranks_manual_runs_not_gate_runs(session: Session) -> None:
    manual = _run(session, "manual", "succeeded", "pass", {"softmax": "unchanged"})
    gated = _run(session, "manual", "succeeded", "fail", {"softmax": "regression"}, gate=True)
    _run(session, "manual", "succeeded", "pass", {"softmax": "unchanged"})  # newer, plain
    overall, ids = _overall(session)
    assert ids == [gated.id] and overall == "fail" and manual.id not in ids
    push = _run(session, "push", "succeeded", "pass", {"softmax": "unchanged"})
    assert _overall(session) == ("pass", [push.id])  # design.md: push/PR > manual --gate


def test_rerunning_a_manually_measured_commit_does_not_reset_it_to_pending(
    session: Session,
) -> None:
    measured = _run(session, "manual", "succeeded", "pass", {"softmax": "unchanged"})
    again = _run(session, "manual", "queued", None)
    overall, ids = _overall(session)
    assert ids == [measured.id] and overall == "pass"
    repo = get_or_create_repository(session, "lib", "/src/lib")
    verdict = commit_verdict(session, "lib", SHA, runs_of_commit(session, [repo.id], SHA))
    assert verdict.in_flight == (again.id,)  # what ``gate --wait`` waits for
    # a gate run measuring outranks what the manual runs found: its answer is awaited
    push = _run(session, "push", "running", None)
    assert _overall(session)[0] == "pending"
    session.delete(push)
    # with nothing measured yet, the queued run is what there is
    session.delete(measured)
    session.flush()
    assert _overall(session)[0] == "pending"


def _rows(data: Path) -> tuple[list[str], int]:
    engine = create_engine(f"sqlite:///{data / 'kernelwatch.db'}")
    with Session(engine) as s:
        return list(s.scalars(select(Repository.name))), len(s.scalars(select(Run.id)).all())


def test_unknown_suite_exits_2_with_the_list_and_queues_nothing(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    make_repo(src, library_files("lib", "X = 1\n"))
    data = tmp_path / "kwdata"
    proc = run_cli("run", str(src), "--commit", "HEAD", "--suite", "nosuch", timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "unknown suite 'nosuch'" in proc.stderr and "basic" in proc.stderr
    if (data / "kernelwatch.db").exists():
        assert _rows(data)[1] == 0


def test_failed_runs_leave_no_repository_rows(tmp_path: Path) -> None:
    notgit = tmp_path / "notgit"
    notgit.mkdir()
    data = tmp_path / "kwdata"
    for source in (str(tmp_path / "doesnotexist"), str(notgit)):
        proc = run_cli("run", source, "--commit", "HEAD", timeout=300)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.startswith("kernelwatch run:") and source in proc.stderr
    if (data / "kernelwatch.db").exists():
        assert _rows(data) == ([], 0)


def test_unknown_kernel_exits_2_with_a_suggestion_and_queues_nothing(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    make_repo(src, library_files("lib", "X = 1\n"))
    proc = run_cli("run", str(src), "--commit", "HEAD", "--kernel", "softmx", timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "unknown kernel 'softmx' (did you mean 'softmax'?)" in proc.stderr
    assert "rmsnorm" in proc.stderr  # the suite's kernels are listed
    data = tmp_path / "kwdata"
    if (data / "kernelwatch.db").exists():
        assert _rows(data)[1] == 0


def test_show_of_a_queued_run_says_dash_not_none(session: Session) -> None:
    # `kernelwatch show RUN` of a queued run printed "verdict=None  worker=None" and
    # "(from runs 19; ...)" for one run (an audit, 2026-12-05)
    judged = _run(session, "push", "succeeded", "pass", {"c1": "unchanged"})
    queued = _run(session, "manual", "queued", None)
    text = format_run(run_summary(session, queued))
    assert "verdict=-  worker=-" in text.splitlines()[0]
    assert "None" not in text
    assert f"(from run {judged.id}; this run is not part of it)" in text
