"""Column types shared by the models, as ``Annotated`` aliases (warehouse style)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from sqlalchemy import JSON, DateTime, String, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


# JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")

# The largest value an Integer column (ids, PR numbers) holds on every supported
# database: PostgreSQL's is 32 bits. A larger number from outside is no row, not a query.
INT_MAX = 2**31 - 1

int_pk = Annotated[int, mapped_column(primary_key=True)]
datetime_now = Annotated[datetime, mapped_column(DateTime(timezone=True), default=utcnow)]
datetime_opt = Annotated[datetime | None, mapped_column(DateTime(timezone=True))]
sha = Annotated[str, mapped_column(String(64))]
short_text = Annotated[str, mapped_column(String(255))]
long_text = Annotated[str, mapped_column(Text, default="")]
json_dict = Annotated[dict[str, Any], mapped_column(JSONType, default=dict)]
