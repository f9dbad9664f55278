"""Executing one run: the body of the Celery task, free of Celery.

Steps, each recorded on the run: mirror → worktree → ``.kernelwatch.toml`` →
environment → suite runner → results → analysis. Outcomes:

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
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Run
from kernelwatch.db.store import store_record, stored_case_ids
from kernelwatch.jobs.errors import (
    CommitNotFound,
    ConfigError,
    InstallError,
    SourceError,
)
from kernelwatch.jobs.judging.analysis import analyze_ready, run_thresholds
from kernelwatch.jobs.library import libspec, repoconfig
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.worker import recipes, submodules, venvs
from kernelwatch.worker.fleetconfig import FleetConfig
from kernelwatch.worker.heartbeat import RunLeased, lease_holder
from kernelwatch.worker.sandbox import clean_env
from kernelwatch.worker.suite_process import SuiteRequest, run_suite


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
        run_options = dict(run.options)
        version_spec = run.version_spec
        baseline_sha = run.baseline_sha
        trigger = run.trigger
    workdir = settings.data_dir / "work" / f"run-{run_id}"
    mirror: Mirror | None = None
    checkout = workdir / "src"
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
            config = repoconfig.parse(mirror.read_file(sha, ".kernelwatch.toml"))
            _note_config(factory, run_id, config)
            env, recipe = _commit_env(factory, settings, run_id, mirror, sha, run_options, trigger)
            library = {
                "name": config.library_name or mirror.source.rsplit("/", 1)[-1],
                "commit": sha,
                "source": source,
            }
            req = SuiteRequest(
                python=env.python,
                pythonpath=env.pythonpath,
                env=clean_env(recipe.env),
                workdir=workdir / "suite",
                suites=suites if run_options.get("suites_explicit") else list(config.suites),
                impl=config.module,
                backend=config.library_name or config.module,
                library=library,
                case_timeout_s=float(run_options.get("case_timeout_s", settings.case_timeout_s)),
                suite_timeout_s=settings.suite_timeout_s,
                extra_args=[str(a) for a in run_options.get("bench_args", [])],
            )
            if run_options.get("paired") and baseline_sha:
                req = _paired_request(
                    factory, settings, run_id, mirror, baseline_sha, env, req, run_options, trigger
                )
        already = _stored(factory, run_id)
        req.extra_args += [a for cid in sorted(already) for a in ("--skip-case", cid)]
        patience = fleet.db_patience_s
        outcome = run_suite(
            req, on_record=lambda rec: _patiently(patience, lambda: _store(factory, run_id, rec))
        )
        return _patiently(
            patience,
            lambda: _finish(
                factory,
                settings,
                run_id,
                "succeeded" if not outcome.aborted else "error",
                outcome.aborted,
                runner_log=outcome.log,
            ),
        )
    except InstallError as exc:
        return _finish(factory, settings, run_id, "failed", str(exc), build_log=exc.log)
    except (SourceError, CommitNotFound, ConfigError) as exc:
        return _finish(factory, settings, run_id, "error", str(exc))
    finally:
        if mirror is not None and checkout.exists():
            mirror.remove_worktree(checkout)


def _commit_env(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    mirror: Mirror,
    sha: str,
    options: dict[str, Any],
    trigger: str,
) -> tuple[venvs.Env, recipes.BuildRecipe]:
    """Build (or reuse) the environment of ``sha`` with its own ``.kernelwatch.toml`` recipe.

    The build profile is the run's ``profile`` option, else the one the recipe maps
    the trigger to (``profile_for``: e.g. a trimmed FA3 build for PRs, the full one
    nightly). Environments are cached per (commit, recipe, toolchain) with an LRU
    size limit and file locks (``worker/venvs.py``); compiles go through ccache;
    submodules come from the server's mirrors (``KW_SUBMODULE_MIRRORS``).
    """
    recipe = recipes.parse(mirror.read_file(sha, ".kernelwatch.toml")).select(
        options.get("profile"), trigger
    )
    cache = venvs.EnvCache(settings.data_dir / "venvs", venvs.probe_toolchain())
    try:
        env = cache.commit_env(
            libspec.CommitSpec(mirror.source, sha),
            recipe,
            lambda dest: mirror.worktree(sha, dest),
            mirrors=submodules.parse_mirrors(settings.submodule_mirrors),
            timeout=settings.install_timeout_s,
        )
    except InstallError as exc:
        raise InstallError(f"install failed ({recipe.profile} profile): {exc}", exc.log) from exc
    what = "cached environment" if env.cached else f"built in {env.seconds:.0f} s"
    _append_log(
        factory,
        run_id,
        (env.log or "") + f"{sha[:12]}: {what} ({recipe.profile} profile) at {env.path}\n",
    )
    return env, recipe


# Runner options the paired coordinator understands too (others concern one side only).
_PAIRED_PASSTHROUGH = ("--size", "--kernel", "--budget", "--pairs")


def _paired_request(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    mirror: Mirror,
    baseline_sha: str,
    candidate: venvs.Env,
    req: SuiteRequest,
    options: dict[str, Any],
    trigger: str,
) -> SuiteRequest:
    """The run as a paired comparison: the baseline built too, both measured interleaved.

    The baseline is built with *its own* commit's recipe (``.kernelwatch.toml`` at
    the baseline), because that is how that commit installs; the suites, module
    and thresholds are the candidate's.
    """
    if not mirror.has_commit(baseline_sha):
        mirror.sync()
    if not mirror.has_commit(baseline_sha):
        raise CommitNotFound(f"baseline {baseline_sha} not found in {mirror.source}")
    _append_log(factory, run_id, f"paired mode: building baseline {baseline_sha[:12]}\n")
    base, _ = _commit_env(factory, settings, run_id, mirror, baseline_sha, options, trigger)
    with factory() as session:
        run = session.get(Run, run_id)
        assert run is not None
        # the most sensitive threshold of any case: analysis re-judges each case with its own
        threshold = run_thresholds(run, settings).smallest()
        confidence = float(run.options.get("confidence", settings.confidence))
    bench = [str(a) for a in req.extra_args]
    passthrough = [
        x
        for i in range(0, len(bench) - 1)
        if bench[i] in _PAIRED_PASSTHROUGH
        for x in (bench[i], bench[i + 1])
    ]
    req.module = "kernelwatch.kernels.paired_suite"
    req.pythonpath = ()  # the coordinator imports no library; each side gets its own path
    req.extra_args = [
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
        *passthrough,
    ]
    return req


def _prepare_version(
    factory: sessionmaker[Session],
    settings: Settings,
    run_id: int,
    version_spec: str,
    suites: list[str],
    options: dict[str, Any],
    workdir: Path,
) -> SuiteRequest:
    """A released version: ``pip install --no-deps --target`` from an index or a
    wheelhouse, cached per (spec, toolchain) with an LRU size limit (worker/venvs.py)."""
    spec = libspec.parse_version_spec(version_spec)
    index_url, find_links = libspec.parse_index(options.get("index_url"), options.get("find_links"))
    cache = venvs.EnvCache(settings.data_dir / "venvs", venvs.probe_toolchain())
    env = cache.version_env(
        spec, index_url=index_url, find_links=find_links, timeout=settings.install_timeout_s
    )
    _append_log(factory, run_id, env.log or f"cached environment {env.path}\n")
    impl = options.get("impl") or spec.name.replace("-", "_")
    return SuiteRequest(
        python=env.python,
        pythonpath=env.pythonpath,
        env=clean_env(),
        workdir=workdir / "suite",
        suites=suites,
        impl=impl,
        backend=spec.name,
        library={"name": spec.name, "version": spec.version},
        case_timeout_s=float(options.get("case_timeout_s", settings.case_timeout_s)),
        suite_timeout_s=settings.suite_timeout_s,
        extra_args=[str(a) for a in options.get("bench_args", [])],
    )


def _stored(factory: sessionmaker[Session], run_id: int) -> set[str]:
    with factory() as session:
        return stored_case_ids(session, run_id)


T = TypeVar("T")


def _patiently(patience_s: float, write: Callable[[], T]) -> T:
    """``write()``, retried with backoff while the database is unreachable, up to
    ``patience_s``; then the error propagates and the task's own retry takes over."""
    deadline = time.monotonic() + patience_s
    delay = 1.0
    while True:
        try:
            return write()
        except OperationalError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 15.0)


