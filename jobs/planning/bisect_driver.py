"""Driving bisections: stored steps in, the next paired run (or the culprit) out.

The search itself is pure (``bisect.py``); this module reads a bisection's steps
from the database (``db/bisect.py``), turns each finished step run into good / bad /
skip, asks the search what to do, and plans that step as an ordinary paired run of
the step commit against the good build (``plan``), marked with
``RunOptions.bisection_id`` so it never decides its commit's gate result.

Nothing here waits for a run: :func:`advance` looks, acts and returns. It is called
from wherever time passes: the API process's :class:`BisectThread` (next to the
reporter and the reconciler), and ``kernelwatch bisect --wait`` while it polls. So a
bisection survives any restart: its state is the database, its steps are runs the
reconciler already keeps alive, and any process can take the next step. Two
processes advancing at once are serialised by the bisection row's lock (a second
plan of the same step would join the first's run: ``dedup``).

A bisection only ever measures main history: the bad commit must be on the
repository's default branch (a PR's fork commits are never built without the
approval that the PR path asks for).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from celery import Celery
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db import bisect as store
from kernelwatch.db.bisect import DEFAULT_BUDGET_S, Bisection, BisectionStep
from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Result, Run
from kernelwatch.db.store import get_or_create_repository
from kernelwatch.jobs.errors import CommitNotFound, ConfigError, KernelwatchError
from kernelwatch.jobs.library import repoconfig, served
from kernelwatch.jobs.library.mirror import Mirror, git, repository_name
from kernelwatch.jobs.planning import build_ahead
from kernelwatch.jobs.planning.bisect import (
    CaseResult,
    Done,
    Limits,
    Measure,
    Outcome,
    Purpose,
    Step,
    Wait,
    case_names,
    distinct_builds,
    judge,
    next_action,
)
from kernelwatch.jobs.planning.plan import BrokerUnavailable, RunRequest, plan
from kernelwatch.kernels.casepattern import matches
from kernelwatch.kernels.verdict import BLOCKING

log = logging.getLogger(__name__)

TRIGGER = "bisect"


@dataclass
class BisectRequest:
    """What ``kernelwatch bisect`` (or the automatic trigger) asks for."""

    source: str
    good: str
    bad: str
    case_pattern: str = ""
    suites: list[str] = field(default_factory=list)  # empty: what .kernelwatch.toml names
    device_class: str = "cpu"
    bench_args: list[str] = field(default_factory=list)
    budget_s: float | None = DEFAULT_BUDGET_S
    trigger: str = "manual"
    full_name: str | None = None


def start(factory: sessionmaker[Session], settings: Settings, req: BisectRequest) -> int:
    """Record a bisection of ``req``'s range, or join the running one; returns its id."""
    mirror = Mirror(settings.data_dir / "mirrors", req.source)
    mirror.sync()
    commits = first_parent_commits(mirror, mirror.resolve(req.good), mirror.resolve(req.bad))
    commits = commits_that_build_differently(mirror, commits, served.table(settings.repo_configs))
    with factory() as session, session.begin():
        repo = get_or_create_repository(session, repository_name(mirror.source), mirror.source)
        joined = store.active_for_range(
            session, repo.id, commits[0], commits[-1], req.device_class, req.case_pattern
        )
        if joined is not None:
            return joined.id
        row = Bisection(
            repository_id=repo.id,
            good_sha=commits[0],
            bad_sha=commits[-1],
            commits=commits,
            case_pattern=req.case_pattern,
            device_class=req.device_class,
            suites=list(req.suites),
            bench_args=list(req.bench_args),
            trigger=req.trigger,
            establish=True,
            budget_s=req.budget_s,
            full_name=req.full_name,
        )
        session.add(row)
        session.flush()
        return row.id


def first_parent_commits(mirror: Mirror, good: str, bad: str) -> list[str]:
    """``[good, ..., bad]`` along bad's first-parent line; bad must be on main history."""
    if good == bad:
        raise CommitNotFound("good and bad are the same commit")
    between = mirror.range(f"{good}..{bad}")
    if not between or between[-1] != bad:
        raise CommitNotFound(f"{bad[:12]} does not follow {good[:12]}: nothing to bisect")
    on_line = git("--git-dir", str(mirror.path), "rev-list", "--first-parent", bad).split()
    if good not in on_line:
        raise CommitNotFound(
            f"{good[:12]} is not on the first-parent line of {bad[:12]} (give a good commit "
            "of the branch's own history)"
        )
    require_main_history(mirror, bad)
    return [good, *between]


