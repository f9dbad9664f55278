from pathlib import Path

import pytest

from kernelwatch.jobs.errors import CommitNotFound, SourceError
from kernelwatch.jobs.library.mirror import Mirror, repository_name, validate_source
from tests.helpers import make_repo


@pytest.mark.parametrize("bad", ["--upload-pack=touch /tmp/pwned", "ext::sh -c id", ""])
def test_option_like_and_ext_sources_are_refused(bad: str) -> None:
    with pytest.raises(SourceError):
        validate_source(bad)


def test_a_directory_that_is_not_a_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not a git repository"):
        validate_source(str(tmp_path))
    with pytest.raises(SourceError, match="does not exist"):
        validate_source(str(tmp_path / "nope"))


def test_mirror_resolves_ranges_and_reads_files(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    a = make_repo(src, {"x.txt": "1"}, "first")
    b = make_repo(src, {"x.txt": "2"}, "second")
    c = make_repo(src, {"x.txt": "3"}, "third")
    m = Mirror(tmp_path / "mirrors", str(src))
    m.sync()
    assert m.resolve("HEAD") == c
    assert m.range(f"{a}..{c}") == [b, c]
    info = m.info(c)
    assert info.parents == (b,) and info.message == "third"
    assert m.read_file(a, "x.txt") == "1"
    assert m.read_file(a, "missing.txt") is None
    wt = m.worktree(b, tmp_path / "wt")
    assert (wt / "x.txt").read_text() == "2"
    m.remove_worktree(wt)
    assert not wt.exists()


def test_missing_commit_is_a_readable_error(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    make_repo(src, {"x.txt": "1"})
    m = Mirror(tmp_path / "mirrors", str(src))
    m.sync()
    with pytest.raises(CommitNotFound, match="not found"):
        m.resolve("0" * 40)
    with pytest.raises(CommitNotFound):
        m.resolve("--all")


def test_corrupt_mirror_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    head = make_repo(src, {"x.txt": "1"})
    m = Mirror(tmp_path / "mirrors", str(src))
    m.sync()
    (m.path / "HEAD").unlink()  # break it
    m.sync()
    assert m.resolve("HEAD") == head


def test_repository_names() -> None:
    assert (
        repository_name("https://github.com/Dao-AILab/flash-attention.git")
        == "Dao-AILab/flash-attention"
    )
    assert (
        repository_name("git@github.com:flashinfer-ai/flashinfer.git") == "flashinfer-ai/flashinfer"
    )
    assert repository_name("/work/tinykern") == "tinykern"
