"""The timer: how long one call of a kernel takes, with every raw sample kept.

On a GPU it works like NVIDIA nvbench, tuned for comparing versions:

- **Warm-up until the SM clock is steady.** An H200 idles at 345 MHz and needs
  tens of milliseconds of load to reach ~1980 MHz; until then we measure the
  clock governor, not the kernel. We run the kernel until NVML's SM clock has
  stopped rising (or ``max_warmup_s``), and remember that level.
- **Cold L2 by default.** Before each sample a buffer of 2× the L2 size is
  written, evicting the inputs. With CUDA graphs, flushing between calls is not
  possible, so the graph rotates over enough input copies to exceed 2× L2 and
  ``graph_footprint_bytes`` (1 GiB: many placements averaged in every sample).
- **CUDA events around each sample**; a sample may be one launch or a CUDA graph
  of N calls (launch-bound kernels, where launch jitter would dominate).
- **The host's launch is never timed** (``host_guard``): a compute-only spin longer
  than the host's launch of the call is queued before the start event, and every
  sample whose start event had already fired when the host finished queueing the
  call is taken again (the spin doubles when such samples are more than a lone
  hiccup; ``HostGuard``). Without it the cold path timed the
  flush's end to the kernel's end, and a Python-wrapped kernel whose launch outlasts
  the flush (Liger's LayerNorm, SDPA's varlen loop) read the host: slower in a busy
  process, in bursts when the sides set up at once.
- **Stopping rule**: sample until the 95 % interval of the median is within
  ±``target_rel_ci`` (0.5 %), or the time ``budget_s`` is spent, or
  ``max_samples``; the reason is recorded.
- **Telemetry**: the SM clock is read after each batch of samples; samples of a
  batch whose clock was below 75 % of the steady level are discarded and
  counted; hardware slowdown and thermal throttle reasons mark the measurement
  unreliable (it can never become a regression).

Without a GPU the same API times with the process's CPU clock
(``timer="host_cpu"``, ``time.process_time``): it counts the CPU time of every
thread of this process and none of other processes, so a busy shared machine
does not turn into false regressions. Such numbers only prove the plumbing.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelwatch.kernels import stats
from kernelwatch.kernels.record import TelemetryState, Timing
from kernelwatch.kernels.spin import iters_for, seconds_per_iter, spin
from kernelwatch.kernels.telemetry import UNRELIABLE_REASONS, Reading, Telemetry

Inputs = Any
Call = Callable[[Inputs], Any]


@dataclass
class TimerConfig:
    """How to time one case. Budgets are seconds of wall time spent sampling."""

    cold_l2: bool = True
    cuda_graph: bool | None = None  # None: graphs when one call takes < graph_below_s
    graph_below_s: float = 50e-6
    graph_sample_s: float = 0.5e-3  # target length of one graph replay
    # A graph rotates over input copies that fill at least this much memory (and 2x
    # the L2). On the H200 a 12 us GEMM rotating over 4 copies (2x L2) sat 2-3 % off
    # in one set-up and elsewhere in the next, for the set-up's whole life
    # (2026-12-02, docs/measurement.md §6): each copy's placement is a draw, and a few
    # copies average few draws. Capped at 256 copies.
    graph_footprint_bytes: int = 2**30
    target_rel_ci: float = 0.005
    ci_level: float = 0.95
    budget_s: float = 2.0
    min_samples: int = 20
    max_samples: int = 20000
    # Long enough to span several power/clock oscillations of a power-capped GPU.
    min_time_s: float = 0.25
    min_warmup_s: float = 0.05
    max_warmup_s: float = 1.0
    clock_floor: float = 0.75
    batch_s: float = 0.02  # sampling time between telemetry reads
    # Spin before every start event and take a sample again when the host queued its
    # call after the start event fired (``HostGuard``). Off reproduces the timer of
    # 2026-12-04 and before, for the A/B of ``benchmarks/gpu/host_gap.py``.
    host_guard: bool = True
    # the spin's cap; past it late samples are kept. SDPA's varlen prefill loops over 16
    # sequences in Python: 3.8 ms of host time idle, 4.4 ms beside 16 busy CPUs (H200,
    # 2026-12-04), and at a 5 ms cap 5 of its samples still came late
    keep_busy_max_s: float = 20e-3
    # Python's garbage collector runs during a block (True, as before) or is paused for
    # it and runs between blocks. An experiment until measured on a GPU: SDPA's varlen
    # prefill had blocks whose every sample the host queued 20 ms or more late, with no
    # synchronising call, allocation or compile worker behind it (H100, 2026-12-07,
    # docs/measurement.md §34d); a generation-2 pass over torch's heap is the next
    # candidate. ``timeit`` times with the collector off.
    collect_garbage_in_blocks: bool = True


@dataclass
class HostGuard:
    """Keeps the host's launch time out of the samples, or says it could not.

    Each sample reports whether its start event had fired before the host had queued
    the whole call (``torch.cuda.Event.query`` after the call returns). Such a sample
    may hold the GPU's wait for the host, so it is dropped and taken again. When more
    than one sample in ``SYSTEMATIC`` of a batch came late, the spin queued before every
    start event doubles; a lone late sample (a host hiccup) is only taken again, since
    every later sample would pay a longer spin (on the H200, 2026-12-04, 2-5 late samples
    grew a 4096^3 GEMM's spin from 83 to 500-760 us in one process; the gemm suite's
    blocks took 47 % more GPU time than before the guard, by how much from such growth is
    not measured). At the cap (a call that synchronises, or a host slower than
    ``keep_busy_max_s``) systematically late samples are kept and counted: the timing
    then includes host time, and ``late_kept`` says so.
    """

    SYSTEMATIC = 8

    iters: int
    max_iters: int
    retaken: int = 0
    late_kept: int = 0

    def on_time(self, values: list[float], late: list[bool]) -> list[float]:
        """The samples to keep; grows the spin when samples came late systematically."""
        n_late = sum(late)
        if not n_late:
            return values
        systematic = n_late * self.SYSTEMATIC > len(values)
        if systematic and self.iters >= self.max_iters:
            self.late_kept += n_late
            return values
        self.retaken += n_late
        if systematic:
            self.iters = min(self.max_iters, 2 * self.iters)
        return [v for v, was_late in zip(values, late, strict=True) if not was_late]


@dataclass
class Measurement:
    """A timing plus the telemetry that says whether to trust it."""

    timing: Timing
    telemetry: dict[str, Any] = field(default_factory=dict)
    reliable: bool = True

    @property
    def telemetry_state(self) -> TelemetryState | None:
        """The record's ``telemetry``: live or off on a GPU, None for a CPU timing."""
        if self.timing.timer != "cuda_event":
            return None
        return "live" if self.telemetry.get("nvml") else "off"


