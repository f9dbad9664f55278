"""Case factories for the paired protocol's CPU tests: a first-set-up state, a memory limit.

Side processes import them (``kernelwatch.kernels.paired`` factories are
``module:function``) from the repository root, as they import ``benchmarks.benchcases``.
Both model what the H200 showed (docs/measurement.md §6), with CPU work in place of
a GPU kernel:

- ``first_setup_slow``: the first process to set up (a token in ``token_dir``) runs
  ``slow`` times the work in that set-up only, as a fresh process's first set-up of a
  short kernel ran 1.1-1.35x slow for its whole life and a set-up again cured it;
- ``memory_bound``: a set-up "holds memory" (a file in ``live_dir`` until its inputs
  are collected) and fails with ``OutOfMemoryError`` when more than ``limit`` set-ups
  are live at once, as 16 sides of an FP8 grouped GEMM did not fit the card;
- ``process_slow``: like ``first_setup_slow``, but the slow process stays slow in
  every set-up, as a decode side's state outlived a set-up again 45 times in 64 on
  the H200 (docs/measurement.md §10): only a new process cures it;
- ``setup_span``: a set-up that holds for a while and leaves its span, to tell set-ups
  one at a time from set-ups all at once;
- ``process_slow_cold``: ``process_slow`` whose first set-up in a process holds a
  while and every set-up is logged, to tell a warm spare's set-up from a cold one;
- ``jit_built``: the work of the library ``fakejit`` on the side's path, "compiled" on
  first use into a cache under ``$HOME`` keyed by the library's version only, as
  FlashInfer's JIT keeps its ops (``paired_suite.side_home``).
"""

from __future__ import annotations

import os
import time
import weakref
from pathlib import Path
from typing import Any

import torch

SideCase = tuple[Any, ...]


class OutOfMemoryError(RuntimeError):
    """Named like torch's: the coordinator recognises the error by its type name."""


def _matmul(n: int, repeat: int) -> SideCase:
    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)

    def call(i: Any) -> Any:
        r = None
        for _ in range(repeat):
            r = i[0] @ i[1]
        return r

    return call, (a, b)


def _claim(token_dir: str, name: str = "sick") -> bool:
    """True for the first set-up to claim the token ``name`` (its pid goes into it)."""
    token = Path(token_dir) / name
    try:
        fd = os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def owns_token(token_dir: str, name: str = "sick") -> bool:
    """True in the process that holds the token ``name``: claimed now, or before."""
    return _claim(token_dir, name) or (Path(token_dir) / name).read_text() == str(os.getpid())


def first_setup_slow(token_dir: str, n: int = 96, slow: int = 3, **_: Any) -> SideCase:
    return _matmul(n, slow if _claim(token_dir) else 1)


def process_slow(token_dir: str, n: int = 96, slow: int = 3, **_: Any) -> SideCase:
    return _matmul(n, slow if owns_token(token_dir) else 1)


def processes_slow(token_dir: str, sick: int = 2, n: int = 96, slow: int = 3, **_: Any) -> SideCase:
    """Slow in the first ``sick`` processes to set up (tokens ``sick-0``...), for
    their whole life: only a new process cures them."""
    mine = any(owns_token(token_dir, f"sick-{k}") for k in range(sick))
    return _matmul(n, slow if mine else 1)


_SETUPS = [0]  # this process's set-ups so far (``process_slow_cold``)


def process_slow_cold(
    token_dir: str, n: int = 96, slow: int = 3, cold_s: float = 0.5, **_: Any
) -> SideCase:
    """``process_slow``, and a process's first set-up holds ``cold_s`` more (its
    library's imports and JIT loads); each set-up leaves ``pid count`` in
    ``setups.log``, the count being its place among its process's set-ups."""
    _SETUPS[0] += 1
    if _SETUPS[0] == 1:
        time.sleep(cold_s)
    with open(Path(token_dir) / "setups.log", "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {_SETUPS[0]}\n")
    return process_slow(token_dir, n, slow)


def one_fast_process(token_dir: str, n: int = 96, slow: int = 3, **_: Any) -> SideCase:
    """Fast only in the first process to set up (token ``fast``); every other process,
    new ones too, slow for life: a kernel whose time is not steady across processes."""
    return _matmul(n, 1 if owns_token(token_dir, "fast") else slow)


def memory_bound(live_dir: str, limit: int, n: int = 96, **_: Any) -> SideCase:
    live = Path(live_dir)
    live.mkdir(parents=True, exist_ok=True)
    mine = live / f"{os.getpid()}-{id(object())}"
    mine.touch()
    call, inputs = _matmul(n, 1)
    # the "memory" is held as long as the inputs live (the side's sampler holds them)
    weakref.finalize(inputs[0], mine.unlink, missing_ok=True)
    if len(list(live.iterdir())) > limit:
        raise OutOfMemoryError(f"{len(list(live.iterdir()))} set-ups live, {limit} fit")
    return call, inputs


def setup_span(span_dir: str, n: int = 96, hold_s: float = 0.3, **_: Any) -> SideCase:
    """A set-up that takes ``hold_s`` and leaves its span (monotonic start and end, the
    same clock in every process) in ``span_dir``: whether two set-ups overlapped."""
    start = time.monotonic()
    time.sleep(hold_s)
    span = Path(span_dir) / f"{os.getpid()}-{id(object())}"
    span.write_text(f"{start} {time.monotonic()}")
    return _matmul(n, 1)


def jit_built(n: int = 96, **_: Any) -> SideCase:
    import fakejit  # type: ignore[import-not-found]  # the side's own library path

    return _matmul(n, fakejit.op())


def fails_or_hangs(mode: str = "", n: int = 96, **_: Any) -> SideCase:
    """A set-up that raises (``mode="raise"``), hangs (``"hang"``) or succeeds."""
    if mode == "raise":
        raise RuntimeError("this case's set-up is broken")
    if mode == "hang":
        time.sleep(120)
    return _matmul(n, 1)
