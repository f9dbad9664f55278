"""The environment cache: real pip installs of local wheels, hits, repairs, LRU, builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelwatch.jobs.errors import InfrastructureError, InstallError
from kernelwatch.jobs.library.libspec import CommitSpec, parse_version_spec
from kernelwatch.worker.recipes import BuildRecipe
from kernelwatch.worker.venvs import (
    MARKER,
    EnvCache,
    Toolchain,
    build_error,
    compiler_errors,
    installed_versions,
    probe_toolchain,
)
from tests.helpers import make_wheel

TOOLCHAIN = Toolchain("CPython 3.11.7", "2.13.0+cpu", "none", "none")


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheelhouse")
    for version in ("1.0", "2.0", "3.0"):
        make_wheel(root, "kwtiny", version, payload=20_000)
    make_wheel(root, "kwhelper", "0.1")
    return root


def _import_version(pythonpath: tuple[str, ...], module: str = "kwtiny") -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    code = f"import {module}; print({module}.VERSION)"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_install_then_hit(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec("kwtiny==1.0")
    companion = parse_version_spec("kwhelper==0.1")
    env = cache.version_env(spec, find_links=str(house), companions=[companion])
    assert not env.cached and "--no-deps" in env.log and "--only-binary=:all:" in env.log
    assert _import_version(env.pythonpath) == "1.0"
    assert installed_versions(env.path / "site") == {"kwtiny": "1.0", "kwhelper": "0.1"}
    meta = json.loads((env.path / MARKER).read_text())
    assert meta["spec"] == "kwtiny==1.0" and meta["toolchain"]["torch"] == "2.13.0+cpu"
    assert Path(meta["log"]).read_text().startswith("$ ")
    again = cache.version_env(spec, find_links=str(house), companions=[companion])
    assert again.cached and again.key == env.key and again.seconds < 1.0
    # another toolchain (say a new driver) is another environment
    other = EnvCache(tmp_path / "envs", Toolchain("CPython 3.11.7", "2.13.0+cpu", "none", "580"))
    assert other.key({"spec": "kwtiny==1.0"}) != cache.key({"spec": "kwtiny==1.0"})


def test_damaged_and_partial_entries_are_rebuilt_not_trusted(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec("kwtiny==1.0")
    env = cache.version_env(spec, find_links=str(house))
    init = env.path / "site" / "kwtiny" / "__init__.py"
    init.write_text("VERSION = 'tampered'\n")  # same name, different size
    repaired = cache.version_env(spec, find_links=str(house))
    assert not repaired.cached and _import_version(repaired.pythonpath) == "1.0"
    (env.path / MARKER).unlink()  # as if the worker died before finishing
    rebuilt = cache.version_env(spec, find_links=str(house))
    assert not rebuilt.cached and (env.path / MARKER).exists()
    # bytecode appearing later is damage too (issue 24): the build compiled all there is
    (env.path / "site" / "kwtiny" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    again = cache.version_env(spec, find_links=str(house))
    assert not again.cached and "failed its integrity check" in again.log


def test_least_recently_used_entries_are_evicted(tmp_path: Path, house: Path) -> None:
    probe = EnvCache(tmp_path / "probe", TOOLCHAIN)
    one_size = json.loads(
        (
            probe.version_env(parse_version_spec("kwtiny==1.0"), find_links=str(house)).path
            / MARKER
        ).read_text()
    )["size"]
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN, max_bytes=int(2.5 * one_size))
    v1 = cache.version_env(parse_version_spec("kwtiny==1.0"), find_links=str(house))
    v2 = cache.version_env(parse_version_spec("kwtiny==2.0"), find_links=str(house))
    (cache.jit_home(v2.key) / "op.so").write_bytes(b"\0" * 100)  # what 2.0's runs compiled
    assert cache.version_env(parse_version_spec("kwtiny==1.0"), find_links=str(house)).cached
    v3 = cache.version_env(parse_version_spec("kwtiny==3.0"), find_links=str(house))
    keys = {e["key"] for e in cache.entries()}
    assert keys == {v1.key, v3.key}  # 2.0 was the least recently used
    assert not v2.path.exists()
    assert not (tmp_path / "envs" / "jit" / v2.key).exists()  # its JIT builds went with it
    # an entry in use is never evicted, even when it is the oldest
    tight = EnvCache(tmp_path / "envs", TOOLCHAIN, max_bytes=1)
    with tight.hold(v1.key):
        assert tight.evict() == [v3.key]
    assert v1.path.exists()


def test_failed_install_leaves_no_entry_and_keeps_the_log(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    with pytest.raises(InstallError) as info:
        cache.version_env(parse_version_spec("kwtiny==9.9"), find_links=str(house))
    assert "kwtiny==9.9" in info.value.log
    assert not any((tmp_path / "envs" / "entries").iterdir())
    [log] = (tmp_path / "envs" / "logs").iterdir()
    assert "No matching distribution" in log.read_text() or "kwtiny==9.9" in log.read_text()


def test_a_wheel_path_installs_that_file(tmp_path: Path, house: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = parse_version_spec(str(house / "kwtiny-2.0-py3-none-any.whl"))
    env = cache.version_env(spec)
    assert _import_version(env.pythonpath) == "2.0" and spec.key == "kwtiny==2.0"


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "lib-src"
    (src / "pkg").mkdir(parents=True, exist_ok=True)
    (src / "pkg" / "gen.py").write_text(
        "import os, sys\n"
        "flag = os.environ.get('FLASH_ATTENTION_DISABLE_HDIM64', 'unset')\n"
        "secret = os.environ.get('KW_GITHUB_TOKEN', 'absent')\n"
        "open('kwbuilt.py', 'w').write(f'VERSION = {flag!r}\\nSECRET = {secret!r}\\n')\n"
        "sys.exit(int(os.environ.get('FAIL', '0')))\n"
    )
    return src


def _copy(src: Path) -> object:
    import shutil

    return lambda dest: shutil.copytree(src, dest)


def test_commit_build_runs_the_recipe_with_its_env_and_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KW_GITHUB_TOKEN", "ghp_secret")
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    recipe = BuildRecipe(
        recipe="command",
        commands=(("{python}", "gen.py"),),
        cwd="pkg",
        pythonpath=("pkg",),
        env={"FLASH_ATTENTION_DISABLE_HDIM64": "TRUE"},
        profile="trimmed",
    )
    spec = CommitSpec("https://example.invalid/lib", "a" * 40)
    env = cache.commit_env(spec, recipe, _copy(_source(tmp_path)), use_ccache=False)
    assert not env.cached and env.meta["profile"] == "trimmed"
    assert _import_version(env.pythonpath, "kwbuilt") == "TRUE"
    built = (env.path / "src" / "pkg" / "kwbuilt.py").read_text()
    assert "absent" in built  # the worker's secrets never reach the build
    assert cache.commit_env(spec, recipe, _copy(_source(tmp_path))).cached
    full = BuildRecipe(**{**recipe.__dict__, "env": {}, "profile": "full"})
    assert cache.commit_env(spec, full, _copy(_source(tmp_path))).key != env.key


def test_commit_build_failure_and_timeout_are_install_errors(tmp_path: Path) -> None:
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = CommitSpec("lib", "b" * 40)
    failing = BuildRecipe(
        recipe="command", commands=(("{python}", "gen.py"),), cwd="pkg", env={"FAIL": "3"}
    )
    with pytest.raises(InstallError, match="exit code 3"):
        cache.commit_env(spec, failing, _copy(_source(tmp_path)), use_ccache=False)
    slow = BuildRecipe(
        recipe="command",
        commands=(("{python}", "-c", "import time; time.sleep(30)"),),
        timeout_s=1.0,
    )
    with pytest.raises(InstallError, match="timed out"):
        cache.commit_env(spec, slow, _copy(_source(tmp_path)), use_ccache=False)
    assert not any((tmp_path / "envs" / "entries").iterdir())
    assert len(list((tmp_path / "envs" / "logs").iterdir())) == 2


def test_a_recipes_timeout_may_shorten_the_servers_but_never_lengthen_it(
    tmp_path: Path,
) -> None:
    # audit, 2026-12-05: [install] timeout_s = 86400 replaced the server's install limit
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    spec = CommitSpec("lib", "b" * 40)
    slow = BuildRecipe(
        recipe="command",
        commands=(("{python}", "-c", "import time; time.sleep(60)"),),
        timeout_s=86400.0,
    )
    started = time.monotonic()
    with pytest.raises(InstallError, match="timed out"):
        cache.commit_env(spec, slow, _copy(_source(tmp_path)), use_ccache=False, timeout=2.0)
    assert time.monotonic() - started < 30  # the server's 2 s, not the recipe's day


def test_an_outage_during_a_build_is_ours_not_the_commits(tmp_path: Path) -> None:
    # a submodule mirror down or no sandbox (InfrastructureError: retried) became
    # "building ... failed", a build failure blamed on the commit and never retried
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)

    def build(dest: Path) -> tuple[str, tuple[str, ...]]:
        raise InfrastructureError("submodule update failed (exit 128): mirror unreachable")

    with pytest.raises(InfrastructureError, match="mirror unreachable"):
        cache._ensure({"kind": "commit", "spec": "lib@" + "c" * 40}, build)
    assert not any((tmp_path / "envs" / "entries").iterdir())  # nothing half-built kept
    (log,) = (tmp_path / "envs" / "logs").iterdir()
    assert "mirror unreachable" in log.read_text()


def test_the_toolchain_probe_reads_the_interpreter() -> None:
    tc = probe_toolchain(sys.executable)
    assert tc.python.startswith("CPython 3.") and tc.torch.startswith("2.")
    assert len(tc.fingerprint()) == 12 and tc == probe_toolchain(sys.executable)


def test_command_line_builds_a_commit_with_a_vendored_submodule_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the GPU host script does: config from a file, trimmed profile, CUTLASS from a
    directory instead of the network, the result printed as JSON and cached."""
    from kernelwatch.worker import venvs_cli
    from tests.helpers import make_repo

    repo = tmp_path / "fa"
    sha = make_repo(repo, {"hopper/gen.py": (_source(tmp_path) / "pkg" / "gen.py").read_text()})
    cutlass = tmp_path / "cutlass-pin"
    (cutlass / "include").mkdir(parents=True)
    (cutlass / "include" / "cute.hpp").write_text("// pinned\n")
    config = tmp_path / "kw.toml"
    config.write_text(
        '[install]\nrecipe = "command"\ncwd = "hopper"\ncommands = [["{python}", "gen.py"]]\n'
        'pythonpath = ["hopper"]\nsubmodules = ["csrc/cutlass"]\n'
        "[install.profiles.trimmed.env]\nFLASH_ATTENTION_DISABLE_HDIM64 = 'TRUE'\n"
    )
    argv = ["--root", str(tmp_path / "envs"), "build", "--repo", str(repo), "--commit", sha[:10]]
    argv += ["--config", str(config), "--profile", "trimmed", "--offline", "--no-ccache"]
    argv += ["--vendor", f"csrc/cutlass={cutlass}"]
    assert venvs_cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["profile"] == "trimmed" and not first["cached"] and first["spec"].endswith(sha)
    src = Path(first["path"]) / "src"
    assert (src / "csrc/cutlass/include/cute.hpp").read_text() == "// pinned\n"
    assert _import_version(tuple(first["pythonpath"]), "kwbuilt") == "TRUE"
    assert venvs_cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["cached"] is True


