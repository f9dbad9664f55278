"""Minimal reproductions of FlashInfer's two FP8 findings on Hopper (issue 15).

Standalone: torch and flashinfer only, no kernelwatch. Run on an H100/H200:

    python3 docs/repro/flashinfer_fp8.py            # one JSON line per finding

Measured on the H200 (2026-12-04, docs/measurement.md §15e): finding 1 reads 0.573
(8/8) and 0.564 (8/2) under FlashInfer 0.5.3 and 0.6.0 alike, digit for digit. The
sweep over the sequence length, on an H100 (2026-12-06, §25c): 0.838 at 64 down to 0.573
at 4096, causal; 0.458 non-causal at 64; 0.027 non-causal at 4096.

1. ``single_prefill_with_kv_cache`` on e4m3 q/k/v with per-head scales (the convention
   of FlashInfer's own ``tests/attention/test_hopper_fp8_attention.py``: scale =
   amax / 448 per head, x_fp8 = x / scale, ``o_dtype`` 16-bit). kernelwatch measured
   a relative L2 error of 0.718-0.725 against an fp32 reference on the dequantized
   inputs with 0.5.3, for GQA 8/2 and for 8/8 (2026-11-29 and 2026-12-01, H200). The
   library's own test asserts only ``MSE < 1.0`` against its 16-bit kernel, which a
   zero output also passes on these inputs: this script prints both MSEs beside the
   relative error. FlashInfer #2111 (09872a1d7, 2025-12-05: "fixes the failed unittest
   on hopper", a rewrite of the FA3 paths) is in 0.6.0 and not in 0.5.3.
2. Paged decode with an FP8 KV cache and a 16-bit query: the same call with an fp16
   cache, timed, per cache dtype. kernelwatch measured 487 us (1.10 TB/s) for an FP8
   cache of 64 x 4096 tokens where the fp16 cache of the same shape moves twice the
   bytes faster. FlashInfer #4977 (2026-09) says why: FA3 rejected a 16-bit query with
   an FP8 cache, so ``backend="auto"`` on SM90 fell back to FA2's mixed-precision
   kernel, "slower than FA2 with a 16-bit cache".
3. Tensor-core decode under 0.6.0 (``use_tensor_cores=True``, GQA above 4): kernelwatch
   measured it 3.6x to 27.6x slower than under 0.5.3 on the H200 (2026-12-05,
   docs/measurement.md §22b), and an FP8 cache with a 16-bit query failed to build
   (``static assertion failed with "MajorB must be GMMA::Major::K for this config."``).
   0.6.0's ``backend="auto"`` resolves through ``determine_attention_backend`` to FA3 on
   SM90; 0.5.3 always planned FA2 there. FlashInfer #2400 and #2530 (merged 2026-02-09)
   say the same. The decode finding times ``backend="fa2"`` beside ``"auto"``.

Finding 1, diagnosed (2026-12-06): **FlashInfer's bug, fixed on main, in no release
yet**. The call above is the library's own test's, and ``auto`` resolves to the FA3 FP8
kernel (``hopper/quantization/``). That kernel folds ``scale_q * scale_k`` into the softmax
scale, quantizes P as e4m3(448 * P) and multiplies the output by ``scale_v / 448``
(``hopper/variants.cuh``). An exact emulation of that arithmetic reads 0.016-0.026 on
these inputs. The kernel's mask writes ``-math::inf`` = **-5e4** into the *raw*
accumulator ``q8 · k8`` before the scale applies (``quantization/mainloop_mma.cuh``,
``attention_updater.cuh:168``, ``math.cuh:32``). Raw FP8 logits reach ±448², and
``scale_q * scale_k / sqrt(d)`` is ~1e-5 here, so a masked key scores about -0.5, not
-inf. Every masked key of a visited tile then counts: the causally hidden ones with
their V, and those past the sequence's end (zero-filled K and V) in the row sum.
``fp8_emulated(..., finite_mask=True)`` models exactly that, with 128-query and 192-key
tiles. On the CPU it gives 0.562 / 0.850 / 0.773 / 0.744 / 0.699 / 0.630 for causal 4096 /
64 / 128 / 192 / 384 / 1024, 0.465 for non-causal 64, and 0.028 for non-causal 4096. An
H100 measured 0.573 / 0.838 / 0.777 / 0.745 / 0.701 / 0.635, 0.458 and 0.027, bitwise
repeatable (docs/measurement.md §25c). Full tiles with no mask are right; that is why
non-causal 4096 passes. FlashInfer d7f2c6464 ("fix(attention): handle extreme negative
logits in masked softmax", #4401, 2026-08-20) makes ``math::inf`` a true infinity. It is
on main and in no tag up to v0.6.18rc7. FlashInfer's own FP8 test asserts only ``MSE <
1.0`` against the 16-bit kernel, which these outputs pass. Each prefill line prints the
kernel's distance from the model (``rel_l2_fp8_vs_finite_mask_model``, ~0.02 where the
model holds).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

FP8 = torch.float8_e4m3fn


def per_head_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x ``[n, h, d]`` -> (x / s in e4m3, s per head), s = amax / 448 (FlashInfer's test)."""
    s = (x.abs().amax(dim=(0, 2)).float() / 448.0).clamp_min(1e-6)
    return (x.float() / s.view(1, -1, 1)).clamp(-448, 448).to(FP8), s


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """fp32 attention, bottom-right causal, GQA by repeating K/V heads."""
    group = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(q.size(-1))
    if causal:
        s = bottom_right_causal(s)
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v.float())


