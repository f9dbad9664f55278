"""``kernelwatch run --case PATTERN --budget S``: the runner's selection and sampling time.

A history run of a library on one GPU call (benchmarks/gpu/liger.py) needs both: fewer
cases than the suites hold, and less sampling a case than a nightly run spends. They
travel as the run's runner arguments, next to ``--kernel``.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Run
from tests.conftest import run_cli
from tests.helpers import library_files, make_repo


def test_case_and_budget_reach_the_runs_runner_arguments(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    make_repo(src, library_files("lib", "X = 1\n"))
    argv = ["run", str(src), "--commit", "HEAD", "--kernel", "softmax"]
    proc = run_cli(*argv, "--case", "softmax *dtype=float16*", "--budget", "0.3", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    engine = create_engine(f"sqlite:///{tmp_path / 'kwdata' / 'kernelwatch.db'}")
    with Session(engine) as s:
        (run,) = s.scalars(select(Run)).all()
        args = list(run.options.bench_args)
    engine.dispose()
    assert args == ["--kernel", "softmax", "--case", "softmax *dtype=float16*", "--budget", "0.3"]


def test_a_budget_that_is_not_positive_is_refused_before_anything_is_queued(
    tmp_path: Path,
) -> None:
    src = tmp_path / "lib"
    make_repo(src, library_files("lib", "X = 1\n"))
    proc = run_cli("run", str(src), "--commit", "HEAD", "--budget", "0", timeout=300)
    assert proc.returncode == 2 and "--budget must be positive seconds" in proc.stderr
    db = tmp_path / "kwdata" / "kernelwatch.db"
    if db.exists():
        engine = create_engine(f"sqlite:///{db}")
        with Session(engine) as s:
            assert s.scalars(select(Run)).all() == []
        engine.dispose()
