"""Limits a sandboxed process tree cannot sidestep: memory, processes, disk.

Issue 24: the memory watchdog counted ``resident - shared``, so 2.5 GB of
``MAP_SHARED`` memory or of files in ``/dev/shm`` passed a 1 GB limit; nothing
limited processes (1,500 created, counted against the worker's own user) or disk
(1.5 GB left behind by one run). Two mechanisms, the first the host offers:

- **cgroup v2** (:class:`Cgroup`), where the worker's cgroup is delegated to it
  (systemd ``Delegate=yes``, or a root worker on a cgroup v2 host): each sandbox
  gets a cgroup of its own with ``memory.max`` (anonymous, shared, tmpfs and SysV
  pages alike, charged by the kernel), ``memory.swap.max = 0`` and ``pids.max``.
  The kernel enforces both; the guard reads ``memory.events`` to say ``out of
  memory`` and kills the rest of the tree, and removes the cgroup at the end.
- **The fallback** everywhere else (cgroup v1 or a non-delegated v2): the sandbox's
  ``/dev/shm`` is a tmpfs of at most the memory limit and ``/dev`` is read-only
  (``worker/sandbox.py``), and the watchdog counts, every poll, the proportional
  anonymous *and* shared memory of every process of the tree
  (``/proc/<pid>/smaps_rollup``: ``Pss_Anon + Pss_Shmem``) plus what lies in that
  ``/dev/shm`` and in the memfds its processes hold open; a root worker also makes
  SysV segments die with their last user (``kernel.shm_rmid_forced=1`` in the
  sandbox's own IPC namespace, set before it drops to the sandbox user), so none
  outlives every process unseen. Processes:
  ``RLIMIT_NPROC`` set inside the sandbox (``prlimit``), which in the user
  namespace of an unprivileged worker counts the sandbox's own tasks only; a root
  worker's sandboxes share one user, so there the watchdog counts the tree's tasks
  (threads included) and kills it over the limit, and ``RLIMIT_NPROC`` is a
  host-wide backstop of ``SHARED_USER_SANDBOXES`` times the limit.

Disk, in both: ``RLIMIT_FSIZE`` (no single file larger than the limit) and the
watchdog's walk over the directories the sandbox may write (``st_blocks`` of every
inode once, at least 4 kB each: inodes run out too), at most every
:data:`DISK_EVERY_S` and never more often than ten times the walk's own cost; what
was there when the step began does not count. A
directory it cannot read (``chmod 000`` by the code) stops the tree too: what
cannot be measured is not allowed to grow. What is left after a run is removed by
the executor (``KW_KEEP_WORK``).

What this does not limit: GPU memory (the driver's), and, with the fallback, what
a process allocates within one poll (0.1 s) before it is killed.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelwatch.jobs.lifetime import processes

log = logging.getLogger(__name__)

DEFAULT_PIDS = 1024
DISK_EVERY_S = 0.25
MAX_DISK_BYTES = 100 * 10**9
# a root worker's sandboxes run as one user: its RLIMIT_NPROC is for all of them
SHARED_USER_SANDBOXES = 8


@dataclass(frozen=True)
class Limits:
    """What one sandboxed step may use (``KW_SANDBOX_MEMORY_GB``, ``_PIDS``, ``_DISK_GB``)."""

    memory_bytes: int
    pids: int = DEFAULT_PIDS
    disk_bytes: int = 0  # 0: half the free space of the directories' file system, at start

    def disk_for(self, dirs: Sequence[Path]) -> int:
        if self.disk_bytes:
            return self.disk_bytes
        for d in dirs:
            with contextlib.suppress(OSError):
                return min(MAX_DISK_BYTES, shutil.disk_usage(d).free // 2)
        return MAX_DISK_BYTES


def describe_memory(limit: int) -> str:
    return f"out of memory (limit {limit / 1e9:.3g} GB)"


def describe_pids(limit: int) -> str:
    return f"too many processes (limit {limit}, threads included)"


def describe_disk(used: int, limit: int) -> str:
    return f"disk limit exceeded ({used / 1e9:.3g} GB written, limit {limit / 1e9:.3g} GB)"


# --------------------------------------------------------------------------- cgroup v2


class Cgroup:
    """A cgroup v2 directory the worker may create children in (delegated to it)."""

    LEAF = "kw-service"  # where the worker's own processes move so children may be limited

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def delegated(cls, root: Path | None = None, own: str | None = None) -> Cgroup | None:
        """The cgroup whose children this process may limit, or None (the fallback).

        ``root``: where cgroup2 is mounted (default: from ``/proc/self/mountinfo``);
        ``own``: this process's cgroup path (default: from ``/proc/self/cgroup``).
        When the own cgroup still holds processes, they move into a leaf child
        first (cgroup v2 lets only a cgroup without processes of its own give
        controllers to its children).
        """
        root = root or _cgroup2_mount()
        own = own if own is not None else _own_cgroup()
        if root is None or own is None:
            return None
        top = root / own.strip("/")
        if top.name == cls.LEAF:
            top = top.parent
        try:
            controllers = (top / "cgroup.controllers").read_text().split()
            if not {"memory", "pids"} <= set(controllers):
                return None
            enabled = (top / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                if top == root or not _only_ours(top):
                    return None  # never move processes that are not the service's own
                leaf = top / cls.LEAF
                leaf.mkdir(exist_ok=True)
                for _ in range(5):  # processes forked meanwhile are born in the old place
                    pids = (top / "cgroup.procs").read_text().split()
                    if not pids:
                        break
                    for pid in pids:
                        with contextlib.suppress(OSError):
                            (leaf / "cgroup.procs").write_text(pid)
                (top / "cgroup.subtree_control").write_text("+memory +pids")
            cls(top).child(f"kw-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}").remove()
        except OSError as exc:
            log.info("cgroup v2 at %s is not delegated to this worker (%s): fallback", top, exc)
            return None
        return cls(top)

    def child(self, name: str) -> Cgroup:
        path = self.path / name
        path.mkdir()
        return Cgroup(path)

    def limit(self, memory: int, pids: int) -> None:
        (self.path / "memory.max").write_text(str(memory))
        with contextlib.suppress(OSError):  # no swap accounting on this host: nothing to cap
            (self.path / "memory.swap.max").write_text("0")
        (self.path / "pids.max").write_text(str(pids))

    def enter(self) -> None:
        """Move the calling process here (a ``preexec_fn``: the child, before exec)."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def events(self, name: str) -> dict[str, int]:
        try:
            text = (self.path / name).read_text()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
        return out

    def remove(self) -> None:
        """Kill whatever is left in it and remove it."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    log.warning("cannot remove cgroup %s: %s", self.path, exc)
                    return
                time.sleep(0.1)


@functools.cache
def host_cgroup() -> Cgroup | None:
    """This process's delegated cgroup v2 (looked for once), or None: the fallback."""
    return Cgroup.delegated()


