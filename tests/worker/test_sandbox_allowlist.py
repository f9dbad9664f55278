"""The sandbox shows what the service names, never a path a recipe names (issue 24, holes 1-2).

The attack: ``[install] env = { PATH = "/usr/bin:/bin:/./etc/kernelwatch:/./var/run/postgresql" }``
passed a ``str.startswith`` deny-list, was bound into the sandbox, and approved code
read the service's secrets and reached PostgreSQL's Unix socket. A recipe's
``CCACHE_DIR`` became a writable bind of any path, chowned by a root worker.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.libspec import CommitSpec
from kernelwatch.jobs.library.repoconfig import parse
from kernelwatch.worker.recipes import BuildRecipe
from kernelwatch.worker.sandbox import Sandbox, clean_env, confine_env
from kernelwatch.worker.suite_process import run_suite
from kernelwatch.worker.venvs import EnvCache, Toolchain
from tests.worker.test_sandbox import _box, _request

TOOLCHAIN = Toolchain("CPython 3.11.7", "2.13.0+cpu", "none", "none")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A directory of the host the sandbox must never show (as /etc/kernelwatch)."""
    top = tmp_path / "etc-kernelwatch"
    top.mkdir()
    (top / "env").write_text("KW_WEBHOOK_SECRET=whsec-never-readable\n")
    return top


def test_a_recipe_path_is_never_bound_into_the_sandbox(tmp_path: Path, secret: Path) -> None:
    """Even a PATH that got past every check binds nothing: the view is the service's."""
    link = tmp_path / "innocent"
    link.symlink_to(secret, target_is_directory=True)
    tricks = [f"/.{secret}", f"/{secret}", f"{secret}/../{secret.name}", str(link)]
    path = ":".join(["/usr/bin", "/bin", *tricks])
    env = clean_env({"PATH": path, "LD_LIBRARY_PATH": f"/.{secret}", "CUDA_HOME": f"/.{secret}"})
    targets = [f"{t}/env" for t in tricks]
    socket_dir = "/var/run/postgresql"
    if Path(socket_dir).is_dir():
        targets.append(f"/.{socket_dir}")
    req = _request(tmp_path, ["c1=read:" + "|".join(targets)], _box())
    req.env = env
    outcome = run_suite(req)
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    seen = json.loads(outcome.log.split("READ ", 1)[1].splitlines()[0])
    assert seen == {t: "FileNotFoundError" for t in targets}
    assert "whsec-never-readable" not in outcome.log


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("PATH", "/usr/bin:/bin:/./etc/kernelwatch"),
        ("PATH", "/usr/bin://var/run/postgresql"),
        ("LD_LIBRARY_PATH", "/usr/lib/../../root/.ssh"),
        ("PATH", "tools/../../../srv"),
        ("CUDA_HOME", "/./home/kw"),
        ("CC", "ccache /./etc/kernelwatch/cc"),
    ],
)
def test_a_recipe_path_outside_the_view_is_refused_when_the_file_is_read(
    key: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^\.kernelwatch\.toml: install\.env\.{key} entry"):
        parse(f'[install]\nenv = {{ {key} = "{value}" }}\n')


@pytest.mark.parametrize(
    "key",
    [
        "CCACHE_DIR",
        "PIP_FIND_LINKS",
        "PIP_INDEX_URL",
        "HOME",
        "TMPDIR",
        "PYTHONPATH",
        "KW_DATABASE_URL",
    ],
)
def test_service_owned_variables_are_refused_in_a_recipe(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"install\.env\.{key} is set by the service"):
        parse(f'[install]\nenv = {{ {key} = "/x" }}\n')
    # in a profile too
    with pytest.raises(ConfigError, match=rf"install\.profiles\.fast\.env\.{key} is set by"):
        parse(f'[install.profiles.fast]\nenv = {{ {key} = "/x" }}\n')


def test_each_entry_is_resolved_before_it_is_judged(tmp_path: Path, secret: Path) -> None:
    """What only the worker's filesystem can tell: symlinks, and where ``..`` really lands."""
    entry = tmp_path / "entry"
    checkout = entry / "src"
    (checkout / "tools").mkdir(parents=True)
    (checkout / "escape").symlink_to(secret, target_is_directory=True)
    visible = Sandbox.from_env({"KW_SANDBOX": "none"}).visible()

    def confined(key: str, value: str) -> dict[str, str]:
        return confine_env({key: value}, checkout=checkout, entry=entry, visible=visible)

    ok = confined("PATH", "tools:/usr/bin:/bin")
    assert ok == {"PATH": f"{checkout}/tools:/usr/bin:/bin"}  # relative: in the checkout
    assert confined("LD_LIBRARY_PATH", f"{entry}/site/lib") == {
        "LD_LIBRARY_PATH": f"{entry}/site/lib"
    }
    assert confined("MAX_JOBS", "4") == {"MAX_JOBS": "4"}
    assert confined("CC", "ccache /usr/bin/gcc") == {"CC": "ccache /usr/bin/gcc"}
    refused = {
        "PATH": "escape",  # a symlinked directory of the checkout
        "LD_LIBRARY_PATH": f"{checkout}/../../{secret.name}",
        "PKG_CONFIG_PATH": f"/{secret}",
        "CUDA_HOME": f"/.{secret}",
        "CXX": f"{secret}/g++",
    }
    for key, value in refused.items():
        with pytest.raises(ConfigError, match=f"install.env.{key} entry .* resolves to {secret}"):
            confined(key, value)
    with pytest.raises(ConfigError, match="install.env.CCACHE_DIR is set by the service"):
        confined("CCACHE_DIR", str(entry))


def test_a_recipe_ccache_dir_is_never_written_or_chowned(tmp_path: Path) -> None:
    """Hole 2: a recipe's CCACHE_DIR became a writable bind, chowned by a root worker.

    The recipe here skips the file's reader (as a server override or a stored snapshot
    would): the worker refuses it on its own, and the directory keeps its owner.
    """
    victim = tmp_path / "root-only"
    victim.mkdir(mode=0o700)
    (victim / "private").write_text("0600 data\n")
    before = victim.stat()
    src = tmp_path / "lib"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "ok.py").write_text("VERSION = 1\n")
    recipe = BuildRecipe.model_construct(
        **{
            **BuildRecipe().__dict__,
            "recipe": "command",
            "commands": (("{python}", "-c", "print('built')"),),
            "env": {"CCACHE_DIR": str(victim)},
        }
    )
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN, sandbox=_box())
    spec = CommitSpec("https://example.invalid/lib", "c" * 40)
    with pytest.raises(ConfigError, match="install.env.CCACHE_DIR is set by the service"):
        cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
    after = victim.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_uid,
        before.st_gid,
        0o700,
    )
    assert sorted(os.listdir(victim)) == ["private"]
    assert not any((tmp_path / "envs" / "entries").iterdir())


