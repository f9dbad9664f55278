"""FlashAttention-2's build profiles: the example parses, trims by stubbing, keeps ccache.

No CUDA here: these tests check what the worker would hand the build (env, argv,
the files rewritten before it) and that a real ``commit_env`` build sees the stubs.
The build times of the trimmed profile need the H200 (docs/suites.md).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from kernelwatch.jobs.errors import ConfigError, InstallError
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.config_model import StubSources
from kernelwatch.jobs.library.libspec import CommitSpec
from kernelwatch.worker import recipes, stubs
from kernelwatch.worker.venvs import EnvCache, Toolchain, ccache_env

FA2 = Path(__file__).resolve().parents[2] / "docs" / "flash-attn2.kernelwatch.toml"
TOOLCHAIN = Toolchain("CPython 3.11.7", "2.13.0+cpu", "none", "none")
SRC = "csrc/flash_attn/src"

# The shapes of flash-attn's generated instantiation files (generate_kernels.py), as
# read at upstream commits 2bce87c9 and 5327bb9f: an explicit specialisation per
# forward/backward kernel, an explicit instantiation per split-KV kernel. The
# namespaced form (newer commits' FLASH_NAMESPACE) is modelled, not copied.
FWD = """// Copyright (c) 2024, Tri Dao.
// This file is auto-generated. See "generate_kernels.py"

#include "flash_fwd_launch_template.h"

template<>
void run_mha_fwd_<cutlass::{t}, {d}, {causal}>(Flash_fwd_params &params, cudaStream_t stream) {{
    run_mha_fwd_hdim{d}<cutlass::{t}, {causal}>(params, stream);
}}
"""
SPLIT = (
    '#include "flash_fwd_launch_template.h"\n\n'
    "template void run_mha_fwd_splitkv_dispatch<cutlass::{t}, {d}, {causal}>"
    "(Flash_fwd_params &params, cudaStream_t stream);\n"
)
BWD_NAMESPACED = """#include "namespace_config.h"
#include "flash_bwd_launch_template.h"

