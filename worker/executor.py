"""Executing one run: the body of the Celery task, free of Celery.

Steps, each recorded on the run: mirror → worktree → environment → suite runner →
results → analysis. What to measure and how to install it was decided when the run
was planned (``RunOptions.config``, ``jobs/planning/resolve.py``): this module executes
that snapshot and never reads ``.kernelwatch.toml`` (a run planned before snapshots
existed is resolved once, by the same function, and the snapshot stored). Outcomes:

- ``succeeded``: the suite ran (individual cases may be fail/error: those are results);
- ``failed``: the library could not be installed or built (log in ``build_log``);
- ``error``: the job could not be done (bad source, missing commit, bad config).

Infrastructure trouble (database, broker) propagates as an exception so the task
can retry; everything about the code under test ends as a recorded outcome.

Delivery is at-least-once, so this is written to be run twice: a run another live
worker holds raises ``RunLeased`` (``worker/heartbeat.py``); a run taken over from
a dead worker skips the cases already stored; result writes wait out a database
outage of up to ``db_patience_s`` (the measurements are kept, not repeated) and a
result stored concurrently by another delivery is not an error; a run cancelled
meanwhile stays cancelled.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.build_log import environment_line, release_line
from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Run
from kernelwatch.db.run_options import ConfigNote, RunOptions
from kernelwatch.db.store import public_source, store_record, stored_case_ids
from kernelwatch.jobs.errors import (
    CommitNotFound,
    ConfigError,
    InstallError,
    SourceError,
)
from kernelwatch.jobs.judging.analysis import analyze_ready, run_thresholds
from kernelwatch.jobs.library import libspec, repoconfig, served
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.planning.resolve import Configs, install_of, resolve
from kernelwatch.jobs.retry import retrying
from kernelwatch.kernels.record import ResultRecord
from kernelwatch.worker import cardlock, recipes, remeasure, submodules, venvs, workdirs
from kernelwatch.worker.fleetconfig import FleetConfig
from kernelwatch.worker.heartbeat import RunLeased, lease_holder
from kernelwatch.worker.sandbox import clean_env, recipe_overlay
from kernelwatch.worker.suite_process import SuiteOutcome, SuiteRequest, run_suite


def worker_name() -> str:
    return f"{socket.gethostname()}"


def execute(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    worker: str | None = None,
    fleet: FleetConfig | None = None,
) -> str:
    """Run ``run_id`` to a final state and return that state."""
    fleet = fleet or FleetConfig.from_settings(settings)
    with factory() as session, session.begin():
        run = session.get(Run, run_id, with_for_update=True)
        if run is None:
            return "missing"
        if run.status in FINAL_STATES:
            return run.status  # a re-delivered message for a finished run
        holder = lease_holder(session, run, worker or worker_name(), fleet.lease_stale_s)
        if holder is not None:
            raise RunLeased(f"run {run_id} is being measured by {holder}")
        run.status = "running"
        run.started = datetime.now(UTC)
        run.worker = worker or worker_name()
        run.attempts += 1
        source = run.repository.source
        sha = run.commit.sha if run.commit else None
        suites = list(run.suites)
        run_options = run.options  # frozen: safe to keep after the session
        version_spec = run.version_spec
        baseline_sha = run.baseline_sha
        trigger = run.trigger
    workdir = settings.data_dir / "work" / f"run-{run_id}"
    status = ""  # how this measurement ended: what KW_KEEP_WORK keeps its work directory by
    mirror: Mirror | None = None
    checkout = workdir / "src"
    selected: tuple[str, ...] = ()  # [suites] kernels, when the file's selection applies
    try:
        if version_spec:
            req = _prepare_version(
                factory, settings, run_id, version_spec, suites, run_options, workdir
            )
        else:
            if sha is None:
                raise CommitNotFound("run has no commit to measure")
            mirror = Mirror(settings.data_dir / "mirrors", source)
            if not mirror.has_commit(sha):  # fetch only when the mirror lacks the commit
                mirror.sync()
            if not mirror.has_commit(sha):
                raise CommitNotFound(f"commit {sha} not found in {source}")
            note = run_options.config
            if note is None or not note.resolved:
                run_options, suites = _resolve_late(
                    factory, settings, run_id, mirror, sha, run_options, suites, baseline_sha
                )
                note = run_options.config
            assert note is not None
            if note.served:
                _append_log(
                    factory,
                    run_id,
                    f"configuration: {note.served} ({served.VARIABLE}, the service's) in place "
                    f"of the repository's {repoconfig.FILE}\n",
                )
            if note.loosened:
                _append_log(
                    factory,
                    run_id,
                    "configuration: the base branch's rules judge this pull request; ignored "
                    "from its own file: " + "; ".join(note.loosened) + "\n",
                )
            env, recipe = _commit_env(
                factory, settings, run_id, mirror, sha, install_of(note.install), run_options,
                trigger,
            )  # fmt: skip
            library = {
                "name": note.library or mirror.source.rsplit("/", 1)[-1],
                "commit": sha,
                "source": source,
            }
            req = SuiteRequest(
                python=env.python,
                pythonpath=env.pythonpath,
                env=clean_env(env.run_env),  # the recipe's, checked (worker/sandbox.py)
                workdir=workdir / "suite",
                suites=suites,
                # ``run --impl`` (a repro command names the module it measured) wins
                impl=run_options.impl or note.module,
                backend=note.library or note.module,
                library=library,
                case_timeout_s=_case_timeout(run_options, settings),
                suite_timeout_s=settings.suite_timeout_s,
                extra_args=_runner_args(run_options, note),
            )
            # a run that picks its own kernels is not judged by the file's pick; one that
            # narrows by its own --case may leave a file's kernel without a case
            narrowed = any(a == "--case" or a.startswith("--case=") for a in run_options.bench_args)
            selected = () if narrowed else tuple(note.kernels or ())
            if run_options.paired and baseline_sha:
                req = _paired_request(
                    factory, settings, run_id, mirror, baseline_sha, env, req, run_options, trigger
                )
            else:  # the commit's own JIT builds (a paired run's sides share one box: none)
                req.jit_cache = venvs.jit_home(settings.data_dir / "venvs", env.key)
        already = _stored(factory, run_id)
        req.extra_args += [a for cid in sorted(already) for a in ("--skip-case", cid)]
        patience = fleet.db_patience_s
        # a k-card worker and the per-GPU workers of its cards measure one at a time
        with cardlock.hold(cardlock.visible_uuids(), settings.data_dir / "gpu-locks"):
            outcome = run_suite(
                req,
                on_record=lambda rec: _patiently(patience, lambda: _store(factory, run_id, rec)),
            )
            if not outcome.aborted and not run_options.paired:
                # a would-be regression of an unpaired run, measured again before the
                # card is let go (design.md: a fail needs an independent re-measure)
                remeasure.confirm(
                    factory, settings, run_id, req, lambda write: _patiently(patience, write)
                )
        # a resumed run's earlier records are not in this outcome: judge the selection fresh only
        why = outcome.aborted or ("" if already else _unmatched(selected, req.suites, outcome))
        return (
            status := _patiently(
                patience,
                lambda: _finish(
                    factory,
                    settings,
                    run_id,
                    "succeeded" if not why else "error",
                    why,
                    runner_log=outcome.log,
                ),
            )
        )
    except InstallError as exc:
        return (status := _finish(factory, settings, run_id, "failed", str(exc), build_log=exc.log))
    except (SourceError, CommitNotFound, ConfigError) as exc:
        return (status := _finish(factory, settings, run_id, "error", str(exc)))
    finally:
        if mirror is not None and checkout.exists():
            mirror.remove_worktree(checkout)
        workdirs.release(workdir, status, settings.keep_work)  # issue 24: nothing left behind


def _commit_env(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    mirror: Mirror,
    sha: str,
    install: repoconfig.InstallRecipe,
    options: RunOptions,
    trigger: str,
) -> tuple[venvs.Env, repoconfig.InstallRecipe]:
    """Build (or reuse) the environment of ``sha`` for a run (:func:`commit_env`), and
    say in the run's build log which it was."""
    env, recipe = commit_env(settings, mirror, sha, install, options.profile, trigger)
    seconds = None if env.cached else env.seconds
    line = environment_line(sha, seconds, recipe.profile, env.path)
    _append_log(factory, run_id, (env.log or "") + line)
    return env, recipe


