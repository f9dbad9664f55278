"""``kernelwatch beat`` end to end: a real beat, a real worker, PostgreSQL and Redis.

The repositories file schedules a watched repository's main (every minute here), a
release watch of ``kwlib`` on a local package index (a PEP 503 ``file://`` index, polled
every 10 s) and the cards' timer self-test (every minute). The first poll measures the
one release there (0.1) as the first point of its series; then 0.2, a release whose
softmax is wrong, is published to the index, and the next poll measures it against 0.1:
broken, the run fails. Meanwhile main was measured as a ``nightly`` run and the worker's
card recorded its A/A self-test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Result, Run
from kernelwatch.db.selftest import CardSelftest
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.cli.processes import start_worker, stop
from tests.conftest import _truncate
from tests.helpers import BROKEN_SOFTMAX, library_files, make_repo, make_wheel

pytestmark = [pytest.mark.slow, pytest.mark.crowd, pytest.mark.postgres, pytest.mark.redis]

GOOD = "from kernelwatch.kernels.triton_kernels import softmax, rmsnorm, matmul, attention\n"
T = TypeVar("T")


def publish(index: Path, files: Path) -> None:
    """The PEP 503 project page of kwlib: every file in ``files``."""
    page = index / "kwlib"
    page.mkdir(parents=True, exist_ok=True)
    links = "\n".join(
        f'<a href="../../files/{f.name}">{f.name}</a>' for f in sorted(files.iterdir())
    )
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}\n</body></html>\n")


def wait_for(what: str, fn: Callable[[], T | None], timeout_s: float, log: Path) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = fn()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"{what} did not happen in {timeout_s:.0f} s; beat log:\n"
                         + log.read_text()[-4000:])  # fmt: skip


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, redis_db_url: str) -> Iterator[dict[str, object]]:
    _truncate(pg_url)
    files, index = tmp_path / "files", tmp_path / "simple"
    files.mkdir()
    make_wheel(files, "kwlib", "0.1", init=GOOD)
    publish(index, files)
    src = tmp_path / "kernels"
    main = make_repo(src, library_files("kern", GOOD, recipe="pythonpath"), "A: kernels")
    repos = tmp_path / "repos.toml"
    repos.write_text(
        f'[repos."acme/kernels"]\nsource = "{src}"\ndevice_classes = ["cpu"]\n'
        'schedule = "* * * * *"\nbench_args = ["--kernel", "softmax", "--budget", "0.1"]\n\n'
        '[watch]\nreleases_every_s = 10\nselftest = "* * * * *"\nselftest_budget_s = 2\n\n'
        f'[[watch.releases]]\npackage = "kwlib"\nindex = "file://{index}"\nsuite = "basic"\n'
        'adapter = "kwlib"\ndevice_classes = ["cpu"]\nkernels = ["softmax"]\n'
        'bench_args = ["--budget", "0.1"]\n'
    )
    settings = Settings(data_dir=tmp_path / "kw", database_url=pg_url, broker_url=redis_db_url,
                        suite_timeout_s=300, cpu_timing_gates=True)  # fmt: skip
    settings.ensure_dirs()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    env.update(KW_DATABASE_URL=pg_url, KW_BROKER_URL=redis_db_url, KW_REPOS_FILE=str(repos),
               KW_DATA_DIR=str(settings.data_dir), KW_CPU_TIMING_GATES="1")  # fmt: skip
    log_path = tmp_path / "beat.log"
    worker = start_worker(settings, name="beat-e2e")
    with log_path.open("wb") as log:
        beat = subprocess.Popen(
            [sys.executable, "-m", "kernelwatch.jobs.cli.main", "beat", "--loglevel", "INFO"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            factory = sessionmaker(bind=engine_for(pg_url), expire_on_commit=False)
            yield {"files": files, "index": index, "main": main, "log": log_path,
                   "factory": factory}  # fmt: skip
        finally:
            stop(beat)  # type: ignore[arg-type]
            stop(worker)


def test_beat_measures_main_new_releases_and_every_cards_noise(
    fleet: dict[str, object],
) -> None:
    factory = fleet["factory"]
    assert isinstance(factory, sessionmaker)
    log, files, index = (
        Path(str(fleet["log"])),
        Path(str(fleet["files"])),
        Path(str(fleet["index"])),
    )

    def finished(version: str) -> Run | None:
        with factory() as s:
            run = s.scalars(select(Run).where(Run.version_spec == version)).first()
            return run if run is not None and run.verdict is not None else None

    first = wait_for("the first release measured", lambda: finished("kwlib==0.1"), 300, log)
    assert first.trigger == "release" and first.status == "succeeded" and first.verdict == "pass"
    assert first.baseline_sha is None  # the first point of the series

    make_wheel(files, "kwlib", "0.2", init=BROKEN_SOFTMAX)  # 0.2 appears on the index
    publish(index, files)
    second = wait_for("the new release measured", lambda: finished("kwlib==0.2"), 300, log)
    assert second.trigger == "release" and second.status == "succeeded"
    assert second.baseline_sha == "version:kwlib==0.1" and second.baseline_run_id == first.id
    assert second.verdict == "fail"
    with factory() as s:
        [softmax] = s.scalars(select(Result).where(Result.run_id == second.id)).all()
        assert softmax.status == "fail" and softmax.verdict == "broken"
        # each version measured once however many polls saw it
        versions = s.scalars(select(Run.version_spec).where(Run.trigger == "release")).all()
        assert sorted(versions) == ["kwlib==0.1", "kwlib==0.2"]

    def nightly() -> tuple[Run, str] | None:
        with factory() as s:
            run = s.scalars(
                select(Run)
                .join(Commit, Run.commit_id == Commit.id)
                .where(
                    Run.trigger == "nightly", Commit.sha == fleet["main"], Run.verdict.is_not(None)
                )
            ).first()
            return (run, run.repository.name) if run is not None else None

    main, name = wait_for("a scheduled run of main", nightly, 180, log)
    assert main.status == "succeeded" and name == "acme/kernels"  # filed under its watched name

    def tested() -> CardSelftest | None:
        with factory() as s:
            return s.scalars(select(CardSelftest).where(CardSelftest.cv.is_not(None))).first()

    card = wait_for("a card's timer self-test", tested, 180, log)
    assert card.card.startswith("cpu:") and card.device_class == "cpu"
    assert card.worker.startswith("beat-e2e-") and card.kernel == "torch.matmul"
    assert card.cv is not None and 0 < card.cv < 1 and card.samples > 0
    assert card.ci_low is not None and card.ci_high is not None and card.ci_low <= card.ci_high
    assert "kernelwatch beat: release watch kwlib" in log.read_text()