def clone_inputs(inputs: Inputs) -> Inputs:
    """Deep copy of the tensors in a tuple/list/dict of inputs (other values shared)."""
    if isinstance(inputs, torch.Tensor):
        return inputs.clone()
    if isinstance(inputs, tuple):
        return tuple(clone_inputs(x) for x in inputs)
    if isinstance(inputs, list):
        return [clone_inputs(x) for x in inputs]
    if isinstance(inputs, dict):
        return {k: clone_inputs(v) for k, v in inputs.items()}
    return inputs


def input_bytes(inputs: Inputs) -> int:
    if isinstance(inputs, torch.Tensor):
        return inputs.numel() * inputs.element_size()
    if isinstance(inputs, (tuple, list)):
        return sum(input_bytes(x) for x in inputs)
    if isinstance(inputs, dict):
        return sum(input_bytes(v) for v in inputs.values())
    return 0


def measure(call: Call, inputs: Inputs, config: TimerConfig | None = None) -> Measurement:
    """Time ``call(inputs)`` on the inputs' device under ``config``."""
    config = config or TimerConfig()
    device = _device_of(inputs)
    if device.type == "cuda":
        start = time.perf_counter()
        return _CudaSampler(call, inputs, config, device).measure(start)
    return _host_measure(call, inputs, config)


class Sampler:
    """Takes samples of one prepared case; ``measure`` and the paired mode both use it."""

    calls_per_sample: int = 1
    sample_s: float = 0.0

    def block(self, n: int) -> list[float]:
        """``n`` samples, each in seconds per call."""
        raise NotImplementedError

    def last_clock(self) -> int | None:
        return None

    def last_reasons(self) -> list[str]:
        """Throttle reasons read after the last block (paired mode's guard); none off-GPU."""
        return []

    def describe(self) -> dict[str, Any]:
        return {"sample_s": self.sample_s, "calls_per_sample": self.calls_per_sample}

    def host_guard_state(self) -> dict[str, Any]:
        """The host guard's spin and counts so far (``HostGuard``); none off-GPU."""
        return {}

    def host_launch_s(self) -> float | None:
        """The host's median time to queue one call (``Timing.host_launch_s``); None
        where the timer is the host's own clock (the CPU path times the host already)."""
        return None

    def launches_since(self, mark: int) -> list[float]:
        """The host launch times measured since ``mark`` (``launch_mark``): a paired
        block's own, taken while only its side ran. Set-up's are taken beside every
        other side setting up: from them an A/A pair read 28.4 against 50.3 µs (H100)."""
        return []

    def launch_mark(self) -> int:
        return 0

    def probe_launch(self) -> None:
        """Time the host's launch of one call where the samples cannot (a paired block
        on the graph path); nothing where they already do or there is no GPU."""

    def late_samples(self) -> tuple[int, int]:
        """Samples so far whose host queued the call late: (taken again, kept at the cap)."""
        return 0, 0


