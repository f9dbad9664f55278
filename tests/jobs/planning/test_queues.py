"""Queue routing: a run goes to the queue of workers that own as many cards as it needs.

A suite declares its GPUs in its grid file (``[suite] gpus = K``); the planner sends a
run to ``gpu.<class>.x<K>`` for the most any of its suites needs, ``gpu.<class>`` for
one, and ``cpu`` on the CPU whatever the suites say.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Run
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.planning.plan import RunRequest, plan
from kernelwatch.jobs.planning.queues import queue_for
from tests.helpers import make_repo


def test_queue_names_carry_the_card_count_above_one() -> None:
    assert queue_for("h200") == queue_for("h200", 1) == "gpu.h200"
    assert queue_for("h200", 2) == "gpu.h200.x2"
    assert queue_for("b200", 8) == "gpu.b200.x8"
    assert queue_for("cpu", 2) == "cpu"
    with pytest.raises(ValueError):
        queue_for("h200", 0)


@pytest.mark.parametrize(
    ("suites", "device_class", "queue"),
    [
        (["collective"], "h200", "gpu.h200.x2"),
        (["basic"], "h200", "gpu.h200"),
        (["basic", "collective"], "h200", "gpu.h200.x2"),  # the most any suite needs
        (["mylib-gemm"], "h200", "gpu.h200"),  # a plugin suite counts as one GPU
        (["collective"], "cpu", "cpu"),
    ],
)
def test_a_planned_run_is_queued_for_the_cards_its_suites_need(
    tmp_path: Path, sqlite_url: str, suites: list[str], device_class: str, queue: str
) -> None:
    src = tmp_path / "lib"
    parent = make_repo(src, {"a.txt": "1\n"}, "first")
    sha = make_repo(src, {"a.txt": "2\n"}, "second")
    settings = Settings(data_dir=tmp_path / "kw", database_url=sqlite_url)
    settings.ensure_dirs()
    engine = make_engine(sqlite_url)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    try:
        req = RunRequest(
            source=str(src),
            commits=[sha],
            suites=suites,
            device_class=device_class,
            options={"suites_explicit": True},  # as ``run --suite``: not the file's suites
        )
        planned = plan(factory, settings, None, req)
        assert len(planned) == 2  # the commit and its parent, measured as the baseline
        with factory() as s:
            runs = s.execute(select(Commit.sha, Run.queue).join(Run.commit)).all()
        assert sorted(runs) == sorted([(sha, queue), (parent, queue)])
    finally:
        engine.dispose()
