"""A source's token reaches git's HTTP requests, never git's command line or a mirror's config.

Real git against a loopback HTTP server that records what it is sent (and refuses it):
the token must arrive as the request's ``Authorization`` header, and no argv git ran
with may hold it (the host's process list shows argv to every local user).
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kernelwatch.jobs.errors import InfrastructureError, SourceError
from kernelwatch.jobs.library import git_credentials, mirror
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.worker import submodules
from tests.helpers import git, make_repo, serving

TOKEN = "ghs_SECRET123"


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    with serving(type("Handler", (_Recorder,), {"seen": seen})) as port:
        yield f"127.0.0.1:{port}", seen


@pytest.fixture
def argvs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every argv started through ``subprocess.run`` (patched for every caller) and the
    submodule update's ``run_logged``, recorded, then run for real."""
    seen: list[list[str]] = []
    real_run, real_logged = subprocess.run, submodules.run_logged

    def run(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        seen.append(list(argv))
        return real_run(argv, *args, **kwargs)

    def logged(argv: list[str], **kwargs: Any) -> Any:
        seen.append(list(argv))
        return real_logged(argv, **kwargs)

    monkeypatch.setattr(mirror.subprocess, "run", run)
    monkeypatch.setattr(submodules, "run_logged", logged)
    return seen


BASIC = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()


def test_split_moves_the_userinfo_into_a_header_scoped_to_the_host() -> None:
    url, env = git_credentials.split(f"https://x-access-token:{TOKEN}@github.com/o/r.git")
    assert url == "https://github.com/o/r.git"
    assert env == {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.https://github.com/.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: {BASIC}",
    }
    # a token as the user alone, percent-encoded characters decoded, the port kept
    url, env = git_credentials.split("http://tok%40en@host.example:8080/x")
    assert url == "http://host.example:8080/x"
    assert env["GIT_CONFIG_KEY_0"] == "http.http://host.example:8080/.extraHeader"
    assert env["GIT_CONFIG_VALUE_0"].endswith(base64.b64encode(b"tok@en:").decode())
    # nothing to move: ssh, local paths, URLs without credentials
    for plain in ("git@github.com:o/r.git", "/srv/repo", "https://github.com/o/r.git"):
        assert git_credentials.split(plain) == (plain, {})


def test_a_mirror_fetch_sends_the_token_as_a_header_and_never_on_the_argv(
    tmp_path: Path, server: tuple[str, list[tuple[str, str]]], argvs: list[list[str]]
) -> None:
    host, seen = server
    source = f"http://x-access-token:{TOKEN}@{host}/o/r.git"
    with pytest.raises(SourceError) as err:
        Mirror(tmp_path / "mirrors", source).sync()  # the server answers 404
    assert seen and all(auth == BASIC for _, auth in seen), seen  # git sent it
    assert seen[0][0].startswith("/o/r.git/info/refs")
    assert argvs and not any(TOKEN in " ".join(a) for a in argvs)
    assert TOKEN not in str(err.value)


def test_a_mirror_cloned_with_the_token_in_its_config_loses_it_at_the_next_fetch(
    tmp_path: Path, server: tuple[str, list[tuple[str, str]]], argvs: list[list[str]]
) -> None:
    host, seen = server
    source = f"http://x-access-token:{TOKEN}@{host}/o/r.git"
    old = Mirror(tmp_path / "mirrors", source)
    make_repo(tmp_path / "r", {"a.txt": "1\n"})
    git(tmp_path, "clone", "-q", "--mirror", str(tmp_path / "r"), str(old.path))
    git(old.path, "config", "remote.origin.url", source)  # as a clone of before wrote it
    argvs.clear()  # (subprocess.run is patched for everyone: the set-up's own git calls)
    with pytest.raises(SourceError):
        Mirror(tmp_path / "mirrors", source).sync()
    assert git(old.path, "config", "remote.origin.url") == f"http://{host}/o/r.git"
    assert TOKEN not in (old.path / "config").read_text()
    assert seen and all(auth == BASIC for _, auth in seen)
    assert not any(TOKEN in " ".join(a) for a in argvs)


def test_a_relative_submodule_gets_the_sources_token_as_a_header_not_on_the_argv(
    tmp_path: Path, server: tuple[str, list[tuple[str, str]]], argvs: list[list[str]]
) -> None:
    host, seen = server
    fa = tmp_path / "flash-attention"
    make_repo(fa, {"setup.py": "print('build')\n"})
    dep = tmp_path / "cutlass"
    make_repo(dep, {"a.h": "// v1\n"})
    git(fa, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(dep), "csrc/c")
    git(fa, "config", "-f", ".gitmodules", "submodule.csrc/c.url", "../cutlass.git")
    git(fa, "add", "-A")
    git(fa, "commit", "-q", "-m", "pin cutlass relative")
    sha = git(fa, "rev-parse", "HEAD")
    checkout = Mirror(tmp_path / "mirrors", str(fa))
    checkout.sync()
    tree = checkout.worktree(sha, tmp_path / "w")
    argvs.clear()
    source = f"http://x-access-token:{TOKEN}@{host}/Dao-AILab/flash-attention.git"
    with pytest.raises(InfrastructureError) as err:
        submodules.update(tree, ["csrc/c"], {}, superproject=source)
    assert seen and seen[0][0].startswith("/Dao-AILab/cutlass.git/info/refs")
    assert all(auth == BASIC for _, auth in seen)
    assert not any(TOKEN in " ".join(a) for a in argvs)
    assert TOKEN not in str(err.value)
    assert TOKEN not in (checkout.path / "config").read_text()  # the worktree's config


def test_a_mirrors_own_credentials_go_to_its_host_only(
    tmp_path: Path, server: tuple[str, list[tuple[str, str]]]
) -> None:
    host, _ = server
    upstream = "https://github.com/"
    args = submodules.mirror_args({upstream: f"http://mirror-user:pw@{host}/m/"})
    assert args == ["-c", f"url.http://{host}/m/.insteadOf={upstream}"]
    settings = submodules.mirror_credentials({upstream: f"http://mirror-user:pw@{host}/m/"})
    assert list(settings) == [f"http.http://{host}/.extraHeader"]
    assert settings[f"http.http://{host}/.extraHeader"].endswith(
        base64.b64encode(b"mirror-user:pw").decode()
    )
