"""Pages and deep links: every view is addressable by query parameters.

``?page=run&run=12``, ``?page=compare&a=3&b=4``, ``?page=trend&repo=1&case=<id>``:
a commit status ``target_url`` or a link in a PR comment opens exactly that view.
Pages read their state from ``st.query_params`` on the first run of a session and
write it back when a widget changes, so the address bar always names the view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from kernelwatch.db.types import INT_MAX


@dataclass(frozen=True)
class PageInfo:
    key: str
    title: str
    params: tuple[str, ...]  # query parameters the page owns


PAGES: tuple[PageInfo, ...] = (
    PageInfo("runs", "Runs", ("run", "repo", "state", "device")),
    PageInfo("trend", "Trends", ("repo", "device", "suite", "kernel", "case", "metric")),
    PageInfo("regressions", "Regressions", ("repo", "state", "regression")),
    PageInfo("compare", "Compare", ("a", "b", "kernel", "x", "y")),
    PageInfo("fleet", "Fleet", ()),
    PageInfo("roofline", "Roofline", ("run", "repo")),
    PageInfo("bisect", "Bisections", ("id",)),
)
BY_KEY = {p.key: p for p in PAGES}
# Spellings a link may use for a page.
ALIASES = {
    "run": "runs",
    "trends": "trend",
    "regression": "regressions",
    "workers": "fleet",
    "bisection": "bisect",
    "bisections": "bisect",
}


def page_key(raw: str | None) -> str:
    if not raw:
        return "runs"
    raw = raw.strip().lower()
    raw = ALIASES.get(raw, raw)
    return raw if raw in BY_KEY else "runs"


def unknown_page(raw: str | None) -> str | None:
    """``raw`` when it names no page (a mistyped link), else None: the app says so
    instead of silently showing Runs (issue 18)."""
    if not raw:
        return None
    key = ALIASES.get(raw.strip().lower(), raw.strip().lower())
    return None if key in BY_KEY else raw


def link(page: str, **params: Any) -> str:
    """A relative deep link to a view: ``?page=compare&a=3&b=4`` (empty values dropped)."""
    query = {"page": page, **{k: v for k, v in params.items() if v not in (None, "")}}
    return "?" + urlencode({k: str(v) for k, v in query.items()})


def param(name: str) -> str | None:
    value = st.query_params.get(name)
    return value if value else None


def int_param(name: str) -> int | None:
    """An id from the address, or None where it is not one: not ASCII digits (``²`` is a
    digit to ``str.isdigit``), or beyond what an id column holds (``?run=`` with 25
    digits raised OverflowError inside the query, a traceback on the page)."""
    value = (param(name) or "").strip()
    digits = value.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > len(str(INT_MAX)):
        return None
    number = int(value)
    return number if abs(number) <= INT_MAX else None


def set_params(values: Mapping[str, Any]) -> None:
    """Write widget state back to the address bar (None or "" removes a parameter)."""
    for k, v in values.items():
        current = st.query_params.get(k)
        if v is None or v == "":
            if current is not None:
                del st.query_params[k]
        elif current != str(v):
            st.query_params[k] = str(v)


def index_of(options: list[Any], value: Any, default: int = 0) -> int:
    """Position of ``value`` among options (compared as text, as query params are)."""
    if value is None:
        return default
    for i, option in enumerate(options):
        if str(option) == str(value):
            return i
    return default