namespace FLASH_NAMESPACE {{

template<>
void run_mha_bwd_<cutlass::{t}, {d}, {causal}>(Flash_bwd_params &params, cudaStream_t stream) {{
    run_mha_bwd_hdim{d}<cutlass::{t}, {causal}>(params, stream);
}}

}} // namespace FLASH_NAMESPACE
"""


def _checkout(root: Path) -> Path:
    """A flash-attn-shaped tree: every kernel file of head dims 64/128/256, both dtypes."""
    src = root / "flash-attention"
    (src / SRC).mkdir(parents=True)
    (src / "csrc/flash_attn/flash_api.cpp").write_text("// dispatches to every kernel\n")
    (src / SRC / "flash.h").write_text("// declarations\n")
    for d in (64, 128, 256):
        for t, short in (("half_t", "fp16"), ("bfloat16_t", "bf16")):
            for causal, tag in (("false", ""), ("true", "_causal")):
                args = {"t": t, "d": d, "causal": causal}
                files = {
                    f"flash_fwd_hdim{d}_{short}{tag}_sm80.cu": FWD,
                    f"flash_fwd_split_hdim{d}_{short}{tag}_sm80.cu": SPLIT,
                    f"flash_bwd_hdim{d}_{short}{tag}_sm80.cu": BWD_NAMESPACED,
                }
                for name, text in files.items():
                    (src / SRC / name).write_text(text.format(**args))
    return src


def _trimmed() -> recipes.InstallRecipe:
    return recipes.recipe_set(repoconfig.parse(FA2.read_text()).install).select(
        trigger="pull_request"
    )


def test_the_fa2_example_selects_trimmed_for_prs_and_full_nightly() -> None:
    rs = recipes.recipe_set(repoconfig.parse(FA2.read_text()).install)
    trimmed, full = rs.select(trigger="pull_request"), rs.select(trigger="nightly")
    assert trimmed.profile == "trimmed" and full.profile == "full"
    for recipe in (trimmed, full):  # sm_90 only, the build's parallelism, no download
        assert recipe.env["FLASH_ATTN_CUDA_ARCHS"] == "90"
        assert recipe.env["MAX_JOBS"] == "16" and recipe.env["NVCC_THREADS"] == "2"
        assert recipe.argv("/opt/py") == [["/opt/py", "setup.py", "build_ext", "--inplace"]]
        assert recipe.submodules == ("csrc/cutlass",) and recipe.pythonpath == ("",)
    assert trimmed.stub_sources is not None and full.stub_sources is None
    assert trimmed.stub_sources.files == (f"{SRC}/flash_*_sm80.cu",)
    assert trimmed.timeout_s == 1200 and full.timeout_s == 3600
    assert trimmed.fingerprint() != full.fingerprint()
    # a recipe without the step keeps the cache key material it always had
    assert len(full.fingerprint()) == 6 and len(trimmed.fingerprint()) == 7


def test_the_trimmed_profile_compiles_only_hdim128_forward(tmp_path: Path) -> None:
    src = _checkout(tmp_path)
    spec = _trimmed().stub_sources
    assert spec is not None
    stubbed, kept = stubs.selected(src, spec)
    assert sorted(Path(k).name for k in kept) == sorted(
        f"flash_fwd{split}_hdim128_{dt}{tag}_sm80.cu"
        for split in ("", "_split")
        for dt in ("fp16", "bf16")
        for tag in ("", "_causal")
    )
    assert len(stubbed) == 36 - 8
    before = {k: (src / k).read_text() for k in kept}
    log = stubs.apply(src, spec)
    assert "28 files stubbed, 8 kept" in log
    assert {k: (src / k).read_text() for k in kept} == before  # kept files untouched
    fwd = (src / SRC / "flash_fwd_hdim64_bf16_causal_sm80.cu").read_text()
    assert "void run_mha_fwd_<cutlass::bfloat16_t, 64, true>(Flash_fwd_params &params" in fwd
    assert "launch_template" not in fwd and "throw std::runtime_error" in fwd
    assert "flash_fwd_hdim64_bf16_causal_sm80.cu was left out" in fwd
    split = (src / SRC / "flash_fwd_split_hdim256_fp16_sm80.cu").read_text()
    # the instantiation becomes a specialisation: the same symbol, without the template body
    assert "template<>\nvoid run_mha_fwd_splitkv_dispatch<cutlass::half_t, 256, false>(" in split
    bwd = (src / SRC / "flash_bwd_hdim128_bf16_sm80.cu").read_text()  # bwd: not kept
    assert "namespace FLASH_NAMESPACE {" in bwd and '#include "namespace_config.h"' in bwd
    assert "run_mha_bwd_<cutlass::bfloat16_t, 128, false>(Flash_bwd_params &params" in bwd
    again = {k: (src / k).read_text() for k in stubbed}
    stubs.apply(src, spec)  # a stub is not stubbed again
    assert {k: (src / k).read_text() for k in stubbed} == again
    assert (src / "csrc/flash_attn/flash_api.cpp").read_text() == "// dispatches to every kernel\n"


def test_a_file_without_an_instantiation_fails_the_build(tmp_path: Path) -> None:
    src = _checkout(tmp_path)
    (src / SRC / "flash_fwd_hdim64_fp16_sm80.cu").write_text("// moved to a header upstream\n")
    with pytest.raises(InstallError, match="flash_fwd_hdim64_fp16_sm80.cu has no template"):
        stubs.apply(src, StubSources(files=(f"{SRC}/flash_fwd_hdim64_*.cu",)))
    with pytest.raises(InstallError, match="no file under the checkout matches"):
        stubs.apply(src, StubSources(files=("csrc/nothing/*.cu",)))


def test_a_link_among_the_files_is_refused(tmp_path: Path) -> None:
    src = _checkout(tmp_path)
    outside = tmp_path / "outside.cu"
    outside.write_text(FWD.format(t="half_t", d=64, causal="false"))
    target = src / SRC / "flash_fwd_hdim64_fp16_sm80.cu"
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(InstallError, match="is a link"):
        stubs.apply(src, StubSources(files=(f"{SRC}/flash_fwd_hdim64_*.cu",)))
    assert "launch_template" in outside.read_text()  # nothing outside was written


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("files = []", "stub_sources.files"),
        ('files = ["/etc/*.cu"]', "relative pattern inside the checkout"),
        ('files = ["../x/*.cu"]', "relative pattern inside the checkout"),
        ('files = ["a/*.cu"]\nkeeps = ["b"]', "keeps"),
    ],
)
def test_bad_stub_sources_are_config_errors(table: str, message: str) -> None:
    text = (
        '[install]\nrecipe = "command"\ncommand = ["make"]\n'
        f"[install.profiles.trimmed.stub_sources]\n{table}\n"
    )
    with pytest.raises(ConfigError, match=message):
        repoconfig.parse(text)


def test_a_commit_build_runs_its_commands_on_the_stubbed_checkout(tmp_path: Path) -> None:
    """Through the real environment cache: the step runs before the commands."""
    src = _checkout(tmp_path)
    (src / "count.py").write_text(
        "import pathlib\n"
        f"marked = [p.name for p in pathlib.Path('{SRC}').glob('*.cu') if '{stubs.MARK}' in "
        "p.read_text()]\n"
        "pathlib.Path('kwseen.py').write_text(f'STUBBED = {len(marked)}\\n')\n"
    )
    trimmed = _trimmed()
    recipe = trimmed.model_copy(update={"commands": (("{python}", "count.py"),), "submodules": ()})
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = CommitSpec("https://example.invalid/flash-attention", "b" * 40)
    env = cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
    assert (env.path / "src" / "kwseen.py").read_text() == "STUBBED = 28\n"
    assert "28 files stubbed, 8 kept" in Path(env.meta["log"]).read_text()


def test_ccache_is_kept_inside_the_environment_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvcc goes through ccache (PYTORCH_NVCC, which torch's ninja build honours)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ccache", "nvcc"):
        exe = bin_dir / tool
        exe.write_text("#!/bin/sh\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    root = tmp_path / "envs"
    env = ccache_env(root, _trimmed().env)
    assert env["CCACHE_DIR"] == str(root / "ccache")
    assert env["CCACHE_BASEDIR"] == str(root / "entries")  # two entries' paths hash alike
    nvcc = env["PYTORCH_NVCC"].split()
    assert nvcc[0] == str(bin_dir / "ccache") and nvcc[1].endswith("nvcc")
    # the trimmed profile's -D flags reach nvcc through NVCC_APPEND_FLAGS, which ccache
    # does not hash: its objects live in a namespace of their own
    assert "FLASHATTENTION_DISABLE_DROPOUT" in _trimmed().env["NVCC_APPEND_FLAGS"]
    full = ccache_env(root, {k: v for k, v in _trimmed().env.items() if k != "NVCC_APPEND_FLAGS"})
    assert env["CCACHE_NAMESPACE"] and env["CCACHE_NAMESPACE"] != full.get("CCACHE_NAMESPACE")
    # a sandbox that does not show ccache's directory: nvcc is left as it is (a wrapper
    # the box cannot run made every step exit 127), one that does keeps it
    assert ccache_env(root, _trimmed().env, shown=["/usr", "/opt/cuda"]) == {}
    shown = ccache_env(root, _trimmed().env, shown=[os.path.realpath(tmp_path)])
    assert shown["PYTORCH_NVCC"] == env["PYTORCH_NVCC"]
