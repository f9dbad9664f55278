"""``libraries``: released versions and built commits of the libraries under test.

Three parts (``--part``, default all whose inputs were carried):

- ``gemm-kernels``: which kernels ``torch._scaled_mm`` (row-wise, per-tensor) and a
  bf16 ``mm`` launch, by the profiler's names: "CUTLASS" is checked, not assumed
  (2026-11-29: cuBLASLt's ``nvjet_sm90_*``, ``docs/data/gemm-kernel-names.json``).
- ``flashinfer``: two carried FlashInfer versions (``--versions 0.5.3,0.6.0``,
  wheels in ``.whl/``) each in its own ``pip --target`` folder, paired on one GPU
  by ``benchmarks/versions_paired.py`` (single decode 8K tokens, single prefill 4K:
  the gate's mode for versions, one side process per version).
- ``fa3``: FlashAttention-3 at commits (``--fa3 16c7f0f6 --fa3 3e87e421``) built
  by kernelwatch's environment cache (``python -m kernelwatch.worker.venvs build``,
  trimmed profile of ``docs/flash-attention.kernelwatch.toml``, offline) from the
  ``.src/`` tarballs that ``python -m benchmarks.gpu prepare-fa3`` makes on a
  networked machine; the first two commits compared in paired mode over the
  prefill suite (``bench-paired``), every further one benched alone. Builds take
  80-130 s each on the H200's 16 cores. The build JSONs name each environment's
  path: pass one to ``gputests --with-path`` for the adapter tests.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "libraries"
HELP = "FlashInfer versions paired; FA3 built at commits, paired and benched"
ENVS = Path("/tmp/kwenvs")
RECIPE = host.ROOT / "docs" / "flash-attention.kernelwatch.toml"
FA3_REPO = "https://github.com/Dao-AILab/flash-attention"
PARTS = ("gemm-kernels", "flashinfer", "fa3")


def gemm_kernels(ctx: host.Context) -> dict[str, Any]:
    """The profiler's kernel names of each GEMM call, and whether one is CUTLASS's."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if ctx.cpu or not torch.cuda.is_available():
        return {"skipped": "needs a CUDA GPU"}
    dev, m = "cuda", 4096
    a = torch.randn(m, m, device=dev).to(torch.float8_e4m3fn)
    w = torch.randn(m, m, device=dev).to(torch.float8_e4m3fn)
    row_a, row_w = torch.ones(m, 1, device=dev), torch.ones(1, m, device=dev)
    one = torch.tensor(1.0, device=dev)
    bf_a, bf_w = a.to(torch.bfloat16), w.to(torch.bfloat16)
    calls: dict[str, Callable[[], torch.Tensor]] = {
        "fp8_rowwise": lambda: torch._scaled_mm(
            a, w.t(), scale_a=row_a, scale_b=row_w, out_dtype=torch.bfloat16
        ),
        "fp8_tensorwise": lambda: torch._scaled_mm(
            a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
        ),
        "bf16_mm": lambda: bf_a @ bf_w.t(),
    }
    found: dict[str, Any] = {}
    for name, fn in calls.items():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:  # type: ignore[no-untyped-call, unused-ignore]
            fn()
            torch.cuda.synchronize()
        events = prof.events()  # type: ignore[no-untyped-call, unused-ignore]
        names = sorted({e.name for e in events if not e.name.startswith(("aten::", "cuda"))})
        found[name] = {"kernels": names, "cutlass": any("cutlass" in x.lower() for x in names)}
    return found


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--part", action="append", choices=PARTS)
    p.add_argument("--versions", default="0.5.3,0.6.0", help="two FlashInfer versions")
    p.add_argument("--repeats", type=int, default=2, help="paired repeats per FlashInfer case")
    p.add_argument("--fa3", action="append", metavar="COMMIT", help="FA3 commits (.src/)")
    p.add_argument("--build-timeout", type=float, default=280)


