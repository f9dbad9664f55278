"""``benchmarks/first_call.py`` on the CPU: processes with a side's environment set each
case up twice, and the table says where the first set-up went."""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks import first_call
from kernelwatch.kernels.timing import TimerConfig, make_sampler


def test_each_process_sets_every_case_up_twice_and_the_table_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--suite", "gemm", "--size", "smoke", "--impl", "kernelwatch.kernels.adapters.gemm",
            "--backend", "torch", "--kernel", "gemm", "--procs", "2",
            "--generations", "2"]  # fmt: skip
    assert first_call.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [json.loads(x) for x in out if x.startswith("{")]
    starts = [r for r in rows if "import_s" in r]
    cases = [r for r in rows if "case" in r]
    # two generations of two processes, each with its start-up and every smoke GEMM case
    assert sorted((r["gen"], r["proc"]) for r in starts) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    per_process = {len([c for c in cases if (c["gen"], c["proc"]) == k]) for k in [(1, 0), (2, 1)]}
    assert len(per_process) == 1 and per_process.pop() >= 1
    for c in cases:
        assert "error" not in c, c
        assert c["first_s"] >= 0 and c["second_s"] >= 0
        assert c["first_new_cache"] == 0  # no Triton on the CPU path: nothing compiled
    # the first process of a generation profiles its first set-ups
    assert all(c.get("profile") for c in cases if c["proc"] == 0)
    assert not any(c.get("profile") for c in cases if c["proc"] == 1)
    table = "\n".join(first_call.table(rows))
    assert "(start)" in table and "gemm" in table
    # whether a process keeps the bytecode it compiles: the start rows say, the table reads it
    assert all(isinstance(r["dont_write_bytecode"], int) for r in starts)
    assert "bytecode written: " in table
    flagged = [{**r, "dont_write_bytecode": 1} for r in starts]
    assert "bytecode written: no (PYTHONDONTWRITEBYTECODE)" in "\n".join(first_call.table(flagged))
    frozen = [{**r, "dont_write_bytecode": 0, "site_writable": False} for r in starts]
    assert "no (torch's folder read-only)" in "\n".join(first_call.table(frozen))
    assert any(x.startswith("profile, generation 2") for x in out)


def test_the_block_probe_counts_what_puts_host_time_into_the_samples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # docs/measurement.md §34c: the varlen prefill's undecided cases kept 97-241 late
    # samples; the probe times blocks one process at a time and counts, around them,
    # the synchronising calls and the allocator's new segments (none of either off a GPU)
    argv = ["--suite", "gemm", "--size", "smoke", "--impl", "kernelwatch.kernels.adapters.gemm",
            "--backend", "torch", "--kernel", "gemm", "--procs", "2", "--generations", "1",
            "--cases", "1", "--blocks", "3", "--samples", "5"]  # fmt: skip
    assert first_call.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    cases = [json.loads(x) for x in out if x.startswith("{") and '"case"' in x]
    assert len(cases) == 2
    for c in cases:
        host = c["host"]
        assert host["syncs_per_call"] == [0] * 10 and host["segments_per_call"] == [0] * 10
        assert len(host["blocks"]) == 3
        assert host["children"] == [0, 0]  # no compile-worker pool on this path
        for b in host["blocks"]:
            assert b["median_s"] > 0 and b["late"] == [0, 0] and b["new_segments"] == 0
            assert b["preempted"] >= 0 and b["cpu_share"] >= 0  # every thread's CPU counts
    line = next(x for x in out if x.strip().startswith("host: "))
    assert "syncs a call 0.0 (max 0)" in line and "6 blocks" in line and "kept 0" in line
    assert "child processes after the set-up 0-0" in line
    assert "gc on: 6 blocks" in line and "objects " in line
    # a synchronising call and a kept sample read back in the line
    probed = [{**cases[0]["host"], "syncs_per_call": [2] * 10,
               "blocks": [{"median_s": 1e-3, "new_segments": 1, "late": [4, 9], "gc_on": True,
                           "gc": [3, 1, 1], "gc_longest_s": 0.2, "preempted": 7,
                           "cpu_share": 0.4, "where": [["cuda/__init__.py:1 synchronize", 0.9]],
                           "where_readings": 200},
                          {"median_s": 1e-3, "new_segments": 0, "late": [0, 0], "gc_on": True,
                           "gc": [0, 0, 0], "gc_longest_s": 0.0, "preempted": 0,
                           "cpu_share": 1.0, "where": [["kernels/timing.py:9 block", 0.5]],
                           "where_readings": 4}]}]  # fmt: skip
    text = first_call.host_line(probed)
    assert "syncs a call 2.0 (max 2)" in text and "new segments 1" in text
    assert "late retaken 4 kept 9" in text and "1000.0-1000.0 us" in text
    assert "gen-2 passes 1, longest pause 200.0 ms" in text
    assert ("worst late block: kept 9, preempted 7 times, CPU share 0.40, main thread at "
            "cuda/__init__.py:1 synchronize 90% of 200 readings") in text  # fmt: skip
    assert "an on-time block, main thread at kernels/timing.py:9 block 50% of 4 readings" in text