def commit_env(
    settings: Settings,
    mirror: Mirror,
    sha: str,
    install: repoconfig.InstallRecipe,
    profile: str | None,
    trigger: str,
) -> tuple[venvs.Env, repoconfig.InstallRecipe]:
    """Build (or reuse) the environment of ``sha`` with its ``[install]`` recipe (``install``,
    from that commit's ``.kernelwatch.toml``, read once by the caller).

    The build profile is ``profile`` (a run's option), else the one the recipe maps
    the trigger to (``profile_for``: e.g. a trimmed FA3 build for PRs, the full one
    nightly). Environments are cached per (commit, recipe, toolchain) with an LRU
    size limit and file locks (``worker/venvs.py``); compiles go through ccache;
    submodules come from the server's mirrors (``KW_SUBMODULE_MIRRORS``). A run and a
    bisection's build-ahead (``worker/prebuild.py``) both build here, so the second
    of them to ask for an entry finds it.
    """
    recipe = recipes.recipe_set(install).select(profile, trigger)
    cache = venvs.EnvCache(settings.data_dir / "venvs", venvs.probe_toolchain())
    try:
        env = cache.commit_env(
            libspec.CommitSpec(mirror.source, sha),
            recipe,
            lambda dest: mirror.worktree(sha, dest),
            mirrors=submodules.parse_mirrors(settings.submodule_mirrors),
            timeout=settings.install_timeout_s,
            offline=settings.offline,
        )
    except InstallError as exc:
        raise InstallError(f"install failed ({recipe.profile} profile): {exc}", exc.log) from exc
    return env, recipe


