"""Rows for dashboard tests: a small, realistic history written through the models.

Not a conftest pytest loads by itself (other engineers own ``conftest.py``); the
dashboard tests import it. The history: one attention library measured on H100
at four commits, a shape grid (seq × batch) plus a GEMM case, a slowdown confined
to one corner of the grid at commit 3 (with its Regression row), the GEMM broken
at commit 4 (failed correctness, a ``broken`` Regression), one throttled
measurement, and a running and a queued run on a second worker and class.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from kernelwatch.db.models import Case, Commit, CommitParent, Regression, Repository, Result, Run
from kernelwatch.db.session import make_engine, session_factory, transaction
from kernelwatch.jobs.judging import history
from kernelwatch.kernels.record import case_id

SOURCE = "https://github.com/example/flash-attn-mini.git"
SEQS = (512, 1024, 2048)
BATCHES = (1, 4)
PEAKS = {"bf16_tflops": 989.0, "copy_gbps": 3350.0}
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
MESSAGES = (
    "attention: add causal forward kernel",
    "docs: calling convention",
    "attention: retile for long sequences",
    "gemm: switch to 3-stage pipeline",
)


@dataclass
class History:
    """Ids of what the factory wrote, for assertions."""

    repository_id: int = 0
    shas: list[str] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)  # the four measured runs, commit order
    running_run_id: int = 0
    queued_run_id: int = 0
    corner_case: str = ""  # seq=2048, batch=4: slower from commit 3
    other_case: str = ""  # seq=512, batch=1: unchanged
    gemm_case: str = ""  # broken at commit 4
    regression_id: int = 0
    broken_id: int = 0
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)


def _samples(rng: random.Random, median: float, n: int = 24) -> list[float]:
    return [median * math.exp(rng.gauss(0, 0.01)) for _ in range(n)]


def _result(
    rng: random.Random,
    run: Run,
    case: Case,
    median: float | None,
    flops: float,
    nbytes: float,
    *,
    sha: str,
    reliable: bool = True,
    fail: str = "",
    verdict: str | None = None,
    ratio: tuple[float, float, float] | None = None,
) -> Result:
    device: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "class": "h100",
        "uuid": "GPU-8c1e7f3a",
        "compute_capability": "9.0",
        "driver": "560.35.03",
        "cuda": "12.6",
        "nvml": True,
        "steady_sm_mhz": 1980,
        "sm_mhz_min": 1410 if not reliable else 1965,
        "sm_mhz_median": 1980,
        "mem_mhz": 2619,
        "temp_c_max": 71,
        "power_w_max": 612.5,
        "throttle_reasons": ["hw_slowdown"] if not reliable else [],
        "reliable": reliable,
        "peaks": PEAKS,
    }
    record: dict[str, Any] = {
        "schema": 1,
        "suite": case.suite,
        "case_id": case.id,
        "kernel": case.kernel,
        "backend": case.backend,
        "params": case.params,
        "status": "fail" if fail else "pass",
        "library": {"name": "flash-attn-mini", "commit": sha, "source": SOURCE},
        "device": device,
        "environment": {"python": "3.11.7", "torch": "2.5.1"},
        "error": fail,
        "log_tail": "mismatch at [3, 17]: 0.41 vs 0.38\n" if fail else "",
        "correctness": {
            "errors": {"rel_l2": 0.4 if fail else 1e-3},
            "bound": 2e-3,
            "passed": not fail,
            "detail": fail,
        },
    }
    samples: list[float] = []
    tflops = gbps = None
    lo = hi = None
    if median is not None:
        samples = sorted(_samples(rng, median))
        lo, hi = samples[len(samples) // 4], samples[3 * len(samples) // 4]
        tflops, gbps = flops / median / 1e12, nbytes / median / 1e9
        record["timing"] = {
            "unit": "s",
            "samples": samples,
            "median": median,
            "ci_low": lo,
            "ci_high": hi,
            "n": len(samples),
            "cold_l2": True,
            "cuda_graph": True,
            "stop_reason": "converged",
            "timer": "cuda_event",
        }
        record["throughput"] = {
            "flops": flops,
            "bytes": nbytes,
            "tflops": tflops,
            "gbps": gbps,
            "pct_of_peak": 100 * tflops / PEAKS["bf16_tflops"],
            "bound_by": "compute",
        }
    r = Result(
        run_id=run.id,
        case_id=case.id,
        status="fail" if fail else "pass",
        median_s=median,
        ci_low_s=lo,
        ci_high_s=hi,
        n_samples=len(samples),
        samples=samples,
        tflops=tflops,
        gbps=gbps,
        reliable=reliable,
        device_name=device["name"],
        error=fail,
        log_tail=record["log_tail"],
        record=record,
        verdict=verdict,
    )
    if ratio:
        r.ratio, r.ratio_ci_low, r.ratio_ci_high = ratio
    return r


def build_history(session: Session, seed: int = 7) -> History:
    rng = random.Random(seed)
    h = History()
    repo = Repository(name="flash-attn-mini", source=SOURCE, created=T0)
    session.add(repo)
    session.flush()
    h.repository_id = repo.id

    cases: list[tuple[Case, float, float, float]] = []  # case, base median, flops, bytes
    for seq in SEQS:
        for batch in BATCHES:
            params = {
                "batch": batch,
                "causal": True,
                "dtype": "bfloat16",
                "head_dim": 128,
                "heads": 16,
                "seq": seq,
            }
            cid = case_id("attention", "fa-mini", params)
            label = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
            case = Case(
                id=cid,
                suite="attention",
                kernel="attention",
                backend="fa-mini",
                params=params,
                label=label,
            )
            flops = 2.0 * batch * 16 * seq * seq * 128  # causal: half of 4·b·h·s²·d
            nbytes = 4.0 * batch * 16 * seq * 128 * 2
            cases.append((case, flops / 400e12, flops, nbytes))
            if (seq, batch) == (2048, 4):
                h.corner_case = cid
            if (seq, batch) == (512, 1):
                h.other_case = cid
    gparams = {"dtype": "bfloat16", "k": 4096, "m": 4096, "n": 4096}
    gemm = Case(
        id=case_id("gemm", "fa-mini", gparams),
        suite="gemm",
        kernel="gemm",
        backend="fa-mini",
        params=gparams,
        label="dtype=bfloat16, k=4096, m=4096, n=4096",
    )
    cases.append((gemm, 2 * 4096**3 / 700e12, 2.0 * 4096**3, 3 * 4096 * 4096 * 2.0))
    h.gemm_case = gemm.id
    session.add_all([c for c, *_ in cases])
    h.cases = {c.id: {"kernel": c.kernel, "label": c.label, "params": c.params} for c, *_ in cases}

    previous: Run | None = None
    for i, message in enumerate(MESSAGES):
        sha = f"{rng.getrandbits(160):040x}"
        h.shas.append(sha)
        commit = Commit(
            repository_id=repo.id,
            sha=sha,
            message=message + "\n\nLonger body.",
            author="Dev One",
            committed_at=T0 + timedelta(hours=i),
            sequence=i + 1,
            parents=[CommitParent(position=0, parent_sha=h.shas[-2])] if i else [],
        )
        session.add(commit)
        session.flush()
        created = T0 + timedelta(hours=i, minutes=5)
        run = Run(
            repository_id=repo.id,
            commit_id=commit.id,
            suites=["attention", "gemm"],
            trigger="push",
            status="succeeded",
            verdict="fail" if i >= 2 else "pass",
            baseline_sha=previous and h.shas[-2],
            baseline_run_id=previous and previous.id,
            device_class="h100",
            queue="gpu.h100",
            worker="gpu-h100-01@node3",
            attempts=1,
            options={"regression_threshold": 0.05},
            created=created,
            started=created + timedelta(seconds=30),
            finished=created + timedelta(minutes=9),
            build_log=(
                f"$ pip install --no-deps .\nSuccessfully installed flash-attn-mini @ {sha}\n"
            ),
        )
        session.add(run)
        session.flush()
        h.run_ids.append(run.id)
        for case, base, flops, nbytes in cases:
            median: float | None = base
            kw: dict[str, Any] = {"verdict": "unchanged" if previous else None}
            if previous:
                kw["ratio"] = (1.0, 0.99, 1.01)
            if case.id == h.corner_case and i >= 2:
                median = base * 1.3
                if i == 2:
                    kw.update(verdict="regression", ratio=(1.3, 1.27, 1.33))
            if case.id == h.gemm_case and i == 3:
                median = None
                kw = {"fail": "rel L2 error 0.41 > bound 0.002", "verdict": "broken"}
            if case.id == h.other_case and i == 1:
                kw.update(reliable=False, verdict="inconclusive")
            session.add(_result(rng, run, case, median, flops, nbytes, sha=sha, **kw))
        if i == 2:
            reg = Regression(
                run_id=run.id,
                baseline_run_id=previous and previous.id,
                case_id=h.corner_case,
                kind="regression",
                ratio=1.3,
                ratio_ci_low=1.27,
                ratio_ci_high=1.33,
                p_value=1e-6,
                detail="30.0% slower (interval 1.270–1.330, p=1e-06)",
                created=created + timedelta(minutes=10),
            )
            session.add(reg)
            session.flush()
            h.regression_id = reg.id
        if i == 3:
            reg = Regression(
                run_id=run.id,
                baseline_run_id=previous and previous.id,
                case_id=h.gemm_case,
                kind="broken",
                detail="rel L2 error 0.41 > bound 0.002",
                created=created + timedelta(minutes=10),
            )
            session.add(reg)
            session.flush()
            h.broken_id = reg.id
        previous = run

    now = datetime.now(UTC)
    running = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=["attention"],
        trigger="manual",
        status="running",
        device_class="h200",
        queue="gpu.h200",
        worker="gpu-h200-02@node7",
        attempts=1,
        created=now - timedelta(minutes=3),
        started=now - timedelta(minutes=2),
    )
    queued = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=["attention"],
        trigger="manual",
        status="queued",
        device_class="h200",
        queue="gpu.h200",
        created=now - timedelta(minutes=1),
    )
    session.add_all([running, queued])
    session.flush()
    h.running_run_id, h.queued_run_id = running.id, queued.id
    return h


RELEASES = [f"0.{i}.0" for i in range(1, 13)]  # 0.10.0 must sort after 0.9.0
RELEASE_STEP = "0.8.0"  # decode 25 % slower from here on


def add_release_history(session: Session, seed: int = 11) -> tuple[int, str]:
    """A library measured at released versions only (pseudo-commits ``version:…``)."""
    rng = random.Random(seed)
    repo = Repository(name="flashinfer-python", source="flashinfer-python", created=T0)
    session.add(repo)
    session.flush()
    params = {"batch": 64, "dtype": "float16", "kv_len": 4096, "page_size": 16}
    case = Case(
        id=case_id("decode_paged", "flashinfer", params),
        suite="decode",
        kernel="decode_paged",
        backend="flashinfer",
        params=params,
        label="batch=64, dtype=float16, kv_len=4096, page_size=16",
    )
    session.add(case)
    previous = None
    for i, version in enumerate(RELEASES):
        sha = f"version:flashinfer-python=={version}"
        commit = Commit(
            repository_id=repo.id,
            sha=sha,
            message=f"flashinfer-python {version}",
            author="",
            committed_at=T0 + timedelta(days=i),
            sequence=i + 1,
            parents=[CommitParent(position=0, parent_sha=previous)] if previous else [],
        )
        session.add(commit)
        session.flush()
        run = Run(
            repository_id=repo.id,
            commit_id=commit.id,
            suites=["decode"],
            trigger="manual",
            status="succeeded",
            verdict="pass",
            device_class="h200",
            queue="gpu.h200",
            version_spec=f"flashinfer-python=={version}",
            created=T0 + timedelta(days=i),
        )
        session.add(run)
        session.flush()
        slow = RELEASES.index(version) >= RELEASES.index(RELEASE_STEP)
        median = 100e-6 * (1.25 if slow else 1.0)
        session.add(_result(rng, run, case, median, 1e9, 1e9, sha=sha))
        previous = sha
    session.flush()
    history.scan_run(session, run)  # the service records the step; the Trends page draws it
    return repo.id, case.id


def fill(url: str) -> History:
    """Migrate the database at ``url`` to head and write the history into it."""
    from kernelwatch.db.migrate import upgrade

    upgrade(url)
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine)) as session:
            return build_history(session)
    finally:
        engine.dispose()


def make_database(path: Path) -> tuple[str, History]:
    """A migrated SQLite database at ``path`` holding the history."""
    url = f"sqlite:///{path}"
    return url, fill(url)
