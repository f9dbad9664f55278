"""Card locks across processes: a card held by one worker blocks another until released.

Real processes and real ``flock`` locks. That the second process is *blocked* (not
merely slow) is read from the kernel's own table of lock waiters, ``/proc/locks``;
the order of events is proven with the system-wide monotonic clock, which every
process on the host shares.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from kernelwatch.worker import cardlock

CTX = mp.get_context("spawn")
A, B = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"


def _hold_until(root: str, uuids: list[str], held: Event, release: Event, out: Any) -> None:
    with cardlock.hold(uuids, Path(root)):
        held.set()
        release.wait(60)
        out.put(("released", time.monotonic()))


def _acquire(root: str, uuids: list[str], out: Any) -> None:
    out.put(("trying", time.monotonic()))
    with cardlock.hold(uuids, Path(root)):
        out.put(("acquired", time.monotonic()))


def _churn(root: str, uuids: list[str], rounds: int, out: Any) -> None:
    for _ in range(rounds):
        with cardlock.hold(uuids, Path(root)):
            pass
    out.put(("done", os.getpid()))


def _blocked_on(pid: int, lock: Path) -> bool:
    """The kernel lists ``pid`` as waiting for the flock of ``lock`` (a ``->`` row)."""
    st = lock.stat()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields:
            continue
        rest = fields[fields.index("->") + 1 :]  # FLOCK ADVISORY WRITE pid maj:min:inode ...
        if rest[0] == "FLOCK" and int(rest[3]) == pid and int(rest[4].split(":")[2]) == st.st_ino:
            return True
    return False


def test_a_held_card_blocks_a_two_card_worker_until_it_is_released(tmp_path: Path) -> None:
    root = tmp_path / "gpu-locks"
    held, release = CTX.Event(), CTX.Event()
    out: Any = CTX.Queue()
    first = CTX.Process(target=_hold_until, args=(str(root), [B], held, release, out))
    first.start()
    assert held.wait(60)
    second = CTX.Process(target=_acquire, args=(str(root), [B, A], out))  # needs both cards
    second.start()
    try:
        assert second.pid is not None
        deadline = time.monotonic() + 60
        while not _blocked_on(second.pid, root / f"{B}.lock"):  # waiting for a condition
            assert second.is_alive() and time.monotonic() < deadline, "never blocked on B"
            time.sleep(0.01)
        release.set()
        events = dict(out.get(timeout=60) for _ in range(3))
    finally:
        release.set()
        first.join(60)
        second.join(60)
    assert first.exitcode == 0 and second.exitcode == 0
    assert events["trying"] < events["released"] < events["acquired"]


def test_locks_are_taken_in_sorted_order_so_crossed_requests_never_deadlock(
    tmp_path: Path,
) -> None:
    root = tmp_path / "gpu-locks"
    with cardlock.hold([B, A, B], root) as paths:
        assert paths == [root / f"{A}.lock", root / f"{B}.lock"]  # sorted, each card once
    out: Any = CTX.Queue()
    procs = [
        CTX.Process(target=_churn, args=(str(root), order, 300, out)) for order in ([A, B], [B, A])
    ]
    for p in procs:
        p.start()
    try:
        done = {out.get(timeout=120) for _ in procs}  # a deadlock would time out here
    finally:
        for p in procs:
            p.join(60)
    assert {pid for _, pid in done} == {p.pid for p in procs}


def test_no_uuids_take_no_lock(tmp_path: Path) -> None:
    root = tmp_path / "gpu-locks"
    with cardlock.hold([], root) as paths:
        assert paths == []
    assert not root.exists()


@pytest.mark.parametrize(
    ("value", "uuids"),
    [
        (f"{A}", [A]),
        (f"{A},{B}", [A, B]),
        (f" {B} , {A} ", [B, A]),
        (f"{A},{A}", [A]),
        ("0", []),
        ("0,1", []),
        (f"0,{A}", []),  # not a pin by UUID: no lock
        ("", []),
        (None, []),
    ],
)
def test_visible_uuids_reads_only_uuid_pins(value: str | None, uuids: list[str]) -> None:
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert cardlock.visible_uuids(env) == uuids
