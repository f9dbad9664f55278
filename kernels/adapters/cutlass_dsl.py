"""Implementation module ``cutlass_dsl`` (``cutlass-dsl``): CUTLASS's Hopper GEMM in the CuTe DSL.

Why: on the H200 with torch 2.11 every GEMM PyTorch dispatches, ``_scaled_mm``
included, ran cuBLAS(Lt) kernels (``docs/data/gemm-kernel-names.json``). This
adapter runs a CUTLASS GEMM for real: ``HopperWgmmaGemmKernel`` from CUTLASS's
``examples/python/CuTeDSL/hopper/dense_gemm.py`` (TMA loads, WGMMA, TMA-store
epilogue), compiled by the ``nvidia-cutlass-dsl`` wheel's ``cute.compile``.
``cutlass_dsl_env.py`` says where both come from.

- ``gemm``: ``C = A · Wᵀ``, bf16 or fp16 in and out, float32 accumulation. The
  suite's ``A [m, k]`` and ``W [n, k]`` are the example's K-major A and B, ``C``
  its N-major C: views, no copy.
- ``gemm_fp8_rowwise``, ``gemm_fp8_tensorwise``: skipped. The example's epilogue
  only converts the accumulator, with no scale, so scaled FP8 is not what it
  computes. ``run`` itself takes e4m3/e5m2 A and W without scales
  (``benchmarks/cutlass_dsl_probe.py`` holds that against cuBLASLt at unit scales).
- ``gemm_grouped*``: skipped; CUTLASS 4.3's CuTe DSL examples have no Hopper
  grouped GEMM.

Compiled once per (dtypes, tile, cluster, device) per process, in the checked
first call, so the timed calls run the cached kernel. The example marks the
layouts dynamic, so one binary serves every shape with that tile. The cute views
of a case's tensors are made once too (``_cache_cutlass_dsl``, keyed by pointer,
shape and strides, so each input copy of the timer gets its own); the stream is
read at every call, so a CUDA graph's capture records the launch on its stream.
Compile seconds go to ``compile_log()`` and, where ``KW_CUTLASS_DSL_COMPILE_LOG``
names a file, one JSON line per compile there: a result record has no field for them.

The tile: 128×256 for ``m > 64``; for thin GEMMs (``m ≤ 64``, decode-sized) the one
the card's class measured best for the output's width and the depth (``thin_tile``:
the H100's, with the H200's own where a paired run said it differs), cluster 1×1
unless a long k pays for 1×2. ``CUTLASS_DSL_TILE=128x128`` /
``CUTLASS_DSL_CLUSTER=2x1`` override it for a whole run; ``run(case,
TileConfig(...))`` for one call. The tile is the code
under test's choice, not the service's, so the names carry no ``KW_`` prefix: a
``.kernelwatch.toml`` recipe sets them (``[install] env``), and a paired run of two
commits whose recipes name two tiles compares the two configurations.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from kernelwatch.kernels.adapters import Unavailable, require_cuda
from kernelwatch.kernels.adapters.cutlass_dsl_env import DIST, KERNEL_CLASS, Dsl, describe, load
from kernelwatch.kernels.devclass import CPU_CLASS, device_class
from kernelwatch.kernels.suite import Inputs

LIB = DIST
CACHE_KEY = "_cache_cutlass_dsl"
COMPILE_LOG_ENV = "KW_CUTLASS_DSL_COMPILE_LOG"
TILE_ENV = "CUTLASS_DSL_TILE"
CLUSTER_ENV = "CUTLASS_DSL_CLUSTER"
NO_SCALES = (
    "CUTLASS's CuTe DSL Hopper dense GEMM example has no scale epilogue (C = A·B, converted): "
    "row-wise or per-tensor scaled FP8 is not what it computes"
)
NO_GROUPED = "CUTLASS 4.3's CuTe DSL examples have no Hopper grouped GEMM"
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# torch dtype -> the DSL's numeric type name (cutlass.<name>)
ELEMENT = {
    torch.bfloat16: "BFloat16",
    torch.float16: "Float16",
    torch.float8_e4m3fn: "Float8E4M3FN",
    torch.float8_e5m2: "Float8E5M2",
    torch.float32: "Float32",
}
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class TileConfig:
    """The example's two knobs: CTA tile (M 64/128, N 64/128/256) and cluster (≤ 4 CTAs)."""

    tile: tuple[int, int]
    cluster: tuple[int, int] = (1, 1)

    @property
    def label(self) -> str:
        return f"{self.tile[0]}x{self.tile[1]}/{self.cluster[0]}x{self.cluster[1]}"


def _pair(text: str | None, what: str) -> tuple[int, int] | None:
    if not text:
        return None
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"{what} must look like 128x256, not {text!r}")
    return int(parts[0]), int(parts[1])


