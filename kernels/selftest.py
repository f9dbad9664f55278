"""The timer's self-test: an A/A measurement of a reference kernel on this device.

Every verdict rests on the timer agreeing with itself on a card. Once a night the
scheduler asks each card's worker to run this (``worker/selftest.py``): two identical
samplers of one reference kernel (PyTorch's own matmul, so no library under test is
involved: bf16 4096³ on a GPU, float32 192³ on the CPU) timed in alternating blocks
(ABBA), with the sampler the suites use (``timing.make_sampler``: cold L2, warm-up,
CUDA events or the host clock). A healthy card gives a ratio B/A whose interval holds
1 and a small spread; what it reports:

- ``cv``: the spread of the per-block medians relative to their mean, over both arms:
  the noise this card adds to a measurement of a budget like a suite's, the number
  tracked per card as a trend (a card whose ``cv`` grows is flagged,
  ``jobs/judging/selftest.py``);
- ``sample_cv``: the spread of the single samples (jitter within a block);
- ``ratio``, ``ci_low``, ``ci_high``: the A/A ratio of medians and its 99 % interval over
  the rounds (Student t on log ratios): an interval without 1 is a timer that favours
  one arm (placement or ordering effects on that card);
- ``median_s``, ``samples``, ``rounds``, and the device (name, UUID, clocks).

``python -m kernelwatch.kernels.selftest [--budget S] [--device cpu|cuda]`` prints it
as one JSON object. Standard library and torch only, like the rest of ``kernels``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from kernelwatch.kernels.device import describe_device, pin_cpu_threads
from kernelwatch.kernels.paired import a_goes_first
from kernelwatch.kernels.stats import cv, median, t_quantile
from kernelwatch.kernels.timing import TimerConfig, make_sampler

LEVEL = 0.99
MIN_ROUNDS = 8
KERNEL = "torch.matmul"


def _inputs(device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    n, dtype = (4096, torch.bfloat16) if device.type == "cuda" else (192, torch.float32)
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    return {"a": a, "b": b, "out": torch.empty(n, n, device=device, dtype=dtype)}


def _call(inputs: dict[str, torch.Tensor]) -> Any:
    return torch.matmul(inputs["a"], inputs["b"], out=inputs["out"])


def aa(device: torch.device, budget_s: float = 20.0) -> dict[str, Any]:
    """Run the A/A test for about ``budget_s`` seconds; its figures (see the module)."""
    pin_cpu_threads(device)
    config = TimerConfig(budget_s=budget_s)
    arms = [make_sampler(_call, _inputs(device, seed), config) for seed in (1, 2)]
    rounds_wanted = max(MIN_ROUNDS, 16)
    block_s = budget_s / (2 * rounds_wanted)
    per_sample = max(arms[0].sample_s * max(arms[0].calls_per_sample, 1), 1e-7)
    n = max(3, min(2000, int(block_s / per_sample)))
    blocks: list[list[list[float]]] = [[], []]
    start = time.perf_counter()
    rounds = 0
    # an even count: as many BAAB rounds as ABBA, so a tilt of the order cancels in the
    # mean instead of leaning it (docs/measurement.md §35c)
    while rounds < MIN_ROUNDS or rounds % 2 or time.perf_counter() - start < budget_s:
        order = (0, 1, 1, 0) if a_goes_first(rounds, 0) else (1, 0, 0, 1)  # the gate's rule
        for arm in order:
            blocks[arm].append(arms[arm].block(n))
        rounds += 1
        if rounds >= 10 * rounds_wanted:
            break
    # each round holds two blocks per arm; its ratio is of their pooled medians
    log_ratios = []
    for r in range(rounds):
        a = blocks[0][2 * r] + blocks[0][2 * r + 1]
        b = blocks[1][2 * r] + blocks[1][2 * r + 1]
        log_ratios.append(math.log(median(b) / median(a)))
    mean = sum(log_ratios) / rounds
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (rounds - 1))
    half = t_quantile(LEVEL, rounds - 1) * sd / math.sqrt(rounds)
    block_medians = [median(b) for arm in blocks for b in arm]
    samples = [x for arm in blocks for b in arm for x in b]
    info = describe_device(device)
    return {
        "kernel": KERNEL,
        "cv": cv(block_medians),
        "sample_cv": cv(samples),
        "ratio": math.exp(mean),
        "ci_low": math.exp(mean - half),
        "ci_high": math.exp(mean + half),
        "level": LEVEL,
        "median_s": median(samples),
        "samples": len(samples),
        "rounds": rounds,
        "seconds": time.perf_counter() - start,
        "device": {k: v for k, v in info.items() if isinstance(v, str | int | float | bool)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m kernelwatch.kernels.selftest",
        description="The timer's A/A self-test on this device; one JSON object on stdout.",
    )
    p.add_argument("--budget", type=float, default=20.0, help="seconds of timed blocks")
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default cuda if available)")
    args = p.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    print(json.dumps(aa(device, args.budget)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