def test_an_install_failure_says_what_pip_said(tmp_path: Path, house: Path) -> None:
    """Issue 18: the error was a truncated argv; it is pip's own message now."""
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN)
    with pytest.raises(InstallError) as info:
        cache.version_env(parse_version_spec("kwtiny==9.9"), find_links=str(house))
    message = str(info.value)
    assert "exit code" in message
    assert "No matching distribution found for kwtiny==9.9" in message, message


def test_build_error_keeps_the_error_block_of_a_long_log() -> None:
    log = "\n".join(f"Collecting thing{i}" for i in range(200))
    log += "\nerror: subprocess-exited-with-error\n  × Getting requirements did not run\n"
    log += "  ╰─> TOMLDecodeError: Expected ']' at line 1\n"
    text = build_error(log)
    assert text.startswith("error: subprocess-exited-with-error") and "TOMLDecodeError" in text
    assert "Collecting" not in text
    assert build_error("one\ntwo\n") == "one\ntwo"


def test_a_native_builds_first_compiler_error_comes_before_its_traceback() -> None:
    # cpp_extension's shape: ninja's failed step and nvcc's message, pages of other steps,
    # then the Python traceback that build_error's tail alone used to give
    log = "[1/40] c++ -c a.cpp\nFAILED: /w/build/flash_fwd.o\n/usr/local/cuda/bin/nvcc -c x.cu\n"
    log += 'hopper/flash_fwd.cu(12): error: identifier "Flash" is undefined\n'
    log += "/bin/sh: 1: ccache: not found\n"
    log += "\n".join(f"[{i}/40] nvcc ok" for i in range(2, 39)) + "\nninja: build stopped\n"
    log += 'Traceback (most recent call last):\n  File "setup.py", line 702\n'
    log += "RuntimeError: Error compiling objects for extension\n"
    text = build_error(log)
    assert text.splitlines()[:5] == [
        "first error lines of the build:",
        "FAILED: /w/build/flash_fwd.o",
        'hopper/flash_fwd.cu(12): error: identifier "Flash" is undefined',
        "/bin/sh: 1: ccache: not found",
        "then:",
    ]
    assert text.endswith("RuntimeError: Error compiling objects for extension")
    assert compiler_errors("x" * 10 + ": error: " + "y" * 1000, width=50) == [
        "x" * 10 + ": error: " + "y" * 31
    ]
    # pip's own message has no compiler line: as it was
    assert build_error("one\ntwo\n") == "one\ntwo"


