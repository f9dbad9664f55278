"""An unpaired run's would-be regressions, measured once more before the job ends.

design.md: "a run-level ``fail`` requires the blocking case to be confirmed by an
independent re-measure". A paired run has its second stage in fresh side processes. An
unpaired run (a push, a nightly run, a manual run without ``--paired``) compares its
samples with a baseline run measured earlier, and one comparison decided: one slow
process (the fresh-process state of ``docs/measurement.md`` §5, 1.35x in 20-50 % of new
processes on the H200) was a ``fail`` on main.

So, while it still holds the card, the worker asks the analysis which cases would read
a regression that counts (``analysis.would_regress``: nothing stored), runs exactly
those again in a fresh runner process (``--case`` with their ids) and keeps each
re-measure beside its case's record (``record.remeasure``). The analysis then keeps the
regression only where the re-measure compared with the same baseline says so too
(``verdict.confirm``), ``inconclusive`` otherwise. A run whose baseline is still being
measured when the job ends has nothing to compare yet: it is judged later, on its one
comparison, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Result, Run
from kernelwatch.db.store import json_safe
from kernelwatch.jobs.judging.analysis import would_regress
from kernelwatch.kernels.record import ERROR_MAX, ResultRecord, remeasure_entry
from kernelwatch.worker.suite_process import SuiteRequest, run_suite

log = logging.getLogger(__name__)


def cases_to_confirm(factory: sessionmaker[Session], settings: Settings, run_id: int) -> list[str]:
    """The case ids whose one comparison reads a regression that would fail the run."""
    with factory() as session:
        run = session.get(Run, run_id)
        return [] if run is None else would_regress(session, run, settings)


def confirm(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    req: SuiteRequest,
    patiently: Callable[[Callable[[], None]], None],
) -> list[str]:
    """Re-measure the run's would-be regressions in a fresh runner process and store each
    re-measure with its case; returns the case ids it measured again."""
    ids = cases_to_confirm(factory, settings, run_id)
    if not ids:
        return []
    log.info("run %s: measuring %d would-be regressions again", run_id, len(ids))
    # one argument, "--case=...": a case id a record made up cannot pass for an option
    args = _without_skips(req.extra_args) + ["--case=" + ",".join(ids)]
    again = replace(req, workdir=req.workdir.parent / "remeasure", extra_args=args)
    seen: set[str] = set()

    def keep(record: ResultRecord) -> None:
        if record.case_id in ids:
            seen.add(record.case_id)
            entry = remeasure_entry(json_safe(record.to_dict()))
            patiently(lambda: _attach(factory, run_id, record.case_id, entry))

    outcome = run_suite(again, on_record=keep)
    why = outcome.aborted or "no record of it came back"
    missing = {"status": "error", "timing": None, "error": why[:ERROR_MAX]}
    for case_id in ids:
        if case_id not in seen:
            patiently(partial(_attach, factory, run_id, case_id, missing))
    return ids


def _attach(
    factory: sessionmaker[Session], run_id: int, case_id: str, again: dict[str, Any]
) -> None:
    """Keep ``again`` (``record.remeasure_entry``) in the stored record of the run's case
    (a new dict: JSON columns see a change only when they are given a new value)."""
    with factory() as session, session.begin():
        result = session.scalars(
            select(Result).where(Result.run_id == run_id, Result.case_id == case_id)
        ).first()
        if result is not None:
            result.record = {**(result.record or {}), "remeasure": again}


def _without_skips(args: list[str]) -> list[str]:
    """The run's runner arguments less its ``--skip-case`` pairs (a resumed run skips the
    cases it stored; the re-measure asks for some of exactly those)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--skip-case":
            skip = True
            continue
        out.append(arg)
    return out


__all__ = ["cases_to_confirm", "confirm"]
