"""Shared fixtures: real SQLite and PostgreSQL databases, real Redis, real workers.

PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) run on every
development and CI machine (.ci/run starts them). Each test session gets its own
PostgreSQL database, dropped at the end, so concurrent sessions never collide.
GPU tests are skipped in one hook when no CUDA device is present.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

PG_ADMIN_URL = os.environ.get(
    "KW_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("KW_TEST_REDIS_URL", "redis://127.0.0.1:6379")
REPO_ROOT = Path(__file__).resolve().parents[1]


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets its own data dir and fresh settings; KW_* from the shell never leak in."""
    for key in list(os.environ):
        if key.startswith("KW_") and not key.startswith("KW_TEST_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KW_DATA_DIR", str(tmp_path / "kwdata"))
    # These tests measure on the CPU but check the gate's logic as a GPU run would use it;
    # the plumbing-only default (CPU timings never gate) is tested where this is unset.
    monkeypatch.setenv("KW_CPU_TIMING_GATES", "1")
    try:
        from kernelwatch.db.config import get_settings
    except ImportError:  # the GPU machine runs kernels/ tests with torch alone
        yield
        return
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def create_pg_database(prefix: str = "kw_test") -> str:
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def drop_pg_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    from kernelwatch.db.session import forget_engine

    forget_engine(url)  # its pooled connections close now, not at a later test's collection
    name = url.rsplit("/", 1)[1]
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    url = create_pg_database()
    from kernelwatch.db.migrate import upgrade

    upgrade(url)
    yield url
    drop_pg_database(url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    from kernelwatch.db.migrate import upgrade

    upgrade(url)
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Both supported databases: a fresh SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    url = str(request.getfixturevalue("pg_url"))
    _truncate(url)
    return url


def _truncate(url: str) -> None:
    from sqlalchemy import text

    from kernelwatch.db.models import Base
    from kernelwatch.db.session import engine_for

    with engine_for(url).begin() as conn:
        names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    from sqlalchemy.orm import sessionmaker

    from kernelwatch.db.session import engine_for

    factory = sessionmaker(bind=engine_for(db_url), expire_on_commit=False)
    with factory() as s:
        yield s


@pytest.fixture
def redis_db_url() -> Iterator[str]:
    """A Redis database of its own, flushed before use: ``KW_TEST_REDIS_DB`` (make test's
    two pytest processes get one each), else 1..15 by xdist worker, else by pid."""
    import redis

    # each test process owns one database: pids could collide
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None
    chosen = os.environ.get("KW_TEST_REDIS_DB", "")
    if chosen.isdigit():
        url = f"{REDIS_URL}/{int(chosen)}"
    else:
        url = f"{REDIS_URL}/{(index if index is not None else os.getpid()) % 15 + 1}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``kernelwatch`` command as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch.jobs.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
