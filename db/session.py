"""Engines and sessions. Sessions are passed explicitly; there is no global session."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import get_settings


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine; SQLite gets WAL and a busy timeout so a worker and the CLI can share it."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **kwargs)


ENGINE_CACHE_SIZE = 8
"""Engines kept per process; one URL is the rule, a few where a process is pointed elsewhere."""

_engines: OrderedDict[str, Engine] = OrderedDict()
_engines_lock = threading.Lock()


def _new_lock_in_child() -> None:
    """A forked child (celery's prefork pool) gets a lock of its own: one another thread
    of the parent held at the fork would never be released in the child."""
    global _engines_lock
    _engines_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def engine_for(url: str) -> Engine:
    """The process's engine for `url`, least recently used out first.

    An engine pushed out is disposed at once: left to the garbage collector, its pooled
    connections stay open on the server until a collection finds them, and psycopg then
    warns from whatever code happens to run (a functools cache would drop it so)."""
    with _engines_lock:
        engine = _engines.get(url)
        if engine is not None:
            _engines.move_to_end(url)
            return engine
        engine = _engines[url] = make_engine(url)
        evicted = _engines.popitem(last=False)[1] if len(_engines) > ENGINE_CACHE_SIZE else None
    if evicted is not None:
        evicted.dispose()
    return engine


def forget_engine(url: str) -> None:
    """Dispose of and drop the cached engine for `url`, if any (a database about to go)."""
    with _engines_lock:
        engine = _engines.pop(url, None)
    if engine is not None:
        engine.dispose()


def default_engine() -> Engine:
    settings = get_settings()
    settings.ensure_dirs()
    return engine_for(settings.resolved_database_url)


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    return sessionmaker(bind=engine or default_engine(), expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with factory() as session, session.begin():
        yield session
