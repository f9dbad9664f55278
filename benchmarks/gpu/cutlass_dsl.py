"""``cutlass-dsl``: CUTLASS's CuTe DSL dense GEMM against cuBLAS, in one device call.

    python -m benchmarks.gpu --deadline-s 380 cutlass-dsl

Carry ``.dsl`` (``prepare-cutlass-dsl`` fills it: the ``nvidia-cutlass-dsl`` wheel
and CUTLASS's ``hopper/dense_gemm.py`` at the wheel's release tag). Each step is
bounded by the deadline and logged:

1. the carried wheel into ``/tmp/dsl-<version>`` (``pip --target``, offline); it
   and ``.dsl/examples`` go on the path of every later step;
2. the GPU tests named ``cutlass`` (``tests/kernels/test_gpu_cutlass_dsl.py``, the
   ``cutlass_dsl`` case of ``test_gpu_adapters.py`` and its grouped-GEMM kernel-name
   test): correctness against float32, one compile per configuration, the
   profiler's kernel names (CUTLASS's, no cuBLAS one);
3. the runner over the gemm suite's ``gemm`` cases (``--size quick``), once with
   ``--impl cutlass-dsl`` and once with ``--impl torch-gemm`` (cuBLAS), one after
   the other on the same GPU: a bench, not a paired gate. Compile seconds come
   from the adapter's compile log, cold (a fresh ``CUTE_DSL_CACHE_DIR`` per step);
4. ``benchmarks/cutlass_dsl_probe.py``: both sides' kernel names, FP8 e4m3 without
   scales against ``_scaled_mm`` at unit scales on the quick FP8 shapes (not a
   suite case: the example has no scale epilogue), and a small tile/cluster sweep.

``--cpu`` runs the same steps on the CPU: no wheel installed, the GPU tests skip,
the CuTe DSL side records skips that say why, cuBLAS's side runs the smoke shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu import gputests, host
from benchmarks.gpu.cutlass_dsl_table import table
from benchmarks.gpu.prepare_cutlass_dsl import EXAMPLES, WHEEL_GLOB, wheel_version

NAME = "cutlass-dsl"
HELP = "CuTe DSL dense GEMM (.dsl/): install, GPU tests, bench against cuBLAS, kernel names, FP8"
DSL_DIR = host.ROOT / ".dsl"
TESTS = ("tests/kernels/test_gpu_cutlass_dsl.py", "tests/kernels/test_gpu_adapters.py")
PROBE = host.ROOT / "benchmarks" / "cutlass_dsl_probe.py"
SIDES = {"cutlass-dsl": "cutlass-dsl", "torch-gemm": "cuBLAS"}  # --impl -> what it runs
STEPS = ("tests", "bench", "probe")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default=None, help="gemm suite size (default quick; smoke on --cpu)")
    p.add_argument("--budget", type=float, default=0.3, help="sampling seconds per case")
    p.add_argument("--skip", action="append", choices=STEPS, default=[], help="leave a step out")
    p.add_argument("--no-sweep", action="store_true", help="the probe without its tile sweep")
    p.add_argument("--test-timeout", type=float, default=120, help="seconds per GPU test")
    p.add_argument("--dsl-dir", type=Path, default=DSL_DIR, help="the carried folder (.dsl)")
    p.add_argument(
        "--into-site",
        action="store_true",
        help="install the wheel into this interpreter's site-packages (not /tmp), where a "
        "sandboxed worker of a later call on the same warm machine sees it "
        "(service --library cutlass-dsl)",
    )


def install(
    ctx: host.Context, dsl_dir: Path = DSL_DIR, site: Path = Path("/tmp"), into_site: bool = False
) -> tuple[list[str], dict[str, Any]]:
    """PYTHONPATH entries that make the DSL and the example importable, and what was done.

    The wheel goes into ``site/dsl-<version>`` once per machine (a chained second
    call finds it there). ``into_site``: into the interpreter's own site-packages
    instead, the one place of the host a sandboxed suite sees besides its checkout
    (``/tmp`` is the box's scratch): the wheel's ``.pth`` lands there and is read at
    start-up, so no path entry is needed.
    """
    # imported here, not at module level: the driver's parser must build on a bare host
    # before ``host.ensure_kernelwatch`` has made kernelwatch importable
    from kernelwatch.kernels.adapters.cutlass_dsl_env import SOURCE_FILE, version_mismatch

    info: dict[str, Any] = {"notes": []}
    paths: list[str] = []
    examples = dsl_dir / EXAMPLES
    if (examples / SOURCE_FILE).is_file():
        info["example"] = json.loads((examples / SOURCE_FILE).read_text())
        paths.append(str(examples))
    else:
        info["example"] = None
        info["notes"].append(f"no {examples}/{SOURCE_FILE}: run prepare-cutlass-dsl")
    wheels = sorted(dsl_dir.glob(WHEEL_GLOB))
    if ctx.cpu:
        info["wheel"] = "CPU mode: not installed (the CuTe DSL needs a GPU)"
        return paths, info
    if not wheels:
        info["wheel"] = f"no {WHEEL_GLOB} in {dsl_dir}"
        return paths, info
    wheel, version = wheels[0], wheel_version(wheels[0])
    if len(wheels) > 1:
        info["notes"].append(f"{len(wheels)} wheels in {dsl_dir}: installing {wheel.name} only")
    mismatch = version_mismatch((info["example"] or {}).get("ref"), version)
    if mismatch:
        info["notes"].append(mismatch)  # the adapter refuses to run then, with this reason
    target = Path(sysconfig.get_path("purelib")) if into_site else site / f"dsl-{version}"
    t0 = time.monotonic()
    if not (target / "nvidia_cutlass_dsl").is_dir():
        step = host.pip_target(ctx, f"install-cutlass-dsl-{version}", [str(wheel)], target)
        if not step.ok:
            info["wheel"] = f"pip install of {wheel.name} failed: {' '.join(step.tail)}"
            return paths, info
    if not into_site:
        # --target does not read the wheel's .pth: its python_packages/ goes on the path
        paths = [str(target), str(target / "nvidia_cutlass_dsl" / "python_packages"), *paths]
    info.update(wheel=wheel.name, version=version, target=str(target))
    info.update(wheel_bytes=wheel.stat().st_size, install_s=round(time.monotonic() - t0, 1))
    return paths, info


def _pythonpath(paths: list[str]) -> str:
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*parts, *paths])


def _dsl_env(ctx: host.Context, paths: list[str], label: str) -> dict[str, str]:
    """The environment of a step that runs the DSL: its path, a cold compile cache, a log."""
    cache = tempfile.mkdtemp(prefix=f"kw-cute-cache-{label}-")
    return {
        "PYTHONPATH": _pythonpath(paths),
        "CUTE_DSL_CACHE_DIR": cache,
        "KW_CUTLASS_DSL_COMPILE_LOG": str(ctx.logs / f"compiles-{label}.jsonl"),
    }


def _tests(ctx: host.Context, args: argparse.Namespace, paths: list[str]) -> dict[str, Any]:
    # the tests' own deadline keeps time for the benches and the probe after them
    end = min(ctx.deadline, time.monotonic() + ctx.limit(150, reserve=200))
    sub = host.Context(ctx.out, ctx.logs, end, ctx.cpu, ctx.steps)
    ns = gputests.arguments(
        file=list(TESTS),
        keyword="cutlass",  # this adapter's tests and ATen's grouped-GEMM kernel-name test
        with_path=paths,
        test_timeout=args.test_timeout,
    )
    result, _ = gputests.run(sub, ns)
    return result


def case_label(p: dict[str, Any]) -> str:
    shape = f"{p.get('m')}x{p.get('n')}x{p.get('k')}"
    return f"{shape} {p['model']} {p['layer']}" if p.get("model") else shape


def _row(r: dict[str, Any]) -> dict[str, Any]:
    timing, tp = r.get("timing") or {}, r.get("throughput") or {}
    median = timing.get("median")
    return {
        "case": case_label(r.get("params") or {}),
        "params": r.get("params"),
        "status": r.get("status"),
        "median_us": None if median is None else round(median * 1e6, 2),
        "tflops": tp.get("tflops"),
        "pct_of_peak": tp.get("pct_of_peak"),
        "rel_l2": ((r.get("correctness") or {}).get("errors") or {}).get("rel_l2"),
        "cuda_graph": timing.get("cuda_graph"),
        "error": r.get("error") or "",
    }


def _bench(
    ctx: host.Context, args: argparse.Namespace, impl: str, library: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    out = ctx.logs / f"bench-{impl}.jsonl"
    size = args.size or ("smoke" if ctx.cpu else "quick")
    argv = [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", "gemm"]
    argv += ["--kernel", "gemm", "--size", size, "--impl", impl, "--backend", impl]
    argv += ["--budget", str(args.budget), "--library", json.dumps(library), "--out", str(out)]
    if ctx.cpu:
        argv += ["--device", "cpu"]
    step = ctx.run(f"bench-{impl}", argv, watch=out, **kw)
    rows = [_row(r) for r in host.read_jsonl(out)]
    return {
        "rc": step.rc,
        "timed_out": step.timed_out,
        "seconds": round(step.seconds, 1),
        "rows": rows,
    }


def compare(cute: list[dict[str, Any]], blas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case of either side: both medians and CuTe DSL / cuBLAS (> 1: CuTe slower)."""
    by_case = {json.dumps(r["params"], sort_keys=True): r for r in blas}
    rows = []
    for c in cute:
        b = by_case.get(json.dumps(c["params"], sort_keys=True), {})
        ratio = None
        if c.get("median_us") and b.get("median_us"):
            ratio = round(c["median_us"] / b["median_us"], 4)
        rows.append(
            {
                "case": c["case"],
                "params": c["params"],
                "cutlass_dsl": c,
                "cublas": b,
                "ratio": ratio,
            }
        )
    return rows


def _probe(ctx: host.Context, args: argparse.Namespace, paths: list[str]) -> dict[str, Any]:
    out = ctx.logs / "probe.json"
    argv = [sys.executable, str(PROBE), "--out", str(out), "--budget", str(args.budget)]
    argv += ["--no-sweep"] if args.no_sweep else []
    step = ctx.run("probe", argv, 150, reserve=5, env=_dsl_env(ctx, paths, "probe"))
    try:
        doc: dict[str, Any] = json.loads(out.read_text())
    except (OSError, ValueError):
        doc = {"error": f"no probe JSON (rc {step.rc}): {' '.join(step.tail)}"}
    return {"rc": step.rc, "timed_out": step.timed_out, **doc}


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    paths, inst = install(ctx, args.dsl_dir, into_site=args.into_site)
    result: dict[str, Any] = {"install": inst, "paths": paths}
    if not ctx.cpu and paths:
        result["imports"] = host.importable("cutlass.cute", os.pathsep.join(paths))
    if "tests" not in args.skip:
        result["tests"] = _tests(ctx, args, paths)
    if "bench" not in args.skip:
        example = inst.get("example") or {}
        lib = {"name": "nvidia-cutlass-dsl", "version": inst.get("version")}
        lib.update(commit=example.get("commit"), ref=example.get("ref"))
        env = _dsl_env(ctx, paths, "bench")
        cute = _bench(ctx, args, "cutlass-dsl", lib, want_s=120, reserve=100, env=env)
        torch_lib = {"name": "torch", "version": host.machine().get("torch"), "blas": "cuBLAS"}
        blas = _bench(ctx, args, "torch-gemm", torch_lib, want_s=90, reserve=60)
        result["bench"] = {"cutlass-dsl": cute, "torch-gemm": blas}
        result["compare"] = compare(cute["rows"], blas["rows"])
        result["compiles"] = host.read_jsonl(Path(env["KW_CUTLASS_DSL_COMPILE_LOG"]))
    if "probe" not in args.skip:
        result["probe"] = _probe(ctx, args, paths)
    return result, table(result)