# Runner options the paired coordinator understands too (others concern one side only).
# Re-measures and the confirmation set the case up again in the same side processes
# (bench-paired's ``--fresh-processes`` starts new ones); ``--seed`` repeats a run's
# inputs; ``--gpu-budget`` bounds the whole run (``[gate] gpu_budget`` when not given).
_PAIRED_PASSTHROUGH = (
    "--size", "--kernel", "--case", "--budget", "--pairs", "--retries", "--seed",
    "--gpu-budget",
)  # fmt: skip


def paired_passthrough(runner_args: Sequence[object], note: ConfigNote | None) -> list[str]:
    """The run's runner options the paired coordinator takes too, and the file's GPU budget.

    ``[gate] gpu_budget`` (``ConfigNote.gpu_budget_s``) applies unless the run gave its
    own ``--gpu-budget`` (``kernelwatch run --gpu-budget``).
    """
    bench = [str(a) for a in runner_args]
    out = [
        x
        for i in range(0, len(bench) - 1)
        if bench[i] in _PAIRED_PASSTHROUGH
        for x in (bench[i], bench[i + 1])
    ]
    if note is not None and note.gpu_budget_s and "--gpu-budget" not in out:
        out += ["--gpu-budget", f"{note.gpu_budget_s:g}"]
    return out