@contextlib.contextmanager
def _collector(running: bool) -> Iterator[None]:
    """Python's garbage collector as ``running`` says while a block is timed, then as it
    was (``TimerConfig.collect_garbage_in_blocks``)."""
    was = gc.isenabled()
    if not running:
        gc.disable()
    try:
        yield
    finally:
        if was and not running:
            gc.enable()


def make_sampler(call: Call, inputs: Inputs, config: TimerConfig | None = None) -> Sampler:
    """Warm up and prepare sampling of ``call(inputs)`` on the inputs' device."""
    config = config or TimerConfig()
    device = _device_of(inputs)
    if device.type == "cuda":
        return _CudaSampler(call, inputs, config, device)
    return _HostSampler(call, inputs, config)


# --------------------------------------------------------------------------- host path


class _HostSampler(Sampler):
    def __init__(self, call: Call, inputs: Inputs, config: TimerConfig) -> None:
        self.call, self.inputs, self.config = call, inputs, config
        start = time.perf_counter()
        call(inputs)  # first call: compilation, caches
        n = 1
        warm_end = start + config.min_warmup_s
        while time.perf_counter() < warm_end:
            call(inputs)
            n += 1
        self.warmup_s = time.perf_counter() - start
        self.sample_s = self.warmup_s / n

    def block(self, n: int) -> list[float]:
        clock = time.process_time
        out = []
        with _collector(self.config.collect_garbage_in_blocks):
            for _ in range(n):
                s = clock()
                self.call(self.inputs)
                out.append(clock() - s)
        return out


def _host_measure(call: Call, inputs: Inputs, config: TimerConfig) -> Measurement:
    start = time.perf_counter()
    sampler = _HostSampler(call, inputs, config)
    samples: list[float] = []
    t0 = time.perf_counter()
    stop = "max_samples"
    while len(samples) < config.max_samples:
        samples.extend(sampler.block(1))
        spent = time.perf_counter() - t0
        if _converged(samples, spent, config):
            stop = "converged"
            break
        if len(samples) >= config.min_samples and spent >= config.budget_s:
            stop = "budget"
            break
    return Measurement(
        timing=_timing(
            samples, config, "host_cpu", False, False, 1, stop, 0, sampler.warmup_s, start
        )
    )


# --------------------------------------------------------------------------- CUDA path


