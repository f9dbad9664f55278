"""Git access through a local mirror of each watched repository.

Every git call is an argument list (never a shell string), so a repository URL
or branch name cannot inject commands; sources that look like options, and
git's ``ext::`` transport, are refused. And git itself never runs code a
repository could have planted: hooks are off (``core.hooksPath=/dev/null``, so
a ``<mirror>/hooks/post-checkout`` written by some build is never run), system
and global configuration are ignored (no ``~/.gitconfig`` with its own
``core.hooksPath``, ``core.fsmonitor`` or ``url.insteadOf``), and the environment
holds ``PATH`` and an empty ``$HOME`` only, never the worker's secrets. Mirrors
live in the data directory, one per source, guarded by a file lock so several
worker processes can share them.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kernelwatch.db.store import public_source
from kernelwatch.jobs.errors import CommitNotFound, InfrastructureError, SourceError
from kernelwatch.jobs.library import git_credentials

GIT_TIMEOUT_S = 600
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_SAFE_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
    "GIT_CONFIG_NOSYSTEM": "1",
}
# before any subcommand: what a repository's or a user's config could turn into code
SAFE_OPTIONS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "protocol.ext.allow=never",
)


def git_env() -> dict[str, str]:
    """The environment of every git the worker runs: PATH, locale, an empty $HOME."""
    return {**tool_env(), **_SAFE_ENV}


def tool_env(base: Mapping[str, str] | None = None, home: Path | None = None) -> dict[str, str]:
    """The environment of the worker's *own* tools (git, pip) that touch repository data.

    Only ``PATH`` and the locale survive; ``HOME`` is an empty directory, so no
    ``~/.gitconfig`` (``core.hooksPath``, ``url.insteadOf``) or ``pip.conf`` that
    code under test may once have written is read, and no secret is passed on.
    """
    base = os.environ if base is None else base
    env = {k: base[k] for k in ("PATH", "LANG", "LC_ALL", "TZ") if k in base}
    env["HOME"] = str(home or empty_home())
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INPUT="1",
        PYTHONNOUSERSITE="1",
    )
    return env


@functools.cache
def empty_home() -> Path:
    """A directory that stays empty: the ``$HOME`` of the worker's git and pip."""
    path = Path(tempfile.mkdtemp(prefix="kw-empty-home-"))
    path.chmod(0o555)
    return path


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    parents: tuple[str, ...]
    author: str
    committed_at: datetime
    message: str


