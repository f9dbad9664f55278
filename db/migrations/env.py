"""Alembic environment: the URL comes from the config kernelwatch builds in migrate.py."""

from alembic import context
from sqlalchemy import pool

from kernelwatch.db import (  # noqa: F401  (tables outside models.py)
    bisect,
    fleet,
    github,
    outbox,
    selftest,
    triage,
)
from kernelwatch.db.models import Base
from kernelwatch.db.session import make_engine

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set"
    engine = make_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