# Thin GEMMs (m <= 64): the grid is n / tile-N CTAs, and the example has no split-K, so
# the tile trades CTAs for work per CTA. Measured on an H100 (2026-12-06,
# docs/measurement.md §25b, §25e) over Llama-3-8B's four projections at 64 tokens: 64x64
# everywhere left them at 1.08-1.36x of cuBLAS; per shape the best tile reads 1.00-1.36x
# (64x4096x4096 stays 1.36x at every tile: 64 CTAs on 132 SMs).
WIDE_N = 16384  # gate_up (n = 28672): 64x256, 87.6 µs against 95.2 for 64x64
MID_N = 4096  # qkv (n = 6144): 64x128, 23.1 against 24.8 (and 1x2 lost 2.2 %, paired)
DEEP_K = 8192  # down (k = 14336): 64x64 in a 1x2 cluster, 5.4 % faster, paired


# Where another card's best tile differs from the H100's: (card class, the constant's
# band) -> tile. On the H200 (2026-12-06, docs/measurement.md §31) the qkv band's
# 64x128 read 1.063 [1.0596, 1.0663] against 64x64, paired and confirmed through the
# sandboxed worker, and the sweep 19.4 against 18.4 µs; gate_up's 64x256 and down's
# 64x64 in 1x2 stayed the H200's best too.
CARD_TILES: dict[tuple[str, str], TileConfig] = {("h200", "mid"): TileConfig((64, 64))}


def current_card(index: int | None = None) -> str:
    """The device class of CUDA device ``index`` (the current one where None;
    ``devclass.device_class``), the CPU class without CUDA: what ``thin_tile`` looks its
    card's tiles up by."""
    if not torch.cuda.is_available():
        return CPU_CLASS
    return _card_of(torch.cuda.current_device() if index is None else index)


@functools.cache
def _card_of(index: int) -> str:
    """Once per device and process: ``run`` asks at every call, timed ones included."""
    return device_class(torch.cuda.get_device_name(index))


def thin_tile(n: int, k: int, card: str = "") -> TileConfig:
    """The tile for a ``64 × n`` output over depth ``k`` on a ``card`` class (the
    constants above, then ``CARD_TILES``)."""
    if n >= WIDE_N:
        return TileConfig((64, 256))
    if n > MID_N:
        return CARD_TILES.get((card, "mid"), TileConfig((64, 128)))
    if k >= DEEP_K:
        return TileConfig((64, 64), (1, 2))
    return TileConfig((64, 64))


def tile_config(
    m: int, n: int, env: dict[str, str] | None = None, *, k: int = 0, card: str | None = None
) -> TileConfig:
    """The tile and cluster for an ``m × n`` output over depth ``k`` on a ``card`` class
    (this process's device where None; see the module docstring). A tile named in the
    environment comes with its own cluster, 1×1 unless named too: a recipe that names a
    tile means that configuration, not a default's."""
    env = dict(os.environ) if env is None else env
    card = current_card() if card is None else card
    default = thin_tile(n, k, card) if m <= 64 else TileConfig((128, 256))
    tile = _pair(env.get(TILE_ENV), TILE_ENV)
    cluster = _pair(env.get(CLUSTER_ENV), CLUSTER_ENV)
    if tile is None:
        return TileConfig(default.tile, cluster or default.cluster)
    return TileConfig(tile, cluster or (1, 1))


