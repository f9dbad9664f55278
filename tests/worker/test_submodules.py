"""Submodules through mirrors: a commit pinned to an upstream URL, fetched from a local mirror."""

from __future__ import annotations

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


def test_an_unreachable_mirror_is_an_infrastructure_error(
    tmp_path: Path, repos: tuple[Path, Path, str, str]
) -> None:
    _, fa, sha, _ = repos
    mirror = Mirror(tmp_path / "mirrors", str(fa))
    mirror.sync()
    checkout = mirror.worktree(sha, tmp_path / "w2")
    with pytest.raises(InfrastructureError, match="submodule update failed"):
        submodules.update(checkout, ["csrc/cutlass"], {UPSTREAM: str(tmp_path / "no-such")})


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
