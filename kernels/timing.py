"""The timer: how long one call of a kernel takes, with every raw sample kept.

On a GPU it works like NVIDIA nvbench, tuned for comparing versions:

- **Warm-up until the SM clock is steady.** An H200 idles at 345 MHz and needs
  tens of milliseconds of load to reach ~1980 MHz; until then we measure the
  clock governor, not the kernel. We run the kernel until NVML's SM clock has
  stopped rising (or ``max_warmup_s``), and remember that level.
- **Cold L2 by default.** Before each sample a buffer of 2× the L2 size is
  written, evicting the inputs. With CUDA graphs, flushing between calls is not
  possible, so the graph rotates over enough input copies to exceed 2× L2.
- **CUDA events around each sample**; a sample may be one launch or a CUDA graph
  of N calls (launch-bound kernels, where launch jitter would dominate).
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

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelwatch.kernels import stats
from kernelwatch.kernels.record import Timing
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
    target_rel_ci: float = 0.005
    ci_level: float = 0.95
    budget_s: float = 2.0
    min_samples: int = 20
    max_samples: int = 20000
    min_time_s: float = 0.05
    min_warmup_s: float = 0.05
    max_warmup_s: float = 1.0
    clock_floor: float = 0.75
    batch_s: float = 0.02  # sampling time between telemetry reads


@dataclass
class Measurement:
    """A timing plus the telemetry that says whether to trust it."""

    timing: Timing
    telemetry: dict[str, Any] = field(default_factory=dict)
    reliable: bool = True


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
        return _CudaTimer(call, inputs, config, device).run()
    return _host_measure(call, inputs, config)


# --------------------------------------------------------------------------- host path


def _host_measure(call: Call, inputs: Inputs, config: TimerConfig) -> Measurement:
    clock = time.process_time
    start = time.perf_counter()
    call(inputs)  # first call: compilation, caches
    warm_end = time.perf_counter() + config.min_warmup_s
    while time.perf_counter() < warm_end:
        call(inputs)
    warmup_s = time.perf_counter() - start
    samples: list[float] = []
    t0 = time.perf_counter()
    stop = "max_samples"
    while len(samples) < config.max_samples:
        s = clock()
        call(inputs)
        samples.append(clock() - s)
        spent = time.perf_counter() - t0
        if _converged(samples, spent, config):
            stop = "converged"
            break
        if len(samples) >= config.min_samples and spent >= config.budget_s:
            stop = "budget"
            break
    return Measurement(
        timing=_timing(samples, config, "host_cpu", False, False, 1, stop, 0, warmup_s, start)
    )


# --------------------------------------------------------------------------- CUDA path


class _CudaTimer:
    def __init__(self, call: Call, inputs: Inputs, config: TimerConfig, device: torch.device):
        self.call, self.inputs, self.config, self.device = call, inputs, config, device
        self.telemetry = Telemetry(device.index or 0)
        self.readings: list[Reading] = []
        props = torch.cuda.get_device_properties(device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20)) or 50 * 2**20
        self.flush_buf: torch.Tensor | None = None

    def run(self) -> Measurement:
        cfg = self.config
        start = time.perf_counter()
        per_call, steady_mhz = self._warmup()
        warmup_s = time.perf_counter() - start
        use_graph = cfg.cuda_graph if cfg.cuda_graph is not None else per_call < cfg.graph_below_s
        if use_graph:
            sample_fn, calls = self._graph_sampler(per_call)
        else:
            sample_fn, calls = self._launch_sampler(), 1
        samples, discarded, stop = self._sample(sample_fn, calls, steady_mhz)
        timing = _timing(
            samples,
            cfg,
            "cuda_event",
            cfg.cold_l2,
            use_graph,
            calls,
            stop,
            discarded,
            warmup_s,
            start,
        )
        tele = self._summary(steady_mhz)
        reliable = not (set(tele.get("throttle_reasons", [])) & UNRELIABLE_REASONS)
        if samples and discarded > 0.2 * (len(samples) + discarded):
            reliable = False
        tele["reliable"] = reliable
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
        if self.flush_buf is None:
            n = 2 * self.l2_bytes // 4
            self.flush_buf = torch.empty(n, dtype=torch.int32, device=self.device)
        self.flush_buf.zero_()

    def _launch_sampler(self) -> Callable[[torch.cuda.Event, torch.cuda.Event], None]:
        cold = self.config.cold_l2

        def sample(begin: torch.cuda.Event, end: torch.cuda.Event) -> None:
            if cold:
                self._flush()
            begin.record()
            self.call(self.inputs)
            end.record()

        return sample

    def _graph_sampler(
        self, per_call: float
    ) -> tuple[Callable[[torch.cuda.Event, torch.cuda.Event], None], int]:
        cfg = self.config
        copies = [self.inputs]
        if cfg.cold_l2:
            nbytes = max(1, input_bytes(self.inputs))
            want = min(256, math.ceil(2 * self.l2_bytes / nbytes))
            copies += [clone_inputs(self.inputs) for _ in range(want - 1)]
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

        def sample(begin: torch.cuda.Event, end: torch.cuda.Event) -> None:
            begin.record()
            graph.replay()
            end.record()

        return sample, calls

    # -- sampling loop -----------------------------------------------------------------

    def _sample(
        self,
        sample: Callable[[torch.cuda.Event, torch.cuda.Event], None],
        calls: int,
        steady_mhz: int | None,
    ) -> tuple[list[float], int, str]:
        cfg = self.config
        kept: list[float] = []
        discarded = 0
        t0 = time.perf_counter()
        batch = 4
        stop = "max_samples"
        while len(kept) + discarded < cfg.max_samples:
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(batch)
            ]
            bs = time.perf_counter()
            for begin, end in events:
                sample(begin, end)
            events[-1][1].synchronize()
            took = time.perf_counter() - bs
            values = [b.elapsed_time(e) / 1e3 / calls for b, e in events]
            reading = self.telemetry.read()
            if reading is not None:
                self.readings.append(reading)
            if reading is not None and steady_mhz and reading.sm_mhz < cfg.clock_floor * steady_mhz:
                discarded += len(values)
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
        return kept, discarded, stop

    def _summary(self, steady_mhz: int | None) -> dict[str, Any]:
        if not self.readings:
            return {"nvml": False}
        sm = [r.sm_mhz for r in self.readings]
        reasons = sorted({x for r in self.readings for x in r.reasons} - {"gpu_idle"})
        return {
            "nvml": True,
            "steady_sm_mhz": steady_mhz,
            "sm_mhz_min": min(sm),
            "sm_mhz_median": int(stats.median(sm)),
            "mem_mhz": int(stats.median([r.mem_mhz for r in self.readings])),
            "temp_c_max": max(r.temp_c for r in self.readings),
            "power_w_max": max(r.power_w for r in self.readings),
            "throttle_reasons": reasons,
            **self.telemetry.static_info(),
        }


def _converged(samples: list[float], spent: float, cfg: TimerConfig) -> bool:
    """The stopping rule: enough samples and time, and the median's interval is tight."""
    return (
        len(samples) >= cfg.min_samples
        and spent >= cfg.min_time_s
        and stats.rel_half_width(samples, cfg.ci_level) <= cfg.target_rel_ci
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
    )