def unsupported(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> str | None:
    """Why the example cannot take these tensors (dtypes, layout, TMA alignment); None if it can."""
    for name, t in (("A", a), ("W", w)):
        if t.dtype not in ELEMENT or t.dtype == torch.float32:
            return f"{name} in {t.dtype}: the example takes fp16, bf16 or FP8 operands"
    if a.element_size() != w.element_size() or (a.element_size() == 2 and a.dtype != w.dtype):
        return f"A {a.dtype} with W {w.dtype}: 16-bit operands must match, 8-bit ones be 8-bit"
    if out.dtype not in OUT_DTYPES:
        return f"C in {out.dtype}: this adapter writes bf16, fp16 or float32"
    if (
        a.dim() != 2
        or w.dim() != 2
        or w.size(1) != a.size(1)
        or out.shape != (a.size(0), w.size(0))
    ):
        return f"a {tuple(a.shape)}, w {tuple(w.shape)}, out {tuple(out.shape)} are not C = A·Wᵀ"
    for name, t in (("a", a), ("w", w), ("out", out)):
        if t.stride(1) != 1 or t.stride(0) != t.size(1):
            return f"{name} is not a contiguous row-major matrix"
        if (t.size(1) * t.element_size()) % 16:
            return f"{name}'s rows ({t.size(1)} × {t.dtype}) are not a multiple of 16 bytes (TMA)"
        if t.data_ptr() % 16:
            return f"{name} does not start 16-byte aligned"
    return None


@dataclass(frozen=True)
class _Compiled:
    fn: Any
    seconds: float


_COMPILED: dict[tuple[str, ...], _Compiled] = {}
_LOG: list[dict[str, Any]] = []


def compile_log() -> list[dict[str, Any]]:
    """One entry per ``cute.compile`` this process made: dtypes, tile, cluster, seconds."""
    return list(_LOG)


def _note(dsl: Dsl, key: tuple[str, ...], cfg: TileConfig, seconds: float) -> None:
    entry = {
        "kernel": KERNEL_CLASS,
        "dtypes": list(key[:3]),
        "tile": list(cfg.tile),
        "cluster": list(cfg.cluster),
        "seconds": round(seconds, 4),
        "dsl_version": dsl.version,
    }
    _LOG.append(entry)
    path = os.environ.get(COMPILE_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def _view(dsl: Dsl, t: torch.Tensor, cache: dict[Any, Any]) -> Any:
    """``t`` as the example's ``(rows, cols, L=1)`` tensor with a dynamic layout, made once."""
    key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype))
    hit = cache.get(key)
    if hit is None:
        base = t.view(torch.uint8) if t.dtype in FP8 else t  # DLPack has no FP8: as the example
        hit = dsl.from_dlpack(base.unsqueeze(0).permute(1, 2, 0), assumed_align=16)
        if t.dtype in FP8:
            hit.element_type = getattr(dsl.cutlass, ELEMENT[t.dtype])
        hit = hit.mark_layout_dynamic(leading_dim=1)
        cache[key] = hit
    return hit


def _compiled(
    dsl: Dsl, cfg: TileConfig, tensors: tuple[torch.Tensor, ...], views: list[Any], stream: Any
) -> Any:
    device = str(tensors[0].device)
    key = (*(ELEMENT[t.dtype] for t in tensors), cfg.label, device)
    hit = _COMPILED.get(key)
    if hit is None:
        kernel = getattr(dsl.example, KERNEL_CLASS)(dsl.cutlass.Float32, cfg.tile, cfg.cluster)
        t0 = time.perf_counter()
        fn = dsl.cute.compile(kernel, *views, stream)
        hit = _COMPILED[key] = _Compiled(fn, time.perf_counter() - t0)
        _note(dsl, key, cfg, hit.seconds)
    return hit.fn


def run(case: Inputs, config: TileConfig | None = None) -> torch.Tensor:
    """``case["out"] = case["a"] · case["w"]ᵀ`` by the example's kernel; returns ``out``."""
    a, w = case["a"], case["w"]
    out: torch.Tensor = case["out"]
    require_cuda(a, "the CuTe DSL")
    cc = torch.cuda.get_device_capability(a.device)
    if cc != (9, 0):
        raise Unavailable(
            f"CUTLASS's Hopper dense GEMM needs sm_90 (WGMMA, TMA); this is sm_{cc[0]}{cc[1]}"
        )
    why = unsupported(a, w, out)
    if why:
        raise Unavailable(why)
    dsl = load()
    cfg = config or tile_config(
        a.size(0), w.size(0), k=a.size(1), card=current_card(a.device.index)
    )
    cache = case.setdefault(CACHE_KEY, {})
    views = [_view(dsl, t, cache) for t in (a, w, out)]
    stream = dsl.driver.CUstream(torch.cuda.current_stream(a.device).cuda_stream)
    _compiled(dsl, cfg, (a, w, out), views, stream)(*views, stream)
    return out


def gemm(case: Inputs) -> torch.Tensor:
    if case["a"].dtype in FP8:
        raise Unavailable(NO_SCALES)  # the suite's FP8 inputs always come with scales
    return run(case)


def gemm_fp8_rowwise(case: Inputs) -> torch.Tensor:
    raise Unavailable(NO_SCALES)


def gemm_fp8_tensorwise(case: Inputs) -> torch.Tensor:
    raise Unavailable(NO_SCALES)


def gemm_grouped(case: Inputs) -> torch.Tensor:
    raise Unavailable(NO_GROUPED)


def gemm_grouped_fp8_rowwise(case: Inputs) -> torch.Tensor:
    raise Unavailable(NO_GROUPED)


__all__ = [
    "LIB",
    "TileConfig",
    "compile_log",
    "describe",
    "gemm",
    "gemm_fp8_rowwise",
    "gemm_fp8_tensorwise",
    "gemm_grouped",
    "gemm_grouped_fp8_rowwise",
    "run",
    "thin_tile",
    "current_card",
    "CARD_TILES",
    "tile_config",
    "unsupported",
]
