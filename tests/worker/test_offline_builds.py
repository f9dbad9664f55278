"""Builds on an air-gapped host (``KW_OFFLINE``): no index, git over ``file://`` only.

What the GPU host needs for Liger-Kernel and libraries like it: the service's switch
reaches every from-source build (``executor.commit_env`` passes ``settings.offline``); a
pure-Python package installs with ``pip --no-deps`` and no index even when it declares
dependencies nobody could download; and a ``pythonpath`` recipe imports a src layout
whose subpackage has no ``__init__.py`` (Liger's ``ops/experimental``), which an offline
pip install without setuptools-scm leaves out. Builds run with ``KW_SANDBOX=none`` as on
the GPU host (no bubblewrap there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelwatch.db.config import Settings
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.libspec import CommitSpec
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.worker import executor
from kernelwatch.worker.recipes import BuildRecipe
from kernelwatch.worker.venvs import EnvCache, Toolchain
from tests.helpers import make_repo

TOOLCHAIN = Toolchain("CPython 3.11.7", "2.13.0+cpu", "none", "none")
PROBE = (
    "import json, os; keys = ('PIP_NO_INDEX', 'GIT_ALLOW_PROTOCOL'); "
    "open('seen.json', 'w').write(json.dumps({k: os.environ.get(k) for k in keys}))"
)
PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "kwofflinepkg"
version = "0.1"
dependencies = ["surely-absent-kernelwatch-dependency>=99"]
[tool.setuptools.packages.find]
where = ["src"]
"""


@pytest.fixture(autouse=True)
def _no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KW_SANDBOX", "none")


def _copy(src: Path) -> Callable[[Path], object]:
    return lambda dest: shutil.copytree(src, dest)


def _imports(pythonpath: tuple[str, ...], code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]
    return done.stdout.strip()


@pytest.mark.parametrize("offline", [True, False])
def test_an_offline_build_gets_no_index_and_git_over_file_only(
    tmp_path: Path, offline: bool
) -> None:
    src = tmp_path / "lib"
    src.mkdir()
    recipe = BuildRecipe(recipe="command", commands=(("{python}", "-c", PROBE),))
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    env = cache.commit_env(
        CommitSpec("lib", "c" * 40), recipe, _copy(src), use_ccache=False, offline=offline
    )
    seen = json.loads((env.path / "src" / "seen.json").read_text())
    if offline:
        assert seen == {"PIP_NO_INDEX": "1", "GIT_ALLOW_PROTOCOL": "file"}
    else:
        assert seen["PIP_NO_INDEX"] is None


def test_a_pure_python_package_installs_offline_without_its_declared_dependencies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an index that answers nothing: reaching for it would fail the install
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    src = tmp_path / "pkg"
    (src / "src" / "kwofflinepkg").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "src" / "kwofflinepkg" / "__init__.py").write_text("VERSION = 'offline'\n")
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    env = cache.commit_env(
        CommitSpec("pkg", "d" * 40),
        BuildRecipe(recipe="pip"),
        _copy(src),
        use_ccache=False,
        offline=True,
    )
    assert "--no-deps" in env.log and "--no-build-isolation" in env.log
    assert _imports(env.pythonpath, "import kwofflinepkg; print(kwofflinepkg.VERSION)") == "offline"


def test_a_pythonpath_recipe_imports_a_src_layout_with_a_namespace_subpackage(
    tmp_path: Path,
) -> None:
    src = tmp_path / "liger-like"
    ops = src / "src" / "kwliglike" / "ops"
    (ops / "experimental").mkdir(parents=True)  # no __init__.py, as in Liger-Kernel
    (src / "src" / "kwliglike" / "__init__.py").write_text("")
    (ops / "__init__.py").write_text("from kwliglike.ops.experimental.emb import NAME\n")
    (ops / "experimental" / "emb.py").write_text("NAME = 'embedding'\n")
    recipe = BuildRecipe(recipe="pythonpath", pythonpath=("src",))
    env = EnvCache(tmp_path / "envs", TOOLCHAIN).commit_env(
        CommitSpec("liger-like", "e" * 40), recipe, _copy(src), use_ccache=False, offline=True
    )
    assert env.pythonpath == (str(env.path / "src" / "src"),)
    assert _imports(env.pythonpath, "import kwliglike.ops as o; print(o.NAME)") == "embedding"


def test_the_services_offline_setting_reaches_its_builds(tmp_path: Path) -> None:
    command = json.dumps(["{python}", "-c", PROBE])
    toml = f'[install]\nrecipe = "command"\ncommands = [{command}]\n'
    src = tmp_path / "lib"
    sha = make_repo(src, {".kernelwatch.toml": toml})
    settings = Settings(data_dir=tmp_path / "data", offline=True)
    mirror = Mirror(settings.data_dir / "mirrors", str(src))
    mirror.sync()
    install = repoconfig.read_at(mirror, sha).install
    env, _ = executor.commit_env(settings, mirror, sha, install, None, "manual")
    seen = json.loads((env.path / "src" / "seen.json").read_text())
    assert seen == {"PIP_NO_INDEX": "1", "GIT_ALLOW_PROTOCOL": "file"}
