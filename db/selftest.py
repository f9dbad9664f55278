"""The cards' timer self-tests: one row per card and night (``kernels/selftest.py``).

Written by the worker that ran the test (``worker/selftest.py``), read by the Fleet
page as a trend of ``cv`` per card. ``card`` is the GPU's UUID, or ``cpu:<host>`` for a
machine without one. ``flagged`` and ``reason`` are the rule's finding at the time
(``jobs/judging/selftest.py``), kept with the row so the page shows what was said then.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Float, Index, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from kernelwatch.db.models import Base
from kernelwatch.db.types import datetime_now, int_pk, json_dict, long_text


class CardSelftest(Base):
    __tablename__ = "card_selftests"
    __table_args__ = (Index("ix_card_selftests_card_created", "card", "created"),)

    id: Mapped[int_pk]
    card: Mapped[str] = mapped_column(String(255))
    device_class: Mapped[str] = mapped_column(String(32), default="cpu")
    gpu_name: Mapped[str] = mapped_column(String(255), default="")
    host: Mapped[str] = mapped_column(String(255), default="")
    worker: Mapped[str] = mapped_column(String(255), default="")
    kernel: Mapped[str] = mapped_column(String(64), default="")
    cv: Mapped[float | None] = mapped_column(Float)
    sample_cv: Mapped[float | None] = mapped_column(Float)
    ratio: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    median_s: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    baseline_cv: Mapped[float | None] = mapped_column(Float)
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[long_text]
    error: Mapped[long_text]
    detail: Mapped[json_dict]
    created: Mapped[datetime_now]


def history(session: Session, card: str, limit: int = 60) -> list[float]:
    """The card's earlier cvs (successful tests only), oldest first."""
    rows = session.scalars(
        select(CardSelftest.cv)
        .where(CardSelftest.card == card, CardSelftest.cv.is_not(None))
        .order_by(CardSelftest.created.desc(), CardSelftest.id.desc())
        .limit(limit)
    ).all()
    return [float(v) for v in reversed(rows) if v is not None]


__all__ = ["CardSelftest", "history"]
