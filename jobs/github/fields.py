"""Payload fields checked against the columns and programs they end up in.

A signed payload is still data from outside. Whatever of it is written to the
database or handed to git must fit there, or PostgreSQL and SQLite raise deep in a
transaction and the delivery gets a 500 that GitHub redelivers forever. So every
string kernelwatch keeps is checked here first: valid UTF-8 (no lone surrogates,
which JSON's ``\\ud800`` escapes can produce), no NUL or other control characters
(PostgreSQL text refuses NUL; git refuses it in arguments), at most the column's
length; and integers fit the 32-bit columns (PR numbers). A field that fails
raises :class:`PayloadError`, which the HTTP layer answers with 400.

What this does not do: decide what a field means (events.py does that).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from kernelwatch.db.types import INT_MAX

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PayloadError(ValueError):
    """The payload lacks a field kernelwatch needs, or a field has the wrong shape."""


def text(value: Any, where: str, max_len: int = 255) -> str:
    """``value`` as a string that fits a ``String(max_len)`` column and a git argument."""
    if not isinstance(value, str):
        raise PayloadError(f"{where} must be a string")
    if len(value) > max_len:
        raise PayloadError(f"{where} is longer than {max_len} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(f"{where} is not valid Unicode (lone surrogate)") from None
    if _CONTROL.search(value):
        raise PayloadError(f"{where} contains control characters")
    return value


def int32(value: Any, where: str) -> int:
    """A positive integer that fits a 32-bit ``Integer`` column (PostgreSQL, SQLite)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= INT_MAX:
        raise PayloadError(f"{where} must be a positive integer below 2^31")
    return value


def timestamp(value: Any) -> datetime | None:
    """An ISO 8601 time such as GitHub's ``updated_at``; None if absent or malformed."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


__all__ = ["PayloadError", "int32", "text", "timestamp"]
