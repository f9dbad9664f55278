"""What several commands share: the validated settings and a migrated database.

Imported lazily by each command's handler, so ``kernelwatch --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from kernelwatch.db.config import Settings


def settings() -> Settings:
    """The settings from the environment, failing fast, with the data directory made."""
    from kernelwatch.db.config import get_settings

    s = get_settings()
    s.ensure_dirs()
    return s


def factory() -> sessionmaker[Session]:
    """A session factory on a database migrated to head."""
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.db.session import session_factory

    upgrade()
    return session_factory()


__all__ = ["factory", "settings"]
