"""A cached environment rewritten behind the cache's back is refused (issue 14).

Approved code once rewrote main's cached environments keeping every file's size;
the listing of paths and sizes still matched and its code ran in later baselines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelwatch.jobs.library.libspec import parse_version_spec
from kernelwatch.worker.venvs import MARKER, EnvCache, Toolchain, _digest, _stamp
from tests.helpers import make_wheel

TOOLCHAIN = Toolchain("CPython 3.11.7", "2.13.0+cpu", "none", "none")


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheelhouse")
    make_wheel(root, "kwtiny", "1.0", payload=20_000)
    return root


def _version(pythonpath: tuple[str, ...], module: str = "kwtiny") -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", f"import {module}; print({module}.VERSION)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_rewritten_entry_of_the_same_sizes_is_refused(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec("kwtiny==1.0")
    env = cache.version_env(spec, find_links=str(house))
    meta = json.loads((env.path / MARKER).read_text())
    assert meta["digest"] == _digest(env.path) and meta["stamp"] == _stamp(env.path)
    init = env.path / "site" / "kwtiny" / "__init__.py"
    original = init.read_text()
    poisoned = original.replace("1.0", "6.6")
    assert len(poisoned) == len(original) and poisoned != original
    init.write_text(poisoned)  # same path, same size: the old listing matched this
    stale = init.parent / "__pycache__"
    for pyc in stale.glob("*.pyc"):  # or Python would still run the bytecode pip compiled
        pyc.unlink()
    assert _version(env.pythonpath) == "6.6"
    again = cache.version_env(spec, find_links=str(house))
    assert not again.cached, "a rewritten entry was used"
    assert _version(again.pythonpath) == "1.0"


def test_a_restored_entry_is_verified_once_then_trusted_by_its_stamp(
    tmp_path: Path, house: Path
) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec("kwtiny==1.0")
    env = cache.version_env(spec, find_links=str(house))
    init = env.path / "site" / "kwtiny" / "__init__.py"
    time.sleep(0.01)
    init.write_text(init.read_text())  # touched, content unchanged (as a restore does)
    old_stamp = json.loads((env.path / MARKER).read_text())["stamp"]
    assert cache.version_env(spec, find_links=str(house)).cached
    new_stamp = json.loads((env.path / MARKER).read_text())["stamp"]
    assert new_stamp != old_stamp and new_stamp == _stamp(env.path)
    assert cache.version_env(spec, find_links=str(house)).cached


def test_rewritten_bytecode_is_refused(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec("kwtiny==1.0")
    env = cache.version_env(spec, find_links=str(house))
    pyc = next((env.path / "site" / "kwtiny" / "__pycache__").glob("__init__.*.pyc"))
    data = bytearray(pyc.read_bytes())
    data[-1] ^= 1  # same size, same header: Python would load it
    pyc.write_bytes(bytes(data))
    assert not cache.version_env(spec, find_links=str(house)).cached


def _plant_bytecode(source: Path, poisoned: str) -> None:
    """Write the bytecode of ``poisoned`` where Python looks for ``source``'s, with the
    header (mtime, size) of ``source``: an import then runs ``poisoned``."""
    import importlib.util
    import py_compile

    original = source.read_text()
    assert len(poisoned) == len(original)
    fake = source.parent / ".fake.py"
    fake.write_text(poisoned)
    st = source.stat()
    os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns))
    target = importlib.util.cache_from_source(str(source))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    py_compile.compile(str(fake), cfile=target, doraise=True)
    fake.unlink()


def test_bytecode_planted_after_creation_is_refused(tmp_path: Path) -> None:
    """Issue 24, hole 3: a commit built without pip (no .pyc at creation) took a planted
    ``__pycache__`` file; main's commit then ran the plant and was reported broken."""
    from kernelwatch.jobs.library.libspec import CommitSpec
    from kernelwatch.worker.recipes import BuildRecipe

    src = tmp_path / "lib"
    (src / "kwlib").mkdir(parents=True)
    (src / "kwlib" / "__init__.py").write_text("VERSION = 'good'\n")
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = CommitSpec("https://example.invalid/kwlib", "d" * 40)
    recipe = BuildRecipe(recipe="pythonpath")

    def build() -> tuple[str, ...]:
        import shutil

        env = cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
        return env.pythonpath

    pythonpath = build()
    init = Path(pythonpath[0]) / "kwlib" / "__init__.py"
    _plant_bytecode(init, "VERSION = 'evil'\n")
    assert _version(pythonpath, "kwlib") == "evil"  # Python runs the plant
    pythonpath = build()  # found, logged, rebuilt
    assert _version(pythonpath, "kwlib") == "good"


def test_a_symlink_planted_in_an_entry_is_refused(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec("kwtiny==1.0")
    env = cache.version_env(spec, find_links=str(house))
    (env.path / "site" / "evil.pth").symlink_to("/etc/hostname")
    assert not cache.version_env(spec, find_links=str(house)).cached