def _flashinfer(ctx: host.Context, args: argparse.Namespace) -> dict[str, Any]:
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    paths: dict[str, str] = {}
    notes: dict[str, str] = {}
    for v in versions:
        path, why = host.flashinfer(ctx, v)
        notes[v] = why
        if path:
            paths[v] = path
    if len(paths) < 2:
        return {"skipped": f"needs two FlashInfer versions: {notes}"}
    a, b = (paths[v] for v in versions[:2])
    out = ctx.logs / "versions_paired.json"
    argv = [sys.executable, str(host.ROOT / "benchmarks" / "versions_paired.py")]
    argv += ["--a", a, "--b", b, "--repeats", str(args.repeats), "--out", str(out)]
    step = ctx.run("flashinfer-versions", argv, 200, reserve=60)
    try:
        rows = json.loads(out.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        rows = []
    keep = ("case", "repeat", "ratio", "ci_low", "ci_high", "verdict", "a_median", "b_median")
    return {
        "versions": versions[:2],
        "rc": step.rc,
        "rows": [{k: r.get(k) for k in (*keep, "wall_s", "seconds")} for r in rows],
        "notes": notes,
    }


def _profile_env(profile: str) -> dict[str, str]:
    """The recipe's environment for ``profile``: tells the FA3 adapter what was left out."""
    from kernelwatch.jobs.library import repoconfig
    from kernelwatch.worker.recipes import recipe_set

    cfg = repoconfig.parse(RECIPE.read_text())
    return dict(recipe_set(cfg.install).select(profile).env)


def _unpack(commit: str) -> tuple[Path, str, Path] | str:
    """``.src/fa3-<sha>.tar.xz`` unpacked, with its CUTLASS include/ beside; or why not."""
    found = sorted(glob.glob(str(host.SOURCES / f"fa3-{commit}*.tar.xz")))
    if not found:
        return f"no .src/fa3-{commit}*.tar.xz (make it with prepare-fa3)"
    import tarfile

    full = Path(found[0]).name.removesuffix(".tar.xz").removeprefix("fa3-")
    src = Path("/tmp/kwfa3") / full
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(found[0]) as tar:
        tar.extractall(src, filter="data")
    pin = (src / ".kw-cutlass-pin").read_text().strip()
    cutlass = Path("/tmp/kwcutlass") / pin
    if not (cutlass / "include").is_dir():
        inc = host.SOURCES / f"cutlass-include-{pin}.tar.xz"
        if not inc.exists():
            return f"no .src/cutlass-include-{pin}.tar.xz for {full}"
        cutlass.mkdir(parents=True, exist_ok=True)
        with tarfile.open(inc) as tar:
            tar.extractall(cutlass, filter="data")
    return src, full, cutlass


def _fa3(ctx: host.Context, args: argparse.Namespace) -> dict[str, Any]:
    commits = args.fa3 or []
    if not commits:
        return {"skipped": "no --fa3 COMMIT given"}
    svc = host.service_wheels(ctx)
    builds: list[dict[str, Any]] = []
    for c in commits:
        got = _unpack(c)
        if isinstance(got, str):
            builds.append({"commit": c, "error": got})
            continue
        src, full, cutlass = got
        argv = [sys.executable, "-m", "kernelwatch.worker.venvs", "--root", str(ENVS)]
        argv += ["--max-gb", "40", "build", "--config", str(RECIPE), "--profile", "trimmed"]
        argv += ["--offline", "--timeout", str(args.build_timeout), "--source-dir", str(src)]
        argv += ["--commit", full, "--vendor", f"csrc/cutlass={cutlass}"]
        step = ctx.run(f"fa3-build-{c}", argv, args.build_timeout + 20, reserve=60)
        try:
            env = json.loads(host.tail(Path(step.log), 1)[0])
        except (IndexError, ValueError):
            env = {"error": f"no build JSON (rc {step.rc})"}
        builds.append({"commit": full, "rc": step.rc, "build_s": round(step.seconds, 1), **env})
    ok = [b for b in builds if b.get("pythonpath")]
    result: dict[str, Any] = {"service_wheels": svc, "builds": builds}
    if not ok:
        return result
    env = _profile_env("trimmed")
    os.environ.update(env)  # the adapter skips what the trimmed build left out
    impl = "kernelwatch.kernels.adapters.fa3"
    lib = {"name": "flash-attn-3", "source": FA3_REPO, "profile": "trimmed"}
    common = ["--suite", "prefill", "--kernel", "prefill", "--impl", impl, "--backend", "fa3"]
    common += ["--size", "quick"]
    if len(ok) >= 2:
        a, b = ok[0], ok[1]
        out = ctx.logs / "fa3_paired.jsonl"
        argv = [sys.executable, "-m", "kernelwatch.kernels.paired_suite", *common]
        argv += ["--baseline-path", os.pathsep.join(a["pythonpath"])]
        argv += ["--candidate-path", os.pathsep.join(b["pythonpath"])]
        argv += ["--library", json.dumps({**lib, "commit": b["commit"]})]
        argv += ["--baseline-library", json.dumps({**lib, "commit": a["commit"]})]
        argv += ["--min-effect", "0.01", "--out", str(out)]
        step = ctx.run("fa3-paired", argv, 240, reserve=30, watch=out)
        result["paired"] = [
            {
                "params": r.get("params"),
                "status": r.get("status"),
                **{k: (r.get("paired") or {}).get(k) for k in ("verdict", "ratio", "ci_low")},
                "ci_high": (r.get("paired") or {}).get("ci_high"),
            }
            for r in host.read_jsonl(out)
        ]
        result["paired_rc"] = step.rc
    for extra in ok[2:] if len(ok) >= 2 else ok:
        out = ctx.logs / f"fa3_{extra['commit'][:8]}_bench.jsonl"
        argv = [sys.executable, "-m", "kernelwatch.kernels.runner", *common, "--budget", "0.3"]
        argv += ["--library", json.dumps({**lib, "commit": extra["commit"]}), "--out", str(out)]
        pp = os.pathsep.join([os.environ.get("PYTHONPATH", ""), *extra["pythonpath"]])
        ctx.run(f"fa3-bench-{extra['commit'][:8]}", argv, 120, env={"PYTHONPATH": pp})
        result.setdefault("bench", {})[extra["commit"]] = [
            {
                "params": r.get("params"),
                "status": r.get("status"),
                "median_s": (r.get("timing") or {}).get("median"),
                "tflops": (r.get("throughput") or {}).get("tflops"),
            }
            for r in host.read_jsonl(out)
        ]
    return result


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    parts = args.part or list(PARTS)
    result: dict[str, Any] = {}
    table: list[str] = []
    if "gemm-kernels" in parts:
        gk = result["gemm_kernels"] = gemm_kernels(ctx)
        if "skipped" in gk:
            table.append(f"gemm kernels: skipped: {gk['skipped']}")
        for call, got in gk.items():
            if isinstance(got, dict):
                cut = "CUTLASS" if got["cutlass"] else "not CUTLASS"
                table.append(f"{call:<15} {cut:<12} {' '.join(got['kernels'])[:70]}")
    if "flashinfer" in parts:
        fi = result["flashinfer"] = _flashinfer(ctx, args)
        if "skipped" in fi:
            table.append(f"flashinfer: skipped: {fi['skipped']}")
        for r in fi.get("rows", []):
            table.append(
                f"flashinfer {'/'.join(fi['versions'])} {r['case'][:30]:<30} "
                f"B/A {r['ratio']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}] {r['verdict']}"
            )
    if "fa3" in parts:
        fa = result["fa3"] = _fa3(ctx, args)
        if "skipped" in fa:
            table.append(f"fa3: skipped: {fa['skipped']}")
        for b in fa.get("builds", []):
            table.append(
                f"fa3 build {b['commit'][:8]}: "
                + (f"{b.get('build_s')} s" if b.get("pythonpath") else f"FAILED {b.get('error')}")
            )
        for r in fa.get("paired", []):
            table.append(f"fa3 paired {r['status']} {r['verdict']} {r['ratio']} {r['params']}")
        for commit, rows in fa.get("bench", {}).items():
            for r in rows:
                table.append(f"fa3 {commit[:8]} {r['status']} {r['median_s']} s {r['tflops']} TF")
    return result, table