def commits_that_build_differently(
    mirror: Mirror, commits: Sequence[str], table: Mapping[str, Path] | None = None
) -> list[str]:
    """``commits`` without those that change none of bad's ``[install] inputs``.

    Without ``inputs`` in bad's ``.kernelwatch.toml`` every commit may matter and all are
    kept. A bad or missing file there is not this function's error: the step runs
    report it.
    """
    try:
        inputs = repoconfig.read_at(mirror, commits[-1], table).install.inputs
    except ConfigError:
        return list(commits)
    if not inputs:
        return list(commits)
    keys = [build_key(mirror, sha, inputs) for sha in commits]
    return [commits[i] for i in distinct_builds(keys)]


def build_key(mirror: Mirror, sha: str, paths: Sequence[str]) -> str:
    """The object ids of ``paths`` at ``sha`` (trees, blobs, submodule commits), one line
    each; a path the commit lacks is simply absent from the key."""
    listing = git("--git-dir", str(mirror.path), "ls-tree", sha, "--", *paths)
    return "\n".join(sorted(listing.splitlines()))


def require_main_history(mirror: Mirror, bad: str) -> None:
    """Refuse commits that are not on the default branch (fork code needs approval).

    Also the build worker's check before a build-ahead (``worker/prebuild.py``).
    """
    for branch in ("main", "master"):
        try:
            head = mirror.resolve(branch)
        except CommitNotFound:
            continue
        if mirror.merge_base(bad, head) == bad:
            return
        raise ConfigError(
            f"{bad[:12]} is not on {branch}: bisections measure main history only "
            "(a pull request's commits are measured by its own, approved runs)"
        )


def advance(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None, bisection_id: int
) -> str:
    """Take the step that is due for one bisection; returns its status afterwards.

    Two transactions around the planning of a step, not one: ``plan`` commits its
    run in a session of its own, which SQLite would block behind this one's writes.
    """
    with factory() as session, session.begin():
        row = session.get(Bisection, bisection_id, with_for_update=True)
        if row is None:
            return "missing"
        if row.status != store.ACTIVE:
            return row.status
        if not row.commits:  # recorded by the automatic trigger: the range is read here
            try:
                mirror = Mirror(settings.data_dir / "mirrors", row.repository.source)
                mirror.sync()
                row.commits = first_parent_commits(mirror, row.good_sha, row.bad_sha)
            except KernelwatchError as exc:
                _finish(row, "error", str(exc))
                return row.status
        _collect(session, row)
        action = next_action(
            len(row.commits) - 1, search_steps(row), _limits(row), establish=row.establish
        )
        if isinstance(action, Wait):
            return row.status
        if isinstance(action, Done):
            _conclude(session, row, action)
            return row.status
        assert isinstance(action, Measure)
        sha, against = row.commits[action.index], row.commits[action.against]
        step_req = _step_request(row, sha, against)
        position = len(row.steps)
    broker_up = app is not None
    try:
        planned = plan(factory, settings, app, step_req)
        error = ""
    except BrokerUnavailable as exc:
        planned, error = exc.planned, ""  # committed: the reconciler sends it
        broker_up = False
    except KernelwatchError as exc:
        planned, error = [], f"step {sha[:12]} could not be planned: {exc}"
    run_id = next((p.id for p in planned if p.commit == sha), None)
    with factory() as session, session.begin():
        row = session.get(Bisection, bisection_id, with_for_update=True)
        assert row is not None
        if row.status != store.ACTIVE or len(row.steps) != position:
            return row.status  # cancelled, or another process took this step meanwhile
        if error:
            _finish(row, "error", error)
            return row.status
        session.add(
            BisectionStep(
                bisection_id=row.id,
                position=position,
                sha=sha,
                against_sha=against,
                purpose=action.purpose.value,
                run_id=run_id,
            )
        )
        depth = settings.bisect_build_ahead if broker_up else 0
        planned_now = Step(action.index, action.against, action.purpose)
        ahead = _builds_due(row, [*search_steps(row), planned_now], depth)
        status = row.status
    if app is not None and ahead:  # after the commit: the build worker reads the step
        build_ahead.send(app, bisection_id, ahead, depth)
    return status


def _builds_due(row: Bisection, steps: list[Step], depth: int) -> list[str]:
    """The shas to build ahead now that ``steps[-1]`` is planned (``build_ahead.due``)."""
    due = build_ahead.due(
        len(row.commits) - 1, steps, _limits(row), establish=row.establish, depth=depth
    )
    return [row.commits[i] for i in due]


def advance_all(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None
) -> dict[int, str]:
    """:func:`advance` every running bisection; a failure of one never stops the others."""
    with factory() as session:
        ids = store.active_ids(session)
    out: dict[int, str] = {}
    for bid in ids:
        try:
            out[bid] = advance(factory, settings, app, bid)
        except Exception:
            log.exception("advancing bisection %s failed; retried on the next pass", bid)
    return out