def _store(factory: sessionmaker[Session], run_id: int, record: dict[str, Any]) -> None:
    for attempt in range(3):
        try:
            with factory() as session, session.begin():
                run = session.get(Run, run_id)
                assert run is not None
                store_record(session, run, record)
            return
        except IntegrityError:
            # Another delivery stored this result, or another run this new case, in
            # between our check and our insert: look again in a fresh transaction.
            if attempt == 2:
                raise


def _note_config(
    factory: sessionmaker[Session], run_id: int, config: repoconfig.RepoConfig
) -> None:
    with factory() as session, session.begin():
        run = session.get(Run, run_id)
        assert run is not None
        opts = dict(run.options)
        if config.regression_threshold is not None:
            opts.setdefault("regression_threshold", config.regression_threshold)
        if config.confidence is not None:
            opts.setdefault("confidence", config.confidence)
        if config.suite_thresholds or config.case_thresholds:
            opts["thresholds"] = repoconfig.Thresholds(
                0.0, config.suite_thresholds, config.case_thresholds
            ).to_options()
        opts["config"] = {
            "module": config.module,
            "suites": list(config.suites),
            "recipe": config.install.recipe,
        }
        run.options = opts


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
            run.options = {**run.options, "runner_log_tail": runner_log[-20_000:]}
        analyze_ready(session, run, settings)
    return status


def abandon(factory: sessionmaker[Session], settings: Settings, run_id: int, reason: str) -> str:
    """End a run that cannot finish (e.g. past the task's time limit) as ``error``."""
    return _patiently(30.0, lambda: _finish(factory, settings, run_id, "error", reason))
