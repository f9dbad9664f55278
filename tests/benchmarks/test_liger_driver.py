"""``prepare-liger`` and ``liger``: the replayed bundle, and the service path on the CPU.

The replay is checked on a small upstream repository made here (a side branch merged
into main, files outside the replayed paths): trees trimmed to ``PATHS`` byte for byte,
author, dates and message kept with an ``Upstream-Commit`` trailer, the same shas on
every run, commits off the first-parent line refused. With the fetched Liger-Kernel
mirror on this machine, two real commits are replayed too. The device sub-command runs
end to end on the CPU over a bundle of a stand-in Liger (``tests/fake_liger.py``):
service-side config, worker, ``kernelwatch run``, verdicts, dump and table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gpu import liger, liger_replay, liger_table
from kernelwatch.kernels.adapters.liger import KERNELS
from tests import fake_liger

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("KW_LIGER_MIRROR", "/work/.mirror/linkedin+Liger-Kernel/repo"))
OPS = "src/liger_kernel/ops"


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**base, **(env or {})},
    ).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str, when: int) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    stamp = f"{when} +0200"
    who = {"GIT_AUTHOR_NAME": "Ada Upstream", "GIT_AUTHOR_EMAIL": "ada@example.invalid"}
    who |= {"GIT_COMMITTER_NAME": "Merge Bot", "GIT_COMMITTER_EMAIL": "bot@example.invalid"}
    env = {**who, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    _git(repo, "commit", "-q", "-m", message, env=env)
    return _git(repo, "rev-parse", "HEAD")


def _library_files() -> dict[str, str]:
    files = {f"{OPS}/{name}.py": text for name, text in fake_liger.OPS.items()}
    files |= {"src/liger_kernel/__init__.py": "", f"{OPS}/__init__.py": ""}
    files |= {"setup.py": "from setuptools import setup\nsetup()\n", "README.md": "# liger\n"}
    files |= {"LICENSE": "BSD\n", "pyproject.toml": "[project]\nname = 'liger_kernel'\n"}
    return files


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    """main: c0 c1 (tests only) c2 (rms_norm) merge(side) c3 (swiglu); side: s1."""
    repo = tmp_path_factory.mktemp("upstream") / "Liger-Kernel"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    t = 1_760_000_000
    c0 = _commit(repo, {**_library_files(), "test/big.bin": "x" * 5000}, "Initial (#1)", t)
    c1 = _commit(repo, {"test/test_x.py": "def test(): pass\n"}, "Add a test (#2)", t + 10)
    rms = fake_liger.OPS["rms_norm"] + "# faster\n"
    c2 = _commit(repo, {f"{OPS}/rms_norm.py": rms}, "RMSNorm: faster (#3)\n\nBody.", t + 20)
    _git(repo, "checkout", "-q", "-b", "side", c1)
    side = _commit(repo, {"docs/x.md": "x\n"}, "Docs on a side branch", t + 25)
    _git(repo, "checkout", "-q", "main")
    merge_env = {"GIT_COMMITTER_DATE": f"{t + 30} +0000", "GIT_AUTHOR_DATE": f"{t + 30} +0000"}
    merge_env |= {"GIT_AUTHOR_NAME": "M", "GIT_AUTHOR_EMAIL": "m@x.invalid"}
    merge_env |= {"GIT_COMMITTER_NAME": "M", "GIT_COMMITTER_EMAIL": "m@x.invalid"}
    _git(repo, "merge", "-q", "--no-ff", "-m", "Merge side", "side", env=merge_env)
    swiglu = fake_liger.OPS["swiglu"] + "# tiled\n"
    c3 = _commit(repo, {f"{OPS}/swiglu.py": swiglu}, "SwiGLU: tiles (#4)", t + 40)
    return repo, [c0, c1, c2, c3], side


def _tree(repo: Path, sha: str, *paths: str) -> str:
    return _git(repo, "ls-tree", "-r", sha, "--", *paths)


def test_a_replay_keeps_the_chosen_commits_trimmed_to_the_install_paths(
    upstream: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    repo, (c0, _, c2, c3), _ = upstream
    manifest = liger_replay.prepare(repo, [c0[:8], c2, c3], tmp_path / "src")
    bundle = tmp_path / "src" / liger_replay.BUNDLE
    assert manifest["bundle_bytes"] == bundle.stat().st_size < 100_000
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(bundle), str(clone))
    steps = manifest["commits"]
    assert [s["upstream"] for s in steps] == [c0, c2, c3]
    replayed = _git(clone, "rev-list", "--first-parent", "--reverse", "HEAD").split()
    assert replayed == [s["replayed"] for s in steps]  # a line of exactly these commits
    for s in steps:  # byte for byte what the install reads; nothing of test/ or docs/
        assert _tree(clone, s["replayed"]) == _tree(repo, s["upstream"], *liger_replay.PATHS)
        assert "test/" not in _tree(clone, s["replayed"])
    body = _git(
        clone, "log", "-1", "--format=%an|%ae|%ad|%cn|%B", "--date=raw", steps[1]["replayed"]
    )
    assert body.startswith(
        "Ada Upstream|ada@example.invalid|1760000020 +0200|kernelwatch prepare-liger|"
    )
    assert "RMSNorm: faster (#3)\n\nBody.\n\nUpstream-Commit: " + c2 in body
    assert [s["changed_ops"] for s in steps] == [
        ["rms_norm.py", "softmax.py", "layer_norm.py", "swiglu.py", "geglu.py"],
        ["rms_norm.py"],
        ["swiglu.py"],
    ]
    assert [s["folded"] for s in steps] == [1, 2, 2]  # c1 folded into c2; the merge into c3
    again = liger_replay.prepare(repo, [c0, c2, c3], tmp_path / "again")
    assert again["commits"] == manifest["commits"]  # the same shas wherever it runs
    assert (tmp_path / "again" / liger_replay.BUNDLE).read_bytes() == bundle.read_bytes()


def test_commits_off_the_first_parent_line_or_out_of_order_are_refused(
    upstream: tuple[Path, list[str], str],
) -> None:
    repo, (c0, c1, c2, c3), side = upstream
    with pytest.raises(ValueError, match="not on the first-parent line"):
        liger_replay.resolve(repo, [c0, side, c3])
    with pytest.raises(ValueError, match="oldest first, each once"):
        liger_replay.resolve(repo, [c2, c1, c3])
    with pytest.raises(ValueError, match="oldest first, each once"):
        liger_replay.resolve(repo, [c1, c1, c3])


@pytest.mark.skipif(
    shutil.which("git") is None or not (MIRROR / "objects").is_dir(),
    reason=f"no Liger-Kernel mirror at {MIRROR}",
)
def test_real_liger_commits_replay_from_the_partial_mirror(tmp_path: Path) -> None:
    manifest = liger_replay.prepare(MIRROR, list(liger_replay.DEFAULT_COMMITS[:2]), tmp_path)
    first, second = manifest["commits"]
    assert first["upstream"].startswith("7d54ff88") and second["upstream"].startswith("87d7057a")
    assert manifest["bundle_bytes"] < 2 * 2**20
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(tmp_path / liger_replay.BUNDLE), str(clone))
    upstream = _tree(MIRROR, second["upstream"], *liger_replay.PATHS)
    assert _tree(clone, second["replayed"]) == upstream
    assert "rms_norm.py" in second["changed_ops"] and second["folded"] == 16


def _case(kernel: str, status: str, median: float | None, verdict: str | None = None,
          ratio: float | None = None, error: str = "") -> dict[str, Any]:  # fmt: skip
    ci = [ratio - 0.01, ratio + 0.01] if ratio else None
    return {"kernel": kernel, "params": {"rows": 16, "cols": 2000, "dtype": "float16"},
            "status": status, "median_s": median, "verdict": verdict, "ratio": ratio,
            "ratio_ci": ci, "error": error}  # fmt: skip


def test_the_table_shows_each_run_each_cases_median_and_what_moved() -> None:
    runs = [
        {"upstream": "a" * 40, "id": 1, "status": "succeeded", "verdict": "pass", "subject": "one",
         "build_log_tail": "x: built in 0 s (default profile)",
         "cases": [_case("softmax", "pass", 50e-6), _case("rmsnorm", "pass", 40e-6)]},
        {"upstream": "b" * 40, "id": 2, "status": "succeeded", "verdict": "fail", "subject": "two",
         "build_log_tail": "x: cached environment (default profile)",
         "cases": [_case("softmax", "pass", 60e-6, "regression", 1.2),
                   _case("rmsnorm", "error", None, "error", error="AttributeError: no tensor")]},
        {"upstream": "c" * 40, "id": 3, "status": "succeeded", "verdict": "pass", "subject": "3",
         "cases": [_case("softmax", "pass", 60e-6, "unchanged", 1.0),
                   _case("rmsnorm", "skip", None, error="no interpreter")]},
    ]  # fmt: skip
    lines = liger_table.table({"commits": runs, "runs": runs, "upstream": "U", "run_rc": 1})
    text = "\n".join(lines)
    assert "aaaaaaaa    #1 succeeded  pass      0 s     2 pass" in text
    assert "bbbbbbbb    #2 succeeded  fail      cached  1 error 1 pass" in text
    assert "softmax 16x2000 fp16     50.0    60.0R     60.0" in text
    assert "rmsnorm 16x2000 fp16     40.0    error     skip" in text
    assert "  bbbbbbbb softmax 16x2000 fp16: regression 1.2000 [1.1900, 1.2100]" in text
    assert "  bbbbbbbb rmsnorm 16x2000 fp16: pass -> error: AttributeError: no tensor" in text
    assert "  cccccccc rmsnorm 16x2000 fp16: error -> skip: no interpreter" in text
    assert "  skip rmsnorm at 1 commit(s) (cccccccc..cccccccc): no interpreter" in text


def test_the_tables_build_column_reads_a_build_a_release_install_and_the_cache() -> None:
    """The service table's ``built`` column, from the build log's tail: a commit's build,
    a released version's install (``run --version``) and a cached environment alike."""
    assert liger_table.build_seconds("abc123456789: built in 96 s (trimmed profile)") == "96 s"
    install = "flashinfer-python==0.6.0: installed in 41 s (release profile) at /v"
    assert liger_table.build_seconds(install) == "41 s"
    assert liger_table.build_seconds("kwlib==0.2: cached environment (release profile)") == "cached"
    assert liger_table.build_seconds("") == "-"


