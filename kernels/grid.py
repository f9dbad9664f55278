"""Shape grids as data: suite files in TOML expanded into case parameters.

Why: the shapes a suite measures are a decision about *which workloads matter*
(Llama-3 at 8B and 70B under tensor parallelism, DeepSeek-V3's MLA, a serving
batch of mixed lengths), and they change far more often than the code that runs
them. Keeping them in ``kernels/suites/<suite>.toml`` lets a reviewer read and
change the grid without reading Python, and keeps the case parameters (and so
the case ids, which hash them) stable when the code is refactored.

This module only expands grids; it knows nothing of tensors. The suite builders
(``kernels/suites/prefill.py`` ...) turn each parameter dict into a case.

File format::

    [suite]
    name = "prefill"
    gpus = 1                   # optional: GPUs of one host a case needs (default 1)

    [[smoke]]                  # one block = one cartesian product; a size has many blocks
    kernel = "prefill"         # scalar: the same in every case of the block
    model = ["llama3-8b", "llama3-70b"]   # list: an axis (one case per element)
    tp = 8                     # tensor parallelism divides a model's heads
    shape = [{batch = 1, seq = 4096}, {batch = 4, seq = 2048}]  # tables: zipped keys
    causal = [true, false]
    dtype = "bfloat16"
    max_tokens = 65536         # filter, not a parameter: batch × query tokens

Rules: a list is an axis; a table is merged into the case (so a list of tables
varies several keys together); ``model`` fills ``heads``/``kv_heads``/
``head_dim`` (and MLA dimensions, or GEMM dimensions through ``layer``) from
``MODELS`` unless the block sets them; keys ending in ``_lens`` hold a list of
per-sequence lengths: a list of integers is *one* value, a table ``{count, min,
max, seed, dist}`` generates one deterministically, and a list of those is an
axis. ``max_tokens`` / ``max_kv_tokens`` drop cases above the bound. Cases come
out in file order, duplicates removed. Size names are free (``smoke``: CPU and
quick checks; ``quick``: one GPU session; ``full``: nightly).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

Params = dict[str, Any]
FILTERS = ("max_tokens", "max_kv_tokens")


class GridError(ValueError):
    """A suite file that cannot be expanded; the message names the file and the block."""


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention (DeepSeek-V2/V3): the compressed KV cache per token."""

    kv_lora_rank: int  # head_dim_ckv: the latent ("compressed KV") width
    qk_rope_head_dim: int  # head_dim_kpe: the decoupled RoPE part
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def softmax_scale(self) -> float:
        """1/sqrt of the query-key head dim before absorption (nope + rope)."""
        return 1.0 / math.sqrt(self.qk_nope_head_dim + self.qk_rope_head_dim)


