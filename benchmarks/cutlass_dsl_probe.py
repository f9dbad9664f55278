"""The CuTe DSL dense GEMM beside cuBLAS where the gemm suite cannot hold them side by side.

Run by ``python -m benchmarks.gpu cutlass-dsl`` with the DSL and CUTLASS's example
on the path; writes one JSON (after every part, so a timeout keeps what finished):

- ``kernel_names``: the profiler's CUDA kernel names of one call each: the CuTe
  DSL GEMM in bf16 and FP8, ``torch.mm`` in bf16, ``_scaled_mm`` in FP8: which
  library ran, by name;
- ``fp8``: e4m3 A and W, bf16 C, **no scales** (the example has no scale
  epilogue), on the quick suite's FP8 shapes, against ``torch._scaled_mm`` with
  unit per-tensor scales (the same arithmetic); both checked against the float32
  product of the same e4m3 values and timed with kernelwatch's timer;
- ``sweep``: a few tiles and clusters on one large bf16 GEMM and on every thin
  (m = 64) one of the quick suite, with cuBLAS beside them, so that ``tile_config``
  can come from measurements.

    python benchmarks/cutlass_dsl_probe.py --out probe.json [--budget 0.3] [--no-sweep]
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kernelwatch.kernels.adapters import cutlass_dsl as cd  # noqa: E402
from kernelwatch.kernels.adapters.cutlass_dsl_env import describe  # noqa: E402
from kernelwatch.kernels.flops import gemm_flops  # noqa: E402
from kernelwatch.kernels.suite import load_suite  # noqa: E402
from kernelwatch.kernels.timing import TimerConfig, measure  # noqa: E402

Case = dict[str, Any]
E4M3 = torch.float8_e4m3fn
BF16 = torch.bfloat16
THIN = [  # the example's thin-tile candidates (M 64); the cluster is along N
    cd.TileConfig((64, 64)),
    cd.TileConfig((64, 128)),
    cd.TileConfig((64, 256)),
    cd.TileConfig((64, 64), (1, 2)),
    cd.TileConfig((64, 128), (1, 2)),
    cd.TileConfig((64, 64), (1, 4)),
]
# every m = 64 shape of the gemm suite's quick size (Llama-3-8B's qkv, o, gate_up, down at
# 64 tokens): one shape was not enough to choose a thin tile by (2026-12-06, H100: the
# 1x2 cluster won 12 % at 64x4096x4096 alone and lost 2.2 % at 64x6144x4096, paired)
SWEEP: dict[tuple[int, int, int], list[cd.TileConfig]] = {
    (4096, 4096, 4096): [
        cd.TileConfig((128, 128)),
        cd.TileConfig((128, 256)),
        cd.TileConfig((128, 256), (2, 1)),
        cd.TileConfig((128, 256), (1, 2)),
        cd.TileConfig((128, 128), (2, 1)),
    ],
    (64, 4096, 4096): THIN,
    (64, 6144, 4096): THIN,
    (64, 28672, 4096): THIN,
    (64, 4096, 14336): THIN,
}


def kernel_names(fn: Callable[[], Any]) -> list[str]:
    """The CUDA kernels one call launches, by the profiler's names (after one warm call)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return sorted({e.name for e in prof.events() if e.device_type == cuda})


def _operands(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0) -> Case:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), generator=g, device="cuda").to(dtype)
    w = torch.randn((n, k), generator=g, device="cuda").to(dtype)
    return {"a": a, "w": w, "out": torch.empty((m, n), device="cuda", dtype=BF16)}


def _cublas_fp8(case: Case) -> torch.Tensor:
    one = case["one"]
    out: torch.Tensor = torch._scaled_mm(
        case["a"], case["w"].t(), scale_a=one, scale_b=one, out_dtype=BF16
    )
    case["out"] = out
    return out


def _mm(case: Case) -> torch.Tensor:
    out: torch.Tensor = torch.mm(case["a"], case["w"].t(), out=case["out"])
    return out


def _rel_l2(out: torch.Tensor, case: Case) -> float:
    ref = case["a"].float() @ case["w"].float().t()
    return float((out.float() - ref).norm() / ref.norm())


