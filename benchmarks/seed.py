"""Fill a PostgreSQL database with a realistic kernelwatch history, for dashboard benchmarks.

    python benchmarks/seed.py postgresql+psycopg://postgres@127.0.0.1:5432/kw_dash_bench \\
        --repos 10 --commits 500 --cases 100 --classes h100,h200

The production target is 10 repositories × 2,000 commits × 200 cases × 2 GPU classes
(8 M results). Each repository gets first-parent commits, one run per commit and
class (the newest few queued or running), a result per case with raw samples and a
full result record (timing, throughput, NVML telemetry, device peaks), step changes
in a few cases' medians with their Regression rows (most of them triaged), a few
broken cases and throttled measurements. Rows go in with COPY; ids are assigned
here and the sequences moved past them at the end.

The database is created if missing and migrated to head first; an existing one is
refused unless ``--replace`` (which drops it) is given.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from kernelwatch.db.migrate import upgrade
from kernelwatch.kernels.record import case_id
from kernelwatch.kernels.verdict import CaseVerdict, case_verdict

REPOS = (
    "flash-attention",
    "flashinfer",
    "triton-kernels",
    "cutlass-gemm",
    "sdpa-bench",
    "liger-kernels",
    "xformers-mini",
    "thunderkittens",
    "gemlite",
    "quack",
    "deepgemm",
    "sageattention",
)
# Measured-looking ceilings (kernels/peaks.py keys), below the datasheet numbers.
PEAKS = {
    "h100": {"bf16_tflops": 760.0, "copy_gbps": 2900.0},
    "h200": {"bf16_tflops": 790.0, "copy_gbps": 4300.0},
    "b200": {"bf16_tflops": 1800.0, "copy_gbps": 7100.0},
}
SPEED = {"h100": 1.0, "h200": 0.9, "b200": 0.55}
SUBJECTS = (
    "attention: retile for long sequences",
    "gemm: 3-stage pipeline",
    "fix causal mask edge",
    "bump cutlass",
    "rmsnorm: vectorized loads",
    "docs",
    "ci: pin triton",
    "fp8 scaling fix",
    "split-k heuristic",
    "softmax: use exp2",
    "refactor launcher",
    "paged kv: new layout",
)


@dataclass
class CaseSpec:
    id: str
    kernel: str
    params: dict[str, Any]
    label: str
    flops: float
    bytes: float
    base_s: float  # median on H100 before any change
    steps: list[tuple[int, float]]  # (commit index, multiplicative change) in order


def case_grid(backend: str, n: int, rng: random.Random, commits: int) -> list[CaseSpec]:
    """``n`` cases: attention over seq × batch × head_dim, GEMMs over m × n × k, norms."""
    specs: list[CaseSpec] = []
    grids: list[tuple[str, dict[str, Any]]] = []
    for dtype in ("bfloat16", "float16", "float8_e4m3"):
        for seq in (512, 1024, 2048, 4096, 8192, 16384):
            for batch in (1, 2, 4, 8, 16):
                for head_dim in (64, 128):
                    grids.append(
                        (
                            "attention",
                            {
                                "batch": batch,
                                "causal": True,
                                "dtype": dtype,
                                "head_dim": head_dim,
                                "heads": 16,
                                "seq": seq,
                            },
                        )
                    )
    for m in (256, 1024, 4096, 8192):
        for nn in (1024, 4096, 8192):
            for k in (1024, 4096, 8192):
                grids.append(("gemm", {"dtype": "bfloat16", "k": k, "m": m, "n": nn}))
    for rows in (1024, 4096, 16384, 65536):
        for cols in (1024, 4096, 8192):
            grids.append(("rmsnorm", {"cols": cols, "dtype": "bfloat16", "rows": rows}))
    # Each library measures its own subset; a small --cases still gets every kernel.
    rng.shuffle(grids)
    if n > len(grids):
        raise SystemExit(f"at most {len(grids)} cases per repository")
    for kernel, params in grids[:n]:
        if kernel == "attention":
            b, s, d = params["batch"], params["seq"], params["head_dim"]
            flops = 2.0 * b * 16 * s * s * d
            nbytes = 4.0 * b * 16 * s * d * 2
        elif kernel == "gemm":
            flops = 2.0 * params["m"] * params["n"] * params["k"]
            nbytes = 2.0 * (
                params["m"] * params["k"] + params["k"] * params["n"] + params["m"] * params["n"]
            )
        else:
            flops = 4.0 * params["rows"] * params["cols"]
            nbytes = 4.0 * params["rows"] * params["cols"]
        base = max(flops / 550e12, nbytes / 2.8e12) + 4e-6
        steps = []
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            at = rng.randrange(5, max(6, commits - 1))
            steps.append((at, rng.choice((0.85, 0.92, 1.08, 1.2, 1.35))))
        steps.sort()
        specs.append(
            CaseSpec(
                id=case_id(kernel, backend, params),
                kernel=kernel,
                params=params,
                label=", ".join(f"{k}={v}" for k, v in sorted(params.items())),
                flops=flops,
                bytes=nbytes,
                base_s=base,
                steps=steps,
            )
        )
    return specs


def factor_at(spec: CaseSpec, commit: int) -> float:
    f = 1.0
    for at, change in spec.steps:
        if commit >= at:
            f *= change
    return f


class Ids:
    def __init__(self) -> None:
        self.repo = self.commit = self.run = self.result = self.regression = 0


def _copy(
    cur: psycopg.Cursor[Any],
    table: str,
    columns: tuple[str, ...],
    rows: Iterator[tuple[Any, ...]] | list[tuple[Any, ...]],
) -> int:
    n = 0
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


RESULT_COLUMNS = (
    "id",
    "run_id",
    "case_id",
    "status",
    "median_s",
    "ci_low_s",
    "ci_high_s",
    "n_samples",
    "samples",
    "tflops",
    "gbps",
    "reliable",
    "device_name",
    "error",
    "log_tail",
    "record",
    "verdict",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "created",
)
RUN_COLUMNS = (
    "id",
    "repository_id",
    "commit_id",
    "suites",
    "trigger",
    "status",
    "verdict",
    "baseline_sha",
    "baseline_run_id",
    "device_class",
    "queue",
    "worker",
    "attempts",
    "options",
    "created",
    "started",
    "finished",
    "error",
    "build_log",
)
REG_COLUMNS = (
    "id",
    "run_id",
    "baseline_run_id",
    "case_id",
    "kind",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "detail",
    "state",
    "created",
)


def seed(
    conninfo: str,
    repos: int,
    commits: int,
    cases: int,
    classes: list[str],
    samples: int,
    seed_value: int,
) -> dict[str, int]:
    rng = random.Random(seed_value)
    ids = Ids()
    counts = {
        "repositories": 0,
        "commits": 0,
        "runs": 0,
        "results": 0,
        "regressions": 0,
        "cases": 0,
    }
    now = datetime.now(UTC).replace(microsecond=0)
    with psycopg.connect(conninfo) as conn, conn.cursor() as cur:
        for r in range(repos):
            t_repo = time.perf_counter()
            name = REPOS[r % len(REPOS)] + ("" if r < len(REPOS) else f"-{r}")
            ids.repo += 1
            repo_id = ids.repo
            source = f"https://github.com/example/{name}.git"
            cur.execute(
                "INSERT INTO repositories (id, name, source, default_branch, created) "
                "VALUES (%s, %s, %s, 'main', %s)",
                (repo_id, name, source, now),
            )
            specs = case_grid(name, cases, rng, commits)
            _copy(
                cur,
                "cases",
                ("id", "suite", "kernel", "backend", "params", "label"),
                ((s.id, s.kernel, s.kernel, name, json.dumps(s.params), s.label) for s in specs),
            )
            counts["cases"] += len(specs)
            shas = [f"{rng.getrandbits(160):040x}" for _ in range(commits)]
            first_commit = ids.commit + 1
            t0 = now - timedelta(hours=3 * commits)
            commit_rows = []
            for i, sha in enumerate(shas):
                commit_rows.append(
                    (
                        first_commit + i,
                        repo_id,
                        sha,
                        f"{rng.choice(SUBJECTS)}\n\nSigned-off-by: dev{i % 7}",
                        f"dev{i % 7}",
                        t0 + timedelta(hours=3 * i),
                        i + 1,
                    )
                )
            ids.commit += commits
            _copy(
                cur,
                "commits",
                ("id", "repository_id", "sha", "message", "author", "committed_at", "sequence"),
                commit_rows,
            )
            _copy(
                cur,
                "commit_parents",
                ("commit_id", "position", "parent_sha"),
                ((first_commit + i, 0, shas[i - 1]) for i in range(1, commits)),
            )
            counts["commits"] += commits

            run_rows, run_ids = _plan_runs(
                rng, ids, specs, shas, classes, commits, first_commit, repo_id, t0
            )
            _copy(cur, "runs", RUN_COLUMNS, run_rows)
            counts["runs"] += len(run_rows)
            regs: list[tuple[Any, ...]] = []
            n = _copy(
                cur,
                "results",
                RESULT_COLUMNS,
                _results(rng, ids, specs, shas, classes, commits, run_ids, samples, regs),
            )
            counts["results"] += n
            first_reg = ids.regression + 1
            ids.regression += len(regs)
            counts["regressions"] += len(regs)
            _copy(
                cur,
                "regressions",
                REG_COLUMNS,
                [(first_reg + k, *reg) for k, reg in enumerate(regs)],
            )
            cur.execute(
                "UPDATE runs SET verdict = 'fail' WHERE repository_id = %s AND id IN "
                "(SELECT run_id FROM regressions)",
                (repo_id,),
            )
            conn.commit()
            print(
                f"  {name}: {n:,} results in {time.perf_counter() - t_repo:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        counts["repositories"] = repos
        for table in ("repositories", "commits", "runs", "results", "regressions"):
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT coalesce(max(id), 1) FROM {table}))"
            )
        conn.commit()
        conn.autocommit = True
        cur.execute("ANALYZE")
    return counts


def _plan_runs(
    rng: random.Random,
    ids: Ids,
    specs: list[CaseSpec],
    shas: list[str],
    classes: list[str],
    commits: int,
    first_commit: int,
    repo_id: int,
    t0: datetime,
) -> tuple[list[tuple[Any, ...]], dict[tuple[str, int], tuple[int, str, datetime]]]:
    """One run per (class, commit); the newest three per class are running or queued."""
    suites = json.dumps(sorted({s.kernel for s in specs}))
    rows: list[tuple[Any, ...]] = []
    planned: dict[tuple[str, int], tuple[int, str, datetime]] = {}
    for cls in classes:
        prev_run: int | None = None
        for i in range(commits):
            ids.run += 1
            created = t0 + timedelta(hours=3 * i, minutes=2)
            pending = i >= commits - 3
            status = ("running" if i == commits - 3 else "queued") if pending else "succeeded"
            worker = f"gpu-{cls}-{(i % 4) + 1:02d}@node{(i % 4) // 2 + 1}"
            started = created + timedelta(seconds=rng.randint(5, 600))
            finished = started + timedelta(seconds=rng.randint(300, 1500))
            rows.append(
                (
                    ids.run,
                    repo_id,
                    first_commit + i,
                    suites,
                    "push",
                    status,
                    None if pending else "pass",
                    shas[i - 1] if i else None,
                    prev_run,
                    cls,
                    f"gpu.{cls}",
                    worker if status != "queued" else None,
                    0 if status == "queued" else 1,
                    json.dumps({"regression_threshold": 0.05}),
                    created,
                    started if status != "queued" else None,
                    finished if status == "succeeded" else None,
                    "",
                    "$ pip install --no-build-isolation .\n"
                    f"Successfully installed {shas[i][:10]}\n",
                )
            )
            planned[(cls, i)] = (ids.run, status, finished)
            prev_run = ids.run
    return rows, planned


def _results(
    rng: random.Random,
    ids: Ids,
    specs: list[CaseSpec],
    shas: list[str],
    classes: list[str],
    commits: int,
    run_ids: dict[tuple[str, int], tuple[int, str, datetime]],
    n_samples: int,
    regs: list[tuple[Any, ...]],
) -> Iterator[tuple[Any, ...]]:
    """Result rows of the succeeded runs, streamed; Regression rows go into ``regs``."""
    for cls in classes:
        prev_run: int | None = None
        prev_median: dict[str, float] = {}
        peaks = PEAKS.get(cls, PEAKS["h100"])
        device_name = f"NVIDIA {cls.upper()}"
        for i in range(commits):
            run_id, status, finished = run_ids[(cls, i)]
            if status != "succeeded":
                continue
            for spec in specs:
                ids.result += 1
                broken = rng.random() < 0.0005
                reliable = rng.random() > 0.005
                median = spec.base_s * SPEED.get(cls, 1.0) * factor_at(spec, i)
                median *= math.exp(rng.gauss(0, 0.004)) * (1.15 if not reliable else 1.0)
                if broken:
                    error = "rel L2 error 0.41 > bound 0.002"
                    record = _record(
                        spec, cls, device_name, peaks, shas[i], None, [], reliable, error
                    )
                    if prev_run is not None:
                        regs.append(
                            (
                                run_id,
                                prev_run,
                                spec.id,
                                CaseVerdict.BROKEN.value,
                                None,
                                None,
                                None,
                                None,
                                error,
                                _state(rng, i, commits),
                                finished,
                            )
                        )
                    yield (
                        ids.result,
                        run_id,
                        spec.id,
                        "fail",
                        None,
                        None,
                        None,
                        0,
                        "[]",
                        None,
                        None,
                        reliable,
                        device_name,
                        error,
                        "",
                        record,
                        CaseVerdict.BROKEN.value,
                        None,
                        None,
                        None,
                        None,
                        finished,
                    )
                    continue
                sm = sorted(median * math.exp(rng.gauss(0, 0.01)) for _ in range(n_samples))
                lo, hi = sm[n_samples // 4], sm[3 * n_samples // 4]
                verdict = ratio = rlo = rhi = p = None
                base = prev_median.get(spec.id)
                if base is not None:
                    ratio = median / base
                    rlo, rhi = ratio * 0.99, ratio * 1.01
                    # the service's one rule at a 5 % minimum effect (kernels/verdict.py)
                    verdict = case_verdict(ratio, rlo, rhi, 0.05, reliable=reliable).value
                    if verdict == CaseVerdict.REGRESSION:
                        p = 1e-6
                        regs.append(
                            (
                                run_id,
                                prev_run,
                                spec.id,
                                CaseVerdict.REGRESSION.value,
                                ratio,
                                rlo,
                                rhi,
                                p,
                                f"{(ratio - 1) * 100:.1f}% slower",
                                _state(rng, i, commits),
                                finished,
                            )
                        )
                if reliable:
                    prev_median[spec.id] = median
                tflops, gbps = spec.flops / median / 1e12, spec.bytes / median / 1e9
                record = _record(
                    spec, cls, device_name, peaks, shas[i], (median, lo, hi), sm, reliable, ""
                )
                yield (
                    ids.result,
                    run_id,
                    spec.id,
                    "pass",
                    median,
                    lo,
                    hi,
                    n_samples,
                    json.dumps(sm),
                    tflops,
                    gbps,
                    reliable,
                    device_name,
                    "",
                    "",
                    record,
                    verdict,
                    ratio,
                    rlo,
                    rhi,
                    p,
                    finished,
                )
            prev_run = run_id


def _state(rng: random.Random, i: int, commits: int) -> str:
    if i >= commits - 40:
        return "open"
    return rng.choice(("fixed", "fixed", "expected", "acknowledged", "false_positive"))


def _record(
    spec: CaseSpec,
    cls: str,
    device_name: str,
    peaks: dict[str, float],
    sha: str,
    timing: tuple[float, float, float] | None,
    samples: list[float],
    reliable: bool,
    error: str,
) -> str:
    rec: dict[str, Any] = {
        "schema": 1,
        "suite": spec.kernel,
        "case_id": spec.id,
        "kernel": spec.kernel,
        "backend": "lib",
        "params": spec.params,
        "status": "fail" if error else "pass",
        "library": {"commit": sha},
        "device": {
            "name": device_name,
            "class": cls,
            "nvml": True,
            "steady_sm_mhz": 1980,
            "sm_mhz_min": 1965 if reliable else 1410,
            "sm_mhz_median": 1980,
            "mem_mhz": 2619,
            "temp_c_max": 68,
            "power_w_max": 640.0,
            "throttle_reasons": [] if reliable else ["hw_slowdown"],
            "reliable": reliable,
            "peaks": peaks,
        },
        "environment": {"python": "3.11.7", "torch": "2.5.1", "triton": "3.1.0"},
        "error": error,
        "log_tail": "",
        "correctness": {
            "errors": {"rel_l2": 0.41 if error else 0.0011},
            "bound": 0.002,
            "passed": not error,
        },
    }
    if timing is not None:
        median, lo, hi = timing
        tflops = spec.flops / median / 1e12
        rec["timing"] = {
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
        rec["throughput"] = {
            "flops": spec.flops,
            "bytes": spec.bytes,
            "tflops": tflops,
            "gbps": spec.bytes / median / 1e9,
            "pct_of_peak": 100 * tflops / peaks["bf16_tflops"],
            "bound_by": "compute",
        }
    return json.dumps(rec, separators=(",", ":"))


def ensure_database(url: str, replace: bool) -> str:
    """Create the database named in ``url`` (dropping it with ``replace``); return a libpq URL."""
    u = make_url(url)
    name = u.database
    if not name:
        raise SystemExit("the URL must name a database")
    admin = u.set(drivername="postgresql", database="postgres").render_as_string(False)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and not replace:
            raise SystemExit(f"database {name} exists; pass --replace to drop and refill it")
        if exists:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return u.set(drivername="postgresql").render_as_string(False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url", help="SQLAlchemy URL of the PostgreSQL database to create and fill")
    p.add_argument("--repos", type=int, default=10)
    p.add_argument("--commits", type=int, default=500)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--classes", default="h100,h200")
    p.add_argument("--samples", type=int, default=16, help="raw samples per result")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--replace", action="store_true")
    args = p.parse_args(argv)
    conninfo = ensure_database(args.url, args.replace)
    upgrade(args.url)
    t = time.perf_counter()
    counts = seed(
        conninfo,
        args.repos,
        args.commits,
        args.cases,
        [c.strip() for c in args.classes.split(",") if c.strip()],
        args.samples,
        args.seed,
    )
    counts["seconds"] = round(time.perf_counter() - t)
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
