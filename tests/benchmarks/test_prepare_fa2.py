"""``prepare-fa2`` and the FA2 part of ``libraries``, without a GPU.

Packing needs a flash-attention clone (``KW_FA_MIRROR``, default the bare mirror
that ``fetch`` leaves on a dev machine); without one that test skips. The rest
checks what the device call relies on: the recipe copy with its ``MAX_JOBS``,
which quick prefill cases a trimmed build cannot run, the build JSON read whole.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from benchmarks.gpu import cli, libraries, prepare
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.config_model import InstallRecipe
from kernelwatch.worker import recipes, stubs

FA_MIRROR = Path(os.environ.get("KW_FA_MIRROR", "/work/.mirror/Dao-AILab+flash-attention/repo"))
CUTLASS_MIRROR = Path(os.environ.get("KW_CUTLASS_MIRROR", "/work/.mirror/NVIDIA+cutlass/repo"))
SRC = "csrc/flash_attn/src"


def _trimmed(recipe: Path) -> InstallRecipe:
    return recipes.recipe_set(repoconfig.parse(recipe.read_text()).install).select("trimmed")


@pytest.mark.skipif(
    shutil.which("git") is None or not (FA_MIRROR / "objects").is_dir(),
    reason=f"no flash-attention mirror at {FA_MIRROR}",
)
def test_a_packed_commit_has_what_its_setup_py_builds_from(tmp_path: Path) -> None:
    made = prepare.pack_fa2(FA_MIRROR, "v2.8.3", tmp_path)
    assert made["commit"].startswith("060c9188") and made["kernel_files"] == 72
    tarball = tmp_path / f"fa2-{made['commit']}.tar.xz"
    assert Path(made["tarball"]) == tarball and tarball.stat().st_size < 1_000_000
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    src = tmp_path / "src"
    assert (src / "setup.py").is_file() and (src / "README.md").is_file()
    assert (src / "flash_attn" / "__init__.py").is_file()
    assert (src / "csrc/flash_attn/flash_api.cpp").is_file() and (src / SRC / "flash.h").is_file()
    pin = (src / ".kw-cutlass-pin").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{40}", pin) and pin == made["cutlass_pin"]
    assert (src / ".kw-commit").read_text().strip() == made["commit"]
    assert (src / ".kw-ref").read_text().strip() == "v2.8.3"
    assert not (src / "csrc/cutlass").exists()  # CUTLASS travels once per pin, beside
    if (CUTLASS_MIRROR / "objects").is_dir():  # the pin is one prepare-fa2 can pack
        assert prepare._git(CUTLASS_MIRROR, "cat-file", "-t", pin).strip() == b"commit"
    # the trimmed profile's stub step on this tree: 8 head-dim-128 forward files kept
    spec = _trimmed(libraries.FA2_RECIPE).stub_sources
    assert spec is not None
    stubbed, kept = stubs.selected(src, spec)
    assert len(kept) == 8 and len(stubbed) == 64
    assert all("hdim128" in k and "fwd" in k for k in kept)
    assert "64 files stubbed, 8 kept" in stubs.apply(src, spec)


def test_prepare_fa2_is_a_sub_command_of_the_driver(capsys: pytest.CaptureFixture[str]) -> None:
    commands = cli.commands()
    assert commands["prepare-fa2"] is prepare.FA2 and commands["prepare-fa3"] is prepare
    assert prepare.FA2.run is prepare.fa2_run and "FlashAttention-2" in str(prepare.FA2.__doc__)
    with pytest.raises(SystemExit) as done:
        cli.parser().parse_args(["prepare-fa2", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "python -m benchmarks.gpu prepare-fa2" in text and "v2.8.2 v2.8.3" in text
    args = cli.parser().parse_args(["prepare-fa2", "--fa-repo", "a", "--cutlass-repo", "b"])
    assert args.commits == ["v2.8.2", "v2.8.3"]
    args = cli.parser().parse_args(["libraries", "--part", "fa2", "--fa2", "7321879f"])
    assert args.fa2 == ["7321879f"] and args.fa2_jobs == 8 and args.fa2_pairs == 4


def test_the_recipe_copy_changes_max_jobs_only() -> None:
    copy = libraries._fa2_recipe(8)
    original, changed = _trimmed(libraries.FA2_RECIPE), _trimmed(copy)
    assert original.env["MAX_JOBS"] == "16" and changed.env["MAX_JOBS"] == "8"
    assert {**changed.env, "MAX_JOBS": "16"} == dict(original.env)
    assert changed.stub_sources == original.stub_sources
    assert changed.argv("py") == original.argv("py") and changed.timeout_s == original.timeout_s


def test_cases_whose_kernel_files_are_stubs_are_named_with_the_file() -> None:
    kept = [
        f"{SRC}/flash_fwd{split}_hdim128_{dt}{tag}_sm80.cu"
        for split in ("", "_split")
        for dt in ("fp16", "bf16")
        for tag in ("", "_causal")
    ]
    outside = libraries._fa2_outside(kept, "flash-attn")
    dims = sorted(int(p["head_dim"]) for p, _ in outside.values())
    assert dims == [64, 256]  # llama3.2-1b and gemma2-9b; the four d128 cases run
    for params, why in outside.values():
        d = params["head_dim"]
        assert (
            why
            == f"outside the trimmed build: {SRC}/flash_fwd_hdim{d}_bf16_causal_sm80.cu is a stub"
        )
    # without the bf16 causal d128 files, the four causal bf16 d128 cases go too
    fewer = [k for k in kept if "bf16_causal" not in k]
    assert len(libraries._fa2_outside(fewer, "flash-attn")) == 2 + 2


def test_the_build_json_is_read_whole(tmp_path: Path) -> None:
    doc = {"key": "k" * 200, "path": "/tmp/kwenvs/entries/" + "e" * 200, "pythonpath": ["/x"]}
    log = tmp_path / "build.log"
    log.write_text("compiling\n" + json.dumps(doc) + "\n\n")
    assert libraries._build_json(log) == doc  # longer than host.tail's 300 characters
    log.write_text("Traceback (most recent call last):\n")
    assert libraries._build_json(log) is None
    assert libraries._build_json(tmp_path / "missing.log") is None
    assert libraries._last_line("build step failed ...:\nTraceback\nOSError: no CUDA") == (
        "OSError: no CUDA"
    )


def test_a_stubbed_kernel_in_the_bench_is_a_skip_and_a_real_error_stays_one() -> None:
    stub = (
        "RuntimeError: csrc/flash_attn/src/flash_fwd_hdim64_bf16_causal_sm80.cu was left "
        "out of this build (kernelwatch build profile)"
    )
    params = {"model": "llama3.2-1b", "batch": 4, "seq_q": 2048, "seq_k": 2048, "head_dim": 64,
              "dtype": "bfloat16", "causal": True}  # fmt: skip
    row = libraries._bench_row({"status": "error", "error": stub, "params": params})
    assert row["status"] == "skip" and row["error"] == f"outside the trimmed build: {stub}"
    assert row["case"] == "llama3.2-1b b4 q2048 k2048 d64 bfloat16 causal"
    other = libraries._bench_row({"status": "error", "error": "RuntimeError: CUDA error"})
    assert other["status"] == "error" and other["error"] == "RuntimeError: CUDA error"
    timed = {"status": "pass", "timing": {"median": 1e-3}, "throughput": {"tflops": 500.0}}
    assert libraries._bench_row(timed)["median_s"] == 1e-3
    assert libraries._bench_row(timed)["tflops"] == 500.0
