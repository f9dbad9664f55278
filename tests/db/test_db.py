"""Models, migrations and idempotent writes on SQLite and on PostgreSQL."""

import subprocess
import sys

import pytest
from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Commit, Regression, Result, Run
from kernelwatch.db.session import engine_for
from kernelwatch.db.store import (
    get_or_create_repository,
    latest_run_for,
    source_suffix,
    store_record,
    stored_case_ids,
    upsert_commit,
)
from kernelwatch.kernels.record import ResultRecord, case_id


def _record(case: str = "c1", status: str = "pass") -> ResultRecord:
    return ResultRecord.from_dict(_record_dict(case, status))


def _record_dict(case: str = "c1", status: str = "pass") -> dict:
    return {
        "schema": 1,
        "suite": "basic",
        "case_id": case,
        "kernel": "softmax",
        "backend": "triton",
        "params": {"rows": 4, "dtype": "float16"},
        "status": status,
        "timing": {
            "unit": "s",
            "cold_l2": True,
            "cuda_graph": False,
            "stop_reason": "budget",
            "timer": "host_cpu",
            "median": 2e-3,
            "ci_low": 1.9e-3,
            "ci_high": 2.1e-3,
            "n": 3,
            "samples": [1.9e-3, 2e-3, 2.1e-3],
        },
        "throughput": {"flops": 1e9, "bytes": 1e6, "tflops": 1.5, "gbps": 300.0},
        "device": {"name": "cpu", "reliable": True},
        "error": "",
    }


def _new_run(session: Session, sha: str) -> Run:
    """A run of commit ``sha`` of repository ``lib``, flushed: what a stored record needs."""
    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, sha, [])
    run = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"])
    session.add(run)
    session.flush()
    return run


def test_migrations_create_every_table(db_url: str) -> None:
    tables = set(inspect(engine_for(db_url)).get_table_names())
    assert {
        "repositories",
        "commits",
        "commit_parents",
        "runs",
        "cases",
        "results",
        "regressions",
        "alembic_version",
    } <= tables


def test_commits_keep_parents_in_order(session: Session) -> None:
    repo = get_or_create_repository(session, "lib", "/src/lib")
    c = upsert_commit(session, repo, "b" * 40, ["a" * 40, "c" * 40], "merge")
    session.commit()
    again = session.scalars(select(Commit).where(Commit.sha == "b" * 40)).one()
    assert again.first_parent == "a" * 40
    assert [p.parent_sha for p in again.parents] == ["a" * 40, "c" * 40]
    assert upsert_commit(session, repo, "b" * 40, []) is c  # idempotent


def test_result_writes_are_idempotent(session: Session) -> None:
    run = _new_run(session, "a" * 40)
    assert store_record(session, run, _record()) is not None
    assert store_record(session, run, _record()) is None  # a re-delivered record
    session.commit()
    assert session.scalar(select(func.count()).select_from(Result)) == 1
    assert stored_case_ids(session, run.id) == {"c1"}
    row = session.scalars(select(Result)).one()
    assert row.samples == [1.9e-3, 2e-3, 2.1e-3]
    assert row.record["params"]["rows"] == 4
    assert session.get(Case, "c1").label == "dtype=float16, rows=4"


def test_a_record_filed_under_another_cases_id_does_not_name_that_case(
    session: Session,
) -> None:
    """Code under test writes its own records: one filed under a victim's case id with
    parameters of its own made the shared row (its label: what threshold patterns and the
    PR comment read). The victim's first true record, which hashes to the id, sets it right."""
    true = {"seqlen": 8192, "dtype": "bfloat16"}
    victim = case_id("attention", "flash_attn", true)
    forged = {**_record_dict(victim), "kernel": "attention", "backend": "flash_attn",
              "params": {"seqlen": 1}}  # fmt: skip
    hostile = _new_run(session, "a" * 40)
    store_record(session, hostile, ResultRecord.from_dict(forged))
    assert session.get(Case, victim).label == "seqlen=1"  # the first record made the row
    real = {**forged, "params": true}
    store_record(session, _new_run(session, "b" * 40), ResultRecord.from_dict(real))
    session.commit()
    row = session.get(Case, victim)
    assert (row.kernel, row.backend, row.params) == ("attention", "flash_attn", true)
    assert row.label == "dtype=bfloat16, seqlen=8192"
    # a later forgery does not undo it
    store_record(session, _new_run(session, "c" * 40), ResultRecord.from_dict(forged))
    session.commit()
    assert session.get(Case, victim).label == "dtype=bfloat16, seqlen=8192"


def test_latest_run_for_matches_suites_and_device_class(session: Session) -> None:
    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, "a" * 40, [])
    r1 = Run(repository_id=repo.id, commit_id=commit.id, suites=["basic"], device_class="h200")
    r2 = Run(repository_id=repo.id, commit_id=commit.id, suites=["other"], device_class="h200")
    session.add_all([r1, r2])
    session.flush()
    assert latest_run_for(session, repo.id, "a" * 40, "h200", ["basic"]) is r1
    assert latest_run_for(session, repo.id, "a" * 40, "h100", ["basic"]) is None


def test_regression_rows_reference_run_and_case(session: Session) -> None:
    run = _new_run(session, "a" * 40)
    store_record(session, run, _record())
    session.add(Regression(run_id=run.id, case_id="c1", kind="broken", detail="wrong"))
    session.commit()
    reg = session.scalars(select(Regression)).one()
    assert reg.case.kernel == "softmax" and reg.state == "open"