def cancel(factory: sessionmaker[Session], bisection_id: int, reason: str = "cancelled") -> bool:
    """Stop a running bisection and cancel its step run in flight; False if not running."""
    with factory() as session, session.begin():
        row = session.get(Bisection, bisection_id, with_for_update=True)
        if row is None or row.status != store.ACTIVE:
            return False
        for step in row.steps:
            run = session.get(Run, step.run_id) if step.run_id else None
            if step.outcome is None and run is not None and run.status not in FINAL_STATES:
                # the worker's heartbeat sees it and stops the suite (jobs/planning/cancel.py)
                run.status = "cancelled"
                run.error = f"bisection {row.id} cancelled"
                run.finished = datetime.now(UTC)
        _finish(row, "cancelled", reason)
        return True


def wait(
    factory: sessionmaker[Session],
    settings: Settings,
    app: Celery | None,
    bisection_id: int,
    timeout_s: float,
    poll_s: float = 1.0,
    on_poll: Callable[[str], None] | None = None,
) -> str:
    """Advance and poll until the bisection ends or ``timeout_s`` passes; its status."""
    deadline = time.monotonic() + timeout_s
    status = advance(factory, settings, app, bisection_id)
    while status == store.ACTIVE and time.monotonic() < deadline:
        time.sleep(poll_s)
        status = advance(factory, settings, app, bisection_id)
        if on_poll is not None:
            on_poll(status)
    return status


def summary(session: Session, bisection_id: int) -> dict[str, object] | None:
    """``kernelwatch bisect --json``: exactly culprit, steps and gpu_seconds (design.md)."""
    row = session.get(Bisection, bisection_id)
    if row is None:
        return None
    return {
        "culprit": row.culprit(),
        "steps": [{"sha": s.sha, "verdict": s.verdict, "skipped": s.skipped} for s in row.steps],
        "gpu_seconds": round(row.gpu_seconds, 3),
    }


# ---------------------------------------------------------------------------- steps


def _step_request(row: Bisection, sha: str, against: str) -> RunRequest:
    """The paired run of one step: ``sha`` built and measured against ``against``."""
    return RunRequest(
        source=row.repository.source,
        commits=[sha],
        baseline=against,
        suites=list(row.suites) or ["basic"],
        device_class=row.device_class,
        trigger=TRIGGER,
        measure_baseline=False,  # paired: the good build is measured inside the run
        config_errors="record",  # a step whose commit has a bad file is an error: a skip
        options={
            "paired": True,
            "suites_explicit": bool(row.suites),  # none given: the commit's own file says
            # only the cases the bisection follows are measured (kernels/casepattern.py)
            "bench_args": [
                *row.bench_args,
                *(["--case", row.case_pattern] if row.case_pattern else []),
            ],
            "bisection_id": row.id,
        },
    )


def _collect(session: Session, row: Bisection) -> None:
    """Judge the step runs that ended since the last look (their outcome and time)."""
    follows: frozenset[str] | None = None
    looked = False  # what the bisection follows, read once a pass and only when needed
    for step in row.steps:
        if step.outcome is not None:
            continue
        run = session.get(Run, step.run_id) if step.run_id else None
        if run is None:
            step.outcome, step.verdict = Outcome.SKIP.value, "error"
            continue
        if run.status not in FINAL_STATES or (run.status == "succeeded" and run.verdict is None):
            continue
        if not looked or step.purpose == Purpose.ESTABLISH.value:
            follows, looked = followed(session, row), True
        outcome, verdict, _ = judge_step(session, run, row.case_pattern, follows)
        step.outcome, step.verdict = outcome.value, verdict
        step.seconds = _held_seconds(run)
        row.gpu_seconds = (row.gpu_seconds or 0.0) + step.seconds


def judge_step(
    session: Session, run: Run, pattern: str, follows: frozenset[str] | None = None
) -> tuple[Outcome, str, Result | None]:
    """A finished step run as good, bad or skip, the word shown, and its worst case.

    A run that did not succeed (it did not build, or errored) is a skip; otherwise its
    results are judged by :func:`bisect.judge`, the rule a device-side bisection uses too,
    for the verdict kinds the bisection ``follows`` (:func:`followed`).
    """
    if run.status != "succeeded":
        return Outcome.SKIP, run.status, None
    results = list(session.scalars(select(Result).where(Result.run_id == run.id)))
    cases = [_case_result(r) for r in results]
    outcome, word, worst = judge(cases, pattern, follows)
    return outcome, word, results[worst] if worst is not None else None


