"""Running untrusted subprocesses: time and memory limits, a capped log, whole-tree kill.

Every child starts a new session and dies with the worker (``PR_SET_PDEATHSIG``),
so a timeout or a crash kills the process and everything it spawned, never the
worker; inside the sandbox (``worker/sandbox.py``) the child is bwrap, whose
PID namespace takes every process with it, ``setsid`` ones included.

Output goes through a pipe to a pump thread, never straight to a file the worker
later reads whole: the file is capped (``log_cap`` bytes, then a marker line and
the last ``TAIL_BYTES`` of the output), so a kernel printing 1.2 GB costs 64 MB of
disk and a few hundred kB of worker memory. The pump also hands lines that start
with a watched prefix (the suite runner's case markers) to a callback, capped
log or not. The first byte past the cap calls ``on_cap`` from the pump itself, before
it reads on, and the sink names the last watched line that began before the cap
(``before_cap``): a flood is stopped and blamed on the case that printed it, however
slowly the caller polls (on a loaded host a 200 MB flood and the rest of the suite
could finish between two polls).

Limits are a :class:`~kernelwatch.worker.limits.Guard` (memory with shared and
tmpfs pages, processes, disk; a cgroup v2 of its own where the host delegates one,
the watchdog otherwise): checked every poll, a tree over a limit is killed and
reported as what it hit (``out of memory (limit N GB)``, ``too many processes``,
``disk limit exceeded``), not as a bare SIGKILL. A plain ``memory_limit`` is the
same watchdog over memory alone, for the worker's own trusted tools.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kernelwatch.jobs.lifetime import die_with_parent
from kernelwatch.kernels.exits import describe_exit
from kernelwatch.worker.limits import Guard, Limits, tree_memory
from kernelwatch.worker.sandbox import DEFAULT_LOG_MB

TAIL_BYTES = 256_000
CHUNK = 1 << 16
log = logging.getLogger(__name__)
POLL_S = 0.1


class LogSink:
    """Copies a pipe into a file of at most ``cap`` bytes, keeping the tail beyond it."""

    def __init__(
        self,
        pipe: IO[bytes],
        path: Path,
        cap: int,
        watch: bytes | None = None,
        on_line: Callable[[str], None] | None = None,
        on_cap: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.cap = cap
        self.written = 0
        self.dropped = 0
        self._pipe = pipe
        self._watch = watch
        self._on_line = on_line
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self._partial = b""
        self._read = 0  # bytes read from the pipe so far
        self._on_cap = on_cap
        self.before_cap: str | None = None  # the last watched line that began before the cap
        self._thread = threading.Thread(target=self._pump, name=f"log {path.name}", daemon=True)
        self._thread.start()

    @property
    def capped(self) -> bool:
        return self.dropped > 0

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _pump(self) -> None:
        fd = self._pipe.fileno()
        # the directory may be writable by the code under test: never follow its symlink
        self.path.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(self.path, flags, 0o644), "wb") as out:
            while True:
                try:
                    chunk = os.read(fd, CHUNK)
                except OSError:
                    break
                if not chunk:
                    break
                self._scan(chunk)
                self._read += len(chunk)
                room = self.cap - self.written
                if room > 0:
                    out.write(chunk[:room])
                    self.written += min(room, len(chunk))
                    chunk = chunk[room:]
                if chunk:
                    first = not self.dropped
                    self.dropped += len(chunk)
                    self._keep(chunk)
                    if first and self._on_cap is not None:
                        out.flush()
                        self._on_cap()
            if self.dropped:
                tail = b"".join(self._tail)
                out.write(
                    f"\n[kernelwatch: log capped at {self.cap / 1e6:g} MB; "
                    f"{self.dropped} bytes not kept; the last {len(tail)} follow]\n".encode()
                )
                out.write(tail)
        with contextlib.suppress(OSError):
            self._pipe.close()

    def _keep(self, chunk: bytes) -> None:
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        while self._tail_len - len(self._tail[0]) >= TAIL_BYTES:
            self._tail_len -= len(self._tail.popleft())

    def _scan(self, chunk: bytes) -> None:
        """Hand complete lines starting with the watched prefix to ``on_line``."""
        if self._watch is None or self._on_line is None:
            return
        data = self._partial + chunk
        base = self._read - len(self._partial)  # the stream offset of data[0]
        start = 0
        while True:
            i = data.find(self._watch, start)
            if i < 0:
                break
            end = data.find(b"\n", i)
            if end < 0:
                break
            if i == 0 or data[i - 1 : i] == b"\n":
                if base + i < self.cap:
                    self.before_cap = data[i:end].decode("utf-8", errors="replace")
                try:
                    self._on_line(data[i:end].decode("utf-8", errors="replace"))
                except Exception:  # a line the handler cannot take must not stop the drain
                    log.exception("watched line not handled: %.200r", data[i:end])
            start = end + 1
        last = data.rfind(b"\n")
        rest = data[last + 1 :]
        # a partial line is only worth keeping if it may still become a marker line
        self._partial = rest if len(rest) <= 4096 else b""


def tree_memory_bytes(root: int) -> int:
    """Anonymous and shared memory of ``root`` and all its descendants (from /proc)."""
    return tree_memory(root)


class Supervised:
    """A child with its output in a capped log and its tree under a memory limit."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        log_path: Path,
        log_cap: int = DEFAULT_LOG_MB * 10**6,
        memory_limit: int | None = None,
        watch: str | None = None,
        on_line: Callable[[str], None] | None = None,
        signal_codes: bool = False,
        guard: Guard | None = None,
        kill_on_cap: bool = False,
    ) -> None:
        if guard is None and memory_limit:
            guard = Guard(Limits(memory_limit), count_tasks=False)
        self.guard = guard
        # bwrap reports a child killed by signal N as exit code 128 + N, like a shell
        self.signal_codes = signal_codes
        self.stopped = ""  # the limit that stopped the tree, when one did
        die = die_with_parent()
        enter = guard.preexec() if guard is not None else None

        def preexec() -> None:
            die()
            if enter is not None:
                enter()  # the step's own cgroup, before anything of it runs

        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
        assert self.proc.stdout is not None
        self.sink = LogSink(
            self.proc.stdout,
            log_path,
            log_cap,
            watch.encode() if watch else None,
            on_line,
            on_cap=self.kill if kill_on_cap else None,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def oom(self) -> bool:
        return self.stopped.startswith("out of memory")

    def poll(self) -> int | None:
        """The exit code, or None while it runs; kills a tree that is over a limit."""
        code = self.proc.poll()
        if code is None and self.guard is not None and not self.stopped:
            self.stopped = self.guard.check(self.pid)
            if self.stopped:
                self.kill()
                code = self.proc.poll()
        return code

    def kill(self) -> None:
        kill_group(self.proc)

    def finish(self) -> int:
        """Wait for the exit and the end of the log; the exit code (-9 if it never came)."""
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        if not self.sink.join(10.0):
            # something outside the tree (only possible without the sandbox) holds
            # the pipe: stop waiting for it, the log so far is kept
            self.kill()
            self.sink.join(5.0)
        code = self.proc.returncode if self.proc.returncode is not None else -9
        if self.guard is not None:
            if not self.stopped and code != 0:
                self.stopped = self.guard.verdict()
            self.guard.close()
        if self.signal_codes and 128 < code <= 128 + 64:
            return -(code - 128)
        return code

    def describe(self, code: int | None) -> str:
        return self.stopped or describe_exit(code)


@dataclass(frozen=True)
class Finished:
    """How a supervised command ended; ``why`` is set when it was stopped or failed."""

    code: int
    log: str
    timed_out: bool
    oom: bool
    why: str
    stopped: str = ""  # the limit that stopped it (memory, processes, disk), if one did


def run_supervised(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    log_path: Path,
    log_cap: int = DEFAULT_LOG_MB * 10**6,
    memory_limit: int | None = None,
    log_limit: int = 200_000,
    signal_codes: bool = False,
    guard: Guard | None = None,
) -> Finished:
    """Run to completion under the limits; the log's last ``log_limit`` characters."""
    child = Supervised(
        argv,
        cwd=cwd,
        env=env,
        log_path=log_path,
        log_cap=log_cap,
        memory_limit=memory_limit,
        signal_codes=signal_codes,
        guard=guard,
    )
    deadline = time.monotonic() + timeout
    timed_out = False
    while child.poll() is None:
        if time.monotonic() > deadline:
            timed_out = True
            child.kill()
            break
        time.sleep(POLL_S)
    code = child.finish()
    why = ""
    if timed_out:
        why = f"timed out after {timeout:.0f}s"
    elif child.stopped or code != 0:
        why = child.describe(code)
    return Finished(code, read_tail(log_path, log_limit), timed_out, child.oom, why, child.stopped)


def run_logged(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    log_limit: int = 200_000,
    memory_limit: int | None = None,
) -> tuple[int, str, bool]:
    """Run to completion; return (exit code, combined output tail, timed out)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kw-log-") as tmp:
        done = run_supervised(
            argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            log_path=Path(tmp) / "log",
            memory_limit=memory_limit,
            log_limit=log_limit,
        )
    return done.code, done.log, done.timed_out


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading, if it is a plain file; else ``OSError``.

    For files where code under test writes: never through a symlink (a link planted
    there would have the worker read, and store, whatever it names) and never a FIFO
    (whose open, or read, would block the worker forever).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a plain file")
    return os.fdopen(fd, "rb")


def read_tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of a file as text (never the whole of a large file),
    opened with :func:`open_regular`."""
    try:
        with open_regular(path) as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after 3 s."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return
            time.sleep(0.05)