class _CudaSampler(Sampler):
    def __init__(self, call: Call, inputs: Inputs, config: TimerConfig, device: torch.device):
        self.call, self.inputs, self.config, self.device = call, inputs, config, device
        self.telemetry = Telemetry(device.index or 0)
        self.readings: list[Reading] = []
        props = torch.cuda.get_device_properties(device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20)) or 50 * 2**20
        self.flush_buf: torch.Tensor | None = None
        self.flush_sink: torch.Tensor | None = None
        self.busy_s, self.busy_iters = 0.0, 0  # sized after warm-up (_size_keep_busy)
        self.copies = 1  # input copies a graph rotates over (_graph_sampler)
        self.guard = HostGuard(iters=0, max_iters=0)  # sized after warm-up
        # the host's seconds to queue one call: set-up's calls, then every launched sample
        self.host_launch: list[float] = []
        start = time.perf_counter()
        per_call, self.steady_mhz = self._warmup()
        self._size_keep_busy()
        self.warmup_s = time.perf_counter() - start
        cfg = config
        self.use_graph = (
            cfg.cuda_graph if cfg.cuda_graph is not None else (per_call < cfg.graph_below_s)
        )
        if self.use_graph:
            # a replay's host side launches the whole graph: give it a longer spin
            self.busy_iters = max(self.busy_iters, iters_for(50e-6, device.index or 0))
            self._sample, self.calls_per_sample = self._graph_sampler(per_call)
        else:
            self._sample, self.calls_per_sample = self._launch_sampler(), 1
        cap = iters_for(cfg.keep_busy_max_s, device.index or 0)
        self.guard = HostGuard(iters=min(self.busy_iters, cap), max_iters=cap)
        self.sample_s = per_call * self.calls_per_sample
        self._last: Reading | None = None

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            # NVML on this side (the paired record's ``telemetry``)
            "telemetry": "live" if self.telemetry.available else "off",
            "cuda_graph": self.use_graph,
            "copies": self.copies,
            "steady_sm_mhz": self.steady_mhz,
            "warmup_s": self.warmup_s,
            **self.host_guard_state(),
        }

    def host_launch_s(self) -> float | None:
        return stats.median(self.host_launch) if self.host_launch else None

    def launches_since(self, mark: int) -> list[float]:
        return self.host_launch[mark:]

    def launch_mark(self) -> int:
        return len(self.host_launch)

    def host_guard_state(self) -> dict[str, Any]:
        """The spin before each start event now, and the samples the host queued late."""
        retaken, kept = self.late_samples()
        return {
            "host_guard": self.config.host_guard,
            "keep_busy_s": self.guard.iters * seconds_per_iter(self.device.index or 0),
            "host_late_retaken": retaken,
            "host_late_kept": kept,
        }

    def late_samples(self) -> tuple[int, int]:
        return self.guard.retaken, self.guard.late_kept

    def block(self, n: int) -> list[float]:
        with _collector(self.config.collect_garbage_in_blocks):
            return self._block(n)

    def _block(self, n: int) -> list[float]:
        out: list[float] = []
        while len(out) < n:
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(n - len(out))
            ]
            late = [self._sample(begin, end) for begin, end in events]
            events[-1][1].synchronize()
            self._last = self.telemetry.read()
            if self._last is not None:
                self.readings.append(self._last)
            values = [float(b.elapsed_time(e)) / 1e3 / self.calls_per_sample for b, e in events]
            out.extend(self.guard.on_time(values, late))  # none late with the guard off
        return out

    def probe_launch(self) -> None:
        """One eager call after a graph block, its host time kept (``host_launch``): the
        graph path's samples replay a graph and never show the host's launch. Called by a
        paired side after each block (an unpaired measurement has set-up's calls, made
        alone); a launched sample already timed its host (``_launch_sampler``). Outside
        the events, so no sample holds it; waited for, so a block still ends with the GPU
        idle (the other side of a pair times next, and its first sample must not share
        the GPU with this call)."""
        if not self.use_graph:
            return
        queued = time.perf_counter()
        self.call(self.inputs)
        self.host_launch.append(time.perf_counter() - queued)
        torch.cuda.synchronize(self.device)

    def last_clock(self) -> int | None:
        return self._last.sm_mhz if self._last is not None else None

    def last_reasons(self) -> list[str]:
        return [x for x in self._last.reasons if x != "gpu_idle"] if self._last else []

    def below_floor(self, reference_mhz: float | None) -> bool:
        """The last block ran under the clock floor (nvbench: 75 % of the reference)."""
        r = self._last
        return bool(
            r is not None and reference_mhz and r.sm_mhz < self.config.clock_floor * reference_mhz
        )

    def measure(self, start: float) -> Measurement:
        cfg = self.config
        kept: list[float] = []
        discarded = 0
        t0 = time.perf_counter()
        batch = 4
        stop = "max_samples"
        block_clocks: list[int] = []
        held: list[float] = []  # discarded samples, kept aside in case all are "low"
        while len(kept) + discarded < cfg.max_samples:
            bs = time.perf_counter()
            values = self.block(batch)
            took = time.perf_counter() - bs
            clock = self.last_clock()
            if clock is not None:
                block_clocks.append(clock)
            # The reference is the sustained clock of *this* measurement, not the
            # warm-up's: a power-capped GEMM runs well below its warm-up clock for
            # its whole life (seen on the H200: every batch of an 8192^3 fp16 GEMM
            # fell under 75 % of the warm-up level after a long benchmark).
            reference = stats.median(block_clocks) if block_clocks else None
            if self.below_floor(reference):
                discarded += len(values)
                held.extend(values)
            else:
                kept.extend(values)
            if took < cfg.batch_s:
                batch = min(batch * 2, 1024)
            spent = time.perf_counter() - t0
            if _converged(kept, spent, cfg):
                stop = "converged"
                break
            if spent >= cfg.budget_s:
                stop = "budget"
                break
        low_clock_only = not kept
        if low_clock_only:  # never drop a whole measurement: keep it, mark it unreliable
            kept, discarded = held, 0
        timing = _timing(
            kept,
            cfg,
            "cuda_event",
            cfg.cold_l2,
            self.use_graph,
            self.calls_per_sample,
            stop,
            discarded,
            self.warmup_s,
            start,
            self.host_launch_s(),
        )
        tele = self._summary()
        if block_clocks:
            tele["sustained_sm_mhz"] = int(stats.median(block_clocks))
        reliable = not (set(tele.get("throttle_reasons", [])) & UNRELIABLE_REASONS)
        if low_clock_only or discarded > 0.2 * (len(kept) + discarded):
            reliable = False
        tele["reliable"] = reliable
        tele.update(self.host_guard_state())
        return Measurement(timing=timing, telemetry=tele, reliable=reliable)

    # -- warm-up ---------------------------------------------------------------------

    def _warmup(self) -> tuple[float, int | None]:
        """Run until the SM clock stops rising; return (seconds per call, steady MHz)."""
        cfg = self.config
        torch.cuda.synchronize(self.device)
        self.call(self.inputs)  # compile / autotune / allocate outside the clock
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        calls = 0
        chunk = 1
        clocks: list[int] = []
        while True:
            s = time.perf_counter()
            for _ in range(chunk):
                self.call(self.inputs)
            torch.cuda.synchronize(self.device)
            dt = time.perf_counter() - s
            calls += chunk
            # grow the chunk until it lasts ~10 ms, so clocks are read under load
            if dt < 0.01:
                chunk = min(chunk * 2, 1 << 16)
            reading = self.telemetry.read()
            if reading is not None:
                clocks.append(reading.sm_mhz)
                self.readings.append(reading)
            elapsed = time.perf_counter() - t0
            if elapsed < cfg.min_warmup_s:
                continue
            if elapsed >= cfg.max_warmup_s or not clocks or _clock_steady(clocks):
                break
        per_call = self._time_calls(max(1, min(calls, 50)))
        steady = int(stats.median(clocks[-3:])) if clocks else None
        return per_call, steady

    def _time_calls(self, n: int) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            self.call(self.inputs)
        b.record()
        b.synchronize()
        return float(a.elapsed_time(b)) / 1e3 / n

    # -- samplers ----------------------------------------------------------------------

    def _flush(self) -> None:
        """Evict the L2 by *reading* 2x its size.

        A write flush (``zero_()``, as triton's do_bench does) leaves the L2 full of
        dirty lines that the timed kernel then pays to write back: on the H200 an
        8 MB streaming op took 22 us after a write flush and 7.1 us after a read
        flush (benchmarks/l2_probe.py, 2026-11-29).
        """
        if self.flush_buf is None:
            n = 2 * self.l2_bytes // 4
            self.flush_buf = torch.ones(n, dtype=torch.int32, device=self.device)
            self.flush_sink = torch.empty((), dtype=torch.int64, device=self.device)
        torch.sum(self.flush_buf, dim=0, dtype=torch.int64, out=self.flush_sink)

    def _keep_busy(self) -> None:
        """Queue GPU work that outlasts the host's launch of the timed call.

        Without it, on an idle GPU the start event fires at once and the kernel
        arrives later: the sample times the launch latency (seen on the H200: an
        8 MB op read 23 us "warm" and 7 us after a flush kernel). The work is a
        compute-only spin (``kernels/spin.py``), so a warm L2 stays warm and a
        flushed one stays cold. Its length is the guard's (``HostGuard``).
        """
        spin(self.guard.iters, self.device)

    def _late(self, begin: torch.cuda.Event) -> bool:
        """The start event had fired before the host finished queueing the call."""
        return self.config.host_guard and bool(begin.query())

    def _size_keep_busy(self) -> None:
        """Spin for 3x the host's launch time of one call (+20 us), 30 us to 2 ms."""
        host = []
        for _ in range(5):
            s = time.perf_counter()
            self.call(self.inputs)
            host.append(time.perf_counter() - s)
            torch.cuda.synchronize(self.device)
        self.host_launch.extend(host)
        self.busy_s = min(2e-3, max(30e-6, 3 * stats.median(host) + 20e-6))
        self.busy_iters = iters_for(self.busy_s, self.device.index or 0)

    def _launch_sampler(self) -> Callable[[torch.cuda.Event, torch.cuda.Event], bool]:
        cold, guard = self.config.cold_l2, self.config.host_guard

        def sample(begin: torch.cuda.Event, end: torch.cuda.Event) -> bool:
            if cold:
                self._flush()
            if guard or not cold:  # before the guard, the cold path trusted the flush
                self._keep_busy()
            begin.record()
            queued = time.perf_counter()
            self.call(self.inputs)
            self.host_launch.append(time.perf_counter() - queued)
            late = self._late(begin)
            end.record()
            return late

        return sample

    def _graph_sampler(
        self, per_call: float
    ) -> tuple[Callable[[torch.cuda.Event, torch.cuda.Event], bool], int]:
        cfg = self.config
        copies = [self.inputs]
        if cfg.cold_l2:
            nbytes = max(1, input_bytes(self.inputs))
            footprint = max(2 * self.l2_bytes, cfg.graph_footprint_bytes)
            want = min(256, math.ceil(footprint / nbytes))
            copies += [clone_inputs(self.inputs) for _ in range(want - 1)]
        self.copies = len(copies)
        calls = max(len(copies), math.ceil(cfg.graph_sample_s / max(per_call, 1e-7)))
        calls = min(calls, 4096)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for c in copies[:3]:
                self.call(c)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                self.call(copies[i % len(copies)])
        torch.cuda.synchronize(self.device)

        def sample(begin: torch.cuda.Event, end: torch.cuda.Event) -> bool:
            self._keep_busy()
            begin.record()
            graph.replay()
            late = self._late(begin)
            end.record()
            return late

        return sample, calls

    def _summary(self) -> dict[str, Any]:
        if not self.readings:
            return {"nvml": False}
        sm = [r.sm_mhz for r in self.readings]
        reasons = sorted({x for r in self.readings for x in r.reasons} - {"gpu_idle"})
        return {
            "nvml": True,
            "steady_sm_mhz": self.steady_mhz,
            "sm_mhz_min": min(sm),
            "sm_mhz_median": int(stats.median(sm)),
            "mem_mhz": int(stats.median([r.mem_mhz for r in self.readings])),
            "temp_c_max": max(r.temp_c for r in self.readings),
            "power_w_max": max(r.power_w for r in self.readings),
            "throttle_reasons": reasons,
            **self.telemetry.static_info(),
        }


