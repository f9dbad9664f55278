"""Library specs: *which* build of a library a run measures.

A run measures either a **commit** of a repository (built from source with the
repository's install recipe) or a **released version** (``flashinfer-python==0.5.3``)
installed from a package index or a local wheelhouse, or a **wheel file** given
by path. Versions and commits are compared exactly alike; only how the
environment is made differs (``kernelwatch.worker.venvs``).

Specs come from users (``kernelwatch run --version SPEC``) and end up in pip's
argument list, so parsing is strict: a plain PEP 508 name, ``==``, a PEP 440
version, nothing else — no other operators, extras, markers, URLs or options —
or a path to an existing ``.whl`` file whose name follows the wheel naming
convention. Everything else is refused with a sentence saying why.

``key`` is the stable identity of a spec (the series a result belongs to);
the environment cache adds where it came from and the toolchain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelwatch.jobs.errors import ConfigError

# PEP 508 names; PEP 440 public versions with an optional local label.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = (
    r"(?:\d+!)?\d+(?:\.\d+)*"  # epoch, release
    r"(?:(?:a|b|rc)\d+)?"  # pre-release
    r"(?:\.post\d+)?(?:\.dev\d+)?"  # post, dev
    r"(?:\+[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?"  # local label (+cu130)
)
_PIN = re.compile(rf"^({_NAME})==({_VERSION})$")
_WHEEL = re.compile(rf"^({_NAME})-({_VERSION})(?:-\d[\w]*)?-[\w.]+-[\w.]+-[\w.]+\.whl$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def normalize_name(name: str) -> str:
    """PEP 503 normalized project name (``Flash_Attn`` → ``flash-attn``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class VersionSpec:
    """``name==version`` from an index or a wheelhouse (``wheel`` set: that very file)."""

    name: str
    version: str
    wheel: Path | None = None

    @property
    def kind(self) -> str:
        return "version"

    @property
    def key(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def requirement(self) -> str:
        """What pip is asked to install: the pin, or the wheel's path."""
        return str(self.wheel) if self.wheel else self.key


@dataclass(frozen=True)
class CommitSpec:
    """A commit of a repository (``source`` as ``kernelwatch run`` takes it)."""

    source: str
    commit: str

    @property
    def kind(self) -> str:
        return "commit"

    @property
    def key(self) -> str:
        return f"{self.source}@{self.commit}"


LibrarySpec = VersionSpec | CommitSpec


def parse_version_spec(text: str) -> VersionSpec:
    """``name==version`` or a path to a ``.whl`` file; anything else is a ConfigError."""
    raw = text.strip()
    if not raw or raw.startswith("-"):
        raise ConfigError(f"not a library spec: {text!r}")
    m = _PIN.match(raw)
    if m:
        return VersionSpec(normalize_name(m.group(1)), m.group(2))
    if raw.endswith(".whl"):
        return _wheel_spec(raw)
    if any(op in raw for op in (">", "<", "~=", "!=", "===", "@", ";", "[", " ")):
        raise ConfigError(
            f"{text!r}: only exact pins name==version (or a wheel path) are accepted, "
            "so that a run measures one known build"
        )
    raise ConfigError(f"{text!r}: expected name==version (PEP 508 name, PEP 440 version)")


def _wheel_spec(raw: str) -> VersionSpec:
    path = Path(raw).expanduser()
    m = _WHEEL.match(path.name)
    if not m:
        raise ConfigError(f"{raw!r}: not a wheel file name (name-version-python-abi-platform.whl)")
    if not path.is_file():
        raise ConfigError(f"wheel not found: {path}")
    return VersionSpec(normalize_name(m.group(1)), m.group(2), path.resolve())


def parse_commit_spec(source: str, commit: str) -> CommitSpec:
    if not source or source.startswith("-"):
        raise ConfigError(f"not a repository source: {source!r}")
    if not _SHA.match(commit):
        raise ConfigError(f"not a commit id: {commit!r} (resolve names to a sha first)")
    return CommitSpec(source, commit)


def parse_index(index_url: str | None, find_links: str | None) -> tuple[str | None, str | None]:
    """Validate where versions come from: an http(s)/file index URL and/or a wheelhouse dir."""
    if index_url is not None and not re.match(r"^(https?|file)://\S+$", index_url):
        raise ConfigError(f"index URL must be http(s):// or file://, not {index_url!r}")
    if find_links is not None:
        if find_links.startswith("-"):
            raise ConfigError(f"not a wheelhouse: {find_links!r}")
        if "://" not in find_links and not Path(find_links).is_dir():
            raise ConfigError(f"wheelhouse directory not found: {find_links}")
    return index_url, find_links
