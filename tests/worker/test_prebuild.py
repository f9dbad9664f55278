"""Build-ahead on the worker (``worker/prebuild.py``): the same cache entry as the step run.

A 12-commit library whose recipe is a command that writes what its environment holds,
built under the default sandbox with a ``bisect`` profile. Checked: a build-ahead of an
upcoming commit is the entry the executor's install then finds (``cached``), secrets of
the worker never reach the build, commits the search no longer needs or that are no
bisection's are not built, fork code is refused, and a failing build is only logged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.planning import bisect_driver as driver
from kernelwatch.worker.executor import commit_env
from kernelwatch.worker.prebuild import build_ahead_of, prebuild
from tests.helpers import git, make_repo

# the build records its environment (and its profile's variable) in the checkout
TOML = """
[library]
name = "aheadlib"
module = "aheadlib"
[install]
recipe = "command"
commands = [["{python}", "dump_env.py"]]
[install.profile_for]
bisect = "quick"
[install.profiles.quick]
env = { AHEAD_PROFILE = "quick" }
"""
DUMP_ENV = "import json, os\nopen('env.json', 'w').write(json.dumps(dict(os.environ)))\n"
BROKEN = "raise SystemExit(3)\n"


@pytest.fixture
def world(
    sqlite_url: str, tmp_path: Path
) -> tuple[sessionmaker[Session], Settings, str, list[str]]:
    src = tmp_path / "aheadlib"
    files = {".kernelwatch.toml": TOML, "dump_env.py": DUMP_ENV, "aheadlib/__init__.py": ""}
    shas = [make_repo(src, files, "commit 0")]
    for i in range(1, 12):
        files = {"NOTES": f"{i}\n"}
        if i == 9:
            files["dump_env.py"] = BROKEN
        if i == 10:
            files["dump_env.py"] = DUMP_ENV
        shas.append(make_repo(src, files, f"commit {i}"))
    settings = Settings(data_dir=tmp_path / "data", database_url=sqlite_url)
    settings.ensure_dirs()
    factory = sessionmaker(bind=engine_for(sqlite_url), expire_on_commit=False)
    return factory, settings, str(src), shas


def test_a_build_ahead_is_the_entry_the_step_run_then_finds(
    world: tuple[sessionmaker[Session], Settings, str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    factory, settings, src, shas = world
    monkeypatch.setenv("KW_GITHUB_TOKEN", "ghp_never_in_a_build")
    monkeypatch.setenv("KW_DATABASE_URL", settings.resolved_database_url)
    bid = driver.start(factory, settings, driver.BisectRequest(src, shas[0], shas[-1]))
    assert driver.advance(factory, settings, None, bid) == "running"  # establish: 11 vs 0
    # establish bad → the middle (5) against good is the next step
    assert build_ahead_of(factory, settings, bid, shas[5], 1) == "built"
    assert build_ahead_of(factory, settings, bid, shas[5], 1) == "cached"
    mirror = Mirror(settings.data_dir / "mirrors", src)
    install = repoconfig.read_at(mirror, shas[5]).install
    env, recipe = commit_env(settings, mirror, shas[5], install, None, driver.TRIGGER)
    assert env.cached and recipe.profile == "quick"  # the run's own install: a cache hit
    seen = json.loads((env.path / "src" / "env.json").read_text())
    assert seen["AHEAD_PROFILE"] == "quick"
    assert not [k for k in seen if k.startswith("KW_") and "CPU_THREADS" not in k]
    assert "ghp_never_in_a_build" not in json.dumps(seen)


def test_what_the_search_cannot_measure_next_is_not_built(
    world: tuple[sessionmaker[Session], Settings, str, list[str]],
) -> None:
    factory, settings, src, shas = world
    bid = driver.start(factory, settings, driver.BisectRequest(src, shas[0], shas[-1]))
    assert build_ahead_of(factory, settings, bid + 7, shas[5], 2) == "missing"
    driver.advance(factory, settings, None, bid)
    assert build_ahead_of(factory, settings, bid, shas[3], 1) == "stale"  # two steps away
    assert build_ahead_of(factory, settings, bid, "0" * 40, 2) == "refused"
    entries = settings.data_dir / "venvs" / "entries"
    assert not entries.exists() or not any(entries.iterdir())
    driver.cancel(factory, bid)
    assert build_ahead_of(factory, settings, bid, shas[5], 2) == "ended"


def test_a_failing_build_is_only_logged_and_fork_code_is_never_built(
    world: tuple[sessionmaker[Session], Settings, str, list[str]],
) -> None:
    _, settings, src, shas = world
    assert prebuild(settings, src, shas[9], None, driver.TRIGGER) == "failed"
    assert not any((settings.data_dir / "venvs" / "entries").iterdir())
    git(Path(src), "checkout", "-q", "-b", "fork", shas[3])
    fork = make_repo(Path(src), {"aheadlib/__init__.py": "import os\n"}, "fork commit")
    git(Path(src), "checkout", "-q", "main")
    assert prebuild(settings, src, fork, None, driver.TRIGGER) == "error"
    assert prebuild(settings, src, "f" * 40, None, driver.TRIGGER) == "error"
    assert not any((settings.data_dir / "venvs" / "entries").iterdir())
