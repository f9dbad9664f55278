"""Git submodules of a checkout, fetched through configurable mirrors.

FlashAttention pins CUTLASS as the submodule ``csrc/cutlass`` and moves the pin
often, so every commit needs its own CUTLASS. GPU hosts are often offline or
behind a proxy; the server config maps upstream URLs to mirrors (a local bare
repository, an internal Git server), applied with git's own rewriting::

    git -c url.<mirror>.insteadOf=<upstream> submodule update --init -- <paths>

The mapping comes from the server (``KW_SUBMODULE_MIRRORS``), never from the
repository under test. Prefix rewriting means one entry can cover a whole host
(``https://github.com/`` → ``file:///srv/mirrors/github/``). Local mirrors need
the ``file`` transport, which git refuses for submodules by default since
2.38.1; it is allowed here for the URLs the server named, and the same
protocol allow-list as ``jobs/library/mirror.py`` applies otherwise, with the
same hardening: hooks off, system and global config ignored, a clean environment
(``mirror.SAFE_OPTIONS``, ``mirror.git_env``). The checkout's own ``.gitmodules``
still names the submodules, but ``submodule.<name>.update`` set to a ``!command``
is refused by git for ``.gitmodules`` and cannot come from elsewhere here.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from kernelwatch.jobs.errors import ConfigError, InfrastructureError
from kernelwatch.jobs.library.mapping import parse_mapping
from kernelwatch.jobs.library.mirror import SAFE_OPTIONS, git_env
from kernelwatch.worker.process import run_logged

_URL = re.compile(r"^(https?|ssh|git|file)://\S+$|^[\w.-]+@[\w.-]+:\S+$|^/\S+$")


def parse_mirrors(text: str | None) -> dict[str, str]:
    """``{upstream: mirror}`` from JSON (``{"https://github.com/": "file:///m/"}``) or
    ``upstream=mirror`` pairs separated by commas or newlines. Refuses odd URLs."""
    pairs = parse_mapping(text, "submodule mirrors", "upstream=mirror")
    for upstream, mirror in pairs.items():
        for url in (upstream, mirror):
            if not _URL.match(url) or url.lower().startswith("ext::"):
                raise ConfigError(f"submodule mirrors: refusing URL {url!r}")
    return pairs


def mirror_args(mirrors: Mapping[str, str]) -> list[str]:
    """``-c`` options that make git fetch ``upstream`` URLs from their mirrors."""
    args: list[str] = []
    for upstream, mirror in sorted(mirrors.items()):
        target = mirror if "://" in mirror or "@" in mirror else Path(mirror).as_uri()
        args += ["-c", f"url.{target}.insteadOf={upstream}"]
    if any(m.startswith(("file://", "/")) for m in mirrors.values()):
        args += ["-c", "protocol.file.allow=always"]
    return args


def update(
    checkout: Path,
    paths: Sequence[str] = (),
    mirrors: Mapping[str, str] | None = None,
    timeout: float = 900.0,
) -> str:
    """Initialise and check out ``paths`` (all submodules when empty); return git's log.

    Raises InfrastructureError (retried, never blamed on the code) when git fails:
    an unreachable mirror is the fleet's problem, not the commit's.
    """
    argv = ["git", *SAFE_OPTIONS, *mirror_args(mirrors or {}), "-C", str(checkout)]
    argv += ["submodule", "update", "--init", "--recursive", "--", *paths]
    env = git_env()
    code, log, timed_out = run_logged(argv, cwd=checkout, env=env, timeout=timeout)
    header = "$ " + " ".join(argv) + "\n"
    if timed_out:
        raise InfrastructureError(f"submodule update timed out after {timeout:.0f}s\n{log}")
    if code != 0:
        raise InfrastructureError(f"submodule update failed (exit {code}):\n{log[-4000:]}")
    return header + log


def pinned(checkout: Path, path: str) -> str | None:
    """The commit a submodule path is pinned to at HEAD (None if it is no submodule)."""
    try:
        out = subprocess.run(
            ["git", *SAFE_OPTIONS, "-C", str(checkout), "rev-parse", f"HEAD:{path}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=git_env(),
        ).stdout.strip()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return out or None
