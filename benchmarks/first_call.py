"""Where a new side process's first set-up of a case goes, and whether a second pays it again.

On an H100 (2026-12-07, docs/measurement.md §32) every confirmation of a Liger
LayerNorm +1 % trial set its 16 new processes up in 11.8-18.0 s, where stage 1's
warm processes took 0.5 s: the check's first call of the kernel alone took 11-14 s
in each new pool (``check_call_s``), trial after trial, with Triton's cache on disk
shared by every side (``paired_suite.side_home``). A cache hit loads a compiled
kernel in milliseconds, so either the cache is missed or the first call pays for
something else. This measures it the way the pool meets it: ``--procs`` processes
started together with a side's environment (its ``$HOME`` and ``TRITON_CACHE_DIR``),
each setting every selected case up twice (``paired_suite.case``, the check on), for
``--generations`` generations of new processes one after another. Per case and
generation it prints the first and the second set-up's seconds (median and slowest
process), the check's first call, and the entries the run added to Triton's cache
directory. A first call that stays slow in generation 2, with no entry added, is not
a compile.

With ``--blocks N`` each process then times N blocks of the case as a side does
(``timing.make_sampler``, the host guard on) and, around its own calls, counts what
would put host time into the samples: the calls that synchronise
(``torch.cuda.set_sync_debug_mode``) and the allocator's new device segments
(``num_device_alloc``), per call outside the timer and per block inside it, with the
samples the host queued late (taken again, kept at the spin's cap). On an H100
(2026-12-07, docs/measurement.md §34c) SDPA's varlen prefill ended ``inconclusive``
whenever 97-241 of its samples were kept at the cap. Inside its turn on the GPU each
block also reads the host's side: involuntary switches, CPU seconds over the wall,
and where the main thread was (``_Where``, §35d).

    python -m benchmarks.first_call --suite layers --impl kernelwatch.kernels.adapters.liger \\
        --backend liger --path .src/liger/src --procs 8 --generations 2
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from benchmarks.turns import gpu_turn
from kernelwatch.kernels.exits import describe_exit


def _entries(cache: str) -> int:
    """Entries in Triton's cache directory (one folder per compiled kernel)."""
    try:
        return len(os.listdir(cache))
    except OSError:
        return 0


def _top(profiler: cProfile.Profile, n: int = 14) -> list[str]:
    """The calls that held the first set-up longest (cumulative seconds), one line each."""
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(n)
    return [x.strip() for x in text.getvalue().splitlines() if x.strip()][-n:]


def _children() -> int:
    """Processes whose parent is this one (an Inductor compile-worker pool shows here)."""
    me, n = str(os.getpid()), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    n += f.read().rsplit(")", 1)[1].split()[1] == me
            except (OSError, IndexError):
                continue
    return n


