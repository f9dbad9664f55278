"""The worker's own git never runs code a repository or a user config planted (issue 14).

An approved fork's install step once wrote ``<mirror>/hooks/post-checkout``; the next
trusted checkout ran it inside the worker's git, with the worker's environment.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from kernelwatch.jobs.library.mirror import Mirror, git_env
from kernelwatch.worker import submodules
from tests.helpers import git, make_repo

SECRET = "whsec-never-leaves"


def _hook(path: Path, capture: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nenv > {capture}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def hostile_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A worker environment holding a secret, with a ``core.hooksPath`` in ``~/.gitconfig``."""
    home = tmp_path / "home"
    hooks = home / "hooks"
    _hook(hooks / "post-checkout", tmp_path / "captured-global")
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KW_WEBHOOK_SECRET", SECRET)
    return home


def test_hooks_planted_in_the_mirror_or_the_global_config_never_run(
    tmp_path: Path, hostile_home: Path
) -> None:
    repo = tmp_path / "lib"
    sha = make_repo(repo, {"lib.py": "X = 1\n"})
    mirror = Mirror(tmp_path / "mirrors", str(repo))
    mirror.sync()
    _hook(mirror.path / "hooks" / "post-checkout", tmp_path / "captured-mirror")
    # the same planted hooks do run under a plain git: the test can fail
    plain = tmp_path / "plain"
    subprocess.run(
        ["git", "--git-dir", str(mirror.path), "worktree", "add", "--detach", str(plain), sha],
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "captured-global").exists()
    (tmp_path / "captured-global").unlink()

    mirror.worktree(sha, tmp_path / "checkout")
    mirror.sync()
    assert (tmp_path / "checkout" / "lib.py").read_text() == "X = 1\n"
    assert not (tmp_path / "captured-mirror").exists()
    assert not (tmp_path / "captured-global").exists()


def test_submodule_update_runs_no_hook_and_sees_no_secret(
    tmp_path: Path, hostile_home: Path
) -> None:
    dep = tmp_path / "dep"
    make_repo(dep, {"dep.h": "// dep\n"})
    top = tmp_path / "top"
    make_repo(top, {"a.txt": "a\n"})
    env = {**git_env(), "GIT_ALLOW_PROTOCOL": "file"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]
    subprocess.run(
        ["git", *ident, "-C", str(top), "submodule", "add", "-q", str(dep), "third/dep"],
        check=True,
        capture_output=True,
        env=env,
    )
    upstream = "https://example.invalid/dep.git"  # never a local path (issue 24)
    git(top, "config", "-f", ".gitmodules", "submodule.third/dep.url", upstream)
    git(top, "add", ".gitmodules")
    subprocess.run(
        ["git", *ident, "-C", str(top), "commit", "-qm", "sub"],
        check=True,
        capture_output=True,
        env=env,
    )
    checkout = tmp_path / "co"
    subprocess.run(["git", "clone", "-q", str(top), str(checkout)], check=True, env=env)
    _hook(checkout / ".git" / "hooks" / "post-checkout", tmp_path / "captured-local")
    log = submodules.update(checkout, ["third/dep"], {upstream: str(dep)})
    assert (checkout / "third" / "dep" / "dep.h").exists(), log
    assert not (tmp_path / "captured-local").exists()
    assert not (tmp_path / "captured-global").exists()


def test_the_git_environment_holds_no_secret_and_no_home(hostile_home: Path) -> None:
    env = git_env()
    assert not any(k.startswith("KW_") for k in env)
    assert SECRET not in "".join(env.values())
    assert env["HOME"] != str(hostile_home)
    assert not {".gitconfig", ".config", ".pip"} & set(os.listdir(env["HOME"]))
    assert env["GIT_CONFIG_GLOBAL"] == os.devnull and env["GIT_CONFIG_NOSYSTEM"] == "1"
