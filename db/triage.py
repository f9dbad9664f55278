"""Triage of regressions: who decided what about a flagged case, and why.

A :class:`~kernelwatch.db.models.Regression` carries only its current ``state``;
every change of that state is also written here as a :class:`TriageEvent`, so the
audit trail (who acknowledged a slowdown, who called it expected, when it was
fixed) survives later changes. The dashboard is the only writer today.

Functions take an explicit session and never commit: the caller owns the
transaction. Authentication is not done here; ``who`` is whatever identity the
caller established.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from kernelwatch.db.models import Base, Regression
from kernelwatch.db.types import datetime_now, int_pk

# Actions a person may take; each one is also the regression's state afterwards.
# ``open`` re-opens a regression that was triaged by mistake.
TRIAGE_ACTIONS = ("acknowledged", "expected", "false_positive", "fixed", "open")
# States in which a regression still wants attention.
ACTIVE_STATES = ("open", "acknowledged")
MAX_NOTE = 4000


class TriageError(ValueError):
    """A triage request that cannot be applied (unknown action or regression, no identity)."""


class TriageEvent(Base):
    """One triage decision on a regression: the state it moved from and to, a note, who."""

    __tablename__ = "triage_events"
    __table_args__ = (Index("ix_triage_events_regression", "regression_id", "created"),)

    id: Mapped[int_pk]
    regression_id: Mapped[int] = mapped_column(ForeignKey("regressions.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(16))
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    note: Mapped[str] = mapped_column(Text, default="")
    who: Mapped[str] = mapped_column(String(255))
    created: Mapped[datetime_now]


def triage(
    session: Session, regression_id: int, action: str, who: str, note: str = ""
) -> TriageEvent:
    """Record ``action`` on a regression by ``who`` and move the regression to that state."""
    if action not in TRIAGE_ACTIONS:
        raise TriageError(f"unknown triage action {action!r}; one of {', '.join(TRIAGE_ACTIONS)}")
    who = who.strip()
    if not who:
        raise TriageError("triage needs the identity of the person who decided")
    regression = session.get(Regression, regression_id, with_for_update=True)
    if regression is None:
        raise TriageError(f"no regression {regression_id}")
    event = TriageEvent(
        regression_id=regression_id,
        action=action,
        from_state=regression.state,
        to_state=action,
        note=note.strip()[:MAX_NOTE],
        who=who[:255],
    )
    regression.state = action
    session.add(event)
    session.flush()
    return event


def history(session: Session, regression_id: int) -> list[TriageEvent]:
    """Triage events of one regression, oldest first."""
    q = (
        select(TriageEvent)
        .where(TriageEvent.regression_id == regression_id)
        .order_by(TriageEvent.created, TriageEvent.id)
    )
    return list(session.scalars(q))


__all__ = ["ACTIVE_STATES", "TRIAGE_ACTIONS", "TriageError", "TriageEvent", "history", "triage"]
