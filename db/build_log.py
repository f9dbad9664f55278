"""The line a run's build log gives each commit environment it used, and its reader.

The worker appends one such line per environment a run needs (the candidate's, then a
paired run's baseline); ``show`` and the GPU driver read them back. A build's own output
runs to megabytes of compiler lines around them, and what comes back from a GPU host is
the log's head and tail: FlashAttention-3's first build line fell between the two on
2026-12-06, so its cold build time was known only by subtraction. Parsed here from the
whole stored log, every environment's time is in the run's summary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(
    r"^(?P<commit>[0-9a-f]{7,40}): (?:built in (?P<seconds>\d+(?:\.\d+)?) s"
    r"|(?P<cached>cached environment)) \((?P<profile>[^)]*) profile\)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class EnvironmentBuild:
    """One environment a run used: its commit (12 hex digits), the build's seconds, or
    None where it came from the environment cache, and the install profile."""

    commit: str
    seconds: float | None
    profile: str

    def text(self) -> str:
        how = "cached" if self.seconds is None else f"built in {self.seconds:.0f} s"
        return f"{self.commit} {how}"


def environment_line(commit: str, seconds: float | None, profile: str, path: Path) -> str:
    """The build log's line for one environment (``seconds`` None: from the cache)."""
    how = "cached environment" if seconds is None else f"built in {seconds:.0f} s"
    return f"{commit[:12]}: {how} ({profile} profile) at {path}\n"


def environments(log: str) -> list[EnvironmentBuild]:
    """Every environment line of ``log``, in the order the run got them."""
    return [
        EnvironmentBuild(m["commit"], None if m["cached"] else float(m["seconds"]), m["profile"])
        for m in _LINE.finditer(log)
    ]


def environments_text(builds: list[EnvironmentBuild]) -> str:
    """``c224b361a9ca built in 120 s, 2b90c90e929b cached (trimmed profile)``: one line."""
    profiles = sorted({b.profile for b in builds})
    return ", ".join(b.text() for b in builds) + f" ({'/'.join(profiles)} profile)"


__all__ = ["EnvironmentBuild", "environment_line", "environments", "environments_text"]
