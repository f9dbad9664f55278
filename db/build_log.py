"""The line a run's build log gives each commit environment it used, and its reader.

The worker appends one such line per environment a run needs (the candidate's, then a
paired run's baseline, or a released version's install: ``run --version``); ``show``
and the GPU driver read them back. A build's own output
runs to megabytes of compiler lines around them, and what comes back from a GPU host is
the log's head and tail: FlashAttention-3's first build line fell between the two on
2026-12-06, so its cold build time was known only by subtraction. Parsed here from the
whole stored log, every environment's time is in the run's summary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# A released version's environment is named by its pin, and its profile is this one.
RELEASE_PROFILE = "release"

_LINE = re.compile(
    r"^(?P<commit>[0-9a-f]{7,40}|[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+): "
    r"(?:(?:built|installed) in (?P<seconds>\d+(?:\.\d+)?) s"
    r"|(?P<cached>cached environment)) \((?P<profile>[^)]*) profile\)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class EnvironmentBuild:
    """One environment a run used: its commit (12 hex digits) or, for a released
    version, its pin (``flashinfer-python==0.6.0``); the build's or the install's
    seconds, or None where it came from the environment cache; and the install profile
    (:data:`RELEASE_PROFILE` for a version)."""

    commit: str
    seconds: float | None
    profile: str

    @property
    def released(self) -> bool:
        return "==" in self.commit

    def text(self) -> str:
        verb = "installed" if self.released else "built"
        how = "cached" if self.seconds is None else f"{verb} in {self.seconds:.0f} s"
        return f"{self.commit} {how}"


def environment_line(commit: str, seconds: float | None, profile: str, path: Path) -> str:
    """The build log's line for one environment (``seconds`` None: from the cache)."""
    how = "cached environment" if seconds is None else f"built in {seconds:.0f} s"
    return f"{commit[:12]}: {how} ({profile} profile) at {path}\n"


def release_line(pin: str, seconds: float | None, path: Path) -> str:
    """The build log's line for a released version's environment (``pin``:
    ``name==version``; ``seconds`` None: from the cache)."""
    how = "cached environment" if seconds is None else f"installed in {seconds:.0f} s"
    return f"{pin}: {how} ({RELEASE_PROFILE} profile) at {path}\n"


def environments(log: str) -> list[EnvironmentBuild]:
    """Every environment line of ``log``, in the order the run got them."""
    return [
        EnvironmentBuild(m["commit"], None if m["cached"] else float(m["seconds"]), m["profile"])
        for m in _LINE.finditer(log)
    ]


def environments_text(builds: list[EnvironmentBuild]) -> str:
    """``c224b361a9ca built in 120 s, 2b90c90e929b cached (trimmed profile)``, or
    ``flashinfer-python==0.6.0 installed in 41 s (release profile)``: one line."""
    profiles = sorted({b.profile for b in builds})
    return ", ".join(b.text() for b in builds) + f" ({'/'.join(profiles)} profile)"


__all__ = [
    "RELEASE_PROFILE",
    "EnvironmentBuild",
    "environment_line",
    "environments",
    "environments_text",
    "release_line",
]
