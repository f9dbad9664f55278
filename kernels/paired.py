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

A *case factory* (``module:function``) builds ``(call, inputs)`` from JSON
params inside each side; both sides get the same factory and params, and differ
only in what their environment imports (or, in benchmarks, in injected work).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelwatch.kernels import stats
from kernelwatch.kernels.timing import Sampler, TimerConfig, make_sampler

# --------------------------------------------------------------------------- side process


def serve(stdin: Any = None, stdout: Any = None) -> None:
    """The side's loop: ``setup`` a case, then answer ``block`` requests until ``quit``."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    sampler: Sampler | None = None
    for line in stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        try:
            if cmd == "setup":
                factory = _load(msg["factory"])
                call, inputs = factory(**msg.get("params", {}))
                sampler = make_sampler(call, inputs, TimerConfig(**msg.get("timer", {})))
                reply: dict[str, Any] = {"ok": True, **sampler.describe()}
            elif cmd == "block":
                assert sampler is not None, "block before setup"
                values = sampler.block(int(msg["samples"]))
                reply = {"ok": True, "values": values, "clock": sampler.last_clock()}
            elif cmd == "quit":
                reply = {"ok": True}
                stdout.write(json.dumps(reply) + "\n")
                stdout.flush()
                return
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        except Exception as exc:  # reported to the coordinator, the side stays alive
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


def _load(target: str) -> Callable[..., tuple[Callable[[Any], Any], Any]]:
    module, func = target.split(":")
    fn: Callable[..., tuple[Callable[[Any], Any], Any]] = getattr(
        importlib.import_module(module), func
    )
    return fn


# --------------------------------------------------------------------------- coordinator


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

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"side {self.name} died (exit {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"side {self.name}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ask({"cmd": "quit"})
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@dataclass
class PairedConfig:
    """How long to compare, and what counts.

    min_effect: smallest relative change worth a verdict (0.5 %).
    confidence: two-sided level of the ratio's interval.
    block_s: target length of one block; groups_min/groups_step: adaptivity.
    budget_s: wall time for the whole comparison (blocks only, after setup).
    """

    min_effect: float = 0.005
    confidence: float = 0.99
    block_s: float = 0.02
    groups_min: int = 6
    groups_step: int = 4
    groups_max: int = 200
    budget_s: float = 5.0


@dataclass
class PairedResult:
    ratio: float  # B / A, > 1 means B is slower
    ci_low: float
    ci_high: float
    groups: int
    verdict: str  # regression | improvement | unchanged | inconclusive
    stop_reason: str
    seconds: float
    a_median: float
    b_median: float
    group_ratios: list[float] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(log_ratios: Sequence[float], cfg: PairedConfig) -> tuple[float, float, float, str]:
    """Ratio, interval and verdict from the groups' log-ratios."""
    n = len(log_ratios)
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1)) if n > 1 else math.inf
    half = stats.t_quantile(cfg.confidence, n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    ratio, lo, hi = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    up, down = 1 + cfg.min_effect, 1 / (1 + cfg.min_effect)
    if lo > 1 and ratio >= up:
        verdict = "regression"
    elif hi < 1 and ratio <= down:
        verdict = "improvement"
    elif down < lo and hi < up:
        verdict = "unchanged"
    elif lo > 1 or hi < 1:
        verdict = "unchanged"  # a real but smaller-than-relevant change
    else:
        verdict = "inconclusive"
    return ratio, lo, hi, verdict


def compare(
    a: Side,
    b: Side,
    factory: str,
    params_a: dict[str, Any],
    params_b: dict[str, Any],
    cfg: PairedConfig | None = None,
    timer: dict[str, Any] | None = None,
) -> PairedResult:
    """Set both sides up with the case, then alternate blocks until a verdict or the budget."""
    cfg = cfg or PairedConfig()
    timer = timer or {}
    da = a.ask({"cmd": "setup", "factory": factory, "params": params_a, "timer": timer})
    db = b.ask({"cmd": "setup", "factory": factory, "params": params_b, "timer": timer})
    per_sample = max(da["sample_s"], db["sample_s"], 1e-7)
    samples = max(3, min(2000, int(cfg.block_s / per_sample)))
    t0 = time.perf_counter()
    logs: list[float] = []
    a_meds: list[float] = []
    b_meds: list[float] = []
    clocks: list[int] = []
    stop = "groups_max"
    verdict, ratio, lo, hi = "inconclusive", math.nan, math.nan, math.nan
    target = cfg.groups_min
    # One unrecorded group first: the side set up last has just warmed up.
    for side in (a, b, b, a):
        side.ask({"cmd": "block", "samples": samples})
    while len(logs) < cfg.groups_max:
        # ABBA and BAAB in turn, so any order effect within a group cancels.
        first, second = (a, b) if len(logs) % 2 == 0 else (b, a)
        r1 = first.ask({"cmd": "block", "samples": samples})
        r2 = second.ask({"cmd": "block", "samples": samples})
        r3 = second.ask({"cmd": "block", "samples": samples})
        r4 = first.ask({"cmd": "block", "samples": samples})
        ra1, rb1, rb2, ra2 = (r1, r2, r3, r4) if first is a else (r2, r1, r4, r3)
        a1, a2 = stats.median(ra1["values"]), stats.median(ra2["values"])
        b1, b2 = stats.median(rb1["values"]), stats.median(rb2["values"])
        logs.append(math.log((b1 + b2) / (a1 + a2)))
        a_meds += [a1, a2]
        b_meds += [b1, b2]
        clocks += [c for c in (ra1["clock"], rb1["clock"]) if c]
        if len(logs) >= target:
            ratio, lo, hi, verdict = judge(logs, cfg)
            if verdict != "inconclusive":
                stop = "decided"
                break
            target += cfg.groups_step
        if time.perf_counter() - t0 >= cfg.budget_s:
            stop = "budget"
            if len(logs) >= 2:
                ratio, lo, hi, verdict = judge(logs, cfg)
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
        clocks=clocks,
    )


__all__ = [
    "PairedConfig",
    "PairedResult",
    "Side",
    "compare",
    "judge",
    "serve",
]

if __name__ == "__main__":
    serve()