def _only_ours(top: Path) -> bool:
    """Every process in ``top`` belongs to this process's session (the service's own)."""
    sid = os.getsid(0)
    for pid in (top / "cgroup.procs").read_text().split():
        try:
            if os.getsid(int(pid)) != sid:
                return False
        except ProcessLookupError:
            continue
    return True


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                pre, _, post = line.partition(" - ")
                if post.split(" ", 1)[0] == "cgroup2":
                    return Path(pre.split()[4])
    except OSError:
        pass
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------- the tree


@dataclass
class Tree:
    """The processes below a root pid, from one read of ``/proc``."""

    pids: list[int]
    tasks: int  # threads included: what RLIMIT_NPROC and pids.max count


def tree(root: int) -> Tree:
    children: dict[int, list[int]] = {}
    threads: dict[int, int] = {}
    for proc in processes():
        children.setdefault(proc.ppid, []).append(proc.pid)
        threads[proc.pid] = proc.threads
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return Tree(found, sum(threads.get(p, 1) for p in found))


_ROLLUP = re.compile(rb"^(Pss_Anon|Pss_Shmem):\s+(\d+) kB", re.M)
_STATUS = re.compile(rb"^(RssAnon|RssShmem):\s+(\d+) kB", re.M)


def process_memory(pid: int, exact: bool = True) -> int:
    """Anonymous and shared-memory bytes of one process.

    ``exact``: proportional (``Pss_Anon + Pss_Shmem`` of ``smaps_rollup``: a page
    shared by n processes counts 1/n in each, so a tree's sum has each page once);
    otherwise the resident pages of ``/proc/<pid>/status``, an upper bound that
    costs no walk over the mappings. A kernel without the split gives the bound.
    """
    found: list[tuple[bytes, bytes]] = []
    try:
        if exact:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                found = _ROLLUP.findall(fh.read())
        if len(found) != 2:
            with open(f"/proc/{pid}/status", "rb") as fh:
                found = _STATUS.findall(fh.read())
    except OSError:
        return 0
    return sum(int(kb) for _, kb in found) * 1024


def tmpfs_used(pid: int, mount: str = "dev/shm") -> int:
    """Bytes in use in the tmpfs at ``mount`` as process ``pid`` sees it (its mount
    namespace, through ``/proc/<pid>/root``); 0 when it cannot be seen."""
    try:
        st = os.statvfs(f"/proc/{pid}/root/{mount}")
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def tree_memory(root: int, shm: bool = False, limit: int | None = None) -> int:
    """Memory of the tree below ``root``: anonymous and shared pages of every process,
    and with ``shm`` what lies in the sandbox's own ``/dev/shm``.

    With ``limit``, the cheap upper bound (resident pages) is summed first and the
    proportional count, which walks every mapping, only when the bound is over it.
    """
    return _memory(tree(root), shm, limit)