def test_nothing_outside_the_service_directory_is_handed_to_the_sandbox_user(
    tmp_path: Path,
) -> None:
    box = Sandbox("bwrap", 10**9, 10**6, uid=os.getuid(), gid=os.getgid())
    inside = tmp_path / "data" / "work"
    inside.mkdir(parents=True)
    box.owner([inside], within=tmp_path / "data")
    for outside in (tmp_path / "elsewhere", tmp_path / "data" / ".." / "x", Path("/etc")):
        with pytest.raises(ConfigError, match="refusing to hand"):
            box.owner([outside], within=tmp_path / "data")
    (tmp_path / "data" / "sneaky").symlink_to("/etc")
    with pytest.raises(ConfigError, match="refusing to hand"):
        box.owner([tmp_path / "data" / "sneaky"], within=tmp_path / "data")


def test_the_view_is_the_services_own_toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"/usr/bin:/./etc:/root/bin:/bin:{Path(sys.executable).parent}")
    visible = Sandbox.from_env({"KW_SANDBOX": "none"}).visible()
    assert "/etc" not in visible and "/root/bin" not in visible
    # a bin/ on PATH stands for its prefix (a toolchain's libexec/ and lib/ beside it)
    assert os.path.dirname(os.path.realpath("/usr/bin")) in visible


