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
2.38.1; it is allowed here only when the server named a local mirror, with the
same hardening as ``jobs/library/mirror.py``: hooks off, system and global
config ignored, a clean environment (``mirror.SAFE_OPTIONS``, ``mirror.git_env``).

The checkout's own ``.gitmodules`` names the submodules and their URLs, and it is
code under test: issue 24 had it point at a local path, and the worker cloned
another repository of the host into the checkout. So every URL is checked before
git may fetch it (:func:`checked_url`): a network URL (``https``, ``http``, ``ssh``,
``git``) over the superproject's own scheme and host (relative URLs resolved
against the superproject's), never ``file``, never a local path, no ``..``, ``%``
or blanks in its path (a mirror prefix must not be escaped). The checked URL is
handed to git with ``-c submodule.<name>.url=...``, so a URL left in the mirror's
shared config by an earlier checkout is never the one used; nested submodules are
checked level by level (git's ``--recursive`` would fetch them unchecked). A
``submodule.<name>.update`` set to a ``!command`` is refused by git for
``.gitmodules`` and cannot come from elsewhere here.

A source that carries a token (``https://x-access-token:TOKEN@host/…``) is split
first (``jobs/library/git_credentials.py``): relative URLs resolve against the URL
without it, and git gets the token as an HTTP header for that scheme and host in its
environment, never on its command line (the host's process list) or in a submodule's
config. What goes from here to a log or an error (the build log shown on the
dashboard) still passes through ``db.store.public_source``: a mirror's own URL may
carry a user.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from kernelwatch.db.store import public_source
from kernelwatch.jobs.errors import ConfigError, InfrastructureError
from kernelwatch.jobs.library import git_credentials
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
                raise ConfigError(f"submodule mirrors: refusing URL {public_source(url)!r}")
    return pairs


def mirror_args(mirrors: Mapping[str, str]) -> list[str]:
    """``-c`` options that make git fetch ``upstream`` URLs from their mirrors.

    Both sides without their credentials: submodule URLs are matched without the
    source's token (:func:`update`), and a mirror's own credentials go to git in its
    environment (:func:`mirror_credentials`), not on its command line.
    """
    args: list[str] = []
    for upstream, mirror in sorted(mirrors.items()):
        target = mirror if "://" in mirror or "@" in mirror else Path(mirror).as_uri()
        target = git_credentials.credentials(target)[0]
        args += ["-c", f"url.{target}.insteadOf={git_credentials.credentials(upstream)[0]}"]
    if any(m.startswith(("file://", "/")) for m in mirrors.values()):
        args += ["-c", "protocol.file.allow=always"]
    return args


def mirror_credentials(mirrors: Mapping[str, str]) -> dict[str, str]:
    """The git settings that send the mirrors' own credentials, one per mirror host."""
    settings: dict[str, str] = {}
    for mirror in mirrors.values():
        settings |= git_credentials.credentials(mirror)[1]
    return settings


NETWORK = ("https", "http", "ssh", "git")
MAX_NESTING = 8
_SCP = re.compile(r"^(?:[\w.+-]+@)?(?P<host>[\w.-]+):(?P<path>(?!//)\S*)$")
_NAME = re.compile(r"^[^=\s]+$")


def origin_of(url: str) -> tuple[str, str] | None:
    """(scheme, host) of a network URL, or None for anything else (a local path,
    ``file://``, git's ``transport::address`` forms)."""
    if "::" in url:
        return None
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme.lower() in NETWORK and parts.hostname:
            return parts.scheme.lower(), parts.hostname.lower()
        return None
    m = _SCP.match(url)
    if m and not url.startswith(("/", ".", "-")):
        return "ssh", m.group("host").lower()
    return None


def resolve(url: str, base: str) -> str:
    """``url`` as git reads it in ``.gitmodules``: a ``./``/``../`` URL is relative to the
    superproject's URL ``base``, anything else stands as it is."""
    if not url.startswith(("./", "../")):
        return url
    scheme_host, sep, path = base.rstrip("/").partition("://")
    prefix = scheme_host + sep if sep else ""
    if not sep:
        path = scheme_host
    if prefix:
        host, _, path = path.partition("/")
        prefix += host + "/"
    parts = [p for p in path.split("/") if p]
    for piece in url.split("/"):
        if piece == "..":
            if parts:
                parts.pop()
        elif piece not in ("", "."):
            parts.append(piece)
    return prefix + "/".join(parts)


def checked_url(name: str, url: str, base: str, origin: tuple[str, str] | None) -> str:
    """The URL git may fetch submodule ``name`` from, or a ``ConfigError`` saying why not.

    ``base``: the superproject's URL (for relative URLs); ``origin``: the (scheme,
    host) every submodule must use (None when the superproject is itself a local
    repository: then any network host, still never a local one).
    """
    full = resolve(url.strip(), base)
    where = public_source(f".gitmodules: submodule {name!r} url {url!r}")
    found = origin_of(full)
    if found is None:
        raise ConfigError(
            f"{where} is not a network URL ({', '.join(NETWORK)}); local paths and file:// "
            "are never fetched"
        )
    path = urlsplit(full).path if "://" in full else full.split(":", 1)[1]
    if any(seg == ".." for seg in path.split("/")) or re.search(r"[%\\\s]", full):
        raise ConfigError(f"{where}: '..', '%', '\\' or blanks in its path are refused")
    if origin is not None and found != origin:
        raise ConfigError(
            f"{where} is {found[0]}://{found[1]}; submodules come only over the "
            f"superproject's own scheme and host ({origin[0]}://{origin[1]})"
        )
    return full


def declared(checkout: Path) -> dict[str, tuple[str, str]]:
    """``{path: (name, url)}`` of the submodules ``.gitmodules`` declares (none: ``{}``)."""
    gitmodules = checkout / ".gitmodules"
    if gitmodules.is_symlink():
        raise ConfigError(".gitmodules is a symbolic link; refused")
    if not gitmodules.is_file():
        return {}
    proc = subprocess.run(
        ["git", *SAFE_OPTIONS, "config", "-f", str(gitmodules), "--null", "--get-regexp"]
        + [r"^submodule\..*\.(path|url)$"],
        capture_output=True,
        timeout=60,
        env=git_env(),
        check=False,
    )
    fields: dict[str, dict[str, str]] = {}
    for item in proc.stdout.decode("utf-8", errors="replace").split("\0"):
        key, _, value = item.partition("\n")
        if not key.startswith("submodule."):
            continue
        name, _, var = key[len("submodule.") :].rpartition(".")
        fields.setdefault(name, {})[var] = value
    return {f["path"]: (name, f.get("url", "")) for name, f in fields.items() if "path" in f}


def update(
    checkout: Path,
    paths: Sequence[str] = (),
    mirrors: Mapping[str, str] | None = None,
    timeout: float = 900.0,
    superproject: str = "",
) -> str:
    """Initialise and check out ``paths`` (all submodules when empty), nested ones too;
    return git's log.

    ``superproject``: the repository's URL (``Mirror.source``): submodule URLs must
    use its scheme and host, relative ones are resolved against it. A URL that may
    not be fetched is a ``ConfigError`` (the commit's fault, named). Raises
    InfrastructureError (retried, never blamed on the code) when git fails: an
    unreachable mirror is the fleet's problem, not the commit's.
    """
    base, settings = git_credentials.credentials(superproject)
    settings |= mirror_credentials(mirrors or {})
    auth = git_credentials.config_env(settings)
    origin = origin_of(base)
    deadline = time.monotonic() + timeout
    return _update(checkout, paths, mirrors or {}, deadline, base, origin, 0, auth)


def _update(
    checkout: Path,
    paths: Sequence[str],
    mirrors: Mapping[str, str],
    deadline: float,
    base: str,
    origin: tuple[str, str] | None,
    depth: int,
    auth: Mapping[str, str],
) -> str:
    if depth > MAX_NESTING:
        raise ConfigError(f"submodules nested deeper than {MAX_NESTING} levels; refused")
    known = declared(checkout)
    wanted = list(paths) or sorted(known)
    urls: dict[str, str] = {}
    options: list[str] = []
    for path in wanted:
        if path not in known:  # git would say "did not match any file(s) known to git"
            raise ConfigError(
                f"install.submodules names {path!r}, which .gitmodules at this commit does "
                f"not declare (it declares: {', '.join(sorted(known)) or 'none'})"
            )
        name, url = known[path]
        if not _NAME.match(name):
            raise ConfigError(f".gitmodules: submodule name {name!r} refused")
        urls[path] = checked_url(name, url, base, origin)
        options += ["-c", f"submodule.{name}.url={urls[path]}"]
    if not wanted:
        return ""
    argv = ["git", *SAFE_OPTIONS, *mirror_args(mirrors), *options, "-C", str(checkout)]
    argv += ["submodule", "update", "--init", "--", *wanted]
    env = {**git_env(), **auth}  # the source's token, if any: never on the argv
    local = any(not origin_of(m) and "@" not in m for m in mirrors.values())
    # file only where the server named a local mirror; every URL above was checked
    env["GIT_ALLOW_PROTOCOL"] = ":".join((*NETWORK, "file") if local else NETWORK)
    left = deadline - time.monotonic()
    if left <= 0:
        raise InfrastructureError("submodule update timed out")
    code, log, timed_out = run_logged(argv, cwd=checkout, env=env, timeout=left)
    # the source's token is in env, not here; a user in a .gitmodules URL would be
    header = public_source("$ " + " ".join(argv)) + "\n"
    log = public_source(log)
    if timed_out:
        raise InfrastructureError(f"submodule update timed out after {left:.0f}s\n{log}")
    if code != 0:
        raise InfrastructureError(f"submodule update failed (exit {code}):\n{log[-4000:]}")
    out = header + log
    for path, url in urls.items():  # each level checked before git fetches it
        if (checkout / path / ".gitmodules").is_file():
            out += _update(checkout / path, (), mirrors, deadline, url, origin, depth + 1, auth)
    return out


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
