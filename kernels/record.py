"""The result record: the wire format between the suite runner, the worker and the database.

One record per (case, measurement). The schema is versioned; consumers reject a
schema they do not know instead of guessing. Field meanings are the contract in
``design.md`` ("Result record"); every timing keeps its raw samples so that any
later analysis can be redone from the record alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

Status = Literal["pass", "fail", "error", "skip"]


def canonical_params(params: dict[str, Any]) -> str:
    """Parameters as a canonical JSON string: sorted keys, no whitespace.

    Two spellings of the same case (key order, ``1`` vs ``1``) must hash alike.
    """
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def case_id(kernel: str, backend: str, params: dict[str, Any]) -> str:
    """Stable id of a case: the first 16 hex digits of sha256(kernel|backend|params)."""
    text = f"{kernel}|{backend}|{canonical_params(params)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Correctness:
    """How the output compared with a high-precision reference.

    errors: named error measures (``max_abs``, ``rel_l2``, ...) of the output.
    bound: the largest ``rel_l2`` accepted for this dtype (see ``correctness.py``).
    passed: every output element was written, finite and within the bound.
    detail: a readable reason when ``passed`` is false.
    k: the factor over PyTorch's own low-precision error that the bound allowed
       (``correctness.K_FACTOR``: 2 attention, 3 KV-cache paths, 4 FP8; 0 unknown).
    """

    errors: dict[str, float]
    bound: float
    passed: bool
    detail: str = ""
    k: float = 0.0


@dataclass
class Timing:
    """Time per call of the kernel under test. Lower is better.

    unit: ``"s"``; samples are seconds per call, every raw sample kept (after
    discarding throttled ones, counted in ``discarded``).
    median, ci_low, ci_high: the median and its confidence interval (``ci_level``).
    n: number of samples kept. cold_l2: L2 flushed before each sample.
    cuda_graph: samples replay a CUDA graph of ``calls_per_sample`` calls.
    stop_reason: what ended sampling (``"converged"``, ``"budget"``, ``"max_samples"``).
    timer: ``"cuda_event"`` on a GPU, ``"host_cpu"`` (process CPU time) on the CPU path.
    """

    unit: str
    samples: list[float]
    median: float
    ci_low: float
    ci_high: float
    n: int
    cold_l2: bool
    cuda_graph: bool
    stop_reason: str
    timer: str
    calls_per_sample: int = 1
    ci_level: float = 0.95
    discarded: int = 0
    warmup_s: float = 0.0
    total_s: float = 0.0


@dataclass
class Throughput:
    """Achieved rates from the case's FLOP and byte counts over the median time.

    pct_of_peak is against the device's measured ceiling (``peaks``), not a datasheet.
    """

    flops: float
    bytes: float
    tflops: float
    gbps: float
    pct_of_peak: float | None = None
    bound_by: str | None = None


@dataclass
class ResultRecord:
    """One case's outcome: correctness first, then timing, with where it ran.

    A timing from a case whose correctness failed is kept for diagnosis but never
    used as a baseline or shown as a result.
    """

    suite: str
    case_id: str
    kernel: str
    backend: str
    params: dict[str, Any]
    status: Status
    library: dict[str, Any] = field(default_factory=dict)
    correctness: Correctness | None = None
    timing: Timing | None = None
    throughput: Throughput | None = None
    device: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    log_tail: str = ""
    # paired mode only (kernels/paired_suite.py): the comparison with the baseline
    # measured interleaved with this candidate (verdict, ratio, interval, groups, ...)
    paired: dict[str, Any] | None = None
    schema: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultRecord:
        """Parse a record, refusing schemas this code does not understand."""
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"unsupported result schema {data.get('schema')!r}")
        data = dict(data)
        corr = data.pop("correctness", None)
        timing = data.pop("timing", None)
        thr = data.pop("throughput", None)
        return cls(
            **data,
            correctness=Correctness(**corr) if corr else None,
            timing=Timing(**timing) if timing else None,
            throughput=Throughput(**thr) if thr else None,
        )