def _kept(tmp_path: Path) -> Path:
    """A kept JIT cache as a run of the code under test could leave it."""
    kept = tmp_path / "jit" / "key"
    (kept / "flashinfer" / "ops").mkdir(parents=True)
    (kept / "flashinfer" / "ops" / "op.so").write_bytes(b"\x7fELF" + b"\0" * 1000)
    (kept / ".ninja_log").write_text("# ninja log v6\n")
    os.utime(kept / "flashinfer" / "ops" / "op.so", ns=(1_700_000_000 * 10**9,) * 2)
    return kept


def test_a_seed_copies_builds_with_their_times_and_within_its_budget(tmp_path: Path) -> None:
    import kernelwatch.worker.venvs as venvs

    kept = _kept(tmp_path)
    copied = venvs.copy_jit_seed(kept, tmp_path / "home" / ".cache")
    op = tmp_path / "home" / ".cache" / "flashinfer" / "ops" / "op.so"
    assert op.read_bytes() == (kept / "flashinfer" / "ops" / "op.so").read_bytes()
    assert op.stat().st_mtime_ns == 1_700_000_000 * 10**9  # older than nothing it was built from
    assert copied == 1004 + len("# ninja log v6\n")
    # past the budget a file is not copied at all (never cut short: a cut .so would load)
    small = venvs.copy_jit_seed(kept, tmp_path / "small", limit_bytes=100)
    assert (
        small == len("# ninja log v6\n")
        and not (tmp_path / "small" / "flashinfer" / "ops" / "op.so").exists()
    )
    assert venvs.copy_jit_seed(tmp_path / "gone", tmp_path / "none") == 0