@dataclass(frozen=True)
class ModelPreset:
    """Attention and MLP dimensions of one model, as in its published config.json."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    mla: MlaDims | None = None


# Published configurations (config.json on the model hubs).
MODELS: dict[str, ModelPreset] = {
    "llama2-7b": ModelPreset(4096, 32, 32, 128, 11008),  # multi-head: no GQA
    "llama3.2-1b": ModelPreset(2048, 32, 8, 64, 8192),  # head_dim 64
    "llama3-8b": ModelPreset(4096, 32, 8, 128, 14336),
    "llama3-70b": ModelPreset(8192, 64, 8, 128, 28672),
    "llama3-405b": ModelPreset(16384, 128, 8, 128, 53248),
    "qwen2.5-7b": ModelPreset(3584, 28, 4, 128, 18944),  # GQA ratio 7
    "qwen2.5-72b": ModelPreset(8192, 64, 8, 128, 29568),
    "qwen3-8b": ModelPreset(4096, 32, 8, 128, 12288),
    "qwen3-32b": ModelPreset(5120, 64, 8, 128, 25600),
    "gemma2-9b": ModelPreset(3584, 16, 8, 256, 14336),  # head_dim 256
    "deepseek-v3": ModelPreset(7168, 128, 128, 192, 18432, MlaDims(512, 64, 128, 128)),
}

GEMM_LAYERS = ("qkv", "o", "gate_up", "down")


def model_params(name: str, tp: int = 1) -> Params:
    """Attention parameters of a preset, per GPU under ``tp``-way tensor parallelism.

    Query heads are split across GPUs; KV heads too, but never below one (with
    more GPUs than KV heads, each GPU keeps a replica of one KV head).
    """
    try:
        m = MODELS[name]
    except KeyError:
        raise GridError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None
    if tp < 1 or m.heads % tp:
        raise GridError(f"model {name}: {m.heads} heads do not split over tp={tp}")
    out: Params = {
        "heads": m.heads // tp,
        "kv_heads": max(1, m.kv_heads // tp),
        "head_dim": m.head_dim,
    }
    if m.mla is not None:
        out.update(
            head_dim_ckv=m.mla.kv_lora_rank,
            head_dim_kpe=m.mla.qk_rope_head_dim,
            sm_scale=m.mla.softmax_scale,
        )
        del out["kv_heads"], out["head_dim"]
    return out


def gemm_shape(model: str, layer: str, tokens: int, tp: int = 1) -> tuple[int, int, int]:
    """(M, N, K) of one linear layer of ``model`` for ``tokens`` rows, per GPU.

    Column-parallel layers (qkv, gate_up) split N over ``tp``; row-parallel ones
    (o, down) split K. ``gate_up`` is the fused gate and up projection (2 × the
    intermediate size), as serving engines run it.
    """
    m = MODELS.get(model)
    if m is None:
        raise GridError(f"unknown model {model!r}; known: {', '.join(sorted(MODELS))}")
    if m.mla is not None:
        raise GridError(f"model {model}: MLA projections are not modelled as GEMM layers")
    kv = max(1, m.kv_heads // tp) * tp
    shapes = {
        "qkv": (tokens, (m.heads + 2 * kv) * m.head_dim // tp, m.hidden),
        "o": (tokens, m.hidden, m.heads * m.head_dim // tp),
        "gate_up": (tokens, 2 * m.intermediate // tp, m.hidden),
        "down": (tokens, m.hidden, m.intermediate // tp),
    }
    if layer not in shapes:
        raise GridError(f"unknown layer {layer!r}; known: {', '.join(GEMM_LAYERS)}")
    return shapes[layer]


def mixed_lengths(
    count: int, low: int, high: int, seed: int = 0, dist: str = "loguniform"
) -> list[int]:
    """``count`` sequence lengths in [low, high], the same for the same arguments.

    ``loguniform`` looks like a serving batch (many short requests, a few long
    ones); ``uniform`` spreads evenly. ``random.Random(seed)`` is stable across
    Python versions for integer seeds.
    """
    if count < 1 or low < 1 or high < low:
        raise GridError(f"bad length mix: count={count} min={low} max={high}")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        u = rng.random()
        if dist == "loguniform":
            x = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
        elif dist == "uniform":
            x = low + u * (high - low)
        else:
            raise GridError(f"unknown length distribution {dist!r} (loguniform, uniform)")
        out.append(min(high, max(low, round(x))))
    return out


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class GridFile:
    """A parsed suite file: its name, the GPUs it needs, and the blocks of each size.

    ``gpus`` (``[suite] gpus = K``, default 1): how many GPUs of one host the
    suite's cases use at once (a collective, tensor-parallel attention); the
    planner routes such a run to a worker that owns that many cards
    (``kernels/catalog.py:suite_gpus``).
    """

    name: str
    sizes: dict[str, list[Params]]
    source: str
    gpus: int = 1

    def size_names(self) -> list[str]:
        return list(self.sizes)

    def cases(self, size: str) -> list[Params]:
        """Every case of ``size``, in file order, without duplicates."""
        if size not in self.sizes:
            raise GridError(
                f"{self.source}: no size {size!r}; sizes: {', '.join(self.sizes) or 'none'}"
            )
        seen: set[str] = set()
        out: list[Params] = []
        for i, block in enumerate(self.sizes[size]):
            try:
                expanded = expand_block(block)
            except GridError as exc:
                raise GridError(f"{self.source} [[{size}]] block {i + 1}: {exc}") from None
            for case in expanded:
                key = json.dumps(case, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append(case)
        return out


def parse(text: str, source: str = "<string>") -> GridFile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"{source}: {exc}") from exc
    suite = data.pop("suite", {})
    if not isinstance(suite, dict):
        raise GridError(f"{source}: [suite] must be a table")
    gpus = suite.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise GridError(f"{source}: [suite] gpus must be an integer >= 1, got {gpus!r}")
    sizes: dict[str, list[Params]] = {}
    for size, blocks in data.items():
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise GridError(f"{source}: size {size!r} must be an array of tables ([[{size}]])")
        sizes[size] = blocks
    return GridFile(str(suite.get("name", Path(source).stem)), sizes, source, gpus)


def load(path: Path) -> GridFile:
    return parse(path.read_text(encoding="utf-8"), str(path))


# What a suite may be called: built-in suites (``basic``, ``gemm``) and plugin entry points
# (``mylib-gemm``). ``.kernelwatch.toml`` is checked against it (``jobs/library/config_model.py``).
SUITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def builtin(name: str) -> GridFile:
    """The grid file shipped with kernelwatch: ``kernels/suites/<name>.toml``."""
    if not SUITE_NAME.fullmatch(name):  # a name, never a path
        raise ValueError(f"not a built-in suite name: {name!r}")
    ref = resources.files("kernelwatch.kernels.suites").joinpath(f"{name}.toml")
    return parse(ref.read_text(encoding="utf-8"), f"suites/{name}.toml")


# --------------------------------------------------------------------------- expansion


def expand_block(block: Params) -> list[Params]:
    """The cases of one block: the product of its axes, resolved and filtered."""
    axes: list[tuple[str, list[Any]]] = []
    for key, value in block.items():
        _check_value(key, value)
        if key.endswith("_lens"):
            is_axis = isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value)
            axes.append((key, list(value) if is_axis else [value]))
        elif isinstance(value, list):
            if not value:
                raise GridError(f"axis {key!r} is empty")
            axes.append((key, value))
        else:
            axes.append((key, [value]))
    cases = []
    for combo in itertools.product(*(values for _, values in axes)):
        raw = dict(zip((k for k, _ in axes), combo, strict=True))
        case = _resolve(raw)
        if _keep(case):
            for f in FILTERS:
                case.pop(f, None)
            cases.append(case)
    return cases


def _resolve(raw: Params) -> Params:
    case: Params = {}
    for key, value in raw.items():
        if isinstance(value, dict) and not key.endswith("_lens"):
            case.update(value)  # zipped keys
        else:
            case[key] = value
    for key in [k for k in case if k.endswith("_lens")]:
        case[key] = _lengths(key, case[key])
    tp = int(case.get("tp", 1))
    if "model" in case and "layer" in case:  # a GEMM of one of the model's linear layers
        if "tokens" not in case:
            raise GridError("a GEMM layer needs 'tokens' (the M dimension)")
        m, n, k = gemm_shape(str(case["model"]), str(case["layer"]), int(case["tokens"]), tp)
        case.update(m=m, n=n, k=k)
    elif "model" in case:
        for key, value in model_params(str(case["model"]), tp).items():
            case.setdefault(key, value)
    return case


def _lengths(key: str, value: Any) -> list[int]:
    if isinstance(value, dict):
        mix: dict[str, Any] = value
        unknown = set(mix) - {"count", "min", "max", "seed", "dist"}
        if unknown or "count" not in mix or "min" not in mix:
            raise GridError(f"{key}: a length mix is {{count, min, max, seed, dist}}")
        return mixed_lengths(
            int(mix["count"]),
            int(mix["min"]),
            int(mix.get("max", mix["min"])),
            int(mix.get("seed", 0)),
            str(mix.get("dist", "loguniform")),
        )
    if isinstance(value, list) and value and all(isinstance(v, int) and v > 0 for v in value):
        return [int(v) for v in value]
    raise GridError(f"{key}: expected a list of positive lengths or a length mix, got {value!r}")


def _keep(case: Params) -> bool:
    q_tokens = _tokens(case, ("q_lens", "seq_lens"), ("seq_q", "seq"))
    kv_tokens = _tokens(case, ("kv_lens", "seq_lens"), ("seq_k", "kv_len", "seq"))
    if "max_tokens" in case and q_tokens is not None and q_tokens > int(case["max_tokens"]):
        return False
    return not (
        "max_kv_tokens" in case and kv_tokens is not None and kv_tokens > int(case["max_kv_tokens"])
    )


def _tokens(case: Params, list_keys: tuple[str, ...], scalar_keys: tuple[str, ...]) -> int | None:
    for key in list_keys:
        if key in case:
            return int(sum(case[key]))
    for key in scalar_keys:
        if key in case:
            return int(case.get("batch", 1)) * int(case[key])
    return None


def _check_value(key: str, value: Any) -> None:
    ok = (str, int, float, bool, list, dict)
    if not isinstance(value, ok):
        raise GridError(f"{key}: unsupported value {value!r} (strings, numbers, lists, tables)")