def test_the_run_command_and_its_json_line(tmp_path: Path) -> None:
    import argparse

    args = argparse.Namespace(budget=None, kernel=["softmax"], case="*bf16*")
    argv = liger.run_argv("py", Path("/r"), ["a" * 40, "b" * 40], args, 100.0, cpu=False)
    assert argv[:5] == ["py", "-m", "kernelwatch.jobs.cli.main", "run", "/r"]
    assert argv[5:7] == ["--range", f"{'a' * 40}..{'b' * 40}"]
    assert argv[argv.index("--budget") : argv.index("--budget") + 2] == ["--budget", "0.5"]
    assert argv[-4:] == ["--kernel", "softmax", "--case", "*bf16*"]
    assert "--paired" not in argv  # the history's way: one run per commit
    paired = liger.run_argv("py", Path("/r"), ["a" * 40, "b" * 40], args, 100.0, False, paired=True)
    assert paired[5:8] == ["--range", f"{'a' * 40}..{'b' * 40}", "--paired"]
    one = liger.run_argv("py", Path("/r"), ["a" * 40], args, 100.0, cpu=True)
    assert one[5:7] == ["--commit", "a" * 40] and "0.2" in one
    log = tmp_path / "run.log"
    log.write_text('kernelwatch run: warning: no live worker\n{"runs": [{"id": 1}]}\n')
    assert liger.runs_json(log) == [{"id": 1}]


