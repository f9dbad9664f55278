"""FlashAttention snapshots replayed into a history a worker checks out (issue 26).

The snapshots are made here the way ``prepare-fa2``/``prepare-fa3`` make them (a
tarball of the commit's files with ``.kw-commit``, ``.kw-cutlass-pin``, ``.kw-ref``,
and one ``cutlass-include-<pin>.tar.xz`` per pin), small, so the test needs no clone.
"""

from __future__ import annotations

import argparse
import subprocess
import tarfile
from pathlib import Path

import pytest

from benchmarks.gpu import fa_replay, service


def _tar(target: Path, files: dict[str, str]) -> None:
    staging = target.with_suffix(".d")
    for rel, text in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_text(text)
    with tarfile.open(target, "w:xz") as tar:
        tar.add(staging, arcname=".")


def _snapshot(src: Path, kind: str, sha: str, ref: str, pin: str, body: str) -> None:
    files = {".kw-commit": sha + "\n", ".kw-cutlass-pin": pin + "\n", ".kw-ref": ref + "\n",
             "setup.py": f"# {body}\n", "hopper/flash.cu": body}  # fmt: skip
    _tar(src / f"{kind}-{sha}.tar.xz", files)
    include = src / f"cutlass-include-{pin}.tar.xz"
    if not include.exists():
        _tar(include, {"include/cutlass/cutlass.h": f"// CUTLASS {pin}\n"})


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    # carried in the reverse of the replay order: the defaults decide, not the names
    _snapshot(folder, "fa3", "c75d019d" + "0" * 32, "c75d019d", "b" * 40, "third")
    _snapshot(folder, "fa3", "3e87e421" + "0" * 32, "3e87e421", "b" * 40, "second")
    _snapshot(folder, "fa3", "16c7f0f6" + "0" * 32, "16c7f0f6", "a" * 40, "first")
    _snapshot(folder, "fa2", "f" * 40, "v2.8.3", "c" * 40, "later")
    _snapshot(folder, "fa2", "e" * 40, "v2.8.2", "c" * 40, "earlier")
    return folder


def test_the_snapshots_become_one_linear_history_with_cutlass_in_place(
    src: Path, tmp_path: Path
) -> None:
    order = fa_replay.ordered(src, "fa3", None)
    assert [o[:8] for o in order] == ["16c7f0f6", "3e87e421", "c75d019d"]
    repo = tmp_path / "fa3"
    replayed = fa_replay.replay(src, "fa3", order, repo)
    shas = [r.replayed for r in replayed]
    assert _git(repo, "rev-list", "--reverse", "HEAD").split() == shas
    for r, body in zip(replayed, ("first", "second", "third"), strict=True):
        assert _git(repo, "show", f"{r.replayed}:hopper/flash.cu") == body
        message = _git(repo, "log", "-1", "--format=%B", r.replayed)
        assert f"{fa_replay.TRAILER}: {r.upstream}" in message
        header = _git(repo, "show", f"{r.replayed}:csrc/cutlass/include/cutlass/cutlass.h")
        assert header == f"// CUTLASS {r.cutlass_pin}"  # each commit has its own pin
    assert replayed[0].cutlass_pin == "a" * 40 and replayed[1].cutlass_pin == "b" * 40
    tracked = _git(repo, "ls-files").split()
    assert ".gitmodules" not in tracked and not any(t.startswith(".kw-") for t in tracked)
    assert _git(repo, "ls-files", "--stage", "csrc/cutlass").count("160000") == 0  # no gitlink
    assert [o[:8] for o in fa_replay.ordered(src, "fa2", None)] == ["eeeeeeee", "ffffffff"]


def test_a_missing_or_ambiguous_snapshot_is_a_clear_error(src: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="make it with prepare-fa3"):
        fa_replay.replay(src, "fa3", ["deadbeef"], tmp_path / "r")
    with pytest.raises(ValueError, match="names 3 fa3 snapshots"):
        fa_replay.replay(src, "fa3", ["3e87e421", ""], tmp_path / "r")
    (src / f"cutlass-include-{'a' * 40}.tar.xz").unlink()
    with pytest.raises(FileNotFoundError, match="cutlass-include-a"):
        fa_replay.replay(src, "fa3", ["16c7f0f6"], tmp_path / "r")


@pytest.mark.parametrize("kind", fa_replay.KINDS)
def test_the_service_config_is_the_documented_recipe_without_submodules(
    kind: str, tmp_path: Path
) -> None:
    from kernelwatch.jobs.library import repoconfig

    written = fa_replay.service_config(kind, tmp_path / f"{kind}.toml")
    replay = repoconfig.parse(written.read_text())
    documented = repoconfig.parse(fa_replay.CONFIGS[kind].read_text())
    assert documented.install.submodules == ("csrc/cutlass",)
    assert replay.install.submodules == ()
    # everything else as documented: the same build, profiles and suites
    assert replay.install.model_copy(update={"submodules": ()}) == (
        documented.install.model_copy(update={"submodules": ()})
    )
    assert replay.library == documented.library and replay.suites == documented.suites


def test_the_service_plan_pairs_each_commit_with_the_one_before(src: Path, tmp_path: Path) -> None:
    args = argparse.Namespace(src=src, fa3=None, fa2=["e" * 8], fa_suite=["prefill"])
    configs: dict[str, str] = {}
    plan = service.fa_plan("fa3", args, "py", tmp_path, ["--wait"], configs)
    shas = [c["replayed"] for c in plan["commits"]]
    assert plan["argv"][5:] == ["--range", f"{shas[0]}..{shas[-1]}", "--paired",
                                "--suite", "prefill", "--wait"]  # fmt: skip
    assert configs == {plan["repo"]: str(tmp_path / "fa3.kernelwatch.toml")}
    one = service.fa_plan("fa2", args, "py", tmp_path, [], configs)
    assert one["argv"][5:7] == ["--commit", one["commits"][0]["replayed"]]
    assert service.carried("fa3", src) and not service.carried("fa3", tmp_path)
