"""Shared pieces of the attention and GEMM suites: inputs, paged caches, references.

The calling convention of these suites (unlike ``basic``): an implementation
is ``fn(case) -> Tensor``, where ``case`` is the dict of inputs (tensors and
plain parameters, keys documented in ``docs/suites.md``). It may write into
``case["out"]`` and return it, or return a tensor of its own (most library APIs
allocate their output); ``invoke`` stores what it returns as the output. An
adapter may cache derived objects (a planned FlashInfer wrapper, a transposed
copy) under keys starting with ``_cache``; they are built during the first,
checked call and so never timed.

References are written for clarity, not speed, but bounded in memory: the
attention reference works one sequence and a few heads at a time, so a full-size
case never materialises a batch × heads × seq² score tensor. The decode
references work a batch at a time (``batch_slices``): one query token a sequence
keeps the batch's scores small, and per-sequence launches were what their check
cost on a shared GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelwatch.kernels.suite import Inputs

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
SCORE_BUDGET = 1 << 26  # score elements held at once by the attention reference


def dtype_of(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def invoke(fn: Callable[[Inputs], Any], case: Inputs) -> Any:
    """Call ``fn(case)``; what it returns (if a tensor) becomes ``case["out"]``."""
    return kept(case, fn(case))


def kept(case: Inputs, result: Any) -> Any:
    """``result``; a returned tensor other than ``case["out"]`` becomes ``case["out"]``, the
    output checked (libraries such as Liger-Kernel allocate theirs: no copy is timed)."""
    if isinstance(result, torch.Tensor) and result is not case["out"]:
        case["out"] = result
    return result


def randn(
    shape: tuple[int, ...], g: torch.Generator, dev: torch.device, dt: torch.dtype
) -> torch.Tensor:
    """Standard normal values drawn in float32 (so every dtype sees the same numbers)."""
    return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(dt)


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Per-tensor e4m3 quantization: (x / scale) in FP8 and the scale (amax / 448)."""
    amax = float(x.detach().abs().max().item()) or 1.0
    scale = amax / FP8_MAX
    return (x.float() / scale).to(FP8), scale


def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise e4m3 quantization: one float32 scale per row (shape ``[rows, 1]``)."""
    amax = x.detach().float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    scale = amax / FP8_MAX
    return (x.float() / scale).to(FP8), scale.float()


def hi_dtype(device: torch.device) -> torch.dtype:
    """Reference precision: float64 on the CPU, float32 on a GPU (float64 is slow there)."""
    return torch.float64 if device.type == "cpu" else torch.float32


# --------------------------------------------------------------------------- paged KV


@dataclass
class PagedLayout:
    """Where each sequence's tokens live in a paged cache, in the two usual encodings.

    FlashInfer's CSR form (``kv_indptr``/``kv_indices``/``kv_last_page_len``) and
    the padded block table of FlashAttention and vLLM (``block_table``, unused
    slots pointing at page 0) describe the same pages. Pages are shuffled, as in a
    cache that has served other requests, so a kernel cannot get away with
    assuming sequence pages are contiguous.
    """

    pages: list[list[int]]
    num_pages: int
    page_size: int

    def tensors(self, dev: torch.device) -> dict[str, torch.Tensor]:
        lens = [len(p) for p in self.pages]
        indptr = [0]
        for n in lens:
            indptr.append(indptr[-1] + n)
        width = max(lens)
        table = [p + [0] * (width - len(p)) for p in self.pages]
        i32 = torch.int32
        return {
            "kv_indptr": torch.tensor(indptr, dtype=i32, device=dev),
            "kv_indices": torch.tensor([x for p in self.pages for x in p], dtype=i32, device=dev),
            "block_table": torch.tensor(table, dtype=i32, device=dev),
        }


def paged_layout(kv_lens: list[int], page_size: int, g: torch.Generator) -> PagedLayout:
    counts = [math.ceil(n / page_size) for n in kv_lens]
    total = sum(counts)
    order = torch.randperm(total, generator=_cpu_gen(g)).tolist()
    pages, at = [], 0
    for c in counts:
        pages.append(order[at : at + c])
        at += c
    return PagedLayout(pages, total, page_size)


def paged_cache(
    layout: PagedLayout,
    kv_lens: list[int],
    kv_heads: int,
    head_dim: int,
    kv_layout: str,
    g: torch.Generator,
    dev: torch.device,
    dt: torch.dtype,
) -> torch.Tensor:
    """A random cache; slots past each sequence's end hold large values.

    A kernel that reads past the valid length then attends to keys that would
    dominate its softmax and fails the check; one that masks them correctly is
    unaffected. (Not NaN: correct kernels may multiply masked probabilities of
    zero by whatever the tail holds.)
    """
    ps = layout.page_size
    cache = randn((layout.num_pages, ps, kv_heads, head_dim), g, dev, torch.float32)
    for seq_pages, n in zip(layout.pages, kv_lens, strict=True):
        tail = len(seq_pages) * ps - n
        if tail:
            cache[seq_pages[-1], ps - tail :] = 30.0
    if kv_layout == "HND":
        cache = cache.transpose(1, 2).contiguous()
    elif kv_layout != "NHD":
        raise ValueError(f"unknown KV layout {kv_layout!r} (NHD, HND)")
    return cache.to(dt)


def gather_pages(
    cache: torch.Tensor, pages: list[int], length: int, kv_layout: str
) -> torch.Tensor:
    """One sequence's tokens ``[length, kv_heads, d]`` from a paged cache."""
    idx = torch.tensor(pages, device=cache.device, dtype=torch.long)
    chunk = cache.index_select(0, idx)
    if kv_layout == "HND":
        chunk = chunk.transpose(1, 2)
    return chunk.reshape(-1, *chunk.shape[2:])[:length]