def _paired_request(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    mirror: Mirror,
    baseline_sha: str,
    candidate: venvs.Env,
    req: SuiteRequest,
    options: RunOptions,
    trigger: str,
) -> SuiteRequest:
    """The run as a paired comparison: the baseline built too, both measured interleaved.

    The baseline is built with *its own* commit's recipe (``.kernelwatch.toml`` at
    the baseline, read when the run was planned: ``ConfigNote.baseline_install``),
    because that is how that commit installs; the suites, module and thresholds are
    the run's.
    """
    if not mirror.has_commit(baseline_sha):
        mirror.sync()
    if not mirror.has_commit(baseline_sha):
        raise CommitNotFound(f"baseline {baseline_sha} not found in {public_source(mirror.source)}")
    _append_log(factory, run_id, f"paired mode: building baseline {baseline_sha[:12]}\n")
    note = options.config
    install = install_of(note.baseline_install if note is not None else None)
    base, _ = _commit_env(
        factory, settings, run_id, mirror, baseline_sha, install, options, trigger
    )
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        # the most sensitive threshold of any case: analysis re-judges each case with its own
        threshold = run_thresholds(run, settings).smallest()
        confidence = run.options.confidence
        confidence = settings.confidence if confidence is None else confidence
    passthrough = paired_passthrough(req.extra_args, note)
    req.module = "kernelwatch.kernels.paired_suite"
    req.pythonpath = ()  # the coordinator imports no library; each side gets its own path
    # ... and its own recipe's variables: a runtime knob a recipe sets (a kernel's tile,
    # a feature flag) belongs to one side, or two recipes that differ in it compare A/A
    req.env = clean_env()
    req.readonly = (str(base.path), str(candidate.path))  # both sides' envs, read-only
    # no ``jit_cache``: the two sides share one sandbox, so a JIT cache kept for either
    # commit would let the candidate's code write builds the baseline's later runs load.
    # What the baseline's own runs kept is copied in instead, and its sides run in the
    # home it is copied to (the paths it was built at): its ops load, not compile
    req.jit_seed = venvs.kept_jit_builds(settings.data_dir / "venvs", base.key)
    seeded = ["--baseline-own-home"] if req.jit_seed is not None else []
    if seeded:
        _append_log(factory, run_id, f"paired mode: the baseline's kept JIT builds "
                    f"({base.key[:12]}) are copied into the run, not bound\n")  # fmt: skip
    req.extra_args = [
        *seeded,
        "--baseline-path",
        os.pathsep.join(base.pythonpath),
        "--candidate-path",
        os.pathsep.join(candidate.pythonpath),
        "--baseline-python",
        base.python,
        "--candidate-python",
        candidate.python,
        "--min-effect",
        str(threshold),
        "--confidence",
        str(confidence),
        "--case-timeout",
        str(req.case_timeout_s),
        "--baseline-library",
        json.dumps({**req.library, "commit": baseline_sha}),
        "--baseline-env",
        json.dumps(recipe_overlay(base.run_env)),
        "--candidate-env",
        json.dumps(recipe_overlay(candidate.run_env)),
        *passthrough,
    ]
    # The coordinator bounds each set-up and block by the case timeout and turns a hang
    # into that case's error with the sides restarted; a healthy paired case makes many
    # such asks (both stages, re-measures, fresh sides importing torch), so the worker's
    # own per-case timer is only the backstop for a coordinator that stops answering.
    req.case_timeout_s *= PAIRED_CASE_ASKS
    return req


def _prepare_version(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    version_spec: str,
    suites: list[str],
    options: RunOptions,
    workdir: Path,
) -> SuiteRequest:
    """A released version: ``pip install --no-deps --target`` from an index or a
    wheelhouse, cached per (spec, toolchain) with an LRU size limit (worker/venvs.py)."""
    spec = libspec.parse_version_spec(version_spec)
    index_url, find_links = libspec.parse_index(options.index_url, options.find_links)
    cache = venvs.EnvCache(settings.data_dir / "venvs", venvs.probe_toolchain())
    env = cache.version_env(
        spec, index_url=index_url, find_links=find_links, timeout=settings.install_timeout_s
    )
    seconds = None if env.cached else env.seconds
    _append_log(factory, run_id, (env.log or "") + release_line(spec.key, seconds, env.path))
    impl = options.impl or spec.name.replace("-", "_")
    return SuiteRequest(
        python=env.python,
        pythonpath=env.pythonpath,
        env=clean_env(),
        workdir=workdir / "suite",
        suites=suites,
        impl=impl,
        backend=spec.name,
        library={"name": spec.name, "version": spec.version},
        case_timeout_s=_case_timeout(options, settings),
        suite_timeout_s=settings.suite_timeout_s,
        extra_args=list(options.bench_args),
        jit_cache=cache.jit_home(env.key),
    )


# The worker's per-case timer in paired mode, in per-ask timeouts (see _paired_request).
PAIRED_CASE_ASKS = 4


def _case_timeout(options: RunOptions, settings: Settings) -> float:
    return options.case_timeout_s if options.case_timeout_s is not None else settings.case_timeout_s


