"""A table in one environment variable: a JSON object, or ``key=value`` pairs.

Why: server settings that map repositories to things (``KW_SUBMODULE_MIRRORS``:
upstream URL to mirror; ``KW_REPO_CONFIGS``: source to a service-side file) are one
variable each, written by hand in a unit file or a ``.env``. Both take the same two
spellings, parsed here once: ``{"a": "b"}``, or ``a=b`` pairs separated by commas or
newlines. What the keys and values must look like is each caller's to check.
"""

from __future__ import annotations

import json
import re

from kernelwatch.jobs.errors import ConfigError


def parse_mapping(
    text: str | None, what: str, form: str, *, last_equals: bool = False
) -> dict[str, str]:
    """``{key: value}`` of ``text``; errors start with ``what`` and name the ``form``.

    ``last_equals``: split a pair at its last ``=`` (the value is a path, the key a URL
    that may hold one), else at its first (both sides URLs, the key without one).
    """
    if not text or not text.strip():
        return {}
    raw = text.strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{what}: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            shape = form.replace("=", ": ")
            raise ConfigError(f"{what}: expected a JSON object of {shape} strings")
        return {str(k): v for k, v in data.items()}
    pairs: dict[str, str] = {}
    for item in re.split(r"[,\n]", raw):
        if not item.strip():
            continue
        split = item.strip().rpartition if last_equals else item.strip().partition
        key, sep, value = split("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what}: {item.strip()!r} is not {form}")
        pairs[key.strip()] = value.strip()
    return pairs


__all__ = ["parse_mapping"]