def gather_padded(
    cache: torch.Tensor, pages: Sequence[list[int]], kv_layout: str = "NHD"
) -> torch.Tensor:
    """Several sequences' tokens ``[b, width · page_size, ...]`` from a paged cache.

    One gather for the whole batch instead of one per sequence: on a GPU the
    reference of a 64-sequence decode case made some 2,600 small launches and 256
    host copies one sequence at a time, inside the paired set-up where 16 processes
    share the card. Each sequence is padded to the longest with its own last page,
    so the rows past its length hold whatever that page holds (the tail of
    ``paged_cache`` is large on purpose): the reference must mask them, as
    ``decode_attention_ref`` and ``mla_ref`` do. ``cache``: NHD
    ``[pages, page_size, kv_heads, d]``, HND ``[pages, kv_heads, page_size, d]``, or
    an MLA cache ``[pages, page_size, d]`` (NHD).
    """
    seqs = [p or [0] for p in pages]  # a sequence with no page reads page 0, all masked
    width = max(len(p) for p in seqs)
    table = [p + [p[-1]] * (width - len(p)) for p in seqs]
    idx = torch.tensor(table, device=cache.device, dtype=torch.long).flatten()
    chunk = cache.index_select(0, idx)
    if kv_layout == "HND":
        chunk = chunk.transpose(1, 2)
    return chunk.reshape(len(pages), -1, *chunk.shape[2:])


