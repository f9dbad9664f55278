"""Fleet state: one heartbeat row per worker process, updated while it lives.

A worker writes its identity (host, GPU name and UUID, driver, CUDA, torch and
triton versions) when it starts and refreshes clocks, state and current run on
every beat. The dashboard's fleet page and ``/metrics`` read it; a worker whose
``last_seen`` is old is presumed dead.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from kernelwatch.db.models import Base
from kernelwatch.db.types import datetime_now, datetime_opt, int_pk, json_dict


class WorkerHeartbeat(Base):
    """The latest known state of one worker process (unique by Celery node name)."""

    __tablename__ = "worker_heartbeats"

    id: Mapped[int_pk]
    name: Mapped[str] = mapped_column(String(255), unique=True)
    host: Mapped[str] = mapped_column(String(255), default="")
    queues: Mapped[str] = mapped_column(String(255), default="")
    device_class: Mapped[str] = mapped_column(String(32), default="cpu")
    gpu_name: Mapped[str] = mapped_column(String(255), default="")
    gpu_uuid: Mapped[str] = mapped_column(String(64), default="")
    state: Mapped[str] = mapped_column(String(16), default="idle")  # idle|busy|unhealthy|gone
    current_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    sm_mhz: Mapped[int | None] = mapped_column(Integer)
    versions: Mapped[json_dict]  # driver, cuda, torch, triton, python, kernelwatch
    started: Mapped[datetime_now]
    last_seen: Mapped[datetime_now]
    stopped: Mapped[datetime_opt]


def beat(session: Session, name: str, **fields: Any) -> WorkerHeartbeat:
    """Insert or update the heartbeat of worker ``name``; the caller commits."""
    row = session.scalars(select(WorkerHeartbeat).where(WorkerHeartbeat.name == name)).first()
    if row is None:
        row = WorkerHeartbeat(name=name)
        session.add(row)
    for key, value in fields.items():
        setattr(row, key, value)
    row.last_seen = datetime.now(UTC)
    session.flush()
    return row


def live_workers(session: Session, within_s: float = 120) -> list[WorkerHeartbeat]:
    """Workers seen in the last ``within_s`` seconds and not stopped."""
    cutoff = datetime.now(UTC) - timedelta(seconds=within_s)
    q = select(WorkerHeartbeat).where(
        WorkerHeartbeat.last_seen >= cutoff, WorkerHeartbeat.stopped.is_(None)
    )
    return list(session.scalars(q.order_by(WorkerHeartbeat.name)))
