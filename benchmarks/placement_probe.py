"""Is a kernel's time a property of where its tensors lie? One process, one GPU.

Builds each case at 8 placements (a padding allocation of random size before
each), then measures the placements round-robin, 4 rounds of ~40 ms blocks.
If the spread *between* placements is well above the spread of one placement
*across rounds*, placement is a fixed effect that a two-process comparison must
randomize (``kernels/paired.py``).

    python benchmarks/placement_probe.py OUT.json
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import benchcases
from kernelwatch.kernels.timing import TimerConfig, make_sampler

CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "bf16 GEMM 4096^3": (benchcases.gemm, {"m": 4096, "n": 4096, "k": 4096}),
    "fp32 add 64M": (benchcases.add, {"numel": 64 * 2**20}),
}


def probe(factory: Any, params: dict[str, Any], placements: int = 8, rounds: int = 4) -> dict:  # type: ignore[type-arg]
    rng = random.Random(0)
    pads, samplers = [], []
    for i in range(placements):
        pads.append(torch.empty(rng.randint(1, 256) * 2**21, dtype=torch.uint8, device="cuda"))
        call, inputs = factory(**params)
        cfg = TimerConfig() if i == 0 else TimerConfig(min_warmup_s=0.0, max_warmup_s=0.03)
        samplers.append(make_sampler(call, inputs, cfg))
    n = max(20, int(0.04 / samplers[0].sample_s))
    med = [[0.0] * rounds for _ in samplers]
    for r in range(rounds):
        for i, s in enumerate(samplers):
            med[i][r] = statistics.median(s.block(n))
    per_place = [statistics.mean(m) for m in med]
    grand = statistics.mean(per_place)
    within = statistics.mean(statistics.stdev(m) for m in med) / grand
    return {
        "median_us": grand * 1e6,
        "between_sd_pct": 100 * statistics.stdev(per_place) / grand,
        "between_range_pct": 100 * (max(per_place) - min(per_place)) / grand,
        "within_sd_pct": 100 * within,
        "per_placement_us": [x * 1e6 for x in per_place],
        "rounds_us": [[x * 1e6 for x in m] for m in med],
    }


def main() -> int:
    out = {"device": torch.cuda.get_device_name(), "cases": {}}
    for name, (factory, params) in CASES.items():
        res = probe(factory, params)
        out["cases"][name] = res
        print(
            f"{name:<20} {res['median_us']:9.1f} us  between placements SD "
            f"{res['between_sd_pct']:.3f} % (range {res['between_range_pct']:.3f} %)"
            f"  within SD {res['within_sd_pct']:.3f} %",
            flush=True,
        )
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
