"""``kernelwatch db upgrade``: Alembic migrations to head, configured in code."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from kernelwatch.db.config import get_settings

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    settings = get_settings()
    settings.ensure_dirs()
    command.upgrade(alembic_config(url or settings.resolved_database_url), revision)