@pytest.mark.slow
@pytest.mark.crowd  # a worker, Redis and the sandbox: the crowd half (make test)
def test_the_device_command_measures_a_bundle_through_the_service_on_the_cpu(
    upstream: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    repo, (c0, _, c2, c3), _ = upstream
    src = tmp_path / "src"
    liger_replay.prepare(repo, [c0, c2, c3], src)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "benchmarks.gpu", "--cpu", "--out", str(out)]
    argv += ["--deadline-s", "400", "liger", "--src", str(src), "--work", str(tmp_path / "w")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=480, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "liger.json").read_text())
    assert doc["status"] == "ok", doc.get("error")
    result = doc["result"]
    assert result["recipe"] == "pythonpath" and result["settings"]["KW_SANDBOX"] == "bwrap"
    runs = result["runs"]
    assert [r["upstream"] for r in runs] == [c0, c2, c3]
    assert all(r["status"] == "succeeded" for r in runs), [r.get("error") for r in runs]
    for r in runs:
        assert {c["kernel"] for c in r["cases"]} == set(KERNELS)
        assert {c["status"] for c in r["cases"]} == {"pass"}
        assert "configuration: " in r["build_log_tail"] and "KW_REPO_CONFIGS" in r["build_log_tail"]
    assert runs[0]["baseline"] is None and runs[1]["baseline"] == runs[0]["replayed"]
    assert "median us per commit" in done.stdout and "moved:" in done.stdout
    with tarfile.open(out / "logs.tgz") as tar:
        names = tar.getnames()
    assert "logs/liger/liger-records.jsonl" in names and "logs/liger/worker.log" in names