def git(
    *args: str,
    cwd: Path | None = None,
    timeout: float = GIT_TIMEOUT_S,
    auth: Mapping[str, str] | None = None,
) -> str:
    """Run git with an argument list; raise with git's own message on failure.

    ``auth``: a source's credentials as git configuration in the environment
    (``git_credentials.split``), so they never stand on git's command line.
    """
    env = {**git_env(), **(auth or {})}
    try:
        proc = subprocess.run(
            ["git", *SAFE_OPTIONS, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise InfrastructureError(f"git {args[0]} timed out after {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(
            proc.returncode, ["git", *args], proc.stdout, proc.stderr
        )
    return proc.stdout


def validate_source(source: str) -> str:
    """A local path (made absolute) or a URL; refuse option-like and ext:: sources."""
    if not source or source.startswith("-") or source.lower().startswith("ext::"):
        raise SourceError(f"refusing repository source {public_source(source)!r}")
    if "://" in source or re.match(r"^[\w.-]+@[\w.-]+:", source):
        return source
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise SourceError(f"repository path does not exist: {path}")
    try:
        git("-C", str(path), "rev-parse", "--git-dir", timeout=30)
    except subprocess.CalledProcessError as exc:
        raise SourceError(f"not a git repository: {path}") from exc
    return str(path)


def repository_name(source: str) -> str:
    """'owner/name' for URLs, the folder name for local paths."""
    s = source.rstrip("/").removesuffix(".git")
    if "://" in s or "@" in s:
        parts = re.split(r"[/:]", s)
        return "/".join(p for p in parts[-2:] if p)
    return Path(s).name


class Mirror:
    """A bare mirror of one source under ``root``; fetched on demand."""

    def __init__(self, root: Path, source: str) -> None:
        self.source = validate_source(source)
        # what git is told: the URL without its token, the token in git's environment
        self.url, self._auth = git_credentials.split(self.source)
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        self.path = root / f"{digest}.git"
        self._lock_path = root / f"{digest}.lock"
        root.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        with open(self._lock_path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def sync(self) -> None:
        """Clone the mirror if missing (or corrupt), else fetch everything."""
        with self.locked():
            if self.path.exists() and not self._healthy():
                _rmtree(self.path)
            try:
                if not self.path.exists():
                    git("clone", "--mirror", "--quiet", "--", self.url, str(self.path),
                        auth=self._auth)  # fmt: skip
                else:
                    # a mirror cloned before kept the token in its config: no longer
                    self._git("config", "remote.origin.url", self.url)
                    git("--git-dir", str(self.path), "fetch", "--prune", "--quiet", "origin",
                        auth=self._auth)  # fmt: skip
            except subprocess.CalledProcessError as exc:
                said = (exc.stderr or "").strip() or str(exc)
                raise SourceError(
                    public_source(f"cannot fetch {self.source}: {said}")
                ) from None  # the chained error's command line holds the source as given

    def _healthy(self) -> bool:
        try:
            git("--git-dir", str(self.path), "rev-parse", "--git-dir", timeout=30)
            return True
        except subprocess.CalledProcessError:
            return False

    def _git(self, *args: str) -> str:
        return git("--git-dir", str(self.path), *args)

    def resolve(self, rev: str) -> str:
        """Full sha of ``rev``; CommitNotFound if it does not name a commit here."""
        if not rev or rev.startswith("-"):
            raise CommitNotFound(f"invalid revision {rev!r}")
        try:
            return self._git(
                "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"
            ).strip()
        except subprocess.CalledProcessError:
            raise CommitNotFound(
                f"commit {rev!r} not found in {public_source(self.source)}"
            ) from None

    def has_commit(self, sha: str) -> bool:
        try:
            self.resolve(sha)
            return True
        except CommitNotFound:
            return False

    def range(self, spec: str) -> list[str]:
        """Commits of ``A..B`` oldest first (first-parent line, as a branch's history)."""
        if ".." not in spec:
            raise CommitNotFound(f"not a range: {spec!r} (expected A..B)")
        a, b = spec.split("..", 1)
        a_sha, b_sha = self.resolve(a), self.resolve(b)
        out = self._git("rev-list", "--reverse", "--first-parent", f"{a_sha}..{b_sha}")
        return [line for line in out.split() if line]

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two revisions (a PR's baseline), None if unrelated."""
        a_sha, b_sha = self.resolve(a), self.resolve(b)
        try:
            out = self._git("merge-base", a_sha, b_sha)
        except subprocess.CalledProcessError:
            return None  # exit 1: no common ancestor
        return out.strip() or None

    def info(self, sha: str) -> CommitInfo:
        fmt = "%H%x00%P%x00%an%x00%ct%x00%B"
        out = self._git("show", "-s", f"--format={fmt}", "--end-of-options", sha)
        full, parents, author, ts, message = out.split("\x00", 4)
        return CommitInfo(
            sha=full.strip(),
            parents=tuple(parents.split()),
            author=author,
            committed_at=datetime.fromtimestamp(int(ts), UTC),
            message=message.strip(),
        )

    def read_file(self, sha: str, path: str) -> str | None:
        """A file's text at a commit, or None if it does not exist there."""
        try:
            return self._git("show", f"{sha}:{path}")
        except subprocess.CalledProcessError:
            return None

    def blob_size(self, sha: str, path: str) -> int | None:
        """The size in bytes of a file at a commit (None if it does not exist there),
        asked before reading it: a repository's file may be of any size."""
        try:
            out = self._git("cat-file", "-s", "--end-of-options", f"{sha}:{path}")
        except subprocess.CalledProcessError:
            return None
        return int(out.strip())

    def read_bytes(self, sha: str, path: str) -> bytes | None:
        """A file's bytes at a commit (None if it does not exist there), not decoded."""
        proc = subprocess.run(
            ["git", *SAFE_OPTIONS, "--git-dir", str(self.path), "cat-file", "blob"]
            + ["--end-of-options", f"{sha}:{path}"],
            env=git_env(),
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        return proc.stdout if proc.returncode == 0 else None

    def worktree(self, sha: str, dest: Path) -> Path:
        """A clean checkout of ``sha`` at ``dest`` (replaced if present)."""
        if not _SHA_RE.match(sha):
            raise CommitNotFound(f"not a full sha: {sha!r}")
        if dest.exists():
            _rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self.locked():
            git("--git-dir", str(self.path), "worktree", "prune")
            git(
                "--git-dir",
                str(self.path),
                "worktree",
                "add",
                "--detach",
                "--force",
                "--quiet",
                str(dest),
                sha,
            )
        return dest

    def remove_worktree(self, dest: Path) -> None:
        with self.locked():
            try:
                git("--git-dir", str(self.path), "worktree", "remove", "--force", str(dest))
            except subprocess.CalledProcessError:
                _rmtree(dest)


def is_full_sha(value: str) -> bool:
    return bool(_SHA_RE.match(value))


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