def test_a_kept_cache_that_swaps_a_link_for_a_directory_is_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copying worker may be root and the kept cache is written by code under test:
    a link it left is copied as a link, and when the cache then shows a directory under
    that name (swapped in while the copy walks), the copy does not write through its own
    link into what the link names."""
    import kernelwatch.worker.venvs as venvs

    kept, victim = _kept(tmp_path), tmp_path / "etc"
    victim.mkdir()
    (kept / "x").symlink_to(victim)
    real_walk = venvs.walk_no_follow

    def racing(top: Path, **kw: object):  # type: ignore[no-untyped-def]
        for item in real_walk(top, **kw):  # type: ignore[arg-type]
            yield item
            if item[0] == kept:  # the copy has made its link x -> etc by now
                (kept / "x").unlink()
                (kept / "x").mkdir()
                (kept / "x" / "planted").write_text("written as root")
                fd = os.open(kept / "x", os.O_RDONLY | os.O_DIRECTORY)
                try:
                    yield kept / "x", [], ["planted"], fd
                finally:
                    os.close(fd)

    monkeypatch.setattr(venvs, "walk_no_follow", racing)
    venvs.copy_jit_seed(kept, tmp_path / "copy")
    assert list(victim.iterdir()) == []
    assert os.readlink(tmp_path / "copy" / "x") == str(victim)


def test_a_build_written_while_it_is_copied_is_left_to_build_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of the same code on another card may be linking an op as the copy reads it;
    a half-written .so copied with its time would load as up to date."""
    import kernelwatch.worker.venvs as venvs

    kept = _kept(tmp_path)
    op = kept / "flashinfer" / "ops" / "op.so"
    real_copy = venvs._copy_bytes

    def linking(fin, fout, size):  # type: ignore[no-untyped-def]
        real_copy(fin, fout, size)
        if os.fstat(fin.fileno()).st_ino == op.stat().st_ino:  # the linker writes on
            with open(op, "ab") as more:
                more.write(b"\0" * 10)

    monkeypatch.setattr(venvs, "_copy_bytes", linking)
    venvs.copy_jit_seed(kept, tmp_path / "copy")
    assert not (tmp_path / "copy" / "flashinfer" / "ops" / "op.so").exists()
    assert (tmp_path / "copy" / ".ninja_log").is_file()