def _time(call: Callable[[Case], Any], case: Case, budget: float) -> tuple[float, bool]:
    m = measure(call, case, TimerConfig(budget_s=budget, max_warmup_s=0.5))
    return m.timing.median, m.reliable


def names_part() -> dict[str, list[str]]:
    bf, f8 = _operands(1024, 1024, 1024, BF16), _operands(1024, 1024, 1024, E4M3)
    f8["one"] = torch.tensor(1.0, device="cuda")
    return {
        "cute_bf16": kernel_names(lambda: cd.run(bf)),
        "cute_fp8": kernel_names(lambda: cd.run(f8)),
        "cublas_bf16": kernel_names(lambda: _mm(bf)),
        "cublaslt_fp8": kernel_names(lambda: _cublas_fp8(dict(f8))),
    }


def fp8_part(budget: float) -> list[dict[str, Any]]:
    shapes = [
        (int(s.params["m"]), int(s.params["n"]), int(s.params["k"]))
        for s in load_suite("gemm", "quick", torch.device("cuda"))
        if s.kernel == "gemm_fp8_tensorwise"
    ]
    rows = []
    for m, n, k in shapes:
        label = f"{m}x{n}x{k}"
        try:
            cute = _operands(m, n, k, E4M3)
            blas = {
                **cute,
                "out": torch.empty_like(cute["out"]),
                "one": torch.ones((), device="cuda"),
            }
            cute_err = _rel_l2(cd.run(cute), cute)
            blas_err = _rel_l2(_cublas_fp8(blas), blas)
            cute_s, cute_ok = _time(cd.run, cute, budget)
            blas_s, blas_ok = _time(_cublas_fp8, blas, budget)
        except Exception as exc:  # one shape's failure is a row, not the end of the probe
            rows.append({"case": label, "error": f"{type(exc).__name__}: {exc}"})
            continue
        fl = gemm_flops(m, n, k)
        rows.append(
            {
                "case": label,
                "tile": cd.tile_config(m, n, k=k).label,
                "cute_us": cute_s * 1e6,
                "cute_tflops": fl / cute_s / 1e12,
                "cute_rel_l2": cute_err,
                "cublas_us": blas_s * 1e6,
                "cublas_tflops": fl / blas_s / 1e12,
                "cublas_rel_l2": blas_err,
                "reliable": cute_ok and blas_ok,
            }
        )
    return rows


def sweep_part(budget: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (m, n, k), configs in SWEEP.items():
        case, label = _operands(m, n, k, BF16), f"{m}x{n}x{k}"
        fl = gemm_flops(m, n, k)
        calls: list[tuple[str, Callable[[Case], Any]]] = [("cuBLAS", _mm)]
        calls += [(c.label, lambda x, c=c: cd.run(x, c)) for c in configs]
        for name, call in calls:
            try:
                call(case)  # compiles a new configuration outside the timing
                seconds, ok = _time(call, case, budget)
            except Exception as exc:
                rows.append({"case": label, "label": name, "error": f"{type(exc).__name__}: {exc}"})
                continue
            rows.append(
                {
                    "case": label,
                    "label": name,
                    "us": seconds * 1e6,
                    "tflops": fl / seconds / 1e12,
                    "reliable": ok,
                }
            )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--budget", type=float, default=0.3)
    p.add_argument("--no-sweep", action="store_true")
    args = p.parse_args()
    doc: dict[str, Any] = {"library": describe(), "errors": {}}
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        doc["skipped"] = "needs a CUDA GPU of sm_90 (Hopper)"
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        return 0
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("kernel_names", names_part),
        ("fp8", lambda: fp8_part(args.budget)),
    ]
    if not args.no_sweep:
        parts.append(("sweep", lambda: sweep_part(args.budget)))
    for key, part in parts:
        try:
            doc[key] = part()
        except Exception as exc:  # e.g. the DSL missing: say so, keep the other parts
            doc["errors"][key] = f"{type(exc).__name__}: {exc}"
            print(traceback.format_exc(), file=sys.stderr)
        doc["compiles"] = cd.compile_log()
        args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"{key}: {json.dumps(doc.get(key), default=str)[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