def test_a_toolchain_on_the_workers_path_is_shown_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler under ``<prefix>/bin`` needs ``<prefix>/libexec`` in the box too.

    On the H200 image Triton's C compiler is ``/opt/gcc/bin/gcc``: with only its
    ``bin/`` bound it exited 1 and every Triton launch of every sandboxed suite
    failed (2026-12-02). The toolchain here lives under /opt for the same reason:
    /tmp is never shown.
    """
    if not os.access("/opt", os.W_OK):
        pytest.skip("needs a writable /opt (the toolchain must lie outside /tmp)")
    prefix = Path(tempfile.mkdtemp(prefix="kw-toolchain-", dir="/opt"))
    try:
        (prefix / "bin").mkdir()
        (prefix / "libexec").mkdir()
        (prefix / "libexec" / "cc1").write_text("backend found\n")
        (prefix / "libexec" / "cc1").chmod(0o644)
        tool = prefix / "bin" / "cc"
        tool.write_text('#!/bin/sh\nexec cat "$(dirname "$0")/../libexec/cc1"\n')
        tool.chmod(0o755)
        for d in (prefix, prefix / "bin", prefix / "libexec"):
            d.chmod(0o755)
        monkeypatch.setenv("PATH", f"{prefix / 'bin'}:/usr/bin:/bin")
        box = _box()
        scratch = box.scratch(tmp_path / "scratch")
        argv, env = box.wrap([str(tool)], cwd=Path("/"), env=clean_env(), scratch=scratch)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (0, "backend found\n"), done.stderr
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def test_every_test_the_threat_model_names_exists() -> None:
    """docs/security.md names, for each line of the threat model, the test that proves it."""
    import re

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "security.md").read_text()
    current: Path | None = None
    named = 0
    for ref in re.findall(r"`((?:[\w/]+\.py)?::\w+)(?:\[[^\]]*\])?`", text):
        path, _, name = ref.partition("::")
        if path:
            found = [root / path] if "/" in path else sorted((root / "tests").rglob(path))
            assert found and found[0].is_file(), path
            current = found[0]
        assert current is not None, ref
        assert f"def {name}(" in current.read_text(), f"{current.name}::{name}"
        named += 1
    assert named >= 25


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the library")
def test_the_recipes_environment_never_reaches_a_process_outside_the_sandbox(
    tmp_path: Path,
) -> None:
    """A recipe's LD_PRELOAD (or LD_LIBRARY_PATH) naming a library the build wrote reached
    bwrap itself, started with the run's environment: the library ran outside the
    sandbox, as the worker (root, for a root worker)."""
    escaped = tmp_path / "escaped"  # outside every bind: only code outside can write it
    src = tmp_path / "preload.c"
    src.write_text(
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void run(void) {\n"
        f'  FILE *f = fopen("{escaped}", "a");\n'
        '  if (f) { fprintf(f, "uid %d\\n", (int)getuid()); fclose(f); }\n}\n'
    )
    req = _request(tmp_path, [], _box())
    lib = req.workdir / "libkw.so"  # where a build step could have written it
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    req.env = clean_env({"LD_PRELOAD": str(lib), "LD_LIBRARY_PATH": str(req.workdir)})
    outcome = run_suite(req)
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    assert not escaped.exists(), escaped.read_text()


def test_a_log_swapped_for_a_symlink_is_not_followed(tmp_path: Path, secret: Path) -> None:
    """The runner's log lies where the code writes: a symlink planted in its place had
    the worker read what it names (as root) into the run's log and the database."""
    target = secret / "env"
    outcome = run_suite(_request(tmp_path, [f"c1=swaplog:{target}"], _box()))
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    assert "whsec-never-readable" not in outcome.log


def test_a_pythonpath_entry_that_links_out_of_the_checkout_is_refused(
    tmp_path: Path, secret: Path
) -> None:
    """The suite binds the recipe's pythonpath entries read-only: a checkout's symlink
    there had bwrap bind what it names (the service's secrets, say)."""
    src = tmp_path / "lib"
    src.mkdir()
    (src / "lib").symlink_to(secret, target_is_directory=True)
    recipe = BuildRecipe(recipe="pythonpath", pythonpath=("lib",))
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN, sandbox=_box())
    spec = CommitSpec("https://example.invalid/lib", "e" * 40)
    with pytest.raises(
        ConfigError, match=r"install\.pythonpath entry 'lib' resolves to .*, outside"
    ):
        cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d, symlinks=True))


@pytest.mark.timeout(120)
def test_a_fifo_where_the_worker_reads_does_not_block_it(tmp_path: Path) -> None:
    """A FIFO planted in place of the runner's log (or in an environment the worker
    hashes) blocked the worker's open forever: the run hung, its heartbeat still beating."""
    outcome = run_suite(_request(tmp_path, ["c1=fifo"], _box()))
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    from kernelwatch.worker.venvs import _digest, _listing

    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "a.py").write_text("A = 1\n")
    os.mkfifo(entry / "pipe")
    assert _digest(entry) and _listing(entry)  # recorded, never opened