def _runner_args(options: RunOptions, note: ConfigNote) -> list[str]:
    """The run's own runner arguments, plus ``[suites] kernels`` as ``--kernel`` selectors
    (``ConfigNote.kernels``: None when the run picks its own kernels; a library
    with only some of a suite's kernels leaves the others out instead of getting an
    ``error`` for each on every commit)."""
    args = list(options.bench_args)
    if note.kernels and "--kernel" not in args:
        args += [a for k in note.kernels for a in ("--kernel", k)]
    return args


def _unmatched(selected: Sequence[str], suites: Sequence[str], outcome: SuiteOutcome) -> str:
    """Why the run is an error when ``[suites] kernels`` names a kernel no case of the
    suites has (a typo would otherwise measure nothing for it, silently)."""
    seen = {r.kernel for r in outcome.records}
    missing = [k for k in selected if k not in seen]
    if not missing:
        return ""
    names = ", ".join(f'"{k}"' for k in missing)
    return (
        f"{repoconfig.FILE}: suites.kernels {names} matched no case of the suites "
        f"{', '.join(suites)} (the other kernels' cases were measured)"
    )


def _stored(factory: sessionmaker[Session], run_id: int) -> set[str]:
    with factory() as session:
        return stored_case_ids(session, run_id)


T = TypeVar("T")


def _patiently(patience_s: float, write: Callable[[], T]) -> T:
    """``write()``, retried with backoff while the database is unreachable, up to
    ``patience_s``; then the error propagates and the task's own retry takes over.

    Backoff 1 s doubling to 15 s, and no wait that would end past the patience
    (the one retry policy, ``jobs/retry.py``)."""
    return retrying(on=OperationalError, within_s=patience_s, first_s=1.0, max_s=15.0)(write)


def _store(factory: sessionmaker[Session], run_id: int, record: ResultRecord) -> None:
    # Another delivery stored this result, or another run this new case, in between
    # our check and our insert: look again in a fresh transaction, three tries in all.
    retrying(on=IntegrityError, attempts=3, first_s=0.0)(_insert, factory, run_id, record)


def _insert(factory: sessionmaker[Session], run_id: int, record: ResultRecord) -> None:
    with factory() as session, session.begin():
        run = session.get(Run, run_id)
        assert run is not None
        store_record(session, run, record)


def _resolve_late(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    mirror: Mirror,
    sha: str,
    options: RunOptions,
    suites: list[str],
    baseline_sha: str | None,
) -> tuple[RunOptions, list[str]]:
    """The snapshot of a run planned without one (before snapshots existed, or written by
    hand), made once by the planner's own function and stored; then executed as any."""
    resolved = resolve(
        Configs(mirror, served.table(settings.repo_configs)),
        sha,
        options,
        suites,
        baseline=baseline_sha,
        default_threshold=settings.regression_threshold,
        default_confidence=settings.confidence,
    )
    with factory() as session, session.begin():
        run = session.get(Run, run_id)
        assert run is not None
        run.options = resolved.options
        run.suites = resolved.suites
    _append_log(factory, run_id, "configuration: resolved by the worker (planned without)\n")
    return resolved.options, resolved.suites


def _append_log(factory: sessionmaker[Session], run_id: int, text: str) -> None:
    if not text:
        return
    with factory() as session, session.begin():
        run = session.get(Run, run_id)
        assert run is not None
        run.build_log = ((run.build_log or "") + text)[-200_000:]


def _finish(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    status: str,
    error: str,
    build_log: str = "",
    runner_log: str = "",
) -> str:
    with factory() as session, session.begin():
        run = session.get(Run, run_id)
        assert run is not None
        if run.status == "cancelled":
            return run.status  # cancelled while we measured: the results stay, the state too
        run.status = status
        run.error = error
        run.finished = datetime.now(UTC)
        if build_log:
            run.build_log = ((run.build_log or "") + build_log)[-200_000:]
        if runner_log:
            run.options = run.options.with_(runner_log_tail=runner_log[-20_000:])
        analyze_ready(session, run, settings)
    return status


def abandon(factory: sessionmaker[Session], settings: Settings, run_id: int, reason: str) -> str:
    """End a run that cannot finish (e.g. past the task's time limit) as ``error``."""
    return _patiently(30.0, lambda: _finish(factory, settings, run_id, "error", reason))
