"""Paired A/B measurement: baseline and candidate interleaved on the same GPU.

This is what the merge gate uses. Each side runs in its own long-lived
subprocess (its own environment: two library versions cannot share one
interpreter), holding its inputs, warm caches and, for launch-bound kernels,
its CUDA graph. A coordinator asks them in turn for *blocks* of samples in ABBA
order, so slow drifts of clocks and temperature hit both sides alike, and
judges the ratio B/A from paired groups of blocks:

    group g:  A B B A (even g) or B A A B (odd g)  ->  r_g = (b1 + b2) / (a1 + a2)

The log-ratios of the groups give a mean and a Student-t interval. Sampling is
adaptive: more groups while the interval still straddles the decision, within a
time budget. The protocol between coordinator and sides is JSON lines on
stdin/stdout, so a side is any Python that can import this module.

A fixed offset belongs to each side process: on the H200 the same bf16 GEMM
measured 0.6 % slower in one process than in another for 20 trials in a row, and
swapping the two processes' roles flipped its sign (docs/measurement.md, runs 5
and 8); on an fp32 add each process sat in one of two states ~0.6 % apart (run
11). So ``compare`` takes m process pairs per side, spreads the groups over them
and computes the interval over the pairs: process offsets widen the interval
instead of biasing the ratio. Within a process each side may also build its case
``placements`` times behind padding allocations of random size (group g measures
placement g mod K); with one pair the interval is then taken over placements.

A *case factory* (``module:function``) builds ``(call, inputs)`` from JSON
params inside each side; both sides get the same factory and params, and differ
only in what their environment imports (or, in benchmarks, in injected work).
A factory may add a third element, a JSON object that goes back with the set-up
reply (paired_suite: the side's correctness check), and an exception with a
``details`` object sends it with the error. Each block reply carries the SM clock
and throttle reasons read after it; one throttled block makes the comparison
unreliable, and an unreliable comparison is never a regression.

Short kernels (under ``TimerConfig.graph_below_s``, 50 us) are sampled as CUDA
graphs of many calls, and with a cold L2 the graph rotates over enough input
copies to exceed twice the L2 (``timing._CudaSampler``): the same sampler as
``kernelwatch bench``, so paired blocks of a 12 us GEMM are graph replays too.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import math
import os
import random
import select
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kernelwatch.kernels import stats
from kernelwatch.kernels.telemetry import blocks_reliable
from kernelwatch.kernels.timing import Sampler, TimerConfig, make_sampler
from kernelwatch.kernels.verdict import CONFIDENCE, MIN_EFFECT, CaseVerdict, decide

# --------------------------------------------------------------------------- side process

# A case factory: ``(call, inputs)``, or ``(call, inputs, info)`` with a JSON object
# for the coordinator (paired_suite: the case's correctness check).
Factory = Callable[..., tuple[Any, ...]]


def serve(stdin: Any = None, stdout: Any = None) -> None:
    """The side's loop: ``setup`` a case, then answer ``block`` requests until ``quit``."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    samplers: list[Sampler] = []
    pads: list[Any] = []
    for line in stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        try:
            if cmd == "setup":
                samplers, pads = [], []  # the previous case's memory is free for reuse
                samplers, pads, info = _setup(
                    _load(msg["factory"]),
                    msg.get("params", {}),
                    TimerConfig(**msg.get("timer", {})),
                    int(msg.get("placements", 1)),
                )
                reply: dict[str, Any] = {
                    "ok": True,
                    **samplers[0].describe(),
                    "placements": len(samplers),
                    "info": info,
                    "device": _side_device(),
                }
            elif cmd == "block":
                assert samplers, "block before setup"
                chosen = samplers[int(msg.get("placement", 0)) % len(samplers)]
                values = chosen.block(int(msg["samples"]))
                reply = {
                    "ok": True,
                    "values": values,
                    "clock": chosen.last_clock(),
                    "reasons": chosen.last_reasons(),
                }
            elif cmd == "quit":
                reply = {"ok": True}
                stdout.write(json.dumps(reply) + "\n")
                stdout.flush()
                return
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        except Exception as exc:  # reported to the coordinator, the side stays alive
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            details = getattr(exc, "details", None)  # e.g. a broken case's errors
            if isinstance(details, dict):
                reply["details"] = details
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


