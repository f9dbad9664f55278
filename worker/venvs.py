"""A size-limited cache of environments: released versions and from-source builds.

Why: installing ``flashinfer-python==0.5.3`` or building FlashAttention-3 at a
commit takes from seconds to an hour, and the result only depends on *what*
was installed and *with which toolchain*. So each environment is built once
per key — (spec, where it came from, recipe, toolchain fingerprint) — and
reused until the cache outgrows its size limit, oldest use first.

- **Versions**: ``pip install --no-deps --only-binary=:all: --target DIR`` of
  ``name==version`` (plus named companion packages, e.g. FlashInfer's
  ``apache-tvm-ffi``), from ``--index-url`` and/or a ``--find-links``
  wheelhouse. torch and triton come from the worker's interpreter, never pip.
- **Commits**: the checkout is materialised inside the entry, submodules are
  fetched through the configured mirrors, and the recipe's commands run there
  with the recipe's environment (``MAX_JOBS``, ``TORCH_CUDA_ARCH_LIST``,
  ``FLASH_ATTENTION_DISABLE_*``) through the sandbox's allow-list, under the
  build timeout. When ``ccache`` exists, nvcc runs through it with a cache
  shared by all entries (``CCACHE_BASEDIR`` makes paths of different entries
  hit), so a nearby commit rebuilds fast. The build log is kept in ``logs/``.
- **Toolchain fingerprint**: Python, torch (with its CUDA tag), CUDA and the
  driver. A new driver or torch makes new entries; old ones age out.
- **Trust**: an entry is used only if its marker (written last) is present and
  its content still hashes to the digest recorded at creation (``_digest``:
  sha256 over every file's path, size and content and every symlink's target,
  bytecode included); a failed, partial or tampered entry is deleted, rebuilt and
  the rebuild said in the run's log and the worker's, never used. Bytecode is
  part of the entry: every build ends by compiling all of its Python
  (``compileall``, inside the sandbox for a commit build), so the ``.pyc`` a
  later import would read is there at creation and covered by the digest, and
  code runs with ``PYTHONDONTWRITEBYTECODE=1`` and sees the entry read-only
  (issue 24: bytecode planted after creation was not seen by the digest). Code
  under test cannot rewrite an entry in the first place: its build runs in the
  sandbox (``worker/sandbox.py``) with only its own entry writable, and the
  suite sees every entry read-only; the digest is the second lock, for whatever
  else may write the cache directory.
- **Who runs what**: the worker's own pip (released versions: wheels only, no
  code of theirs runs) runs outside the sandbox with a clean environment and no
  user or system configuration; a from-source build (``setup.py``, the recipe's
  commands) is code under test and runs sandboxed, without network.
- **Concurrency**: one lock file per entry (exclusive while building, shared
  while a run uses it) and one for eviction, which skips entries in use.

Run as ``python -m kernelwatch.worker.venvs`` (``venvs_cli.py``) it installs or
builds one entry and prints it as JSON: GPU host scripts use it without Celery.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from kernelwatch.jobs.errors import ConfigError, InfrastructureError, InstallError
from kernelwatch.jobs.library.config_model import InstallRecipe
from kernelwatch.jobs.library.libspec import CommitSpec, VersionSpec, normalize_name
from kernelwatch.jobs.library.recipe_env import under
from kernelwatch.jobs.library.repoconfig import FILE
from kernelwatch.kernels.devclass import gpu_rows
from kernelwatch.worker import stubs, submodules
from kernelwatch.worker.process import open_regular, run_supervised
from kernelwatch.worker.safewalk import walk_no_follow
from kernelwatch.worker.sandbox import Sandbox, clean_env, confine_env, tool_env, worker_pip_env

logger = logging.getLogger(__name__)

MARKER = ".kw-env.json"
LAST_USED = ".kw-last-used"
DEFAULT_MAX_BYTES = 200 * 2**30
_IGNORED = {MARKER, LAST_USED, f"{MARKER}.tmp", f"{LAST_USED}.tmp"}  # the cache's own


# --------------------------------------------------------------------------- toolchain


@dataclass(frozen=True)
class Toolchain:
    """What a built environment depends on besides its own sources."""

    python: str
    torch: str
    cuda: str
    driver: str

    def fingerprint(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


_PROBE = (
    "import json, platform\n"
    "info = {'python': platform.python_implementation() + ' ' + platform.python_version()}\n"
    "try:\n"
    "    import torch\n"
    "    info['torch'] = torch.__version__\n"
    "    info['cuda'] = torch.version.cuda or 'none'\n"
    "except Exception:\n"
    "    info['torch'] = info['cuda'] = 'none'\n"
    "print(json.dumps(info))\n"
)


@functools.cache
def probe_toolchain(python: str = sys.executable) -> Toolchain:
    """Ask ``python`` for its versions (a subprocess: it may be another interpreter)."""
    out = subprocess.run(
        [python, "-c", _PROBE], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    info = json.loads(out.strip().splitlines()[-1])
    return Toolchain(info["python"], info["torch"], info["cuda"], driver_version())


def driver_version() -> str:
    """The NVIDIA driver version, or ``none`` on a machine without one.

    The kernel module's own file first, then the shared GPU query (NVML where it
    starts, ``nvidia-smi`` where it does not: ``kernels/devclass.gpu_rows``).
    """
    proc_file = Path("/proc/driver/nvidia/version")
    if proc_file.exists():
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", proc_file.read_text())
        if m:
            return m.group(1)
    rows = gpu_rows(["driver_version"], timeout_s=30)
    return next((row[0] for row in rows or [] if row and row[0]), "none")


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class Env:
    """A ready environment: run the suite with ``python`` and ``pythonpath``."""

    key: str
    path: Path
    python: str
    pythonpath: tuple[str, ...]
    cached: bool
    seconds: float
    log: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    # the recipe's environment, checked and made absolute (commit environments)
    run_env: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": str(self.path),
            "python": self.python,
            "pythonpath": list(self.pythonpath),
            "cached": self.cached,
            "seconds": round(self.seconds, 2),
            **self.meta,
        }


Builder = Callable[[Path], tuple[str, tuple[str, ...]]]  # dest -> (log, pythonpath)


class EnvCache:
    """Environments under ``root``: ``entries/``, ``locks/``, ``logs/``, ``ccache/``."""

    def __init__(
        self,
        root: Path,
        toolchain: Toolchain,
        max_bytes: int = DEFAULT_MAX_BYTES,
        python: str = sys.executable,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.root = root
        self._sandbox = sandbox
        self.toolchain = toolchain
        self.max_bytes = max_bytes
        self.python = python
        for sub in ("entries", "locks", "logs"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    # -- public API -----------------------------------------------------------------

    def version_env(
        self,
        spec: VersionSpec,
        *,
        index_url: str | None = None,
        find_links: str | None = None,
        companions: Sequence[VersionSpec] = (),
        timeout: float = 900.0,
    ) -> Env:
        """The environment of a released version (installed now, or from the cache)."""
        material = {
            "kind": "version",
            "spec": spec.key,
            "wheel": _file_digest(spec.wheel) if spec.wheel else None,
            "with": sorted(c.key for c in companions),
            "index_url": index_url,
            "find_links": find_links,
        }

        def build(dest: Path) -> tuple[str, tuple[str, ...]]:
            site = dest / "site"
            argv = [self.python, "-m", "pip", "install", "--no-deps", "--no-input"]
            argv += ["--disable-pip-version-check", "--no-cache-dir", "--only-binary=:all:"]
            argv += ["--target", str(site)]
            if index_url:
                argv += ["--index-url", index_url]
            elif find_links:
                argv += ["--no-index"]
            if find_links:
                argv += ["--find-links", find_links]
            argv += [spec.requirement, *(c.requirement for c in companions)]
            log = _run(argv, dest, {}, timeout, trusted=True)
            log += _run(_compile_argv(self.python, dest), dest, {}, timeout, trusted=True)
            found = installed_versions(site)
            if found.get(spec.name) != spec.version:
                raise InstallError(
                    f"pip did not install {spec.key} (found {found.get(spec.name)!r})", log
                )
            return log, (str(site),)

        return self._ensure(material, build)

    def commit_env(
        self,
        spec: CommitSpec,
        recipe: InstallRecipe,
        materialize: Callable[[Path], object],
        *,
        mirrors: Mapping[str, str] | None = None,
        timeout: float = 3600.0,
        use_ccache: bool = True,
        offline: bool = False,
    ) -> Env:
        """The environment of a commit built with ``recipe`` (a profile already chosen).

        ``materialize(dest)`` puts the commit's sources at ``dest`` (the executor
        passes ``lambda d: mirror.worktree(sha, d)``). ``offline`` makes the build
        fail fast instead of reaching for the network (git only over ``file``,
        pip without an index): a build script that tries to download on an
        air-gapped host would otherwise hang until its timeout.

        ``timeout``: the server's limit on the build (``KW_INSTALL_TIMEOUT_S``); the
        recipe's ``timeout_s`` may shorten it, never lengthen it.
        """
        material = {
            "kind": "commit",
            "spec": spec.key,
            "recipe": recipe.fingerprint(),
            "profile": recipe.profile,
        }

        def build(dest: Path) -> tuple[str, tuple[str, ...]]:
            src = dest / "src"
            materialize(src)
            log = ""
            if recipe.submodules:
                log += submodules.update(src, recipe.submodules, mirrors, superproject=spec.source)
            if recipe.stub_sources is not None:  # the profile leaves kernels out
                log += stubs.apply(src, recipe.stub_sources)
            box = self.sandbox
            # the recipe's variables, checked (issue 24); the service's own laid over them
            env = self.recipe_env(recipe, dest)
            writable = [dest]
            shown = box.visible() if box.confined else None
            if use_ccache and (service := ccache_env(self.root, env, shown)):
                env.update(service)
                writable.append(self.root / "ccache")  # the service's, never the recipe's
                writable[-1].mkdir(parents=True, exist_ok=True)
            elif use_ccache and (ccache := shutil.which("ccache")):
                log += f"kernelwatch: the sandbox does not show {ccache}: built without ccache\n"
            if offline:
                env.update(GIT_ALLOW_PROTOCOL="file", PIP_NO_INDEX="1")
            # the repository's timeout_s may only shorten the server's limit, never raise it
            limit = min(recipe.timeout_s, timeout) if recipe.timeout_s else timeout
            deadline = time.monotonic() + limit
            box.check()
            box.owner([dest], within=self.root)
            # the shared ccache: its top only, never a walk through what other builds,
            # running now, may be rearranging under it
            box.owner(writable[1:], within=self.root, recursive=False)
            scratch_root = self.root / "tmp"
            if recipe.recipe == "pip":
                site = dest / "site"
                argv = [self.python, "-m", "pip", "install", "--no-deps"]
                argv += ["--no-build-isolation", "--disable-pip-version-check", "--no-input"]
                argv += ["--target", str(site), str(src / recipe.subdirectory)]
                steps = [(argv, src)]
                paths: tuple[str, ...] = (str(site),)
            else:
                steps = [(argv, src / recipe.cwd) for argv in recipe.argv(self.python)]
                paths = tuple(str(src / p) if p else str(src) for p in recipe.pythonpath or ("",))
            steps.append((_compile_argv(self.python, dest), src))  # bytecode: part of the entry
            for argv, cwd in steps:
                log += _run(
                    argv,
                    cwd,
                    env,
                    _left(deadline),
                    sandbox=box,
                    writable=writable,
                    scratch_root=scratch_root,
                )
            box.reclaim([dest])  # built: no later sandbox (the same user) may write it
            return log, paths

        built = self._ensure(material, build)
        _inside(built)
        return replace(built, run_env=self.recipe_env(recipe, built.path))

    def recipe_env(self, recipe: InstallRecipe, entry: Path) -> dict[str, str]:
        """``recipe.env`` as the build and the suite get it: path-like entries absolute
        and inside the checkout (``entry/src``), the entry or the sandbox's read-only
        toolchain, service-owned names refused (``sandbox.confine_env``)."""
        return confine_env(
            recipe.env, checkout=entry / "src", entry=entry, visible=self.sandbox.visible()
        )

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Keep entry ``key`` from eviction while a run uses it (shared lock)."""
        with _locked(self._lock(key), fcntl.LOCK_SH):
            yield

    def jit_home(self, key: str) -> Path:
        """The JIT cache of entry ``key`` (``jit_home``): kept beside it, evicted with it."""
        return jit_home(self.root, key)

    def entries(self) -> list[dict[str, Any]]:
        """Every complete entry's marker, with its last use (for ``kernelwatch doctor``)."""
        out = []
        for d in sorted((self.root / "entries").iterdir()):
            meta = _read_marker(d)
            if meta is not None:
                meta["last_used"] = _last_used(d)
                out.append(meta)
        return out

    def evict(self, keep: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Delete least recently used entries until the cache fits; return their keys."""
        removed: list[str] = []
        with _locked(self.root / "locks" / "cache.lock", fcntl.LOCK_EX):
            dirs = [d for d in (self.root / "entries").iterdir() if d.is_dir()]
            jit = self.root / JIT_DIR
            sizes = {d: _entry_size(d) + _loose_size(jit / d.name) for d in dirs}
            total = sum(sizes.values())
            for d in sorted(dirs, key=_last_used):
                if total <= self.max_bytes:
                    break
                if d.name in keep:
                    continue
                with _try_locked(self._lock(d.name)) as got:
                    if not got:
                        continue  # in use or being built
                    shutil.rmtree(d, ignore_errors=True)
                    shutil.rmtree(jit / d.name, ignore_errors=True)
                    (self.root / "logs" / f"{d.name}.log").unlink(missing_ok=True)
                total -= sizes[d]
                removed.append(d.name)
        return removed

    @property
    def sandbox(self) -> Sandbox:
        """Where builds run (``KW_SANDBOX*`` unless one was given)."""
        if self._sandbox is None:
            self._sandbox = Sandbox.from_env()
        return self._sandbox

    # -- internals ------------------------------------------------------------------

    def key(self, material: dict[str, Any]) -> str:
        full = {**material, "toolchain": self.toolchain.fingerprint()}
        digest = hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()[:20]
        label = re.sub(r"[^A-Za-z0-9_.=-]+", "_", str(material.get("spec", "env")))[-40:]
        return f"{label}-{digest}"

    def _lock(self, key: str) -> Path:
        return self.root / "locks" / f"{key}.lock"

    def _ensure(self, material: dict[str, Any], build: Builder) -> Env:
        key = self.key(material)
        dest = self.root / "entries" / key
        start = time.monotonic()
        with _locked(self._lock(key), fcntl.LOCK_EX):
            meta = _read_marker(dest)
            damage = damaged(dest, meta) if meta is not None else ""
            if meta is not None and not damage:
                _touch(dest)
                return self._env(key, dest, meta, True, start)
            note = ""
            if damage:  # tampered with (or broken): rebuilt, never trusted, and said so
                note = f"environment {key} failed its integrity check ({damage}); rebuilding\n"
                logger.warning("%s", note.strip())
            if dest.exists():  # partial, failed or tampered: rebuilt, never trusted
                shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            log_path = self.root / "logs" / f"{key}.log"
            try:
                log, pythonpath = build(dest)
                log = note + log
            except InstallError as exc:
                log_path.write_text(exc.log, encoding="utf-8")
                shutil.rmtree(dest, ignore_errors=True)
                raise
            except (ConfigError, InfrastructureError) as exc:
                # the recipe's fault, or ours (no sandbox, a submodule mirror down): said
                # as such, never as a build failure of the commit; ours is retried
                log_path.write_text(f"{exc}\n", encoding="utf-8")
                shutil.rmtree(dest, ignore_errors=True)
                raise
            except Exception as exc:
                log_path.write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
                shutil.rmtree(dest, ignore_errors=True)
                raise InstallError(f"building {material.get('spec')} failed: {exc}") from exc
            log_path.write_text(log, encoding="utf-8")
            meta = {
                **material,
                "key": key,
                "toolchain": asdict(self.toolchain),
                "pythonpath": list(pythonpath),
                "created": time.time(),
                "build_s": round(time.monotonic() - start, 2),
                "log": str(log_path),
                "size": _tree_size(dest),
                "listing": _listing(dest),
                "digest": _digest(dest),
                "stamp": _stamp(dest),
            }
            _write_marker(dest, meta)
            _touch(dest)
        self.evict(keep={key})
        return self._env(key, dest, meta, False, start, log)

    def _env(
        self, key: str, dest: Path, meta: dict[str, Any], cached: bool, start: float, log: str = ""
    ) -> Env:
        pythonpath = tuple(meta.get("pythonpath", ()))
        summary: dict[str, Any] = {
            k: meta[k] for k in ("spec", "kind", "profile", "log") if k in meta
        }
        return Env(
            key, dest, self.python, pythonpath, cached, time.monotonic() - start, log, summary
        )


def _inside(env: Env) -> None:
    """Every ``pythonpath`` entry resolves inside the environment: the sandbox binds
    them, and a checkout's symlink (``pythonpath = ["lib"]``, ``lib -> /etc/...``) would
    otherwise have it bind whatever the link names (issue 24's rule: no path a
    repository supplies is ever bound)."""
    top = os.path.realpath(env.path)
    for entry in env.pythonpath:
        real = os.path.realpath(entry)
        if real != top and not real.startswith(top + os.sep):
            rel = os.path.relpath(entry, env.path / "src")
            raise ConfigError(
                f"{FILE}: install.pythonpath entry {rel!r} resolves to {real}, outside the "
                "checkout; refused"
            )


def installed_versions(site: Path) -> dict[str, str]:
    """``{normalized name: version}`` of the distributions pip put into ``site``."""
    found: dict[str, str] = {}
    if not site.is_dir():
        return found
    for meta in site.glob("*.dist-info/METADATA"):
        fields: dict[str, str] = {}
        try:
            with open_regular(meta) as fh:
                text = fh.read(1 << 20).decode("utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if not line.strip():
                break
            name, sep, value = line.partition(":")
            if sep and name in ("Name", "Version"):
                fields[name] = value.strip()
        if "Name" in fields and "Version" in fields:
            found[normalize_name(fields["Name"])] = fields["Version"]
    return found


_ENV_FLAGS = ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "CFLAGS", "CXXFLAGS", "CPPFLAGS")


def ccache_env(
    root: Path, recipe_env: Mapping[str, str], shown: Sequence[str] | None = None
) -> dict[str, str]:
    """Variables that route nvcc through ccache, when ccache is installed and, in a
    sandbox (``shown``: the real paths it shows read-only), where the build can run it.

    ``PYTORCH_NVCC`` is how torch's extension builder (and FA3's copy of it)
    picks the CUDA compiler; ``CCACHE_BASEDIR`` rewrites absolute paths under the
    cache root so the same file in two entries hashes alike. A ccache the box does not
    show made every nvcc step exit 127 (FA3 on the H100, 2026-12-05: ccache under the
    host's ``/tmp``, which no box shows): then the build goes without it.
    """
    ccache = shutil.which("ccache")
    if not ccache:
        return {}
    if shown is not None and not any(under(os.path.realpath(ccache), top) for top in shown):
        return {}
    env = {
        "CCACHE_DIR": str(root / "ccache"),
        "CCACHE_BASEDIR": str(root / "entries"),
        "CCACHE_NOHASHDIR": "true",
        "CCACHE_COMPILERCHECK": "content",
    }
    # nvcc reads NVCC_APPEND_FLAGS / NVCC_PREPEND_FLAGS from the environment, where
    # ccache's hash does not look: a namespace per flag set keeps a trimmed build's
    # objects (-DFLASHATTENTION_DISABLE_DROPOUT ...) out of a full build's hits
    flags = [f"{k}={recipe_env[k]}" for k in _ENV_FLAGS if recipe_env.get(k)]
    if flags:
        env["CCACHE_NAMESPACE"] = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:16]
    nvcc = _nvcc()
    if nvcc and "PYTORCH_NVCC" not in recipe_env:
        env["PYTORCH_NVCC"] = f"{ccache} {nvcc}"
    return env


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [Path(home) / "bin" / "nvcc"] if home else []
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for c in candidates:
        if c.exists():
            return str(c)
    return shutil.which("nvcc")


def _run(
    argv: list[str],
    cwd: Path,
    env_extra: Mapping[str, str],
    timeout: float,
    *,
    trusted: bool = False,
    sandbox: Sandbox | None = None,
    writable: Sequence[Path] = (),
    scratch_root: Path | None = None,
) -> str:
    """One build step: the worker's own pip (``trusted``) or code under test (sandboxed)."""
    env = clean_env(env_extra)
    env["PIP_NO_INPUT"] = "1"
    header = "$ " + " ".join(argv) + "\n"
    if timeout <= 0:
        raise InstallError("build timed out before this step", header)
    if trusted:
        env.update(tool_env(env))  # no pip.conf, no $HOME of the worker, no secrets
        env.update(worker_pip_env())  # the operator's index: the worker's pip only
    scratch = None
    guard = None
    if sandbox is not None and not trusted:
        scratch = sandbox.scratch(scratch_root or cwd.parent)
        argv, env = sandbox.wrap(argv, cwd=cwd, env=env, scratch=scratch, writable=writable)
        guard = sandbox.guard([*writable, scratch])
    log_dir = Path(tempfile.mkdtemp(prefix="kw-build-log-"))
    try:
        done = run_supervised(
            argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            log_path=log_dir / "log",
            guard=guard,
            signal_codes=scratch is not None and sandbox is not None and sandbox.confined,
        )
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if done.timed_out:
        raise InstallError(f"build step timed out after {timeout:.0f}s", header + done.log)
    if done.stopped:
        raise InstallError(f"build step {done.why}: {header[2:].split()[:3]}", header + done.log)
    if done.code != 0:
        what = " ".join(header[2:].split()[:4])
        raise InstallError(
            f"build step failed with exit code {done.code} ({what} ...):\n{build_error(done.log)}",
            header + done.log,
        )
    return header + done.log


# What a compiler, ninja or the shell prints where a native build first went wrong: a
# ninja step (its command line), nvcc's and gcc's diagnostics, a tool that is not there
COMPILER_ERROR = re.compile(
    r"^FAILED: |: (fatal )?error\b|\(\d+\): (catastrophic )?error\b|^nvcc fatal|"
    r"static assertion failed|: (command )?not found$|: No such file or directory$"
)


def compiler_errors(log: str, limit: int = 8, width: int = 400) -> list[str]:
    """The first ``limit`` lines of ``log`` that say where a native build failed, each cut
    to ``width`` characters (a ninja ``FAILED:`` line carries the whole nvcc command)."""
    found = []
    for line in log.splitlines():
        if COMPILER_ERROR.search(line.strip()):
            found.append(line.strip()[:width])
            if len(found) == limit:
                break
    return found


def build_error(log: str, lines: int = 15) -> str:
    """What the build tool itself said went wrong: pip's (or the backend's) message.

    The last ``error:`` block of the log when there is one (pip prints its reason there,
    after pages of progress), else the last ``lines`` non-empty lines. Issue 18: the run's
    error used to be a truncated argv, the reason only in the build log. A native build
    (``torch.utils.cpp_extension``, CMake) ends in a Python traceback pages below the
    compiler's own message; its first error lines come first (FlashAttention-3 in the
    sandbox, 2026-12-05: the run said "Error compiling objects for extension" and no more).
    """
    kept = [line.rstrip() for line in log.splitlines() if line.strip()]
    tail = kept[-4 * lines :]
    marks = [
        i
        for i, line in enumerate(tail)
        if line.lstrip().lower().startswith(("error:", "× ", "exception:", "traceback"))
    ]
    block = tail[marks[0] :] if marks else tail[-lines:]
    first = [line for line in compiler_errors(log) if line not in block]
    if first:
        return "\n".join(["first error lines of the build:", *first, "then:", *block])
    return "\n".join(block)


def _left(deadline: float) -> float:
    return deadline - time.monotonic()


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as fh:  # a FIFO a build planted would block the worker
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _walk(root: Path) -> Iterator[tuple[str, int]]:
    """(path, size) of every regular file below ``root`` but the cache's own markers,
    bytecode included (symlinks are in the digest, by target)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if rel in _IGNORED or stat.S_ISLNK(st.st_mode):
                continue
            yield rel, st.st_size


def _listing(root: Path) -> str:
    """Digest of (path, size) of every file: what a complete entry must still hold."""
    if not root.is_dir():
        return ""
    h = hashlib.sha256()
    for rel, size in _walk(root):
        h.update(f"{rel}\0{size}\n".encode())
    return h.hexdigest()


def _digest(root: Path) -> str:
    """sha256 over every file's path, size and content, and every symlink's target.

    Every file: bytecode too, which the build compiled (issue 24). What the listing
    cannot see: a file rewritten with its size kept. Costs one read of the entry
    (measured: see docs/security.md).
    """
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames):
            path = Path(dirpath) / name
            if path.is_symlink():
                h.update(f"L {path.relative_to(root)}\0{os.readlink(path)}\n".encode())
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel in _IGNORED:
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                h.update(f"L {rel}\0{os.readlink(path)}\n".encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(f"F {rel}\0{st.st_size}\0{_file_digest(path)}\n".encode())
            else:  # a FIFO or socket a build left: recorded, never opened
                h.update(f"O {rel}\0{stat.S_IFMT(st.st_mode)}\n".encode())
    return h.hexdigest()


def _stamp(root: Path) -> str:
    """Digest of every file's (path, size, inode, mtime, ctime): changes on any write.

    ``ctime`` cannot be set back by an unprivileged process, so an unchanged stamp
    means no file was touched since the content was last verified, and the content
    hash (seconds for a multi-GB entry) need not be recomputed on every use.
    """
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel in _IGNORED:
                continue
            st = path.lstat()
            h.update(
                f"{rel}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode()
            )
    return h.hexdigest()


def damaged(dest: Path, meta: dict[str, Any]) -> str:
    """Why the entry no longer holds what was built ("" when it does), by content hash.

    The stat stamp of the last verification decides whether the content must be
    hashed again; when it must and the content still matches, the new stamp is
    recorded (a cache copied or restored keeps working, after one full check).
    """
    if not meta.get("digest"):
        return "no content digest recorded"
    if meta.get("listing") != _listing(dest):
        return "files were added, removed or resized since it was built"
    stamp = _stamp(dest)
    if meta.get("stamp") == stamp:
        return ""
    if meta["digest"] != _digest(dest):
        return "file contents changed since it was built"
    meta["stamp"] = stamp
    _write_marker(dest, meta)
    return ""


# Compiles every .py of the entry into its __pycache__ (a file that does not compile is
# left to fail at import, as it would anyway); -I: nothing of the entry is imported.
_COMPILE = "import compileall, sys; compileall.compile_dir(sys.argv[1], quiet=2, workers=1)"


def _compile_argv(python: str, dest: Path) -> list[str]:
    return [python, "-I", "-c", _COMPILE, str(dest)]


# beside ``entries/``: what each environment's runs compiled at run time
JIT_DIR = "jit"


def jit_home(root: Path, key: str) -> Path:
    """The directory the runs of environment ``key`` keep their JIT builds in.

    A sandboxed run starts with a fresh ``$HOME`` (worker/sandbox.py), and JIT
    libraries cache their builds there: on the H200 (2026-12-04) FlashInfer 0.5.3's
    decode suite finished no case in 287 s in the sandbox, compiling modules that take
    71.5 s outside it, again on every run. This directory becomes ``$HOME/.cache`` for
    the entry's own runs only (``SuiteRequest.jit_cache``): the entry's key names its
    code (spec or commit, recipe, toolchain), so what a run leaves there is read again
    only by the same code. It is not in the entry itself, whose content digest proves it
    unchanged (``damaged``), and is evicted with it (``EnvCache.evict``).
    """
    path = root / JIT_DIR / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def kept_jit_builds(root: Path, key: str) -> Path | None:
    """Environment ``key``'s JIT cache if its runs left anything there, else None (made
    by no one: a paired run only reads it, through ``copy_jit_seed``)."""
    path = root / JIT_DIR / key
    try:
        return path if path.is_dir() and not path.is_symlink() and any(path.iterdir()) else None
    except OSError:
        return None


# a kept JIT cache copied into a paired run is cut off at these: FlashInfer's builds for
# a whole suite are a few hundred MB in a few thousand files, a few levels deep; a kept
# cache its own code grew past them costs the run those compiles, never the worker's
# disk, descriptors or time
SEED_MAX_BYTES = 8 * 10**9
SEED_MAX_ENTRIES = 200_000
SEED_MAX_DEPTH = 32
SEED_MAX_SECONDS = 120.0


def copy_jit_seed(kept: Path, dest: Path, limit_bytes: int = SEED_MAX_BYTES) -> int:
    """Copy a kept JIT cache to ``dest`` (a paired run's own, then its ``$HOME/.cache``);
    the bytes copied.

    A paired run's two sides share one sandbox, so neither commit's kept cache may be
    bound there: the candidate's code would write builds the baseline's later runs load.
    A copy gives the baseline its builds and keeps the original out of reach. Under
    bubblewrap its sides run in the home the copy is bound in (``paired_suite
    --baseline-own-home``), the one the builds were made in, so each lies at the path
    it was built at and loads (``KW_SANDBOX=none`` gives every run a new home: there
    they build again). File times are kept: a build younger than its sources is up to
    date.

    The kept cache is written by code under test, maybe at this moment on another card,
    and the worker copying it may be root: the walk (``safewalk``) opens every
    directory relative to its open parent and never through a link; each file is opened
    ``O_NOFOLLOW | O_NONBLOCK`` (no FIFO blocked on) and exactly the size it had when
    opened is copied; links are copied as links, never written through (a directory
    swapped in where the cache had a link to ``/etc`` is skipped); a FIFO, device or
    socket is left out; a file written while copied is dropped (a build finished before
    the copy and rewritten after it is not seen); and the copy stops at ``limit_bytes``,
    ``SEED_MAX_ENTRIES``, ``SEED_MAX_DEPTH`` levels and ``SEED_MAX_SECONDS``. A seed
    that misses a build costs that build, never the run.
    """
    budget = [limit_bytes]
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    base = Path(os.path.realpath(dest))
    entries, stop = 0, time.monotonic() + SEED_MAX_SECONDS
    for root, dirnames, filenames, dirfd in walk_no_follow(kept, max_depth=SEED_MAX_DEPTH):
        here = base / root.relative_to(kept)
        # a link the copy made where the kept cache had one, and has a directory by now,
        # is never written through (it may name /etc)
        if os.path.realpath(here.parent) != str(here.parent):
            continue
        with contextlib.suppress(FileExistsError):
            here.mkdir(mode=0o700)
        if os.path.realpath(here) != str(here):
            continue
        entries += len(dirnames) + len(filenames)
        if entries > SEED_MAX_ENTRIES or time.monotonic() > stop:
            break
        for name in (*dirnames, *filenames):
            with contextlib.suppress(OSError):
                _copy_entry(dirfd, name, here / name, budget)
    return limit_bytes - budget[0]


def _copy_entry(dir_fd: int, name: str, dest: Path, budget: list[int]) -> None:
    """One entry of an open directory (``copy_jit_seed``): a link as a link, a plain file
    with its time, within ``budget`` bytes; a directory is the walk's; the rest nothing."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=dir_fd), dest)
        return
    if not stat.S_ISREG(st.st_mode) or st.st_size > budget[0]:
        return
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fin:
        opened = os.fstat(fin.fileno())
        if not stat.S_ISREG(opened.st_mode) or opened.st_size > budget[0]:
            return  # swapped since the listing, or grown past the budget
        made = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(made, "wb") as fout:
            _copy_bytes(fin, fout, opened.st_size)  # a file that grows is not chased
            fout.flush()
            os.fchmod(fout.fileno(), opened.st_mode & 0o755)
            os.utime(fout.fileno(), ns=(opened.st_atime_ns, opened.st_mtime_ns))
        after = os.fstat(fin.fileno())
    if (after.st_size, after.st_mtime_ns) != (opened.st_size, opened.st_mtime_ns):
        # written while copied (a build of the same code on another card): a half-written
        # op would load as up to date, so it is left to be built again
        dest.unlink()
        return
    budget[0] -= opened.st_size


def _copy_bytes(fin: IO[bytes], fout: IO[bytes], size: int) -> None:
    """At most ``size`` bytes of ``fin`` into ``fout``."""
    while size > 0 and (chunk := fin.read(min(size, 1 << 20))):
        fout.write(chunk)
        size -= len(chunk)


def _loose_size(root: Path) -> int:
    """Bytes of the files below ``root`` while runs may still write there (a JIT cache):
    a file that went away between listing and reading counts nothing."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).lstat().st_size
    return total


def _tree_size(root: Path) -> int:
    return sum(size for _, size in _walk(root))


def _entry_size(d: Path) -> int:
    meta = _read_marker(d)
    if meta is not None and isinstance(meta.get("size"), int):
        return int(meta["size"])
    return _tree_size(d)


# The cache's own files in an entry (its marker, its last use) lie in the directory a
# build wrote as the sandbox user: a link or FIFO the build left under one of their names
# had the worker (root, maybe) write through the link to any file of the host, or block
# on the FIFO for good. They are read only as plain files, and written only as new ones.
_OWN_MAX = 64 * 2**20  # a marker is a few kB (its listing digest, not a listing)


def _read_own(path: Path) -> str:
    with open_regular(path) as fh:  # never through a link, never a FIFO
        return fh.read(_OWN_MAX).decode("utf-8")


def _write_own(path: Path, text: str) -> None:
    """``text`` into ``path`` by way of a new file (whatever was left there is replaced,
    never opened), renamed into place so a reader sees the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a link planted there goes, not what it names
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    tmp.replace(path)


def _read_marker(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(_read_own(d / MARKER))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(d: Path, meta: dict[str, Any]) -> None:
    _write_own(d / MARKER, json.dumps(meta, indent=1, sort_keys=True))


def _touch(d: Path) -> None:
    _write_own(d / LAST_USED, str(time.time()))


def _last_used(d: Path) -> float:
    try:
        return float(_read_own(d / LAST_USED))
    except (OSError, ValueError):
        return 0.0


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[IO[str]]:
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, mode)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _try_locked(path: Path) -> Iterator[bool]:
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


if __name__ == "__main__":
    from kernelwatch.worker.venvs_cli import main

    raise SystemExit(main())