class _Collections:
    """Python's garbage collections while it listens (``gc.callbacks``): how many per
    generation, and the longest pause. A generation-2 pass over a heap that holds torch,
    ``torch._dynamo`` and transformers walks every object the process has, and a pause
    inside a sample is host time the spin may not cover. Whether the collector runs at
    all is the timer's to say (``TimerConfig.collect_garbage_in_blocks``)."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.longest_s = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.counts[int(info.get("generation", 0))] += 1
        self.longest_s = max(self.longest_s, time.perf_counter() - self._began)

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        gc.callbacks.append(self)
        try:
            yield
        finally:
            gc.callbacks.remove(self)


def frame_place(frame: FrameType) -> str:
    """``folder/file.py:line function`` of a frame: short, and still says whose code."""
    code = frame.f_code
    parent = os.path.basename(os.path.dirname(code.co_filename))
    return f"{parent}/{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}"


class _Where:
    """Where the listening thread (the probe's main thread) is, every ``period_s``: its
    innermost Python frame, read by a sampling thread through ``sys._current_frames``.
    A host that sleeps in a call shows as the frame that made the call, many times over.

    The sampler takes the GIL for each reading, which adds the same small host time to
    late and on-time blocks alike (not measured on a GPU yet). The first reader
    was faulthandler's watchdog, which takes no GIL. On the H200 (2026-12-07,
    docs/measurement.md §36) all 8 probe processes ended without a row or a traceback
    in SDPA's varlen case, the first run of that reader on a GPU. The watchdog walks
    the other threads' frames while they run, and CPython's tracker has such walks
    crashing (python/cpython#116008, #131580), so it is the suspect; a sampler that
    holds the GIL reads frames that cannot change under it.
    """

    def __init__(self, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.counts: Counter[str] = Counter()

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        watched = threading.get_ident()  # the thread that runs the block
        counts: Counter[str] = Counter()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(self.period_s):
                frame = sys._current_frames().get(watched)
                if frame is not None:
                    counts[frame_place(frame)] += 1
                del frame  # no reference to a frame outlives its reading

        sampler = threading.Thread(target=sample, name="kw-where", daemon=True)
        sampler.start()
        try:
            yield
        finally:
            stop.set()
            sampler.join()
            self.counts = counts

    def top(self, n: int = 3) -> list[list[Any]]:
        """The ``n`` most frequent frames with their share of the readings."""
        total = sum(self.counts.values())
        return [[place, k / total] for place, k in self.counts.most_common(n)]


def _scheduling() -> tuple[int, float]:
    """(involuntary context switches, CPU seconds of every thread) of this process so
    far: a block whose every sample came late with no collection in it had its host
    taken away, or not."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nivcsw, usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def _held(into: dict[str, Any]) -> Iterator[None]:
    """What the host did while inside, into ``into``: taken off its CPU (involuntary
    switches), CPU seconds of every thread over the wall, the listening thread's
    innermost frames (``_Where``)."""
    where = _Where()
    switched, cpu = _scheduling()
    wall = time.perf_counter()
    with where.listening():
        yield
    wall = time.perf_counter() - wall
    switched_after, cpu_after = _scheduling()
    into.update(
        preempted=switched_after - switched,
        cpu_share=(cpu_after - cpu) / wall if wall > 0 else 0.0,
        where=where.top(),
        where_readings=sum(where.counts.values()),
    )


def _host_time_sources(call: Callable[[Any], Any], inputs: Any, calls: int, blocks: int,
                       samples: int, lock: str, gc_ab: bool = False) -> dict[str, Any]:  # fmt: skip
    """Synchronising calls and new device segments per call of the case (no timer), then
    per timed block: those, the samples the host queued late, the block's median and the
    garbage collections in it. ``gc_ab``: every second block runs with the collector off."""
    import warnings

    import torch

    from kernelwatch.kernels.timing import TimerConfig, make_sampler

    cuda = torch.cuda.is_available()

    def segments() -> int:
        return int(torch.cuda.memory_stats().get("num_device_alloc", 0)) if cuda else 0

    def counted(
        work: Callable[[], Any], held: dict[str, Any] | None = None
    ) -> tuple[Any, int, int]:
        """``work`` with the GPU to this process alone: its result, synchronising calls
        and new segments. ``held``: also what the host did while it held the GPU (the
        wall, the involuntary switches, the CPU seconds, where the main thread was);
        measured inside the turn, not around it, where the wait for the other
        processes' turns would read as a host asleep."""
        with gpu_turn(lock):
            before = segments()
            with (
                warnings.catch_warnings(record=True) as caught,
                _held(held) if held is not None else contextlib.nullcontext(),
            ):
                warnings.simplefilter("always")
                out = work()
                if cuda:
                    torch.cuda.synchronize()  # the block's work, not the next holder's
            syncs = sum("synchroniz" in str(w.message) for w in caught)
            return out, syncs, segments() - before

    children = [_children()]
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
    try:
        per_call = [counted(lambda: call(inputs))[1:] for _ in range(calls)]
        if cuda:
            torch.cuda.set_sync_debug_mode(0)  # the timer's own event waits are not the case's
            torch.cuda.synchronize()
        # one sampler, so both arms of gc_ab share its warm-up, graph, input copies and
        # flush buffer; the timer's own switch pauses the collector in every second block
        # (a sampler reads its config at each block)
        config = TimerConfig()
        sampler = make_sampler(call, inputs, config)
        rows = []
        for i in range(blocks):
            collect = not (gc_ab and i % 2)
            config.collect_garbage_in_blocks, collections = collect, _Collections()
            late = sampler.late_samples()
            held: dict[str, Any] = {}
            with collections.listening():
                values, _, new = counted(functools.partial(sampler.block, samples), held)
            after = sampler.late_samples()
            rows.append({"median_s": statistics.median(values), "new_segments": new,
                         "late": [a - b for a, b in zip(after, late, strict=True)],
                         "gc_on": collect, "gc": collections.counts,
                         "gc_longest_s": collections.longest_s, **held})  # fmt: skip
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    children.append(_children())
    return {
        # child processes after the set-up and after the blocks
        "children": children,
        "objects": len(gc.get_objects()),  # what a generation-2 collection walks
        "syncs_per_call": [n for n, _ in per_call],
        "segments_per_call": [n for _, n in per_call],
        "blocks": rows,
    }


def child(args: argparse.Namespace) -> int:
    """One process: imports, CUDA context, then each case set up twice; a JSON line each."""
    began = time.perf_counter()
    import torch

    imported = time.perf_counter()
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
    context = time.perf_counter()
    from kernelwatch.kernels.paired_suite import case
    from kernelwatch.kernels.runner import selected_cases

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cache = os.environ.get("TRITON_CACHE_DIR", "")
    # whether this process may write the bytecode it compiles into torch's folder (as
    # prelude's _compile_site asks; §33a: torch's lazily imported modules were compiled
    # from source in every process)
    site = os.path.dirname(torch.__file__)
    print(json.dumps({"proc": args.proc, "import_s": imported - began,
                      "context_s": context - imported,
                      "kernelwatch_s": time.perf_counter() - context,
                      "dont_write_bytecode": sys.flags.dont_write_bytecode,
                      "site_writable": os.access(site, os.W_OK)}), flush=True)  # fmt: skip
    chosen = list(selected_cases(
        [args.suite], args.size, device, args.backend, args.kernel or None, [], announce=False
    ))  # fmt: skip
    for suite, spec, cid in chosen[: args.cases or None]:
        row: dict[str, Any] = {"proc": args.proc, "case": cid, "kernel": spec.kernel}
        for turn in ("first", "second"):
            # the first set-up's inputs go before the second's are made (a varlen case
            # holds 6.4 GB a process: 16 processes at once fill an H100)
            call: Callable[[Any], Any] | None = None
            inputs: Any = None
            gc.collect()
            before = _entries(cache)
            profiler = cProfile.Profile() if args.proc == 0 and turn == "first" else None
            t = time.perf_counter()
            try:
                if profiler is not None:
                    profiler.enable()
                call, inputs, info = case(suite, args.size, cid, args.impl, args.backend, seed=1)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            except Exception as exc:  # a broken case is a row, not the end of the run
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                break
            finally:
                if profiler is not None:
                    profiler.disable()
                    row["profile"] = _top(profiler)
            row[f"{turn}_s"] = time.perf_counter() - t
            row[f"{turn}_call_s"] = float(info.get("check_parts", {}).get("check_call_s", 0.0))
            row[f"{turn}_new_cache"] = _entries(cache) - before
        if args.blocks and "error" not in row and call is not None:
            try:
                row["host"] = _host_time_sources(call, inputs, 10, args.blocks, args.samples,
                                                 args.lock, args.gc_ab)  # fmt: skip
            except Exception as exc:  # the probe's failure is a row, as a set-up's is
                row["error"] = f"probe: {type(exc).__name__}: {exc}"[:300]
        print(json.dumps(row), flush=True)
    return 0


def _generation(args: argparse.Namespace, gen: int) -> list[dict[str, Any]]:
    """One generation of ``--procs`` new processes, started together; a hung one is
    killed at ``--timeout`` with the rest, and its rows are what it printed before
    (:func:`collect`)."""
    from kernelwatch.kernels.paired_suite import side_env

    env = {**os.environ, **side_env(sys.executable, args.path)}
    argv = [sys.executable, "-m", "benchmarks.first_call", "--child", "--suite", args.suite,
            "--size", args.size, "--impl", args.impl, "--backend", args.backend]  # fmt: skip
    for k in args.kernel:
        argv += ["--kernel", k]
    lock = os.path.join(tempfile.mkdtemp(prefix="kw-first-call-"), "gpu.lock")
    argv += ["--cases", str(args.cases), "--blocks", str(args.blocks),
             "--samples", str(args.samples), "--lock", lock]  # fmt: skip
    if args.gc_ab:
        argv.append("--gc-ab")
    procs = [
        subprocess.Popen([*argv, "--proc", str(i)], env=env, stdout=subprocess.PIPE, text=True)
        for i in range(args.procs)
    ]
    return collect(procs, args.timeout, gen)


def collect(
    procs: Sequence[subprocess.Popen[str]], timeout: float, gen: int
) -> list[dict[str, Any]]:
    """The JSON rows the processes print, by ``timeout`` seconds from now; a hung
    process is killed, and one that ended by a signal or an error code is a row too."""
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    for i, p in enumerate(procs):
        try:
            # at least a moment each: a process that ended while an earlier one was
            # waited for still has its output to read, and is not hung
            out, _ = p.communicate(timeout=max(0.5, deadline - time.monotonic()))
            ended = f"ended: {describe_exit(p.returncode)}" if p.returncode else ""
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            ended = f"timed out after {timeout:g}s"
        rows += [
            {**json.loads(x), "gen": gen} for x in out.splitlines() if x.startswith("{")
        ]  # fmt: skip
        if ended:  # a process that died or hung mid-case printed no row for that case
            rows.append({"proc": i, "gen": gen, "error": ended})
    return rows


def _summary(
    rows: Sequence[dict[str, Any]],
    key: str,
    how: Callable[[list[float]], float] = statistics.median,
) -> float:
    """``how`` (the median, or ``max``) of ``key`` over the rows that have it; NaN for none."""
    values = [float(r[key]) for r in rows if key in r]
    return float(how(values)) if values else float("nan")


def _bytecode_written(starts: Sequence[dict[str, Any]]) -> str:
    """'yes', or why a process's compiled bytecode is lost: the flag or a read-only site."""
    if not starts:
        return "?"
    if any(r.get("dont_write_bytecode") for r in starts):
        return "no (PYTHONDONTWRITEBYTECODE)"
    if not all(r.get("site_writable", True) for r in starts):
        return "no (torch's folder read-only)"
    return "yes"


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per generation and case: the set-ups' seconds and the cache entries added."""
    lines = [f"{'gen':>3} {'case':<18} {'first s med/max':>16} {'call s med':>10} "
             f"{'second s med':>12} {'new cache':>9}  errors"]  # fmt: skip
    for gen in sorted({r["gen"] for r in rows}):
        starts = [r for r in rows if r["gen"] == gen and "import_s" in r]
        lines.append(f"{gen:>3} {'(start)':<18} import {_summary(starts, 'import_s'):.2f}  "
                     f"context {_summary(starts, 'context_s'):.2f}  "
                     f"kernelwatch {_summary(starts, 'kernelwatch_s'):.2f}  "
                     f"bytecode written: {_bytecode_written(starts)}")  # fmt: skip
        ended = [r for r in rows if r["gen"] == gen and "case" not in r and "error" in r]
        for why in dict.fromkeys(r["error"] for r in ended):  # hung, or died mid-case
            n = sum(1 for r in ended if r["error"] == why)
            lines.append(f"{gen:>3} (ended)            {n} process(es): {why}")
        cases = [r for r in rows if r["gen"] == gen and "case" in r]
        for cid in dict.fromkeys(r["case"] for r in cases):
            mine = [r for r in cases if r["case"] == cid]
            added = sum(int(r.get("first_new_cache", 0)) for r in mine)
            errors = sum(1 for r in mine if "error" in r)
            lines.append(
                f"{gen:>3} {mine[0]['kernel'][:18]:<18} "
                f"{_summary(mine, 'first_s'):>7.2f}/{_summary(mine, 'first_s', max):<7.2f} "
                f"{_summary(mine, 'first_call_s'):>10.2f} {_summary(mine, 'second_s'):>12.2f} "
                f"{added:>9}  {errors or ''}"
            )
            probed = [r["host"] for r in mine if r.get("host")]
            if probed:
                lines.append("    " + host_line(probed))
    return lines


def _where_text(block: dict[str, Any]) -> str:
    """Where a block's main thread was: its most read frames and their shares."""
    where = block.get("where") or []
    if not where:
        return ""
    frames = ", ".join(f"{place} {share:.0%}" for place, share in where)
    return f", main thread at {frames} of {block.get('where_readings', 0)} readings"


def host_line(probed: Sequence[dict[str, Any]]) -> str:
    """What put host time into the samples, over a generation's processes: synchronising
    calls and new segments per call, then per block, with the late samples."""
    calls = [n for p in probed for n in p["syncs_per_call"]]
    segs = [n for p in probed for n in p["segments_per_call"]]
    blocks = [b for p in probed for b in p["blocks"]]
    retaken = sum(b["late"][0] for b in blocks)
    kept = sum(b["late"][1] for b in blocks)
    new = sum(b["new_segments"] for b in blocks)
    medians = sorted(b["median_s"] for b in blocks) or [float("nan")]
    kids = [p.get("children", [0])[0] for p in probed]
    gc_lines = []
    for on in (True, False):
        mine = [b for b in blocks if b.get("gc_on", True) is on]
        if mine and "gc" in mine[0]:
            gen2 = sum(b["gc"][2] for b in mine)
            kept_here = sum(b["late"][1] for b in mine)
            longest = max(b["gc_longest_s"] for b in mine)
            gc_lines.append(
                f"gc {'on' if on else 'off'}: {len(mine)} blocks, gen-2 passes "
                f"{gen2}, longest pause {longest * 1e3:.1f} ms, kept {kept_here}"
            )
    objects = max((p.get("objects", 0) for p in probed), default=0)
    late_blocks = [b for b in blocks if b["late"][1]]
    if late_blocks and "preempted" in late_blocks[0]:
        worst = max(late_blocks, key=lambda b: b["late"][1])
        gc_lines.append(
            f"worst late block: kept {worst['late'][1]}, preempted "
            f"{worst['preempted']} times, CPU share {worst['cpu_share']:.2f}" + _where_text(worst)
        )
    on_time = [b for b in blocks if not b["late"][1] and b.get("where")]
    if on_time:
        gc_lines.append("an on-time block" + _where_text(on_time[0]))
    tail = f"; objects {objects}; " + "; ".join(gc_lines) if gc_lines else ""
    return (f"host: child processes after the set-up {min(kids, default=0)}-"
            f"{max(kids, default=0)}; syncs a call {_summary([{'x': n} for n in calls], 'x'):.1f} "
            f"(max {max(calls, default=0)}), new segments in {len(segs)} calls {sum(segs)}; "
            f"{len(blocks)} blocks: new segments {new}, late retaken {retaken} kept {kept}, "
            f"block medians {medians[0] * 1e6:.1f}-{medians[-1] * 1e6:.1f} us{tail}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="layers")
    p.add_argument("--size", default="quick")
    p.add_argument("--impl", default="kernelwatch.kernels.adapters.liger")
    p.add_argument("--backend", default="liger")
    p.add_argument("--path", default="", help="the library's folder, first on the sides' path")
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--cases", type=int, default=0, help="the first N selected cases (0: all)")
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--generations", type=int, default=2)
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument(
        "--blocks",
        type=int,
        default=0,
        help="then time N blocks and count what puts host time in them (0: off)",
    )
    p.add_argument("--samples", type=int, default=50, help="samples a block")
    p.add_argument(
        "--gc-ab",
        action="store_true",
        help="every second block with Python's garbage collector off",
    )
    p.add_argument("--lock", default="", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--proc", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    rows: list[dict[str, Any]] = []
    for gen in range(1, args.generations + 1):
        rows += _generation(args, gen)
    for r in rows:
        print(json.dumps(r))
    print("\n".join(table(rows)))
    for r in rows:
        if r.get("profile") and r.get("gen") == args.generations:
            print(f"profile, generation {r['gen']}, {r['kernel']} {r['case']}:")
            print("\n".join(f"  {x[:150]}" for x in r["profile"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