def batch_slices(batch: int, row_elements: int) -> list[slice]:
    """The batch in slices whose largest tensor holds at most ``SCORE_BUDGET`` elements
    (``row_elements`` per sequence): batched references stay bounded in memory."""
    step = max(1, SCORE_BUDGET // max(1, row_elements))
    return [slice(b0, min(batch, b0 + step)) for b0 in range(0, batch, step)]


def valid_rows(lens: Sequence[int], rows: int, dev: torch.device) -> torch.Tensor:
    """``[b, rows]``: True where row ``j`` of sequence ``i`` is within its length."""
    n = torch.tensor(list(lens), device=dev)
    return torch.arange(rows, device=dev)[None, :] < n[:, None]


def _cpu_gen(g: torch.Generator) -> torch.Generator:
    """A CPU generator seeded from ``g`` (randperm of page ids happens on the host)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=g, device=g.device).item())
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- references


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float,
    dt: torch.dtype,
    p_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v for one sequence, computed in ``dt``.

    q ``[sq, h, d]``, k/v ``[sk, hk, d]`` with ``h`` a multiple of ``hk``; causal
    masks are bottom-right aligned; rows that see no key give zeros (as
    FlashAttention does). In a low-precision ``dt`` this is "PyTorch doing the
    same computation in the kernel's dtype": products rounded to ``dt``, softmax
    in float32 then rounded, as in flash-attention's ``attention_ref``.
    ``p_dtype``: the probabilities are also rounded to it before the PV product,
    as FA3's FP8 test does for its low-precision reference
    (``intermediate_dtype=float8_e4m3fn`` in ``hopper/test_flash_attn.py``): an FP8
    kernel feeds P to its tensor cores in e4m3, and a bound that ignored that
    would call correct FP8 kernels broken.
    """
    q, k, v = q.to(dt), k.to(dt), v.to(dt)
    sq, h, _ = q.shape
    sk, hk = k.shape[0], k.shape[1]
    group = h // hk
    out = torch.empty(sq, h, v.shape[-1], dtype=dt, device=q.device)
    keep = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        keep = j <= i + (sk - sq)
    step = max(1, SCORE_BUDGET // max(1, sq * sk))
    for h0 in range(0, h, step):
        h1 = min(h, h0 + step)
        kv_idx = torch.arange(h0, h1, device=q.device) // group
        qh = q[:, h0:h1].transpose(0, 1)
        kh = k.index_select(1, kv_idx).transpose(0, 1)
        vh = v.index_select(1, kv_idx).transpose(0, 1)
        scores = torch.matmul(qh, kh.transpose(1, 2)) * scale
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        p = torch.softmax(scores.float(), dim=-1).nan_to_num(0.0).to(dt)
        if p_dtype is not None:
            p = p.to(p_dtype).to(dt)
        out[:, h0:h1] = torch.matmul(p, vh).transpose(0, 1)
    return out


def decode_attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lens: Sequence[int],
    scale: float,
    dt: torch.dtype,
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v for one query token per sequence, a batch at once, in ``dt``.

    q ``[b, h, d]``; k/v ``[b, n, hk, d]`` (``gather_padded``), sequence ``i``'s keys
    in its first ``lens[i]`` rows, the rest masked. The arithmetic of
    ``attention_ref`` for ``sq = 1`` (products rounded to ``dt``, softmax in float32
    then rounded, query head ``j`` reading KV head ``j // (h // hk)``), for the
    whole batch in a handful of launches.
    """
    b, h, d = q.shape
    n, hk = k.shape[1], k.shape[2]
    qh = q.to(dt).reshape(b, hk, h // hk, d)
    kh = k.to(dt).permute(0, 2, 3, 1)  # [b, hk, d, n]
    vh = v.to(dt).transpose(1, 2)  # [b, hk, n, dv]
    scores = torch.matmul(qh, kh) * scale  # [b, hk, group, n]
    scores = scores.masked_fill(~valid_rows(lens, n, q.device)[:, None, None, :], float("-inf"))
    p = torch.softmax(scores.float(), dim=-1).nan_to_num(0.0).to(dt)
    return torch.matmul(p, vh).reshape(b, h, -1)


def mla_ref(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    ckv: torch.Tensor,
    kpe: torch.Tensor,
    lens: Sequence[int],
    scale: float,
    dt: torch.dtype,
) -> torch.Tensor:
    """Absorbed MLA for a batch: q ``[b, h, d_ckv]``/``[b, h, d_kpe]``, caches
    ``[b, n, d]`` (``gather_padded``) with sequence ``i``'s rows first ``lens[i]``."""
    qn, qp, c, p = (x.to(dt) for x in (q_nope, q_pe, ckv, kpe))
    scores = (qn @ c.transpose(1, 2) + qp @ p.transpose(1, 2)) * scale  # [b, h, n]
    scores = scores.masked_fill(~valid_rows(lens, c.shape[1], c.device)[:, None, :], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(dt)
    out: torch.Tensor = probs @ c
    return out


def cu_seqlens(lens: list[int], dev: torch.device) -> torch.Tensor:
    offs = [0]
    for n in lens:
        offs.append(offs[-1] + n)
    return torch.tensor(offs, dtype=torch.int32, device=dev)


def dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")
