"""Building a bisection's next commits ahead, into the environment cache the GPU workers use.

Why: a bisection step's run builds its commit on the GPU worker before it measures
(FlashAttention-3: ~100 s of GPU time spent compiling). The driver sends the commits
the next steps may measure to the ``build`` queue (``jobs/planning/build_ahead.py``);
a CPU worker consuming it runs :func:`build_ahead`, which builds through the very
function a run's install uses (``executor.commit_env``: same recipe, profile,
toolchain key, sandbox, ccache), so the step run on any worker sharing the cache
folder (``KW_DATA_DIR/venvs``) finds the entry and only measures.

Nothing here is recorded as a run, and every failure is harmless: it is logged, and
the step run then builds the commit itself and fails there as it would have (a
skipped step). Only main history is built: the commit must be one of a running
bisection's commits (checked on main history when it started) and, checked again
here, on the repository's default branch; the build runs sandboxed with the
allow-listed environment as any run's build, so no secret of the worker reaches it.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.bisect import ACTIVE, Bisection
from kernelwatch.db.config import Settings
from kernelwatch.jobs.errors import CommitNotFound, ConfigError, InstallError, SourceError
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.planning import bisect_driver, build_ahead
from kernelwatch.jobs.planning.bisect import Limits
from kernelwatch.worker.executor import commit_env

log = logging.getLogger(__name__)


def build_ahead_of(
    factory: sessionmaker[Session], settings: Settings, bisection_id: int, sha: str, depth: int
) -> str:
    """Build ``sha`` for bisection ``bisection_id`` if its search may still measure it.

    Returns what happened, one word: ``built``, ``cached``, ``failed`` (the build
    failed), ``error`` (the commit or its file could not be read), ``stale`` (the
    search went the other way meanwhile), ``ended``, ``missing`` or ``refused`` (not
    one of the bisection's commits).
    """
    with factory() as session:
        row = session.get(Bisection, bisection_id)
        if row is None:
            return "missing"
        if row.status != ACTIVE:
            return "ended"
        if sha not in row.commits:
            log.warning("build-ahead of %s refused: not a commit of bisection %s", sha, row.id)
            return "refused"
        wanted = build_ahead.wanted(
            len(row.commits) - 1,
            bisect_driver.search_steps(row),
            Limits(row.gpu_seconds, row.budget_s),
            establish=row.establish,
            depth=depth,
        )
        if row.commits.index(sha) not in wanted:
            return "stale"
        source = row.repository.source
        profile, trigger = bisect_driver.step_build(row)
    return prebuild(settings, source, sha, profile, trigger)


def prebuild(settings: Settings, source: str, sha: str, profile: str | None, trigger: str) -> str:
    """The environment of ``sha`` of main history, built into the cache (or found there).

    ``built`` or ``cached``; ``failed`` or ``error`` logged, never raised (see the
    module docstring: the step's own run reports the failure).
    """
    try:
        mirror = Mirror(settings.data_dir / "mirrors", source)
        if not mirror.has_commit(sha):  # fetch only when the mirror lacks the commit
            mirror.sync()
        if not mirror.has_commit(sha):
            raise CommitNotFound(f"commit {sha} not found in {source}")
        bisect_driver.require_main_history(mirror, sha)
        install = repoconfig.read_configured(mirror, sha, settings.repo_configs).install
        env, recipe = commit_env(settings, mirror, sha, install, profile, trigger)
    except InstallError as exc:
        log.warning("build-ahead of %s failed (its step will skip it): %s", sha[:12], exc)
        return "failed"
    except (SourceError, CommitNotFound, ConfigError) as exc:
        log.warning("build-ahead of %s not done: %s", sha[:12], exc)
        return "error"
    what = "cached" if env.cached else "built"
    log.info(
        "build-ahead of %s: %s (%s profile, %.0f s) at %s",
        sha[:12],
        what,
        recipe.profile,
        env.seconds,
        env.path,
    )
    return what


__all__ = ["build_ahead_of", "prebuild"]
