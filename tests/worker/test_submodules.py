"""Submodules through mirrors: a commit pinned to an upstream URL, fetched from a local mirror."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelwatch.jobs.errors import ConfigError, InfrastructureError
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.worker import submodules
from tests.helpers import git, make_repo

UPSTREAM = "https://github.com/NVIDIA/cutlass.git"


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path, str, str]:
    """A 'cutlass' repo with two commits and a 'flash-attention' pinning the first."""
    cutlass = tmp_path / "cutlass"
    first = make_repo(cutlass, {"include/cute/tensor.hpp": "// v1\n"})
    make_repo(cutlass, {"include/cute/tensor.hpp": "// v2\n"}, "v2")
    fa = tmp_path / "flash-attention"
    make_repo(fa, {"hopper/setup.py": "print('build')\n"})
    git(
        fa,
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(cutlass),
        "csrc/cutlass",
    )
    git(fa / "csrc" / "cutlass", "checkout", "-q", first)
    git(fa, "config", "-f", ".gitmodules", "submodule.csrc/cutlass.url", UPSTREAM)
    git(fa, "add", "-A")
    git(fa, "commit", "-q", "-m", "pin cutlass v1")
    sha = git(fa, "rev-parse", "HEAD")
    return cutlass, fa, sha, first


def test_worktree_of_a_mirror_gets_the_pinned_submodule_from_the_mirror(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    cutlass, fa, sha, pinned_sha = repos
    mirror = Mirror(tmp_path / "mirrors", str(fa))
    mirror.sync()
    checkout = mirror.worktree(sha, tmp_path / "work" / "src")
    assert not (checkout / "csrc/cutlass/include").exists()
    log = submodules.update(checkout, ["csrc/cutlass"], {UPSTREAM: str(cutlass)})
    assert "insteadOf" in log
    header = (checkout / "csrc/cutlass/include/cute/tensor.hpp").read_text()
    assert header == "// v1\n"  # the commit's pin, not the mirror's tip
    assert submodules.pinned(checkout, "csrc/cutlass") == pinned_sha


def _checkout(tmp_path: Path, repo: Path, sha: str, name: str) -> Path:
    """A worktree of ``repo`` at ``sha`` from a fresh mirror, its submodules not fetched."""
    mirror = Mirror(tmp_path / "mirrors", str(repo))
    mirror.sync()
    return mirror.worktree(sha, tmp_path / name)


def test_an_unreachable_mirror_is_an_infrastructure_error(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    _, fa, sha, _ = repos
    checkout = _checkout(tmp_path, fa, sha, "w2")
    with pytest.raises(InfrastructureError, match="submodule update failed"):
        submodules.update(checkout, ["csrc/cutlass"], {UPSTREAM: str(tmp_path / "no-such")})


def test_a_submodule_the_commit_does_not_declare_is_the_recipes_error(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    # a typo in install.submodules reached git ("did not match any file(s)"), an
    # infrastructure error: retried as an outage instead of named as the file's
    cutlass, fa, sha, _ = repos
    checkout = _checkout(tmp_path, fa, sha, "w3")
    with pytest.raises(ConfigError, match=r"'csrc/cutlas'.*declares: csrc/cutlass"):
        submodules.update(checkout, ["csrc/cutlas"], {UPSTREAM: str(cutlass)})


def test_mirror_maps_parse_from_json_or_pairs() -> None:
    assert submodules.parse_mirrors(None) == {}
    pairs = submodules.parse_mirrors(
        "https://github.com/=file:///srv/m/github/, https://gitlab.com/x.git=/srv/x.git"
    )
    assert pairs == {
        "https://github.com/": "file:///srv/m/github/",
        "https://gitlab.com/x.git": "/srv/x.git",
    }
    assert submodules.parse_mirrors('{"https://a/": "https://b/"}') == {"https://a/": "https://b/"}
    args = submodules.mirror_args({"https://a/": "/srv/b"})
    assert args == [
        "-c",
        "url.file:///srv/b.insteadOf=https://a/",
        "-c",
        "protocol.file.allow=always",
    ]


@pytest.mark.parametrize(
    "text", ["https://a/=ext::sh -c evil", "nonsense", '{"https://a/": "--upload-pack=x"}', "[1]"]
)
def test_odd_mirror_urls_are_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        submodules.parse_mirrors(text)


# ----------------------------------------------------------------------------- issue 24, hole 5
# .gitmodules is code under test: it pointed at a local path and the worker cloned another
# repository of the host into the checkout, where the kernel printed its source.


def _pin(repo: Path, path: str, url: str) -> str:
    git(repo, "config", "-f", ".gitmodules", f"submodule.{path}.url", url)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"point {path} at {url}")
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.parametrize("form", ["path", "file-url", "relative"])
def test_a_submodule_at_a_local_path_is_refused_before_git_fetches_it(
    tmp_path: Path, repos: tuple[Path, Path, str, str], form: str
) -> None:
    cutlass, fa, _, _ = repos
    victim = tmp_path / "other-repo"
    make_repo(victim, {"SECRET.txt": "another repository's source\n"})
    url = {"path": str(victim), "file-url": victim.as_uri(), "relative": "../other-repo"}[form]
    sha = _pin(fa, "csrc/cutlass", url)
    mirror = Mirror(tmp_path / "mirrors", str(fa))
    mirror.sync()
    checkout = mirror.worktree(sha, tmp_path / "work" / "src")
    with pytest.raises(ConfigError, match=r"^\.gitmodules: submodule 'csrc/cutlass' url .* is not"):
        submodules.update(
            checkout, ["csrc/cutlass"], {UPSTREAM: str(cutlass)}, superproject=str(fa)
        )
    assert not (checkout / "csrc/cutlass/SECRET.txt").exists()
    assert not any((checkout / "csrc/cutlass").iterdir())


def test_a_nested_submodule_is_checked_before_it_is_fetched(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    """git's --recursive would fetch a submodule's own submodules unchecked."""
    cutlass, fa, _, _ = repos
    victim = tmp_path / "other-repo"
    make_repo(victim, {"SECRET.txt": "another repository's source\n"})
    # cutlass (fetched from its mirror, fine) pins a nested submodule at a local path
    git(cutlass, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(victim), "dep")
    git(cutlass, "commit", "-q", "-m", "nested")
    git(fa / "csrc" / "cutlass", "fetch", "-q", str(cutlass))
    git(fa / "csrc" / "cutlass", "checkout", "-q", "FETCH_HEAD")
    git(fa, "add", "-A")
    git(fa, "commit", "-q", "-m", "bump cutlass")
    sha = git(fa, "rev-parse", "HEAD")
    mirror = Mirror(tmp_path / "mirrors", str(fa))
    mirror.sync()
    checkout = mirror.worktree(sha, tmp_path / "work" / "src")
    with pytest.raises(ConfigError, match=r"submodule 'dep' url .* is not a network URL"):
        submodules.update(checkout, ["csrc/cutlass"], {UPSTREAM: str(cutlass)})
    assert (checkout / "csrc/cutlass/include").exists()  # the first level, checked, came
    assert not (checkout / "csrc/cutlass/dep/SECRET.txt").exists()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("/srv/kernelwatch/mirrors/other", "is not a network URL"),
        ("file:///srv/kernelwatch/mirrors/other", "is not a network URL"),
        ("ext::sh -c touch% /tmp/pwned", "is not a network URL"),
        ("https://evil.example/NVIDIA/cutlass.git", "is https://evil.example; submodules"),
        ("ssh://github.com/NVIDIA/cutlass.git", "is ssh://github.com; submodules"),
        ("git@github.com:NVIDIA/cutlass.git", "is ssh://github.com; submodules"),
        ("https://github.com/../../etc/x", "'..', '%'"),
        ("https://github.com/%2e%2e/%2e%2e/x", "'..', '%'"),
    ],
)
def test_submodule_urls_only_over_the_superprojects_scheme_and_host(url: str, why: str) -> None:
    base = "https://github.com/Dao-AILab/flash-attention"
    with pytest.raises(ConfigError, match=re.escape(why)):
        submodules.checked_url("csrc/cutlass", url, base, submodules.origin_of(base))


def test_allowed_submodule_urls_resolve_as_git_does() -> None:
    base = "https://github.com/Dao-AILab/flash-attention.git"
    origin = submodules.origin_of(base)
    assert origin == ("https", "github.com")
    check = submodules.checked_url
    assert check("c", "https://github.com/NVIDIA/cutlass.git", base, origin) == (
        "https://github.com/NVIDIA/cutlass.git"
    )
    assert check("c", "../cutlass.git", base, origin) == "https://github.com/Dao-AILab/cutlass.git"
    assert check("c", "./sub", base, origin) == (
        "https://github.com/Dao-AILab/flash-attention.git/sub"
    )
    # never above the host: the URL git is handed (-c submodule.<name>.url) is this one
    assert check("c", "../../../../x", base, origin) == "https://github.com/x"
    # a local superproject (a development source): any network host, never a local one
    assert check("c", UPSTREAM, "/srv/src/fa", None) == UPSTREAM


# ----------------------------------------------------------------------------- audit, 2026-12-05
# A relative URL resolved against a source with a token carried the token into git's
# command line, which the log's "$ ..." header showed, and into git's own messages: the
# build log (on the dashboard) and the error both held it.

TOKEN_SOURCE = "https://x-access-token:ghs_SECRET123@github.com/Dao-AILab/flash-attention.git"
TOKEN_SUB = "https://x-access-token:ghs_SECRET123@github.com/Dao-AILab/cutlass.git"


def test_a_sources_token_never_reaches_the_submodule_log(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    cutlass, fa, _, _ = repos
    checkout = _checkout(tmp_path, fa, _pin(fa, "csrc/cutlass", "../cutlass.git"), "w4")
    log = submodules.update(
        checkout, ["csrc/cutlass"], {TOKEN_SUB: str(cutlass)}, superproject=TOKEN_SOURCE
    )
    assert (checkout / "csrc/cutlass/include/cute/tensor.hpp").is_file()  # it was used
    assert "SECRET" not in log and "x-access-token" not in log
    assert "https://github.com/Dao-AILab/cutlass.git" in log  # the URL, without its user


def test_a_sources_token_never_reaches_a_submodule_error(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    _, fa, _, _ = repos
    checkout = _checkout(tmp_path, fa, _pin(fa, "csrc/cutlass", "../cutlass.git"), "w5")
    gone = (tmp_path / "no-such").as_uri() + "/"
    with pytest.raises(InfrastructureError, match="submodule update failed") as err:
        submodules.update(
            checkout,
            ["csrc/cutlass"],
            {"https://x-access-token:ghs_SECRET123@github.com/": gone},
            superproject=TOKEN_SOURCE,
        )
    assert "SECRET" not in str(err.value) and "x-access-token" not in str(err.value)
    with pytest.raises(ConfigError) as bad:
        submodules.parse_mirrors("https://a/=https://user:ghs_SECRET123@b/ x")
    assert "SECRET" not in str(bad.value)


def test_a_token_in_any_url_of_gits_messages_is_masked() -> None:
    said = "fatal: unable to access 'https://TOKEN@github.com/o/r.git/': 403\n"
    said += "fatal: clone of 'https://u:p@h.example/x' into submodule path 'c' failed"
    assert submodules.public_source(said) == (
        "fatal: unable to access 'https://github.com/o/r.git/': 403\n"
        "fatal: clone of 'https://h.example/x' into submodule path 'c' failed"
    )