_DEVICE: dict[str, Any] = {}


def _side_device() -> dict[str, Any]:
    """The card this side measures on (name, class, UUID, ...), described once a process.

    The coordinator never opens a CUDA context of its own, so the paired record's card
    comes from a side: history tells cards of one class apart by it (per-card offsets).
    """
    if not _DEVICE:
        import torch

        from kernelwatch.kernels.device import describe_device

        dev = (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
        _DEVICE.update(describe_device(dev))
    return dict(_DEVICE)


def _setup(
    factory: Factory,
    params: dict[str, Any],
    timer: TimerConfig,
    placements: int,
) -> tuple[list[Sampler], list[Any], dict[str, Any]]:
    """Build the case ``placements`` times, each behind a padding allocation of random size.

    Only the first instance warms the clocks up; the others find them warm. A factory
    may return ``(call, inputs, info)``: the first instance's ``info`` (a JSON object,
    e.g. the correctness check) goes back to the coordinator with the set-up reply;
    ``"cuda_graph": false`` in it times that instance without CUDA graphs.
    """
    import torch

    # The previous case's samplers hold reference cycles (their sampling closures);
    # without a collection their GPU memory piles up setup after setup (an H200 ran
    # out of its 141 GB after ~50 setups of 8 placements).
    gc.collect()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.empty_cache()
    rng = random.Random()
    samplers: list[Sampler] = []
    pads: list[Any] = []
    info: dict[str, Any] = {}
    # placement is a GPU memory effect: on the CPU path one instance is the case
    for i in range(max(1, placements if cuda else 1)):
        if i and cuda:  # 2 MB granules: the allocator's and the GPU's large-page size
            pads.append(torch.empty(rng.randint(1, 256) * 2**21, dtype=torch.uint8, device="cuda"))
        cfg = timer if i == 0 else replace(timer, min_warmup_s=0.0, max_warmup_s=0.03)
        built = factory(**params)
        call, inputs = built[0], built[1]
        extra = dict(built[2]) if len(built) > 2 else {}
        if i == 0:
            info = extra
        if extra.get("cuda_graph") is False:  # e.g. NCCL across devices: never captured
            cfg = replace(cfg, cuda_graph=False)
        samplers.append(make_sampler(call, inputs, cfg))
    return samplers, pads, info


def _load(target: str) -> Factory:
    module, func = target.split(":")
    fn: Factory = getattr(importlib.import_module(module), func)
    return fn


# --------------------------------------------------------------------------- coordinator


class SideError(RuntimeError):
    """The side answered with an error (``remote``: its ``Type: message`` text).

    details: what the side's exception carried besides its message (its
    ``details`` attribute, e.g. the errors of a failed correctness check).
    """

    def __init__(
        self,
        message: str,
        remote: str = "",
        side: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.remote, self.side = remote, side
        self.details: dict[str, Any] = details or {}


class SideDied(RuntimeError):
    """The side process exited (a crash: segfault, abort, killed for memory)."""


class SideTimeout(RuntimeError):
    """The side did not answer in time and was killed (a hang)."""


class Side:
    """One side (A or B): a subprocess speaking the JSON-lines protocol."""

    def __init__(
        self, name: str, python: str = sys.executable, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [python, "-m", "kernelwatch.kernels.paired"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            bufsize=1,
        )

    def ask(self, msg: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply line.

        ``timeout_s``: a side that has not answered by then (a hung kernel) is
        killed and ``SideTimeout`` raised; a side that died raises ``SideDied``.
        """
        self.send(msg)
        return self.receive(str(msg.get("cmd")), timeout_s)

    def send(self, msg: dict[str, Any]) -> None:
        """Send without waiting, so several sides can set up at once (``receive`` after)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise SideDied(f"side {self.name} died (exit {self.proc.wait()})") from None

    def receive(self, cmd: str, timeout_s: float | None = None) -> dict[str, Any]:
        """The reply to the command sent last (see ``ask``)."""
        assert self.proc.stdout is not None
        if timeout_s is not None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            if not ready:
                self.proc.kill()
                self.proc.wait()
                raise SideTimeout(
                    f"side {self.name} did not answer {cmd!r} within {timeout_s:.0f} s; killed"
                )
        line = self.proc.stdout.readline()
        if not line:
            raise SideDied(f"side {self.name} died (exit {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            raise SideError(
                f"side {self.name}: {reply.get('error')}",
                str(reply.get("error")),
                self.name,
                reply.get("details") if isinstance(reply.get("details"), dict) else None,
            )
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, grace_s: float = 10.0) -> None:
        """Ask the side to quit and reap it; one still busy after ``grace_s`` is killed."""
        self.request_quit()
        self.reap(time.monotonic() + grace_s)

    def request_quit(self) -> None:
        """Send ``quit`` and close stdin without waiting for the reply: a side still
        importing torch (just restarted) or stuck in a kernel must not hold the caller."""
        with contextlib.suppress(Exception):
            self.send({"cmd": "quit"})
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # a dead side: its pipe is broken
                self.proc.stdin.close()

    def reap(self, deadline: float) -> None:
        """Wait for the exit until ``deadline`` (a monotonic time), then kill."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()


@dataclass
class PairedConfig:
    """How long to compare, and what counts.

    min_effect: smallest relative change worth a verdict. 1 %: on the H200 a +1 %
      GEMM slowdown was flagged 20/20 with 0/20 A/A alarms, while fixed offsets of
      up to 0.6 % between two processes masked +0.5 % (docs/measurement.md, runs 5-6).
    confidence: two-sided level of the ratio's interval.
    block_s: target length of one block; groups_min/groups_step: adaptivity.
    placements: instances of the case per side at different addresses (see above).
    ask_timeout_s: longest wait for one set-up or block; the side is then killed.
    budget_s: wall time for the whole comparison (blocks only, after setup).
    """

    min_effect: float = MIN_EFFECT
    confidence: float = CONFIDENCE  # one stage of two (kernels/verdict.py)
    block_s: float = 0.02
    groups_min: int = 8
    groups_step: int = 4
    groups_max: int = 200
    budget_s: float = 5.0
    placements: int = 8
    ask_timeout_s: float | None = None  # per set-up or block: a hung kernel is killed


@dataclass
class PairedResult:
    ratio: float  # B / A, > 1 means B is slower
    ci_low: float
    ci_high: float
    groups: int
    verdict: str  # a timing verdict of kernels/verdict.py (regression ... inconclusive)
    stop_reason: str
    seconds: float
    a_median: float
    b_median: float
    group_ratios: list[float] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)
    placements: list[int] = field(default_factory=list)  # the placement of each group
    pairs: list[int] = field(default_factory=list)  # the process pair of each group
    # the unit the interval was taken over, per group (None: groups are independent)
    clusters: list[int] | None = None
    a_blocks: list[float] = field(default_factory=list)  # block medians, seconds per call
    b_blocks: list[float] = field(default_factory=list)
    describe_b: dict[str, Any] = field(default_factory=dict)  # the candidate's sampler
    device_b: dict[str, Any] = field(default_factory=dict)  # the candidate side's card
    # the set-up ``info`` of the first pair's sides (paired_suite: their correctness)
    info_a: dict[str, Any] = field(default_factory=dict)
    info_b: dict[str, Any] = field(default_factory=dict)
    # every block's SM clock (None: not read) and unreliable throttle reasons, in order
    block_clocks: list[int | None] = field(default_factory=list)
    block_reasons: list[list[str]] = field(default_factory=list)
    # telemetry.blocks_reliable over the blocks: one throttled block, no regression
    reliable: bool = True
    throttled_blocks: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(
    log_ratios: Sequence[float], cfg: PairedConfig, clusters: Sequence[int] | None = None
) -> tuple[float, float, float, CaseVerdict]:
    """Ratio, interval and verdict from the groups' log-ratios (the rule: ``kernels/verdict.py``).

    ``clusters`` (the placement of each group): groups that share a placement are
    not independent, so they are averaged first and the interval is taken over
    the placements.
    """
    if clusters is not None and len(set(clusters)) < len(log_ratios):
        by: dict[int, list[float]] = {}
        for c, x in zip(clusters, log_ratios, strict=True):
            by.setdefault(c, []).append(x)
        log_ratios = [sum(v) / len(v) for v in by.values()]
    n = len(log_ratios)
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1)) if n > 1 else math.inf
    half = stats.t_quantile(cfg.confidence, n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    ratio, lo, hi = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    return ratio, lo, hi, decide(ratio, lo, hi, cfg.min_effect).verdict


def judge_reliable(
    log_ratios: Sequence[float],
    cfg: PairedConfig,
    clusters: Sequence[int] | None = None,
    reliable: bool = True,
) -> tuple[float, float, float, CaseVerdict]:
    """``judge``, with the throttle guard: an unreliable measurement decides no change.

    The verdict is ``verdict.decide``'s with ``reliable`` passed on, so a throttled
    comparison is at worst inconclusive (and measured again), never a regression.
    """
    ratio, lo, hi, verdict = judge(log_ratios, cfg, clusters)
    if not reliable:
        verdict = decide(ratio, lo, hi, cfg.min_effect, reliable=False).verdict
    return ratio, lo, hi, verdict


def compare(
    a: Side | Sequence[Side],
    b: Side | Sequence[Side],
    factory: str,
    params_a: dict[str, Any],
    params_b: dict[str, Any],
    cfg: PairedConfig | None = None,
    timer: dict[str, Any] | None = None,
    first_pair: dict[str, Any] | None = None,
) -> PairedResult:
    """Set both sides up with the case, then alternate blocks until a verdict or the budget.

    ``first_pair``: parameters merged into the first pair's set-up only (paired_suite:
    ``check=True``, so each role's result is checked once, not once per process).
    The first pair's set-up ``info`` comes back as ``info_a``/``info_b``.

    Every block's SM clock and throttle reasons are kept; one throttled block makes
    the comparison unreliable (``telemetry.blocks_reliable``), and an unreliable
    comparison is never a regression or an improvement (``verdict.decide``).

    ``a`` and ``b`` may be lists of equal length m: m independent process pairs.
    A process carries a fixed offset of its own (on the H200 up to 0.5 %, which
    flips sign when the two processes swap roles, docs/measurement.md run 8) that
    no number of groups inside one pair averages away. With m pairs, group g runs
    on pair g mod m and the interval is taken over the pairs, so process offsets
    widen the interval instead of biasing the ratio.
    """
    cfg = cfg or PairedConfig()
    timer = timer or {}
    sides_a = [a] if isinstance(a, Side) else list(a)
    sides_b = [b] if isinstance(b, Side) else list(b)
    if not sides_a:
        raise ValueError("compare needs at least one side per role")
    if len(sides_a) != len(sides_b):
        raise ValueError("compare needs as many baseline sides as candidate sides")
    m = len(sides_a)
    k = max(1, cfg.placements)
    setup = {"cmd": "setup", "factory": factory, "timer": timer, "placements": k}
    # All sides set up at once (an import of torch and a warm-up each); the candidates'
    # replies are read first: a broken candidate is the answer, whatever the baseline.
    extra = first_pair or {}
    for i, side in enumerate(sides_b):
        side.send({**setup, "params": {**params_b, **(extra if i == 0 else {})}})
    for i, side in enumerate(sides_a):
        side.send({**setup, "params": {**params_a, **(extra if i == 0 else {})}})
    db, da = _receive_all(sides_b, sides_a, "setup", cfg.ask_timeout_s)
    k = min(int(d.get("placements", k)) for d in da + db)
    per_sample = max(max(d["sample_s"] for d in da + db), 1e-7)
    samples = max(3, min(2000, int(cfg.block_s / per_sample)))
    t0 = time.perf_counter()
    logs: list[float] = []
    a_meds: list[float] = []
    b_meds: list[float] = []
    block_clocks: list[int | None] = []
    block_reasons: list[list[str]] = []
    reliability = blocks_reliable([])
    stop = "groups_max"
    verdict, ratio, lo, hi = CaseVerdict.INCONCLUSIVE, math.nan, math.nan, math.nan
    # every pair gets the same number of groups before each judgement
    target = _round_up(max(cfg.groups_min, 2 * m), m)
    step = _round_up(cfg.groups_step, m)
    placement: list[int] = []
    pair_of: list[int] = []
    # One unrecorded group per pair first: the side set up last has just warmed up.
    for pa, pb in zip(sides_a, sides_b, strict=True):
        for side in (pa, pb, pb, pa):
            side.ask({"cmd": "block", "samples": samples}, cfg.ask_timeout_s)
    while len(logs) < cfg.groups_max:
        g = len(logs)
        pair, rnd = g % m, g // m
        pa, pb = sides_a[pair], sides_b[pair]
        # ABBA and BAAB in turn within each pair, so any order effect cancels.
        first, second = (pa, pb) if rnd % 2 == 0 else (pb, pa)
        ask = {"cmd": "block", "samples": samples, "placement": rnd % k}
        placement.append(rnd % k)
        pair_of.append(pair)
        r1 = first.ask(ask, cfg.ask_timeout_s)
        r2 = second.ask(ask, cfg.ask_timeout_s)
        r3 = second.ask(ask, cfg.ask_timeout_s)
        r4 = first.ask(ask, cfg.ask_timeout_s)
        ra1, rb1, rb2, ra2 = (r1, r2, r3, r4) if first is pa else (r2, r1, r4, r3)
        a1, a2 = stats.median(ra1["values"]), stats.median(ra2["values"])
        b1, b2 = stats.median(rb1["values"]), stats.median(rb2["values"])
        logs.append(math.log((b1 + b2) / (a1 + a2)))
        a_meds += [a1, a2]
        b_meds += [b1, b2]
        for r in (ra1, rb1, rb2, ra2):
            block_clocks.append(r.get("clock"))
            block_reasons.append(list(r.get("reasons") or []))
        reliability = blocks_reliable(block_clocks, block_reasons)
        clusters = _clusters(pair_of, placement, m, k)
        if len(logs) >= target:
            ratio, lo, hi, verdict = judge_reliable(logs, cfg, clusters, reliability.reliable)
            if verdict != CaseVerdict.INCONCLUSIVE:
                stop = "decided"
                break
            target += step
        if time.perf_counter() - t0 >= cfg.budget_s and len(logs) >= 2 * m:
            stop = "budget"
            ratio, lo, hi, verdict = judge_reliable(logs, cfg, clusters, reliability.reliable)
            break
    return PairedResult(
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        groups=len(logs),
        verdict=verdict,
        stop_reason=stop,
        seconds=time.perf_counter() - t0,
        a_median=stats.median(a_meds),
        b_median=stats.median(b_meds),
        group_ratios=[math.exp(x) for x in logs],
        placements=placement if k > 1 else [0] * len(logs),
        pairs=pair_of,
        clusters=_clusters(pair_of, placement, m, k),
        clocks=[c for c in block_clocks if c],
        a_blocks=a_meds,
        b_blocks=b_meds,
        describe_b={k: v for k, v in db[0].items() if k not in ("ok", "info", "device")},
        device_b=dict(db[0].get("device") or {}),
        info_a=dict(da[0].get("info") or {}),
        info_b=dict(db[0].get("info") or {}),
        block_clocks=block_clocks,
        block_reasons=block_reasons,
        reliable=reliability.reliable,
        throttled_blocks=len(reliability.throttled),
    )


def _receive_all(
    first: list[Side], then: list[Side], cmd: str, timeout_s: float | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every side's reply, even when one failed (an unread reply would answer the next
    command); then the first failure, candidates' before baselines'."""
    replies: list[dict[str, Any]] = []
    failures: list[Exception] = []
    for side in first + then:
        try:
            replies.append(side.receive(cmd, timeout_s))
        except (SideError, SideDied, SideTimeout) as exc:
            failures.append(exc)
    if failures:
        raise failures[0]
    return replies[: len(first)], replies[len(first) :]


def _round_up(n: int, m: int) -> int:
    return max(m, -(-n // m) * m)


def _clusters(pair_of: list[int], placement: list[int], m: int, k: int) -> list[int] | None:
    """The unit the interval is taken over: the process pair, else the placement."""
    if m > 1:
        return pair_of
    return placement if k > 1 else None


__all__ = [
    "PairedConfig",
    "PairedResult",
    "Side",
    "SideDied",
    "SideError",
    "SideTimeout",
    "compare",
    "judge",
    "judge_reliable",
    "serve",
]

if __name__ == "__main__":
    serve()