def followed(session: Session, row: Bisection) -> frozenset[str] | None:
    """The blocking kinds the bisection follows: what its first evidence found, bad
    against good (the ``establish`` step), else the run that asked for it (its cases the
    pattern matches); None (any blocking kind) until one of them says."""
    for step in row.steps:
        if step.purpose == Purpose.ESTABLISH.value and step.outcome == Outcome.BAD.value:
            return frozenset({str(step.verdict)}) if step.verdict in BLOCKING else None
    if row.origin_run_id is None:
        return None
    kinds = {
        str(r.verdict)
        for r in session.scalars(select(Result).where(Result.run_id == row.origin_run_id))
        if r.verdict in BLOCKING and _matches(r, row.case_pattern)
    }
    return frozenset(kinds) or None


def _matches(result: Result, pattern: str) -> bool:
    return matches(_case_result(result).names, pattern)


def _case_result(result: Result) -> CaseResult:
    kernel = str((result.record or {}).get("kernel", ""))
    label = result.case.label if result.case is not None else ""
    return CaseResult(
        case_names(kernel, label, result.case_id), result.status, result.verdict, result.ratio
    )


def _held_seconds(run: Run) -> float:
    if run.started is None or run.finished is None:
        return 0.0
    start, end = run.started, run.finished
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    if end.tzinfo is None:
        end = end.replace(tzinfo=UTC)
    return max((end - start).total_seconds(), 0.0)


def search_steps(row: Bisection) -> list[Step]:
    """The bisection's stored steps as the search (``bisect.py``) sees them."""
    return [_as_step(row, s) for s in row.steps]


def step_build(row: Bisection) -> tuple[str | None, str]:
    """The build profile option and trigger of the bisection's step runs: what a
    build-ahead must build with to be the entry the step's run then finds."""
    return _step_request(row, row.bad_sha, row.good_sha).run_options.profile, TRIGGER


def _limits(row: Bisection) -> Limits:
    return Limits(row.gpu_seconds, row.budget_s)


def _as_step(row: Bisection, s: BisectionStep) -> Step:
    index = {sha: i for i, sha in enumerate(row.commits)}
    return Step(
        index[s.sha],
        index[s.against_sha],
        Purpose(s.purpose),
        Outcome(s.outcome) if s.outcome else None,
    )


def _conclude(session: Session, row: Bisection, done: Done) -> None:
    """Store the search's end; the culprit's effect comes from its confirmation run."""
    culprits: list[dict[str, object]] = []
    first_case: Result | None = None
    for c in done.culprits:
        sha, parent = row.commits[c], row.commits[c - 1]
        confirm = [s for s in row.steps if s.purpose == Purpose.CONFIRM.value and s.sha == sha][-1]
        run = session.get(Run, confirm.run_id) if confirm.run_id else None
        case = judge_step(session, run, row.case_pattern)[2] if run is not None else None
        if not culprits:
            first_case = case
        culprits.append(
            {
                "sha": sha,
                "parent": parent,
                "ratio": case.ratio if case else None,
                "interval": [case.ratio_ci_low, case.ratio_ci_high] if case else None,
                "verdict": case.verdict if case else confirm.verdict,
                "run_id": confirm.run_id,
                "case_id": case.case_id if case else None,
            }
        )
    row.culprits = culprits
    if done.culprits:
        c = done.culprits[0]
        row.culprit_sha, row.culprit_parent = row.commits[c], row.commits[c - 1]
        row.culprit_ratio = first_case.ratio if first_case else None
        row.culprit_ci_low = first_case.ratio_ci_low if first_case else None
        row.culprit_ci_high = first_case.ratio_ci_high if first_case else None
        row.culprit_verdict = str(culprits[0]["verdict"] or "") or None
    _finish(row, done.status, done.reason)


def _finish(row: Bisection, status: str, reason: str) -> None:
    row.status = status
    row.reason = reason
    row.finished = datetime.now(UTC)


# ---------------------------------------------------------------------------- loop


class BisectThread(threading.Thread):
    """Calls :func:`advance_all` every ``interval_s`` in the API process until stopped."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        app: Celery | None,
        interval_s: float = 5.0,
    ) -> None:
        super().__init__(name="kernelwatch-bisect", daemon=True)
        self.factory, self.settings, self.app = factory, settings, app
        self.interval_s = interval_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                advance_all(self.factory, self.settings, self.app)
            except Exception:  # the loop must survive a database outage
                log.exception("bisect pass failed")
            self._stop_event.wait(self.interval_s)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_event.set()
        self.join(timeout)


__all__: Sequence[str] = [
    "DEFAULT_BUDGET_S",
    "TRIGGER",
    "BisectRequest",
    "BisectThread",
    "advance",
    "advance_all",
    "cancel",
    "first_parent_commits",
    "judge_step",
    "require_main_history",
    "search_steps",
    "start",
    "step_build",
    "summary",
    "wait",
]