def bottom_right_causal(s: torch.Tensor) -> torch.Tensor:
    """Scores ``[h, n, m]`` with query i seeing keys up to ``i + m - n`` (FlashInfer's)."""
    n, m = s.size(-2), s.size(-1)
    rows = torch.arange(n, device=s.device)[:, None]
    keep = torch.arange(m, device=s.device)[None] <= rows + (m - n)
    return s.masked_fill(~keep, float("-inf"))


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def fp8_emulated(
    q8: torch.Tensor,
    k8: torch.Tensor,
    v8: torch.Tensor,
    sq: torch.Tensor,
    sk: torch.Tensor,
    sv: torch.Tensor,
    causal: bool,
    finite_mask: bool = False,
) -> torch.Tensor:
    """What FlashInfer's FA3 FP8 kernel is written to compute (``hopper/variants.cuh``):
    scores scaled by ``sq * sk / sqrt(d)``, P = e4m3(448 * exp(s - rowmax)), the row
    sums of the unquantized P, the output times ``sv / 448``. One softmax over the whole
    row (the kernel's running max only rescales, it quantizes against a smaller max).

    ``finite_mask``: the defect as 0.6.0's source has it. The mask writes ``-5e4``
    (``math::inf``) into the *raw* FP8 accumulator ``q8 · k8``, before the softmax scale
    ``sq * sk / sqrt(d)`` applies (``quantization/mainloop_mma.cuh``,
    ``attention_updater.cuh``). Raw FP8 logits reach ±448² and the scale is ~1e-5, so a
    masked key's logit is about -0.5, not -inf. Every masked key of the KV tiles a
    query tile visits (128 queries, 192 keys: ``quantization/prefill_sm90.cuh``) then
    counts. That covers the causally hidden ones, with their V, and those past the end
    (zero-filled K and V). FlashInfer d7f2c6464 (#4401, main, 2026-08-20) makes it -inf.
    """
    group = q8.size(1) // k8.size(1)
    k, v = k8.float().repeat_interleave(group, 1), v8.float().repeat_interleave(group, 1)
    sk_h, sv_h = sk.repeat_interleave(group), sv.repeat_interleave(group)
    scale = (sq * sk_h / math.sqrt(q8.size(-1))).view(-1, 1, 1)
    n, m = q8.size(0), k8.size(0)
    pad = -m % KV_TILE if finite_mask else 0  # keys past the end: zero K and V (TMA fill)
    k = torch.cat([k, k.new_zeros(pad, *k.shape[1:])])
    v = torch.cat([v, v.new_zeros(pad, *v.shape[1:])])
    raw = torch.einsum("qhd,khd->hqk", q8.float(), k)
    rows = torch.arange(n, device=raw.device)[:, None]
    keys = torch.arange(m + pad, device=raw.device)[None]
    seen = rows + (m - n) + 1 if causal else torch.full_like(rows, m)  # keys a row may see
    hidden = keys >= seen
    if finite_mask:
        # the query tile's loop visits whole KV tiles up to its last row's limit
        last = (rows // Q_TILE + 1) * Q_TILE + (m - n) if causal else torch.full_like(rows, m)
        visited = keys < (last.clamp(max=m) + KV_TILE - 1) // KV_TILE * KV_TILE
        raw = raw.masked_fill(hidden, -MASK_FILL).masked_fill(~visited, float("-inf"))
    else:
        raw = raw.masked_fill(hidden, float("-inf"))
    s = raw * scale
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p8 = (p * 448.0).to(FP8).float() / p.sum(-1, keepdim=True)
    return torch.einsum("hqk,khd->qhd", p8, v) * (sv_h / 448.0).view(1, -1, 1)


# FlashInfer 0.6.0's FP8 prefill at head_dim 128 (``quantization/prefill_sm90.cuh``):
# the tiles its loops walk, and the mask's fill in raw accumulator units (``math::inf``)
Q_TILE, KV_TILE, MASK_FILL = 128, 192, 5e4


# bands of query rows: the first 128 are the kernel's first query tile, whose whole
# causal window fits one 192-key tile (no main loop)
BANDS = ((0, 64), (64, 128), (128, 256), (256, 1024), (1024, 1 << 30))


def banded(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """rel. L2 error per band of query rows."""
    n = ref.size(0)
    return {f"{lo}-{min(hi, n)}": rel_l2(out[lo:hi], ref[lo:hi]) for lo, hi in BANDS if lo < n}


def prefill(fi: Any, seq: int, hq: int, hk: int, causal: bool = True) -> dict[str, object]:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(seq, h, 128, generator=g, device="cuda") for h in (hq, hk, hk))
    (q8, sq), (k8, sk), (v8, sv) = per_head_quant(q), per_head_quant(k), per_head_quant(v)
    deq = [x.float() * s.view(1, -1, 1) for x, s in ((q8, sq), (k8, sk), (v8, sv))]
    ref = reference(deq[0], deq[1], deq[2], causal)

    def fp8_call() -> torch.Tensor:
        return fi.single_prefill_with_kv_cache(
            q8, k8, v8, sq, sk, sv, causal=causal, o_dtype=torch.float16
        )

    out, again = fp8_call(), fp8_call()
    emulated = fp8_emulated(q8, k8, v8, sq, sk, sv, causal)
    half = fi.single_prefill_with_kv_cache(*(x.half() for x in deq), causal=causal)
    return {
        "seq": seq, "heads": f"{hq}/{hk}", "causal": causal,
        "rel_l2_fp8_vs_fp32_ref": rel_l2(out, ref),
        # the FP8 arithmetic itself, done right: ~0.02 if the kernel only rounds
        "rel_l2_fp8_emulated_vs_fp32_ref": rel_l2(emulated, ref),
        "rel_l2_fp8_vs_emulated": rel_l2(out, emulated),
        "rel_l2_fp8_by_rows": banded(out, ref),
        # the finite mask's model: ~0.02 (rounding) if -5e4 in raw units is the defect
        "rel_l2_fp8_vs_finite_mask_model": rel_l2(
            out, fp8_emulated(q8, k8, v8, sq, sk, sv, causal, finite_mask=True)
        ),
        # False: two identical calls disagree, a race (not a wrong formula)
        "bitwise_repeatable": bool(torch.equal(out, again)),
        "rel_l2_fp16_kernel_vs_fp32_ref": rel_l2(half, ref),
        # FlashInfer's own test asserts this is < 1.0
        "mse_fp8_vs_fp16_kernel": float(((out.float() - half.float()) ** 2).mean()),
        "mse_of_a_zero_output": float((half.float() ** 2).mean()),
    }  # fmt: skip


def _time(fn: Callable[[], object], reps: int = 50) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / reps * 1e3  # µs


def decode(
    fi: Any, batch: int = 64, tokens: int = 4096, hq: int = 32, hk: int = 4
) -> dict[str, object]:
    """GQA 8: FlashInfer 0.5.3's batch decode rejects a group of 7 ("Unsupported
    group_size: 7", H200, 2026-12-04), so the 28/4 heads of an earlier version of
    this script ended the run there.

    With tensor cores, each cache dtype is timed under ``backend="auto"`` and under
    ``"fa2"``: 0.6.0's ``auto`` resolves to FA3 on SM90, where 0.5.3 always planned FA2
    (finding 3). A row whose plan or build fails records the error and the script goes
    on: 0.6.0's FA3 template does not compile for an FP8 cache with a 16-bit query."""
    page, d = 16, 128
    pages = batch * tokens // page
    indptr = torch.arange(0, pages + 1, tokens // page, dtype=torch.int32, device="cuda")
    indices = torch.arange(pages, dtype=torch.int32, device="cuda")
    last = torch.full((batch,), page, dtype=torch.int32, device="cuda")
    q = torch.randn(batch, hq, d, dtype=torch.float16, device="cuda")
    kv16 = torch.randn(pages, 2, page, hk, d, dtype=torch.float16, device="cuda")
    rows: dict[str, dict[str, object]] = {}
    variants = ((False, "auto"), (True, "auto"), (True, "fa2"))
    for name, cache in (("float16", kv16), ("float8_e4m3fn", kv16.to(FP8))):
        for tc, backend in variants:
            label = f"{name} tensor_cores={tc} backend={backend}"
            try:
                w = fi.BatchDecodeWithPagedKVCacheWrapper(
                    torch.zeros(256 << 20, dtype=torch.uint8, device="cuda"),
                    "NHD",
                    use_tensor_cores=tc,
                    backend=backend,
                )
                w.plan(
                    indptr,
                    indices,
                    last,
                    hq,
                    hk,
                    d,
                    page,
                    q_data_type=q.dtype,
                    kv_data_type=cache.dtype,
                )
                us = _time(partial(w.run, q, cache))
            except Exception as exc:  # a failed JIT build is the finding, not the end
                rows[label] = {"error": f"{type(exc).__name__}: {str(exc)[-300:]}"}
                continue
            moved = cache.numel() * cache.element_size()
            rows[label] = {"us": round(us, 1), "TB/s": round(moved / us / 1e6, 2)}
    return {"batch": batch, "tokens": tokens, "heads": f"{hq}/{hk}", "times": rows}


def main() -> None:
    """One JSON line per finding, each printed as soon as it is measured: a first use
    compiles FlashInfer's modules (a minute or more each), and a run cut short still
    says what it found."""
    import flashinfer as fi

    head = {"flashinfer": fi.__version__, "device": torch.cuda.get_device_name()}
    # the error against the sequence length, one compiled module: measured, it fell from
    # 0.838 at 64 to 0.564 at 4096; 128, 192 and 384 bound the first query and key tiles
    for seq in (4096, 64, 128, 192, 384, 1024):
        print(json.dumps({**head, "prefill": prefill(fi, seq, 8, 8)}), flush=True)
    print(json.dumps({**head, "decode": decode(fi)}), flush=True)
    # modules of their own (each compiles first): GQA, and no causal mask
    print(json.dumps({**head, "prefill": prefill(fi, 4096, 8, 2)}), flush=True)
    for seq in (64, 4096):
        print(json.dumps({**head, "prefill": prefill(fi, seq, 8, 8, causal=False)}), flush=True)


if __name__ == "__main__":
    main()
