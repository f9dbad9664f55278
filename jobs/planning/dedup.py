"""Duplicate requests join the run already planned instead of measuring twice.

A push webhook, a PR webhook for the same head and a manual ``kernelwatch run``
often ask for the same measurement within minutes. A request joins an existing
run when everything that decides the numbers is equal: repository, commit, suites
(in any order), device class, the options that change what is measured
(``db/run_options.py:MEASUREMENT``) and the baseline (verdicts are per run, so a PR's
merge-base comparison cannot reuse a push's first-parent comparison).

Only ``queued`` and ``running`` runs are joined by default: a finished run is a
past answer, and asking again is how a user re-measures. A joining request of
higher priority (a PR gate joining a nightly run still queued) asks the planner
to send the run again at that priority; the old message then finds the run
finished and does nothing.

On PostgreSQL a transaction-scoped advisory lock on the request's key makes
look-up-then-insert atomic across planners, so two webhooks arriving together
still make one run. (A partial unique index on a stored key would also hold for
other writers; that needs a column, see docs/scale.md.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from kernelwatch.db.models import Run
from kernelwatch.db.run_options import RunOptions
from kernelwatch.db.store import runs_of
from kernelwatch.jobs.planning.broker import PRIORITY

ACTIVE_STATES = ("queued", "running")
MAX_JOINED = 50

Options = RunOptions | Mapping[str, Any] | None


def measurement_options(options: Options) -> dict[str, Any]:
    return RunOptions.parse(options).measurement()


def request_key(
    repository_id: int,
    sha: str,
    suites: Iterable[str],
    device_class: str,
    options: Options = None,
    baseline_sha: str | None = None,
) -> str:
    """A stable digest of everything that decides what a run measures and compares."""
    blob = json.dumps(
        [
            repository_id,
            sha,
            sorted(suites),
            device_class,
            measurement_options(options),
            baseline_sha,
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _lock(session: Session, key: str) -> None:
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        as_int = int.from_bytes(bytes.fromhex(key[:16]), "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": as_int})


def find_joinable(
    session: Session,
    repository_id: int,
    sha: str,
    suites: Iterable[str],
    device_class: str,
    options: Options = None,
    baseline_sha: str | None = None,
    *,
    states: Iterable[str] = ACTIVE_STATES,
) -> Run | None:
    """The newest run this request can join, or None (then plan a new one in the same
    transaction: on PostgreSQL the key stays locked until it commits)."""
    suites = sorted(suites)
    _lock(session, request_key(repository_id, sha, suites, device_class, options, baseline_sha))
    wanted = measurement_options(options)
    q = runs_of(repository_id, sha, device_class).where(Run.status.in_(list(states)))
    for run in session.scalars(q):
        if (
            sorted(run.suites) == suites
            and measurement_options(run.options) == wanted
            and run.baseline_sha == baseline_sha
        ):
            return run
    return None


def join(run: Run, trigger: str, requester: Mapping[str, Any] | None = None) -> bool:
    """Note that a request with ``trigger`` joined ``run``.

    Returns True when the run is still queued and the new request outranks every
    earlier one: the planner should enqueue it again at the new priority.
    """
    joined = list(run.options.joined)
    before = max([PRIORITY.get(run.trigger, 5)] + [PRIORITY.get(j["trigger"], 5) for j in joined])
    joined.append({"trigger": trigger, **(requester or {})})
    run.options = run.options.with_(joined=joined[-MAX_JOINED:])
    return run.status == "queued" and PRIORITY.get(trigger, 5) > before
