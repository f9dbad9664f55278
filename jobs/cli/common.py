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


def warn_without_worker(sessions: sessionmaker[Session], queue: str, command: str) -> bool:
    """Warn on stderr when no live worker consumes ``queue``; True if one does.

    ``command``: whose warning it is (``run``, ``bisect``): both queue runs a worker takes.
    """
    import sys

    from kernelwatch.db.fleet import live_workers

    with sessions() as session:
        serving = [
            w
            for w in live_workers(session)
            if queue in w.queues.split(",") and w.state != "unhealthy"
        ]
    if not serving:
        print(
            f"kernelwatch {command}: warning: no live worker serves queue {queue!r}; the runs wait "
            "until one does (start `kernelwatch worker`, or `kernelwatch serve` on one machine)",
            file=sys.stderr,
        )
    return bool(serving)


__all__ = ["factory", "settings", "warn_without_worker"]
