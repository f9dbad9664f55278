"""``.kernelwatch.toml`` read once by the worker reaches the build and the suite runner.

The executor is called in this process (the Celery path is tests/jobs/cli/test_pipeline.py);
the library is a real git repository, its environment really built, the suite runner a
real subprocess, the database real SQLite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Result, Run
from kernelwatch.db.run_options import ConfigNote, RunOptions
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.plan import RunRequest, plan
from kernelwatch.kernels.record import ResultRecord
from kernelwatch.worker.executor import _runner_args, _unmatched, execute
from kernelwatch.worker.suite_process import SuiteOutcome
from tests.helpers import make_repo

# A library with one of the basic suite's four kernels (softmax, rmsnorm, matmul, attention).
ONLY_SOFTMAX = "from kernelwatch.kernels.triton_kernels import softmax  # noqa: F401\n"
TOML = """
[library]
name = "onlysoftmax"
module = "onlysoftmax"
[install]
recipe = "pythonpath"
[suites]
names = ["basic"]
kernels = ["softmax"]
[thresholds]
regression = 1.0
"""


def test_the_files_kernels_become_runner_selectors_unless_the_run_picks_its_own() -> None:
    # the planner resolved [suites] kernels into the run's snapshot (jobs/planning/resolve.py)
    note = ConfigNote(kernels=["softmax", "rmsnorm"], resolved=True)
    assert _runner_args(RunOptions(), note) == ["--kernel", "softmax", "--kernel", "rmsnorm"]
    picked = RunOptions(bench_args=["--kernel", "matmul", "--budget", "0.1"])
    assert _runner_args(picked, note) == ["--kernel", "matmul", "--budget", "0.1"]
    budget = RunOptions(bench_args=["--budget", "0.1"])
    assert _runner_args(budget, ConfigNote(resolved=True)) == ["--budget", "0.1"]


def test_a_selected_kernel_that_matched_no_case_makes_the_run_an_error_naming_it() -> None:
    def rec(kernel: str) -> ResultRecord:
        return ResultRecord(
            suite="basic", case_id=kernel, kernel=kernel, backend="lib", params={}, status="pass"
        )

    measured = SuiteOutcome(records=[rec("softmax"), rec("softmax")], log="")
    assert _unmatched(("softmax",), ["basic"], measured) == ""
    assert _unmatched((), ["basic"], measured) == ""  # no selection: nothing to match
    assert _unmatched(("softmax", "rmsnrom"), ["basic"], measured) == (
        '.kernelwatch.toml: suites.kernels "rmsnrom" matched no case of the suites basic '
        "(the other kernels' cases were measured)"
    )


@pytest.mark.slow
def test_a_library_with_some_kernels_of_a_suite_measures_those_not_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path / "data", suite_timeout_s=300)
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    factory: sessionmaker[Session] = sessionmaker(
        bind=make_engine(settings.resolved_database_url), expire_on_commit=False
    )
    src = tmp_path / "onlysoftmax"
    sha = make_repo(src, {"onlysoftmax/__init__.py": ONLY_SOFTMAX, ".kernelwatch.toml": TOML})
    req = RunRequest(source=str(src), commits=[sha], measure_baseline=False)
    (planned,) = plan(factory, settings, make_celery(settings), req)

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the worker read .kernelwatch.toml: it executes the snapshot")

    # the planner resolved the file (issue 23): the worker reads it no more
    monkeypatch.setattr(repoconfig, "read_at", never)
    monkeypatch.setattr(repoconfig, "parse", never)
    assert execute(factory, settings, planned.id, worker="test@host") == "succeeded"
    # issue 24: nothing of the run stays on disk (KW_KEEP_WORK=none, the default)
    assert not (settings.data_dir / "work" / f"run-{planned.id}").exists()
    with factory() as s:
        run = s.get(Run, planned.id)
        assert run is not None
        results = s.scalars(select(Result).where(Result.run_id == run.id)).all()
        kernels = {r.record["kernel"] for r in results}
        statuses = {r.record["status"] for r in results}
        noted = run.options.config
    # without the selection rmsnorm, matmul and attention would each be an "error" record
    assert kernels == {"softmax"} and statuses == {"pass"}, (kernels, statuses)
    assert noted is not None and noted.kernels == ["softmax"]
    assert run.suites == noted.suites == ["basic"]  # stored = measured


def test_a_file_built_to_break_the_parser_ends_the_run_at_once_as_error(tmp_path: Path) -> None:
    """Issue 24: a 10 kB file nested 5,000 deep raised RecursionError in the worker; the
    run ended after 346 s and three attempts as "the worker died 3 times". The planner now
    refuses it before anything is queued (issue 23); a run planned before it resolved
    (no snapshot: its worker resolves it once) ends at once as ``error`` with the file's
    message."""
    import time

    from kernelwatch.db.models import Commit, Repository
    from kernelwatch.jobs.errors import ConfigError

    settings = Settings(data_dir=tmp_path / "data")
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    factory: sessionmaker[Session] = sessionmaker(
        bind=make_engine(settings.resolved_database_url), expire_on_commit=False
    )
    src = tmp_path / "deep"
    sha = make_repo(src, {".kernelwatch.toml": "a = " + "[" * 5000 + "]" * 5000})
    why = ".kernelwatch.toml: arrays and inline tables nested 5000 deep, over the limit of 32"
    req = RunRequest(source=str(src), commits=[sha], measure_baseline=False)
    with pytest.raises(ConfigError, match="nested 5000 deep"):
        plan(factory, settings, make_celery(settings), req)
    with factory() as s, s.begin():
        repo = Repository(name="deep", source=str(src))
        s.add(repo)
        s.flush()
        commit = Commit(repository_id=repo.id, sha=sha, message="deep")
        s.add(commit)
        s.flush()
        old = Run(repository_id=repo.id, commit_id=commit.id, status="queued",
                  device_class="cpu", suites=["basic"])  # fmt: skip
        s.add(old)
        s.flush()
        run_id = old.id
    started = time.monotonic()
    assert execute(factory, settings, run_id, worker="test@host") == "error"
    assert time.monotonic() - started < 30
    with factory() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.attempts <= 1
        assert run.error is not None and run.error.startswith(why), run.error
