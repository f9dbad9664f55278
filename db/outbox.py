"""Runs committed but not yet handed to the broker: a transactional outbox.

The planner adds one :class:`PendingSend` per run in the same transaction that
creates (or re-prioritises) the run, sends the messages after the commit, and
deletes the rows of the messages the broker took. A row that outlives its send
means the broker refused it (down, restarting) or the planner died in between;
the reconciler (``jobs/planning/reconcile.py``) sends it again, and a redelivered
webhook that joins such a run sends it at once. So a committed run always has
either a message or a row here, and is never stuck ``queued`` with neither.

Functions take an explicit session and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import ForeignKey, String, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from kernelwatch.db.models import Base
from kernelwatch.db.types import datetime_now, int_pk


class PendingSend(Base):
    """A run whose message the broker has not confirmed yet."""

    __tablename__ = "run_pending_sends"

    id: Mapped[int_pk]
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    queue: Mapped[str] = mapped_column(String(64))
    trigger: Mapped[str] = mapped_column(String(32))
    created: Mapped[datetime_now]


def add(session: Session, run_id: int, queue: str, trigger: str) -> None:
    """Note that ``run_id`` must be sent (once: a second note for the same run is merged)."""
    row = session.scalars(select(PendingSend).where(PendingSend.run_id == run_id)).first()
    if row is None:
        session.add(PendingSend(run_id=run_id, queue=queue, trigger=trigger))
    else:
        row.queue, row.trigger = queue, trigger
    session.flush()


def is_pending(session: Session, run_id: int) -> bool:
    return session.scalar(select(PendingSend.id).where(PendingSend.run_id == run_id)) is not None


def sent(session: Session, run_ids: Iterable[int]) -> None:
    """The broker took these runs' messages."""
    ids = list(run_ids)
    if ids:
        session.execute(delete(PendingSend).where(PendingSend.run_id.in_(ids)))


def due(session: Session, before: datetime) -> list[PendingSend]:
    """Sends noted before ``before`` and still not confirmed, oldest first."""
    q = select(PendingSend).where(PendingSend.created < before).order_by(PendingSend.id)
    return list(session.scalars(q))


__all__ = ["PendingSend", "add", "due", "is_pending", "sent"]
