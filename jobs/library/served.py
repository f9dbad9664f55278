"""Service-side ``.kernelwatch.toml`` files, for libraries that carry none of their own.

Why: a library kernelwatch watches may never merge a ``.kernelwatch.toml``
(FlashAttention-3, Liger-Kernel), and a commit from before it did has none. The
service then says how to build and run it: ``KW_REPO_CONFIGS`` maps a repository
source to a file on the service's machines, as JSON (``{"https://github.com/
linkedin/Liger-Kernel": "/etc/kernelwatch/liger.kernelwatch.toml"}``) or as
``source=path`` pairs separated by commas or newlines. For a mapped source that
file is read instead of the repository's at every commit (design.md: "server-side
config may override it"), by the one reader (``repoconfig.read_at``), so the
webhook planner, the worker, bisections and build-ahead all see the same table.

Sources match as ``Mirror`` spells them: a URL without a trailing ``/`` or
``.git``, a local path made absolute. Paths must be absolute: the API process and
the workers do not share a working directory. The file is trusted configuration
(it may name install commands); the code it builds still runs sandboxed.

What this module does not do: validate the file (``repoconfig.parse`` does, with
errors that name it), or fetch it from anywhere: every machine that plans or
runs needs it at the same path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.mapping import parse_mapping

VARIABLE = "KW_REPO_CONFIGS"
_URL = re.compile(r"^[\w.+-]+://|^[\w.-]+@[\w.-]+:")


def source_key(source: str) -> str:
    """``source`` as the table and ``Mirror.source`` both reduce to it."""
    s = source.strip()
    if _URL.match(s):
        return s.rstrip("/").removesuffix(".git")
    return str(Path(s).expanduser().resolve())


def parse_table(text: str | None) -> dict[str, Path]:
    """``{source key: file}`` from ``KW_REPO_CONFIGS``; a malformed table is a ConfigError."""
    table: dict[str, Path] = {}
    for source, path in parse_mapping(text, VARIABLE, "source=path", last_equals=True).items():
        if source.startswith("-"):
            raise ConfigError(f"{VARIABLE}: refusing source {source!r}")
        if not Path(path).is_absolute():
            raise ConfigError(f"{VARIABLE}: {path!r} (for {source}) must be an absolute path")
        table[source_key(source)] = Path(path)
    return table


@functools.lru_cache(maxsize=8)
def table(text: str | None) -> Mapping[str, Path]:
    """``parse_table`` of the setting's text, parsed once per text (every run reads it)."""
    return MappingProxyType(parse_table(text))


def served_file(source: str, table: Mapping[str, Path] | None) -> Path | None:
    """The service-side file for ``source``, or None when the repository's own is used."""
    if not table:
        return None
    return table.get(source_key(source))


def read_served(path: Path, source: str, limit: int | None = None) -> str:
    """The text of a service-side file; unreadable, not UTF-8 or over ``limit`` bytes
    is a ConfigError naming both."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1) if limit is not None else fh.read()
    except OSError as exc:
        raise ConfigError(f"{VARIABLE}: cannot read {path} (for {source}): {exc}") from exc
    if limit is not None and len(raw) > limit:
        raise ConfigError(f"{VARIABLE}: {path} (for {source}) is over {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{VARIABLE}: {path} (for {source}) is not UTF-8 text") from exc


__all__ = ["VARIABLE", "parse_table", "read_served", "served_file", "source_key", "table"]
