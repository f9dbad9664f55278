"""Child of ``python -m benchmarks.gpu host-gap``: does the timer time the host?

One process sets one suite case up (``paired_suite.case``, no check) and times it
with ``kernels/timing.py`` with the host guard off (the timer of 2026-12-04 and
before: on the cold path the flush alone covered the host's launch) and on, in
alternation, first on an idle host and then beside ``--burners`` processes that keep
every CPU busy (what a pool's other sides do while they set up). Beside each timing:
the host's own time to queue one call, the spin before each start event, and the
samples the guard took again because their start event had fired before the call
was queued. One JSON line per timing on stdout.

    python -m benchmarks.host_gap '{"suite": "layers", ...}'
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch

from kernelwatch.kernels.casepattern import matches, names_of
from kernelwatch.kernels.paired_suite import case
from kernelwatch.kernels.record import case_id
from kernelwatch.kernels.suite import load_suite
from kernelwatch.kernels.timing import TimerConfig, measure

BURN = "while True: pass"


@contextlib.contextmanager
def burners(n: int, code: str = BURN, settle_s: float = 0.2) -> Iterator[None]:
    """``n`` processes that each run ``code`` (by default: keep one CPU busy), given
    ``settle_s`` to start, ended on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        time.sleep(settle_s if n else 0.0)
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def host_launch_s(call: Any, inputs: Any, reps: int = 30) -> float:
    """Median host seconds to queue one call (no synchronisation inside)."""
    times = []
    for _ in range(reps):
        s = time.perf_counter()
        call(inputs)
        times.append(time.perf_counter() - s)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return statistics.median(times)


def one(call: Any, inputs: Any, guard: bool, budget_s: float) -> dict[str, Any]:
    m = measure(call, inputs, TimerConfig(host_guard=guard, budget_s=budget_s))
    t = m.timing
    return {
        "guard": guard,
        "median_s": t.median,
        "ci": [t.ci_low, t.ci_high],
        "n": t.n,
        "graph": t.cuda_graph,
        "stop": t.stop_reason,
        "host_launch_s": host_launch_s(call, inputs),
        **{k: m.telemetry.get(k) for k in ("keep_busy_s", "host_late_retaken", "host_late_kept")},
    }


def first_case(suite: str, size: str, pattern: str, backend: str) -> str:
    """The id of the suite's first case that ``pattern`` selects (an id selects itself)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for spec in load_suite(suite, size, device):
        cid: str = case_id(spec.kernel, backend, spec.params)
        if matches(names_of(spec.kernel, spec.params, cid), pattern):
            return cid
    raise LookupError(f"no case of suite {suite} at size {size} matches {pattern!r}")


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    cid = first_case(spec["suite"], spec["size"], spec["case"], spec["backend"])
    call, inputs, _ = case(
        spec["suite"], spec["size"], cid, spec["impl"], spec["backend"], check=False
    )
    for load in spec["loads"]:
        with burners(int(load)):
            for guard in [False, True] * int(spec["rounds"]):
                row = {"load": load, **one(call, inputs, guard, float(spec["budget_s"]))}
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
