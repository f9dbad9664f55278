"""The demo scenario through Redis, PostgreSQL and a real Celery worker process.

Asserts exactly which commit regressed and which broke: the harmless commit must
pass, the slow commit must fail on RMSNorm only, the broken commit on softmax only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from kernelwatch.db.models import Regression, Result, Run
from kernelwatch.db.session import engine_for
from kernelwatch.kernels.verdict import BLOCKING, CaseVerdict, RunVerdict
from tests.conftest import create_pg_database, drop_pg_database, run_cli

# Serial, alone on the machine: the demo gates on CPU timings (its slow commit is the
# point), and beside the other half of make test on 2 cores the harmless commit's
# baseline was once measured in a burst of load (2026-12-06: attention 0.60 [0.48,
# 0.94] faster, not confirmed by its re-measure, so the run read neutral). Serial does
# not make the machine quiet: the assertion below takes what a burst can leave.
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis, pytest.mark.serial]


def test_demo_on_redis_and_postgres_names_the_slow_and_the_broken_commit(
    tmp_path: Path, redis_db_url: str
) -> None:
    pg = create_pg_database("kw_e2e")
    try:
        env = {
            "KW_DATABASE_URL": pg,
            "KW_BROKER_URL": redis_db_url,
            "KW_DATA_DIR": str(tmp_path / "data"),
        }
        proc = run_cli("demo", "--json", "--workdir", str(tmp_path / "demo"), env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout)
        assert report["finished"]
        by_role = {c["role"]: c for c in report["commits"]}
        assert set(by_role) == {"baseline", "harmless", "slow", "broken"}
        assert by_role["baseline"]["verdict"] == "pass"
        # An unchanged commit is never blocked. It reads "pass", or "neutral" where a burst
        # of the shared machine's load left a case undecided: serial, alone in make test,
        # softmax once read 1.94 [1.19, 2.19] (2026-12-06), inconclusive, never a block.
        # The whole entry in the message: pytest's repr cut the reason off once.
        harmless = by_role["harmless"]
        assert harmless["verdict"] in (RunVerdict.PASS, RunVerdict.NEUTRAL), json.dumps(harmless)
        harmless_moves = {m["verdict"] for m in harmless["moved"]}
        assert not harmless_moves & BLOCKING, json.dumps(harmless)
        if harmless["verdict"] == RunVerdict.NEUTRAL:
            assert CaseVerdict.INCONCLUSIVE in harmless_moves, json.dumps(harmless)
        assert by_role["slow"]["verdict"] == "fail"
        assert by_role["broken"]["verdict"] == "fail"
        assert report["slow_commits"] == [by_role["slow"]["sha"]]
        assert report["broken_commits"] == [by_role["broken"]["sha"]]
        slow_moves = {(m["kernel"], m["verdict"]) for m in by_role["slow"]["moved"]}
        assert ("rmsnorm", "regression") in slow_moves
        assert all(k == "rmsnorm" for k, v in slow_moves if v == "regression")
        broken_moves = {(m["kernel"], m["verdict"]) for m in by_role["broken"]["moved"]}
        assert ("softmax", "broken") in broken_moves
        assert not [m for m in by_role["broken"]["moved"] if m["verdict"] == "regression"]

        # what the report says is what the database holds
        engine = engine_for(pg)
        with engine.connect() as conn:
            kinds = conn.execute(select(Regression.kind, func.count()).group_by(Regression.kind))
            assert dict(kinds.all()) == {"regression": 1, "broken": 1}
            workers = conn.execute(select(Run.worker).distinct()).scalars().all()
            assert workers and all(w and w.startswith("demo-") for w in workers), workers
            assert conn.execute(select(func.count()).select_from(Result)).scalar() == 16
        engine.dispose()
    finally:
        drop_pg_database(pg)
