"""Where the code under test runs: a bubblewrap sandbox with no secrets and no way out.

The library under test is untrusted code, approved or not: its build scripts and
its kernels run here, never beside the worker. Two layers:

- **Environment**: built from an allow-list (``clean_env``), so ``KW_GITHUB_TOKEN``,
  database URLs and anything else the worker holds never reach it.
- **Namespaces** (``Sandbox.wrap``): bubblewrap (``bwrap``) gives the process tree
  its own PID namespace (the worker's ``/proc/<pid>/environ`` is not there to
  read; when its init dies the kernel kills every process left, ``setsid`` or
  not), its own network namespace (loopback only: no route to Redis,
  PostgreSQL, the API or GitHub), its own IPC and UTS namespaces, and a
  filesystem view of the system's read-only tool directories, the interpreter
  and the ``kernelwatch.kernels`` package read-only, the paths the step must
  write (a build's entry, a suite's work directory) writable, the
  environments it runs read-only, a fresh ``$HOME`` and ``/tmp`` and the NVIDIA
  device nodes. Mirrors, caches, the data directory, ``/root``, ``/home``,
  ``/run`` and ``/etc/kernelwatch`` are simply absent. The view is an allow-list
  the service decides (issue 24): no path that comes from an environment variable
  the recipe can set is ever bound; the toolchain directories are the worker's own
  (its interpreter, ``CUDA_HOME``, ``PATH`` and ``LD_LIBRARY_PATH`` as the service
  was started with them), each resolved with ``realpath`` before it is judged.
  A recipe's path-like variables are checked against that view
  (:func:`confine_env`): inside the checkout, its environment, or the read-only
  toolchain, anything else a ``ConfigError`` naming the key.
  A worker running as root runs the code as ``kernelwatch-sandbox`` (or
  ``nobody`` where that user does not exist), through ``setpriv`` with every
  capability dropped and ``no_new_privs``; an unprivileged worker's bwrap uses a
  user namespace instead.

``KW_SANDBOX`` picks the mode: ``bwrap`` (the default) or ``none``, which runs the
code with the clean environment only. ``none`` is for a development machine that
runs only its own trusted code; with the default, a host where bubblewrap is
missing or cannot create namespaces fails closed (``SandboxUnavailable``) instead
of running code unconfined. ``KW_SANDBOX_MEMORY_GB`` (default: 3/4 of the RAM),
``KW_SANDBOX_PIDS`` (tasks, threads included; default 1024), ``KW_SANDBOX_DISK_GB``
(default: half the free space, at most 100 GB) and ``KW_SANDBOX_LOG_MB`` (default
64) set the limits; ``worker/limits.py`` says how each is enforced (a cgroup v2 of
the sandbox's own, or the fallback), ``worker/process.py`` applies them. The
sandbox's ``/dev/shm`` is a tmpfs no larger than the memory limit, the rest of
``/dev`` is read-only, and ``RLIMIT_NPROC``/``RLIMIT_FSIZE`` are set inside it
(``prlimit``). What this does not isolate is listed in ``docs/security.md``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwatch.jobs.errors import ConfigError, InfrastructureError
from kernelwatch.jobs.library import recipe_env
from kernelwatch.jobs.library.mirror import tool_env
from kernelwatch.jobs.library.repoconfig import FILE
from kernelwatch.worker.limits import (
    DEFAULT_PIDS,
    SHARED_USER_SANDBOXES,
    Guard,
    Limits,
    host_cgroup,
)
from kernelwatch.worker.safewalk import walk_no_follow

ALLOWED = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "TRITON_INTERPRET",
    "TRITON_CACHE_DIR",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "NVCC_THREADS",
    "CC",
    "CXX",
    "PIP_NO_INDEX",
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "KW_CPU_THREADS",  # threads of a CPU suite (kernels/device.py:cpu_threads), not a secret
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)
# The operator's package sources: the worker's *own* pip (released versions, outside the
# sandbox) reads them (``worker_pip_env``); code under test never sees them. An index URL
# may carry credentials (https://user:TOKEN@index/simple), and nothing in the sandbox can
# use them: it has no network, a wheelhouse or constraints file is outside its view, and
# a from-source build installs with --no-deps --no-build-isolation (worker/venvs.py).
WORKER_PIP = ("PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONSTRAINT")
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "DATABASE_URL", "BROKER_URL")
__all__ = [
    "Sandbox",
    "SandboxUnavailable",
    "clean_env",
    "confine_env",
    "tool_env",
    "worker_pip_env",
]
SANDBOX_USER = "kernelwatch-sandbox"
# the whole environment of bwrap and of the set-up steps inside the sandbox
LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
DEFAULT_LOG_MB = 64
# /etc entries a toolchain reads; the rest (/etc/kernelwatch/env first) stays out
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "localtime",
    "timezone",
    "os-release",
    "debian_version",
    "gai.conf",
    "host.conf",
    "mime.types",
    "protocols",
    "services",
    "OpenCL",
    "vulkan",
    "nvidia",
)
# never bound, even when named on PATH: homes, runtime state, service data
_NEVER = ("/root", "/home", "/tmp", "/var", "/run", "/etc", "/srv", "/proc", "/sys", "/dev")
_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")


class SandboxUnavailable(InfrastructureError):
    """bubblewrap is missing or cannot create namespaces on this host (fail closed)."""


def clean_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Allow-listed variables of ``base`` (default: os.environ) plus ``extra``.

    ``extra`` comes from the repository's install recipe; names that look like
    secrets are dropped from it too.
    """
    base = os.environ if base is None else base
    env = {k: base[k] for k in ALLOWED if k in base}
    env.update(recipe_overlay(extra or {}))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def worker_pip_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The operator's ``PIP_*`` package sources (``WORKER_PIP``) of ``base`` (default:
    os.environ): for the worker's own pip only, never for code under test."""
    base = os.environ if base is None else base
    return {k: base[k] for k in WORKER_PIP if k in base}