def _converged(samples: list[float], spent: float, cfg: TimerConfig) -> bool:
    """The stopping rule: enough samples and time, and the median's interval is tight.

    Two intervals must both be within the target: the order-statistic interval of
    the median (assumes independent samples) and a batch-medians interval (time-
    ordered batches, Student t), which widens when samples drift together with
    the clock, as they do on a power-capped GPU.
    """
    return (
        len(samples) >= cfg.min_samples
        and spent >= cfg.min_time_s
        and stats.rel_half_width(samples, cfg.ci_level) <= cfg.target_rel_ci
        and stats.batch_rel_half_width(samples, cfg.ci_level) <= cfg.target_rel_ci
    )


def _clock_steady(clocks: list[int]) -> bool:
    """Steady: the last three readings lie within 2 % of each other."""
    if len(clocks) < 3:
        return False
    last = clocks[-3:]
    return max(last) - min(last) <= 0.02 * max(last)


def _device_of(inputs: Inputs) -> torch.device:
    if isinstance(inputs, torch.Tensor):
        return inputs.device
    values: list[Any] = []
    if isinstance(inputs, (tuple, list)):
        values = list(inputs)
    elif isinstance(inputs, dict):
        values = list(inputs.values())
    for v in values:
        d = _device_of(v)
        if d.type != "cpu":
            return d
    return torch.device("cpu")


def _timing(
    samples: list[float],
    cfg: TimerConfig,
    timer: str,
    cold_l2: bool,
    graph: bool,
    calls: int,
    stop: str,
    discarded: int,
    warmup_s: float,
    start: float,
    host_launch_s: float | None = None,
) -> Timing:
    if not samples:
        raise RuntimeError("no samples kept: every batch was taken below the clock floor")
    lo, hi = stats.median_ci(samples, cfg.ci_level)
    return Timing(
        unit="s",
        samples=samples,
        median=stats.median(samples),
        ci_low=lo,
        ci_high=hi,
        n=len(samples),
        cold_l2=cold_l2,
        cuda_graph=graph,
        stop_reason=stop,
        timer=timer,
        calls_per_sample=calls,
        ci_level=cfg.ci_level,
        discarded=discarded,
        warmup_s=warmup_s,
        total_s=time.perf_counter() - start,
        host_launch_s=host_launch_s,
    )
