"""``Run.options``: what a run was asked to do and what it noted on the way, typed.

The column is JSON (``runs.options``), but nothing reads or writes it as a bag of
keys: the planner, the webhook handler, the CLI and the importer build a
``RunOptions``; the worker and the analysis read its attributes. The column type
below turns it into JSON on the way into the database and back into a
``RunOptions`` on the way out, and ``Run`` validates whatever is assigned to it, so
a misspelt key fails where it is written (``extra="forbid"``) instead of being
ignored where it is read.

Values are frozen: change one with ``with_(...)``, which validates again and gives
a new value for the ORM to notice. Only keys that differ from their default are
stored, so the stored JSON is what it was before this type existed.

This module does not decide anything about the options (the executor, dedup and
analysis do); it only says what they are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import JSON, Dialect
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator, TypeEngine

log = logging.getLogger(__name__)

# The options that change what a run measures or how it is judged: two requests that
# agree on these (and on commit, suites, device class, baseline) are one measurement
# (jobs/planning/dedup.py). Thresholds are among them: a pull request judged by its base
# branch's rules must never join a run judged by another file's.
MEASUREMENT = (
    "bench_args",
    "case_timeout_s",
    "suites_explicit",
    "paired",
    "regression_threshold",
    "confidence",
    "thresholds",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JudgedWith(_Frozen):
    """The judging worker's settings a run's verdict came from (``analysis.analyze``):
    its ``KW_INCONCLUSIVE_POLICY`` and ``KW_CPU_TIMING_GATES``. A commit's composed
    answer reads them from here, not from the reading process's own environment: a
    gate whose process lacked ``KW_CPU_TIMING_GATES`` once said PASS for a run that
    ``show`` and ``run --wait`` called neutral."""

    inconclusive_policy: str
    cpu_timings_gate: bool


class GithubOrigin(_Frozen):
    """The webhook delivery a run was planned for (``jobs/github/events.py``)."""

    repository: str  # owner/name
    event: str  # the trigger: push | pull_request | ...
    pr: int | None = None


class ConfigNote(_Frozen):
    """The run's resolved configuration: what it measures and how it installs, decided once
    by the planner (``jobs/planning/resolve.py``) from the ``.kernelwatch.toml`` of its
    commit (and, for a pull request, of its baseline), and executed as it is by the
    worker, which never reads the file again.

    module, library: ``[library]`` (the module exposing the kernels, the series name).
    suites: what is measured (``Run.suites`` is the same list).
    kernels: ``[suites] kernels`` as ``--kernel`` selectors (None: every kernel), unless
      the run picked its own kernels or cases.
    recipe: the ``[install]`` recipe kind; install: the whole ``[install]`` table of the
      commit; baseline_install: the baseline commit's, for a paired run that builds both.
    served: the service-side file (``KW_REPO_CONFIGS``) that stood in for the commit's.
    loosened: what a pull request's own file tried to loosen and was ignored (its
      thresholds, suites and kernels come from the base branch's file; it may only
      tighten them); the PR comment says so.
    resolved: False for a note of a run planned before the planner resolved (its
      worker resolves it once, from the same function).
    gpu_budget_s: ``[gate] gpu_budget`` (a pull request: its base branch's), what the
      worker gives a paired run as ``--gpu-budget`` unless the run set its own.
    """

    module: str | None = None
    library: str | None = None
    suites: list[str] = Field(default_factory=list)
    kernels: list[str] | None = None  # [suites] kernels: None is every kernel of the suites
    recipe: str | None = None
    install: dict[str, Any] | None = None
    baseline_install: dict[str, Any] | None = None
    served: str | None = None
    loosened: list[str] = Field(default_factory=list)
    resolved: bool = False
    gpu_budget_s: float | None = None  # [gate] gpu_budget: a paired run's GPU seconds


# The name the planner uses: the note is the snapshot.
ResolvedConfig = ConfigNote


class RunOptions(_Frozen):
    """Every option a run carries, with its default; only non-defaults are stored.

    What is measured (``MEASUREMENT``; dedup compares these):
      suites_explicit: run the request's suites, not the ones ``.kernelwatch.toml`` names.
      bench_args: extra arguments for the suite runner (``--kernel softmax --budget 0.1``).
      case_timeout_s: per-case limit in seconds; None: the service's ``case_timeout_s``.
      paired: baseline and candidate built and measured interleaved in this one run.
    How the library is installed:
      impl: module exposing the kernels (released versions; default from the name).
      index_url, find_links: where released versions come from.
      profile: build profile of the recipe; None: the one the recipe maps the trigger to.
    How it is judged (filled by the planner from ``.kernelwatch.toml`` when unset):
      regression_threshold: minimum relative effect; None: the service default.
      confidence: confidence of the intervals; None: the service default.
      thresholds: per-suite and per-case thresholds (``repoconfig.Thresholds.to_options``).
      baseline_run_id: compare with this run instead of the baseline commit's latest.
    Where it came from:
      pr: pull request number (``jobs/planning/cancel.py`` finds a PR's runs by it).
      github: the repository and event of the webhook delivery.
      requested: the revisions of a request that could not be planned.
      joined: requests that joined this run instead of planning another (``dedup.join``).
      imported_from, records: the file and record count of ``kernelwatch import``.
      note: what the import said of this file (``--message``, a manifest row's ``note``);
        the run's subject in place of its commit's message (:func:`run_subject`).
      gate: a manual run asked (``run --gate``) to rank above other manual runs in its
        commit's composed answer (push and PR runs still rank first:
        ``jobs/judging/compose.py``).
      bisection_id: the run is a step of this bisection (``db/bisect.py``); such a run
        never takes part in its commit's gate answer (``runs_of_commit``).
      baseline_for: the run measures its commit again because this run's baseline had
        measurements of another environment class only (``baseline_remeasure.py``).
      baseline_remeasure: the run planned to measure this run's baseline commit again;
        a run asks once.
      judged_late: the run's judgement waited for its baseline after its job ended, so
        no worker re-measure confirmed its would-be regressions (``confirmation.py``).
      confirms: the run measures again the would-be regressions of this run, judged
        after its job ended (``confirmation.py``).
      confirmation: the run planned to confirm this run's would-be regressions; a run
        asks once.
    What was decided at planning:
      config: the resolved configuration (``ConfigNote``: suites, kernels, module, the
        install recipe of each side, what a pull request's file could not loosen).
    What happened:
      requeued_at, requeues: when and how often reconcile sent the run again (ISO time).
      runner_log_tail: the end of the suite runner's log.
      judged_with: the judging worker's settings its verdict came from (``JudgedWith``).
    """

    suites_explicit: bool = False
    bench_args: list[str] = Field(default_factory=list)
    case_timeout_s: float | None = None
    paired: bool = False

    impl: str | None = None
    index_url: str | None = None
    find_links: str | None = None
    profile: str | None = None

    regression_threshold: float | None = None
    confidence: float | None = None
    thresholds: dict[str, Any] | None = None
    baseline_run_id: int | None = None

    pr: int | None = None
    github: GithubOrigin | None = None
    requested: list[str | None] | None = None
    joined: list[dict[str, Any]] = Field(default_factory=list)
    imported_from: str | None = None
    records: int | None = None
    note: str | None = None
    gate: bool = False
    bisection_id: int | None = None
    baseline_for: int | None = None
    baseline_remeasure: int | None = None
    judged_late: bool = False
    confirms: int | None = None
    confirmation: int | None = None

    config: ConfigNote | None = None
    requeued_at: str | None = None
    requeues: int = 0
    runner_log_tail: str = ""
    judged_with: JudgedWith | None = None

    @classmethod
    def parse(cls, value: RunOptions | Mapping[str, Any] | None) -> RunOptions:
        """``value`` as options; an unknown key or a wrong type raises ``ValidationError``."""
        if isinstance(value, RunOptions):
            return value
        return cls.model_validate(dict(value or {}))

    @classmethod
    def from_stored(cls, value: RunOptions | Mapping[str, Any] | None) -> RunOptions:
        """Options read back from the database (a query of ``Run.options`` already
        gives a ``RunOptions``; raw JSON from elsewhere is parsed here).

        A key this code no longer knows (a row older than a removal) is dropped and
        logged, not fatal: one old row must not make every page that lists runs fail.
        """
        if isinstance(value, RunOptions):
            return value
        data = dict(value or {})
        unknown = sorted(set(data) - set(cls.model_fields))
        if unknown:
            log.warning("run options: ignoring stored keys this version does not know: %s", unknown)
            data = {k: v for k, v in data.items() if k not in unknown}
        return cls.model_validate(data)

    def to_json(self) -> dict[str, Any]:
        """The stored form: JSON values, keys at their default left out."""
        return self.model_dump(mode="json", exclude_defaults=True)

    def with_(self, **changes: Any) -> RunOptions:
        """A copy with ``changes``, validated like a new value."""
        return RunOptions.model_validate({**self.to_json(), **changes})

    @property
    def follow_up(self) -> bool:
        """A run the judgement asked for (a baseline measured again, or a confirmation):
        like a bisection step, it never gives its commit's answer (design.md)."""
        return self.baseline_for is not None or self.confirms is not None

    def measurement(self) -> dict[str, Any]:
        """The options that decide what is measured, as stored (for dedup's key)."""
        return {k: v for k, v in self.to_json().items() if k in MEASUREMENT}


class RunOptionsType(TypeDecorator[RunOptions]):
    """``RunOptions`` in a JSON column: JSONB on PostgreSQL, JSON text elsewhere."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(
        self, value: RunOptions | Mapping[str, Any] | None, dialect: Dialect
    ) -> dict[str, Any]:
        return RunOptions.parse(value).to_json()

    def process_result_value(self, value: Any, dialect: Dialect) -> RunOptions:
        return RunOptions.from_stored(value)


def run_subject(options: RunOptions, commit_message: str | None) -> str:
    """What a run is about: its import's note, else its commit's message.

    A commit's message is written once, by the first run that stores the commit. Two
    imported files of one release (``version:flashinfer-python==0.6.0``: 7 cases on
    2026-12-04, the whole suite on 2026-12-05) would both have read the first file's
    note."""
    return options.note or commit_message or ""


__all__ = [
    "MEASUREMENT",
    "ConfigNote",
    "GithubOrigin",
    "ResolvedConfig",
    "RunOptions",
    "RunOptionsType",
    "run_subject",
]