def test_the_probe_reads_where_the_main_thread_waits_while_it_holds_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # §35: a block whose samples came late read a CPU share of 0.07, but its wall held
    # the wait for the other processes' turns; the probe now measures inside the turn,
    # and reads where the main thread is (a sampling thread, _Where)
    def sleepy(_: object) -> None:
        time.sleep(0.01)  # a host asleep in a call: the frame that made it

    host = first_call._host_time_sources(sleepy, torch.zeros(1), 1, 2, 6, str(tmp_path / "turn"))
    for b in host["blocks"]:
        place, share = b["where"][0]
        assert place.startswith("benchmarks/test_first_call.py:") and place.endswith(" sleepy")
        assert share > 0.5 and b["where_readings"] >= 3
        assert b["cpu_share"] < 0.5  # asleep, not spinning

    # every turn waits 0.2 s for other processes: a busy block still reads busy
    @contextlib.contextmanager
    def slow_turn(lock: str) -> Iterator[None]:
        time.sleep(0.2)
        yield

    monkeypatch.setattr(first_call, "gpu_turn", slow_turn)
    busy = first_call._host_time_sources(lambda _: sum(range(200_000)), torch.zeros(1), 1, 2, 4, "")
    assert all(b["cpu_share"] > 0.3 for b in busy["blocks"]), busy["blocks"]


def test_where_reads_only_the_watched_threads_innermost_frame() -> None:
    # §36: faulthandler's watchdog, the first reader, walked running threads' frames and
    # every probe process ended silently on the H200; the sampler reads with the GIL
    stop = threading.Event()

    def elsewhere() -> None:
        while not stop.is_set():
            time.sleep(0.001)

    other = threading.Thread(target=elsewhere)
    other.start()
    where = first_call._Where(period_s=0.002)

    def waiting_here() -> None:
        time.sleep(0.1)

    try:
        with where.listening():
            waiting_here()
    finally:
        stop.set()
        other.join()
    (place, share), *_ = where.top()
    assert place.startswith("benchmarks/test_first_call.py:") and place.endswith(" waiting_here")
    assert share > 0.8 and sum(where.counts.values()) >= 10
    assert not any("elsewhere" in p for p in where.counts)
    assert not any(t.name == "kw-where" for t in threading.enumerate())  # the sampler ended


def test_a_process_that_dies_or_hangs_mid_case_is_a_row_not_a_silence() -> None:
    # §36: 8 processes printed their first case's row and then nothing, and the table
    # said nothing of it
    row = json.dumps({"proc": 0, "case": "c1", "kernel": "k"})
    code = {
        "dies": f"import os, signal; print({row!r}, flush=True); os.kill(os.getpid(), 11)",
        "fails": "raise SystemExit(3)",
        "hangs": "import time; time.sleep(30)",
        "ends": f"print({row!r})",
    }
    procs = [subprocess.Popen([sys.executable, "-c", c], stdout=subprocess.PIPE, text=True)
             for c in code.values()]  # fmt: skip
    rows = first_call.collect(procs, 5.0, gen=1)
    ended = {r["proc"]: r["error"] for r in rows if "case" not in r}
    assert ended == {0: "ended: killed by SIGSEGV", 1: "ended: exit code 3",
                     2: "timed out after 5s"}  # fmt: skip
    assert [r["case"] for r in rows if "case" in r] == ["c1", "c1"]
    text = "\n".join(first_call.table(rows))
    assert "1 process(es): ended: killed by SIGSEGV" in text
    assert "1 process(es): timed out after 5s" in text


def test_collections_are_counted_while_listening_and_none_happen_with_the_collector_off() -> None:
    # the candidate of §34d: a generation-2 pass inside a sample is host time; the
    # collector is off where the timer pauses it (TimerConfig.collect_garbage_in_blocks)
    seen: list[int] = []
    listener = first_call._Collections()

    def churn(_: object = None) -> None:
        for _ in range(20_000):
            a: list[object] = []
            a.append(a)  # a cycle: only the collector frees it
        seen.append(sum(listener.counts))  # collections so far, inside the sample

    with listener.listening():
        churn()
        gc.collect()
    assert listener.counts[2] >= 1 and sum(listener.counts) > 1 and listener.longest_s > 0
    for collect in (True, False):
        sampler = make_sampler(
            churn, torch.zeros(1), TimerConfig(min_warmup_s=0.0, collect_garbage_in_blocks=collect)
        )
        gc.collect()
        listener, seen[:] = first_call._Collections(), []
        with listener.listening():
            sampler.block(1)
        # a running collector collects inside the sample; a paused one only after it
        assert (seen[-1] > 0) if collect else (seen[-1] == 0), (collect, seen)
    assert gc.isenabled()  # the collector is back as it was


def test_the_collector_a_b_flips_the_timers_switch_block_by_block() -> None:
    # --gc-ab: every second block with the collector paused by the timer itself, on the
    # same sampler (one warm-up, one set of buffers for both arms)
    enabled: list[bool] = []

    def call(_: object) -> None:
        enabled.append(gc.isenabled())

    host = first_call._host_time_sources(call, torch.zeros(1), 2, 4, 3, "", gc_ab=True)
    assert [b["gc_on"] for b in host["blocks"]] == [True, False, True, False]
    assert enabled[-12:] == [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3
    assert gc.isenabled()