def recipe_overlay(extra: Mapping[str, str]) -> dict[str, str]:
    """A recipe's variables as code under test may see them: no ``KW_*``, no secrets."""
    return {
        key: value
        for key, value in extra.items()
        if not key.startswith("KW_") and not any(m in key.upper() for m in SECRET_MARKERS)
    }


@dataclass(frozen=True)
class Sandbox:
    """How code under test is confined; ``wrap`` turns an argv into a confined one."""

    mode: str  # "bwrap" | "none"
    memory_bytes: int
    log_cap_bytes: int
    uid: int | None = None  # set when the worker is root: the user the code runs as
    gid: int | None = None
    pids: int = DEFAULT_PIDS
    disk_bytes: int = 0  # 0: half the free space where it writes (worker/limits.py)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Sandbox:
        """The sandbox the ``KW_SANDBOX*`` variables ask for; fails fast on bad values."""
        env = os.environ if env is None else env
        mode = env.get("KW_SANDBOX", "bwrap").strip().lower() or "bwrap"
        if mode not in ("bwrap", "none"):
            raise ConfigError(f"KW_SANDBOX must be 'bwrap' or 'none', not {mode!r}")
        try:
            memory = float(env.get("KW_SANDBOX_MEMORY_GB", "0") or 0) * 1e9
            log_cap = float(env.get("KW_SANDBOX_LOG_MB") or DEFAULT_LOG_MB) * 1e6
            pids = int(env.get("KW_SANDBOX_PIDS") or DEFAULT_PIDS)
            disk = float(env.get("KW_SANDBOX_DISK_GB", "0") or 0) * 1e9
        except ValueError as exc:
            raise ConfigError(f"KW_SANDBOX_MEMORY_GB / _LOG_MB / _PIDS / _DISK_GB: {exc}") from exc
        if memory < 0 or log_cap <= 0 or pids < 16 or disk < 0:
            raise ConfigError(
                "KW_SANDBOX_MEMORY_GB, _LOG_MB and _DISK_GB must be positive (0: the "
                "default), KW_SANDBOX_PIDS at least 16"
            )
        uid = gid = None
        if mode == "bwrap" and os.geteuid() == 0:
            uid, gid = sandbox_ids()
        memory_bytes = int(memory) or default_memory_bytes()
        return cls(mode, memory_bytes, int(log_cap), uid, gid, pids, int(disk))

    @classmethod
    def check_env_at_start(cls, prog: str = "kernelwatch worker") -> None:
        """Exit 2 with one line where ``KW_SANDBOX*`` do not validate: a worker that
        started with ``KW_SANDBOX_MEMORY_GB=-1`` said ready, then took run after run and
        failed each (an audit, 2026-12-05); its settings fail fast, as ``KW_*`` do."""
        try:
            cls.from_env()
        except ConfigError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    @property
    def confined(self) -> bool:
        return self.mode == "bwrap"

    @property
    def limits(self) -> Limits:
        return Limits(self.memory_bytes, self.pids, self.disk_bytes)

    def guard(self, writable: Sequence[Path]) -> Guard:
        """The limits of one step that writes ``writable``: a cgroup of its own where
        the host delegates one to the worker, the watchdog otherwise (worker/limits.py)."""
        parent = host_cgroup() if self.confined else None
        return Guard.start(self.limits, list(writable), parent, shm=self.confined)

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` unless bwrap can start a sandbox here."""
        if self.confined:
            _probe(self.uid is not None)

    def owner(self, paths: Sequence[Path], within: Path, recursive: bool = True) -> None:
        """Give the sandbox user the paths it must write (a no-op unless the worker is root).

        Only paths inside ``within`` (the service's own directory they belong to: the
        environment cache, the run's work directory) are ever handed over; anything
        else is refused, whatever asked for it (issue 24: a recipe's ``CCACHE_DIR``
        had a root worker chown a root-only directory to the sandbox user).
        """
        top_dir = os.path.realpath(within)
        for top in paths:
            real = os.path.realpath(top)
            if not recipe_env.under(real, top_dir):
                raise ConfigError(
                    f"refusing to hand {top} to the sandbox user: not inside {within}"
                )
        if self.uid is None or self.gid is None:
            return
        _chown_tree(paths, self.uid, self.gid, recursive)

    def reclaim(self, paths: Sequence[Path]) -> None:
        """Take back what :meth:`owner` handed over (a finished build's entry), so no
        later sandbox, running as the same user, may write it."""
        if self.uid is None:
            return
        _chown_tree(paths, os.geteuid(), os.getegid())

    def scratch(self, parent: Path) -> Path:
        """A fresh directory under ``parent`` that becomes the sandbox's ``/tmp`` and ``$HOME``."""
        parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="sandbox-", dir=parent))
        (path / "home").mkdir()
        self.owner([path], within=parent)
        return path

    def visible(self) -> list[str]:
        """Real paths of the read-only directories every sandbox shows: the system's
        tool directories and the toolchain the service configures."""
        tops = [os.path.realpath(Path("/") / name) for name in _SYSTEM]
        return [*dict.fromkeys(tops + [os.path.realpath(p) for p in _tool_paths()])]

    def wrap(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        scratch: Path,
        writable: Sequence[Path] = (),
        readonly: Sequence[Path] = (),
        cache: Path | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, env) that run ``argv`` confined; in ``none`` mode only the env changes.

        ``env`` should come from ``clean_env``; ``HOME`` and ``TMPDIR`` point into
        ``scratch`` and caches that would outlive the run (Triton's) move there too.

        ``cache``: a directory kept across runs of the same code (``venvs.jit_home``),
        seen as ``$HOME/.cache`` with Triton's cache in it. JIT libraries build there
        (FlashInfer under ``~/.cache/flashinfer``, torch extensions under
        ``~/.cache/torch_extensions``), so a version compiles its modules once per
        worker, not once per run. Only the environment's own runs get it: whatever the
        code writes there, only that same code reads again. (A paired run gets a copy
        of its baseline's, its own: ``SuiteRequest.jit_seed``.)

        ``env`` reaches ``argv`` only, never a process of the worker's privilege: bwrap
        is started with ``LAUNCH_ENV``, and so is the set-up inside the sandbox (a root
        worker's ``sh`` and ``setpriv`` run as root there); ``env -i`` hands ``env`` to
        ``argv`` after the drop. A recipe's ``LD_PRELOAD`` or ``LD_LIBRARY_PATH`` would
        otherwise load a library the build wrote into bwrap itself, outside the sandbox.
        """
        inner = dict(env)
        home = "/tmp/home" if self.confined else str(scratch / "home")
        tmp = "/tmp" if self.confined else str(scratch)
        triton = f"{home}/.cache/triton" if cache is not None else f"{home}/.triton"
        inner.update(HOME=home, TMPDIR=tmp, TRITON_CACHE_DIR=triton)
        inner.update(PIP_CONFIG_FILE=os.devnull, GIT_CONFIG_NOSYSTEM="1", PYTHONNOUSERSITE="1")
        if cache is not None:
            # the mount point (bwrap) or the link (none mode) in the fresh home
            mount = scratch / "home" / ".cache"
            if self.confined:
                mount.mkdir(exist_ok=True)
            else:
                mount.symlink_to(cache, target_is_directory=True)
        if not self.confined:
            return list(argv), inner
        user = SANDBOX_USER if self.uid is not None else inner.get("USER", "sandbox")
        inner.update(USER=user, LOGNAME=user)
        out = [bwrap_program(), "--die-with-parent", "--new-session"]
        out += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        out += ["--unshare-cgroup-try", "--hostname", "kernelwatch-sandbox"]
        if self.uid is None:
            # unprivileged worker: a user namespace, and none nested in it to regain
            # capabilities in. A root worker maps no user namespace: setpriv drops to a
            # real unprivileged uid instead
            out += ["--unshare-user", "--disable-userns"]
        system, bound = _system_binds()
        out += system
        out += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
        for node in _gpu_nodes():
            out += ["--dev-bind", node, node]
        # shared memory: a tmpfs of its own, no larger than the memory limit (and counted
        # in it); the rest of /dev read-only, so no file there escapes the count
        out += ["--size", str(self.memory_bytes), "--perms", "1777", "--tmpfs", "/dev/shm"]
        out += ["--remount-ro", "/dev"]
        out += ["--bind", str(scratch), "/tmp"]
        # /tmp is the scratch directory: paths below it are not there unless made
        made: set[str] = {"/tmp"}
        for path in _tool_paths():  # the service's own, never the recipe's (issue 24)
            out += _bind("--ro-bind", path, bound, made, skip_covered=True)
        for path in readonly:
            out += _bind("--ro-bind", Path(path), bound, made, skip_covered=True)
        for path in writable:
            out += _bind("--bind", Path(path), bound, made, skip_covered=False)
        if cache is not None:
            out += ["--bind", str(cache), f"{home}/.cache"]
        out += ["--chdir", str(cwd), "--clearenv", "--setenv", "PATH", LAUNCH_ENV["PATH"]]
        out.append("--")
        out += _shm_forced(strict=self.uid is not None)
        nproc = self.pids
        if self.uid is not None and self.gid is not None:
            out += _drop_to(self.uid, self.gid)
            nproc *= SHARED_USER_SANDBOXES  # one user for every sandbox of the host
        disk = self.limits.disk_for([*writable, scratch, *([cache] if cache else [])])
        out += ["prlimit", f"--nproc={nproc}:{nproc}", f"--fsize={disk}:{disk}", "--"]
        out += ["env", "-i", "--", *(f"{k}={v}" for k, v in sorted(inner.items())), *argv]
        # bwrap (and its init, PID 1 inside) keep the environment they were started with
        return out, dict(LAUNCH_ENV)


def sandbox_ids() -> tuple[int, int]:
    """uid and gid of ``kernelwatch-sandbox``, or of ``nobody`` where it does not exist."""
    for name in (SANDBOX_USER, "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    return 65534, 65534


def default_memory_bytes() -> int:
    """Three quarters of the machine's RAM: a run may use most of it, never all of it."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 16 * 10**9
    return int(pages * 0.75)


def _shm_forced(strict: bool) -> list[str]:
    """A shell step that makes SysV shared memory die with its last user in the
    sandbox's own IPC namespace (``kernel.shm_rmid_forced``), so no detached segment
    holds memory no process counts. ``strict`` (a root worker, where the code under
    test cannot undo it afterwards): the sandbox does not start without it."""
    step = "echo 1 2>/dev/null > /proc/sys/kernel/shm_rmid_forced"
    if strict:
        why = "kernelwatch: cannot set kernel.shm_rmid_forced in the sandbox"
        script = f'{step} || {{ echo "{why}" >&2; exit 125; }}; exec "$@"'
    else:
        script = f'{step}; exec "$@"'
    return ["sh", "-c", script, "kw-sandbox"]


def _drop_to(uid: int, gid: int) -> list[str]:
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _bind(
    flag: str, path: Path, bound: list[str], made: set[str], *, skip_covered: bool
) -> list[str]:
    """``flag path path``, preceded by the parents it needs (created world-searchable:
    bwrap makes missing parents 0700, which the sandbox user could not traverse)."""
    text = os.path.normpath(str(path))
    if not path.exists() or text in bound:
        return []
    if skip_covered and any(_under(text, b) for b in bound):
        return []
    out: list[str] = []
    parents = [str(p) for p in reversed(Path(text).parents) if str(p) != "/"]
    for parent in parents:
        if parent not in made and not any(_under(parent, b) for b in bound):
            out += ["--perms", "0755", "--dir", parent]
            made.add(parent)
    bound.append(text)
    return [*out, flag, text, text]


def _system_binds() -> tuple[list[str], list[str]]:
    out: list[str] = []
    bound: list[str] = []
    for name in _SYSTEM:
        path = Path("/") / name
        if path.is_symlink():
            out += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            out += ["--ro-bind", str(path), str(path)]
        else:
            continue
        bound.append(str(path))
    out += ["--perms", "0755", "--dir", "/etc"]  # bwrap would make it 0700
    for name in _ETC:
        path = Path("/etc") / name
        if path.exists():
            out += ["--ro-bind", str(path), str(path)]
    return out, bound


def _gpu_nodes() -> list[str]:
    dev = Path("/dev")
    nodes = sorted(str(p) for p in dev.glob("nvidia*") if not p.is_dir())
    caps = dev / "nvidia-caps"
    if caps.is_dir():
        nodes += sorted(str(p) for p in caps.iterdir())
    dri = dev / "dri"
    if dri.is_dir():
        nodes += sorted(str(p) for p in dri.iterdir())
    return nodes


def _tool_paths() -> Iterator[Path]:
    """The interpreter, ``kernelwatch.kernels``, and the service's CUDA and ``PATH``.

    These are code the worker trusts, bound read-only. They come from the worker's
    own environment (what the service was started with), never from a run's or a
    recipe's; each is resolved with ``realpath`` and dropped when it lies in a
    directory that is never shown (homes, ``/etc``, ``/var``, ``/run``, ``/tmp``...).
    An entry named ``bin`` or ``sbin`` stands for its prefix: a toolchain
    keeps its ``libexec``, ``lib`` and target directories beside ``bin``. On the
    H200 image Triton's C compiler is ``/opt/gcc/bin/gcc``; with only ``bin`` bound
    it exited 1 on Triton's launcher stub, so every Triton launch in the box failed
    (2026-12-02).
    """
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        yield Path(prefix)
    yield Path(os.path.realpath(sys.executable)).parent.parent
    import kernelwatch.kernels

    yield Path(kernelwatch.kernels.__file__).resolve().parent
    own = os.environ
    named = [own.get("CUDA_HOME", ""), own.get("CUDA_PATH", "")]
    for key in ("PATH", "LD_LIBRARY_PATH"):
        named += own.get(key, "").split(os.pathsep)
    for part in named:
        if not part.startswith("/"):
            continue
        real = os.path.realpath(part)
        if os.path.basename(real) in ("bin", "sbin"):
            real = os.path.dirname(real)  # the toolchain's prefix
        if not any(recipe_env.under(real, top) for top in _NEVER) and real != "/":
            yield Path(real)


def confine_env(
    env: Mapping[str, str], *, checkout: Path, entry: Path, visible: Sequence[str]
) -> dict[str, str]:
    """A recipe's environment with every path-like entry made absolute and checked.

    Relative entries are inside ``checkout``; each entry is resolved with
    ``realpath`` and must lie in the checkout, the environment ``entry`` or one of
    the ``visible`` read-only directories (:meth:`Sandbox.visible`). A service-owned
    name or any other path is a ``ConfigError`` naming the key (``recipe_env``).
    """
    roots = [os.path.realpath(checkout), os.path.realpath(entry), *visible]
    out: dict[str, str] = {}
    for key, value in env.items():
        where = f"{FILE}: install.env.{key}"
        if not recipe_env.VARIABLE.match(key):
            raise ConfigError(f"{where} {recipe_env.NOT_A_NAME}")
        if recipe_env.service_owned(key):
            raise ConfigError(f"{where} {recipe_env.why_service_owned(key)}")

        def judged(part: str, where: str = where) -> str:
            path = part if part.startswith("/") else str(checkout / part)
            real = os.path.realpath(path)
            if not any(recipe_env.under(real, root) for root in roots):
                raise ConfigError(
                    f"{where} entry {part!r} resolves to {real}, outside what the sandbox "
                    f"shows; {recipe_env.WHERE}"
                )
            return path

        out[key] = recipe_env.rewrite(key, value, judged)
    return out


def _chown_tree(paths: Sequence[Path], uid: int, gid: int, recursive: bool = True) -> None:
    """chown without following a symlink, not even one swapped in for a directory on
    the way down (``safewalk``: each directory held open, names resolved against it,
    no directory opened through a link)."""
    for top in paths:
        if not top.exists():
            continue
        os.lchown(top, uid, gid)
        if not recursive:
            continue
        for _, dirnames, filenames, dirfd in walk_no_follow(top):
            for name in (*dirnames, *filenames):
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)


def bwrap_program() -> str:
    """bubblewrap's absolute path, found on the worker's own ``PATH``.

    The box is started with the inner environment, whose ``PATH`` is the sandbox's
    short system list; ``subprocess`` looks a bare name up in *that* ``PATH``, so a
    bwrap installed outside ``/usr/bin`` (a carried package under ``/opt``, a
    Homebrew-style prefix) was "not found" although the worker's probe had found it.
    """
    return shutil.which("bwrap") or "bwrap"


@functools.cache
def _probe(drop: bool) -> None:
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: install it (apt-get install bubblewrap) "
            "or set KW_SANDBOX=none on a development machine that runs only trusted code"
        )
    if shutil.which("prlimit") is None:
        raise SandboxUnavailable(
            "prlimit (util-linux) is not installed: the sandbox sets its process and file "
            "size limits with it; install util-linux"
        )
    box = Sandbox("bwrap", 10**9, 10**6, *(sandbox_ids() if drop else (None, None)))
    with tempfile.TemporaryDirectory(prefix="kw-probe-") as tmp:
        scratch = box.scratch(Path(tmp))
        argv, env = box.wrap(["true"], cwd=Path("/"), env=clean_env(), scratch=scratch)
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"bubblewrap did not start: {exc}") from exc
    if proc.returncode != 0:
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox here ({proc.stderr.strip()[-500:]}); "
            "user namespaces may be disabled. Fix the host, or set KW_SANDBOX=none on a "
            "development machine that runs only trusted code"
        )