def test_bubblewrap_is_started_by_the_path_the_worker_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inner environment's short PATH must not decide which bwrap runs.

    subprocess looks a bare argv[0] up in the *child's* PATH: a bwrap installed
    outside /usr/bin (on the H200, the carried package under /opt) was "not found"
    for every run although the worker had found it (2026-12-02).
    """
    tools = tmp_path / "opt" / "bin"
    tools.mkdir(parents=True)
    fake = tools / "bwrap"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    box = Sandbox("bwrap", 10**9, 10**6, uid=None, gid=None)
    scratch = box.scratch(tmp_path / "scratch")
    argv, env = box.wrap(["true"], cwd=Path("/"), env=clean_env(), scratch=scratch)
    assert argv[0] == str(fake)
    assert str(tools) not in env["PATH"].split(":")  # the box's PATH stays its own


def test_a_link_a_build_leaves_where_the_cache_writes_its_marker_is_not_followed(
    tmp_path: Path, secret: Path
) -> None:
    """A build writes its entry as the sandbox user, and the cache then wrote its marker
    (``.kw-env.json`` by way of ``.kw-env.json.tmp``) and ``.kw-last-used`` there, as the
    worker: links the build left under those names had a root worker overwrite the files
    they named (the service's environment file, the database) with the marker's JSON."""
    victims = {name: secret / name for name in ("env", "db")}
    victims["db"].write_text("SQLite format 3\n")
    before = {name: path.read_text() for name, path in victims.items()}
    src = tmp_path / "lib"
    src.mkdir()
    plant = (
        f"import os; os.symlink({str(victims['env'])!r}, '../.kw-env.json.tmp'); "
        f"os.symlink({str(victims['db'])!r}, '../.kw-last-used')"
    )
    recipe = BuildRecipe(recipe="command", commands=(("{python}", "-c", plant),))
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN, sandbox=_box())
    spec = CommitSpec("https://example.invalid/lib", "f" * 40)
    env = cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
    assert {name: path.read_text() for name, path in victims.items()} == before
    for name in (".kw-env.json", ".kw-last-used"):
        assert stat.S_ISREG((env.path / name).lstat().st_mode), name
    again = cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
    assert again.cached and again.key == env.key  # the cache's own files: not its listing


@pytest.mark.timeout(120)
def test_a_fifo_a_build_leaves_where_the_cache_writes_does_not_block_it(tmp_path: Path) -> None:
    """A FIFO the build left as ``.kw-last-used`` blocked the worker's write of the entry's
    last use forever: the build was done, the run never went on."""
    src = tmp_path / "lib"
    src.mkdir()
    plant = "import os; os.mkfifo('../.kw-last-used'); os.mkfifo('../.kw-env.json')"
    recipe = BuildRecipe(recipe="command", commands=(("{python}", "-c", plant),))
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN, sandbox=_box())
    spec = CommitSpec("https://example.invalid/lib", "f" * 40)
    env = cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
    assert stat.S_ISREG((env.path / ".kw-last-used").lstat().st_mode)
    assert [e["key"] for e in cache.entries()] == [env.key]


# ----------------------------------------------------------------------------- audit, 2026-12-05
# PIP_INDEX_URL was on the allow-list: an operator's index URL with credentials reached
# code under test (which has no network, so no use for it). Only the worker's own pip,
# outside the sandbox, reads the operator's package sources now.

INDEX = "https://kw:idx-SECRET-9@pypi.internal.example/simple"
PIP_PROBE = (
    "import json, os; "
    "open('seen.json', 'w').write("
    "json.dumps({k: v for k, v in os.environ.items() if k.startswith('PIP_')}))"
)


def test_code_under_test_never_sees_the_operators_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    monkeypatch.setenv("PIP_FIND_LINKS", "https://kw:links-SECRET-9@wheels.example/")
    monkeypatch.setenv("PIP_CONSTRAINT", "https://kw:c-SECRET-9@wheels.example/c.txt")
    assert not any(k in clean_env() for k in ("PIP_INDEX_URL", "PIP_FIND_LINKS"))
    src = tmp_path / "lib"
    src.mkdir()
    recipe = BuildRecipe(recipe="command", commands=(("{python}", "-c", PIP_PROBE),))
    cache = EnvCache(tmp_path / "envs", TOOLCHAIN, sandbox=_box())
    spec = CommitSpec("https://example.invalid/lib", "c" * 40)
    env = cache.commit_env(spec, recipe, lambda d: shutil.copytree(src, d), use_ccache=False)
    seen = (env.path / "src" / "seen.json").read_text()
    assert "SECRET" not in seen and "PIP_INDEX_URL" not in seen, seen


def test_the_workers_own_pip_still_reads_the_operators_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelwatch.worker import venvs

    monkeypatch.setenv("PIP_INDEX_URL", INDEX)
    venvs._run([sys.executable, "-c", PIP_PROBE], tmp_path, {}, 60, trusted=True)
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["PIP_INDEX_URL"] == INDEX and seen["PIP_CONFIG_FILE"] == os.devnull