def test_migrations_match_the_models(db_url: str) -> None:
    """Autogenerate finds nothing to do: every model change has its migration."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    import kernelwatch.db.bisect
    import kernelwatch.db.fleet
    import kernelwatch.db.github
    import kernelwatch.db.outbox
    import kernelwatch.db.selftest
    import kernelwatch.db.triage  # noqa: F401
    from kernelwatch.db.models import Base

    with engine_for(db_url).connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_a_nan_in_a_record_is_stored_as_null_not_lost(session: Session) -> None:
    # A kernel that writes NaN has NaN correctness errors; PostgreSQL's JSONB refuses
    # the NaN token, which used to lose the failure it should record.
    run = _new_run(session, "c" * 40)
    record = {
        **_record_dict("nan", "fail"),
        "correctness": {"errors": {"rel_l2": float("nan")}, "bound": 1e-3, "passed": False},
        "paired": {"ratio": float("inf"), "group_ratios": [1.0, float("nan")]},
    }
    assert store_record(session, run, ResultRecord.from_dict(record)) is not None
    session.commit()
    row = session.scalars(select(Result).where(Result.case_id == "nan")).one()
    assert row.status == "fail"
    assert row.record["correctness"]["errors"]["rel_l2"] is None
    # the stored section is the whole typed one (kernels/record.py:PairedSection)
    paired = row.record["paired"]
    assert {k: paired[k] for k in ("ratio", "group_ratios")} == {
        "ratio": None,
        "group_ratios": [1.0, None],
    }


def test_a_kernels_message_with_a_nul_is_stored_on_every_database(session: Session) -> None:
    # RuntimeError("bad\x00byte") from a kernel: PostgreSQL's text and JSONB refuse NUL,
    # and the result was lost (an audit, 2026-12-05); SQLite took it as it was
    run = _new_run(session, "d" * 40)
    record = ResultRecord.from_dict(_record_dict("nul", "error"))
    record.error, record.log_tail = "RuntimeError: bad\x00byte", "out\x00put"
    assert store_record(session, run, record) is not None
    session.commit()
    row = session.scalars(select(Result).where(Result.case_id == "nul")).one()
    assert row.error == row.record["error"] == "RuntimeError: bad\\0byte"
    assert row.log_tail == "out\\0put"


def test_a_record_of_another_schema_is_not_stored(session: Session) -> None:
    run = _new_run(session, "d" * 40)
    record = _record("future")
    record.schema = 2
    with pytest.raises(ValueError, match="schema 2"):
        store_record(session, run, record)
    assert stored_case_ids(session, run.id) == set()


def test_a_taken_repository_name_gets_the_same_suffix_in_every_process(
    session: Session,
) -> None:
    # hash() of a str is salted per process: a repeated demo (a new process, the same
    # path) made tinykern-7847 beside tinykern-0312. Ask two fresh interpreters.
    code = "from kernelwatch.db.store import source_suffix; print(source_suffix('/tmp/x/lib'))"
    names = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert names == {source_suffix("/tmp/x/lib")}
    get_or_create_repository(session, "lib", "/src/lib")
    other = get_or_create_repository(session, "lib", "/tmp/x/lib")
    assert other.name == f"lib-{source_suffix('/tmp/x/lib')}"
    assert get_or_create_repository(session, "lib", "/tmp/x/lib") is other


@pytest.mark.postgres
def test_an_engine_pushed_out_of_the_cache_closes_its_connections() -> None:
    """A process that talks to more databases than the cache holds (a test session, a
    dashboard switched between deployments) must not leave the evicted engines' pooled
    connections open until the garbage collector finds them: psycopg warns then, and the
    server keeps those backends the while."""
    import gc
    import time
    import warnings

    from sqlalchemy import create_engine, text

    from kernelwatch.db.session import ENGINE_CACHE_SIZE, forget_engine
    from tests.conftest import PG_ADMIN_URL, create_pg_database, drop_pg_database

    def _backends_on(url: str) -> int:
        admin = create_engine(PG_ADMIN_URL)
        try:
            with admin.connect() as conn:
                return int(
                    conn.execute(
                        text("select count(*) from pg_stat_activity where datname = :name"),
                        {"name": url.rsplit("/", 1)[1]},
                    ).scalar_one()
                )
        finally:
            admin.dispose()

    urls = [create_pg_database("kw_evict") for _ in range(ENGINE_CACHE_SIZE + 1)]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = engine_for(urls[0])
            for url in urls:
                with engine_for(url).connect() as conn:
                    assert conn.execute(text("select 1")).scalar() == 1
            # the server ends a closed connection's backend a moment after the client goes
            deadline = time.monotonic() + 5
            while _backends_on(urls[0]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _backends_on(urls[0]) == 0, "the evicted engine's connection is still open"
            assert _backends_on(urls[-1]) == 1, "a cached engine keeps its pooled connection"
            assert engine_for(urls[0]) is not first, "the oldest engine was not evicted"
            del first
            gc.collect()
        leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
        assert not leaked, [str(w.message) for w in leaked]
    finally:
        for url in urls:
            forget_engine(url)
            drop_pg_database(url)