def memfd_bytes(pids: Sequence[int]) -> int:
    """Bytes held by the memfds (``memfd_create``) the processes keep open, each once.

    A memfd written and never mapped is shared memory no process's mappings show."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(link).startswith("/memfd:"):
                    continue
                st = os.stat(link)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _memory(found: Tree, shm: bool, limit: int | None) -> int:
    inner = found.pids[1:]  # the sandbox's processes (the root is bwrap, outside it)
    extra = (tmpfs_used(inner[0]) if shm and inner else 0) + memfd_bytes(found.pids)
    if limit is not None:
        bound = extra + sum(process_memory(p, exact=False) for p in found.pids)
        if bound <= limit:
            return bound
    return extra + sum(process_memory(p) for p in found.pids)


# --------------------------------------------------------------------------- disk


class DiskWatch:
    """Growth of the bytes allocated under ``dirs`` since the step began."""

    def __init__(self, dirs: Sequence[Path], limit: int) -> None:
        self.dirs = [d for d in dirs if d.exists()]
        self.limit = limit
        self.base = self._usage()[0]
        self.cost = 0.0
        self.next_at = time.monotonic() + DISK_EVERY_S

    def check(self, now: float) -> str:
        if now < self.next_at:
            return ""
        started = time.monotonic()
        used, unreadable = self._usage()
        self.cost = time.monotonic() - started
        self.next_at = time.monotonic() + max(DISK_EVERY_S, 10 * self.cost)
        if unreadable:
            return f"cannot measure the work directory ({unreadable}); stopped"
        grown = used - self.base
        return describe_disk(grown, self.limit) if grown > self.limit else ""

    def _usage(self) -> tuple[int, str]:
        seen: set[tuple[int, int]] = set()
        total = 0
        todo = list(self.dirs)
        while todo:
            top = todo.pop()
            try:
                with os.scandir(top) as it:
                    for entry in it:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        key = (st.st_dev, st.st_ino)
                        if key in seen:
                            continue
                        seen.add(key)
                        # at least a block: a million empty files exhaust the inodes
                        total += max(st.st_blocks * 512, 4096)
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(Path(entry.path))
            except FileNotFoundError:
                continue
            except OSError as exc:
                return total, f"{top}: {exc.strerror}"
        return total, ""


# --------------------------------------------------------------------------- the guard


@dataclass
class Guard:
    """The limits of one sandboxed step: set up before it starts, checked while it runs.

    ``preexec`` goes into the child (joins the step's cgroup), ``check`` is called
    every poll and returns why the tree must stop ("" while it may go on),
    ``verdict`` after the exit says whether a limit the kernel enforced ended it,
    and ``close`` removes what was set up.
    """

    limits: Limits
    dirs: Sequence[Path] = ()
    cgroup: Cgroup | None = None
    count_tasks: bool = True  # the fallback counts tasks itself (no per-sandbox pids.max)
    shm: bool = False  # count the sandbox's /dev/shm (a sandbox's own; never the host's)
    disk: DiskWatch | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.disk = DiskWatch(self.dirs, self.limits.disk_for(self.dirs)) if self.dirs else None

    @classmethod
    def start(cls, limits: Limits, dirs: Sequence[Path], parent: Cgroup | None, shm: bool) -> Guard:
        group = None
        if parent is not None:
            try:
                group = parent.child(f"kw-{os.getpid()}-{uuid.uuid4().hex[:8]}")
                group.limit(limits.memory_bytes, limits.pids)
            except OSError as exc:  # fail closed: the fallback's limits apply instead
                log.warning("cgroup for a sandbox failed (%s); the watchdog limits apply", exc)
                if group is not None:
                    group.remove()
                group = None
        return cls(limits, dirs, group, count_tasks=group is None, shm=shm)

    def preexec(self) -> Callable[[], None] | None:
        return self.cgroup.enter if self.cgroup is not None else None

    def check(self, root: int) -> str:
        if self.cgroup is not None:
            if self.cgroup.events("memory.events").get("oom_kill", 0):
                return describe_memory(self.limits.memory_bytes)
        else:
            found = tree(root)  # one read of /proc for both
            if self.count_tasks and found.tasks > self.limits.pids:
                return describe_pids(self.limits.pids)
            limit = self.limits.memory_bytes
            if _memory(found, self.shm, limit) > limit:
                return describe_memory(limit)
        return self.disk.check(time.monotonic()) if self.disk is not None else ""

    def verdict(self) -> str:
        """After a failed exit: the limit the kernel enforced, if it met one (a fork
        refused at ``pids.max`` fails in the program, which then says why less clearly)."""
        if self.cgroup is None:
            return ""
        if self.cgroup.events("memory.events").get("oom_kill", 0):
            return describe_memory(self.limits.memory_bytes)
        if self.cgroup.events("pids.events").get("max", 0):
            return describe_pids(self.limits.pids)
        return ""

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()


__all__ = [
    "DEFAULT_PIDS",
    "Cgroup",
    "DiskWatch",
    "Guard",
    "Limits",
    "describe_disk",
    "describe_memory",
    "describe_pids",
    "host_cgroup",
    "process_memory",
    "tree",
    "tree_memory",
]
