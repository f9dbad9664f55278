"""The decode suite's batched references agree with attention done one sequence at a time.

The references gather a batch's pages in one go and mask the padded rows
(``common.gather_padded``, ``decode_attention_ref``, ``mla_ref``). What they must
equal is the slow form, one sequence after another from ``gather_pages`` and
``attention_ref`` (``benchmarks.reference_cost.one_at_a_time``, which times the
two), so a mask that lets a padded row in (the cache's tails hold 30.0 on
purpose), a head that reads the wrong KV head or a slice that drops a sequence
shows as a mismatch.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch

from benchmarks.reference_cost import main, one_at_a_time
from kernelwatch.kernels.suite import Inputs
from kernelwatch.kernels.suites import common, decode

CPU = torch.device("cpu")


def _case(**params: Any) -> tuple[Any, Inputs]:
    spec = decode.make_case(params)
    gen = torch.Generator(device=CPU).manual_seed(7)
    return spec, spec.make_inputs(gen, CPU)


PAGED = [
    {"batch": 3, "kv_len": 50, "page_size": 16, "layout": "NHD"},
    {"batch": 3, "kv_len": 50, "page_size": 16, "layout": "HND"},
    {"batch": 2, "kv_len": 9, "page_size": 1, "layout": "NHD"},
    {"kv_lens": [7, 33, 64, 1], "page_size": 16, "layout": "HND"},
    {"kv_lens": [7, 33, 64], "page_size": 16, "layout": "NHD", "kv_dtype": "float8_e4m3fn"},
]


@pytest.mark.parametrize("shape", PAGED, ids=lambda p: "-".join(f"{v}" for v in p.values()))
@pytest.mark.parametrize("dt", [torch.float64, torch.float16])
def test_the_batched_paged_reference_is_attention_one_sequence_at_a_time(
    shape: dict[str, Any], dt: torch.dtype
) -> None:
    params = {"kernel": "decode_paged", "heads": 8, "kv_heads": 2, "head_dim": 32,
              "dtype": "float16", **shape}  # fmt: skip
    spec, inputs = _case(**params)
    lens = shape.get("kv_lens") or [shape["kv_len"]] * shape["batch"]
    got = spec.reference(inputs, dt)
    want = one_at_a_time(spec, inputs, dt)
    assert got.shape == want.shape == (len(lens), 8, 32)
    assert got.dtype == dt
    # the softmax is float32 in both (``attention_ref``), its sums in another order
    # over the padded row: float32's rounding; float16: one rounding of the output
    tol = 1e-6 if dt == torch.float64 else 2e-3
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert got.abs().max() < 10  # no padded row (30.0) leaked into a softmax


def test_the_batched_paged_reference_counts_every_sequence_in_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch larger than the memory budget is done in slices, each sequence once."""
    spec, inputs = _case(kernel="decode_paged", heads=4, kv_heads=1, head_dim=32,
                         kv_lens=[5, 40, 17, 64, 3], page_size=16, layout="NHD",
                         dtype="float16")  # fmt: skip
    whole = spec.reference(inputs, torch.float64)
    monkeypatch.setattr(common, "SCORE_BUDGET", 64 * 32 * 2)  # two sequences a slice
    assert len(common.batch_slices(5, 64 * 32)) == 3
    torch.testing.assert_close(spec.reference(inputs, torch.float64), whole)


@pytest.mark.parametrize("lens", [{"batch": 2, "kv_len": 40}, {"kv_lens": [3, 40, 17]}])
def test_the_batched_mla_reference_is_mla_one_sequence_at_a_time(lens: dict[str, Any]) -> None:
    spec, inputs = _case(kernel="decode_mla", heads=4, head_dim_ckv=64, head_dim_kpe=16,
                         sm_scale=0.125, page_size=16, dtype="float16", **lens)  # fmt: skip
    for dt, tol in ((torch.float64, 1e-6), (torch.float16, 2e-3)):
        got = spec.reference(inputs, dt)
        torch.testing.assert_close(got, one_at_a_time(spec, inputs, dt), rtol=tol, atol=tol)


def test_gather_padded_pads_each_sequence_with_its_own_last_page() -> None:
    cache = torch.arange(4 * 2 * 1 * 1, dtype=torch.float32).reshape(4, 2, 1, 1)
    got = common.gather_padded(cache, [[3], [1, 0]]).flatten(1)
    assert got.tolist() == [[6, 7, 6, 7], [2, 3, 0, 1]]
    rows = common.valid_rows([1, 4], got.shape[1], CPU)
    assert rows.tolist() == [[True, False, False, False], [True] * 4]
    assert math.isclose(float(got[rows].sum()), 6 + 2 + 3 + 0 + 1)


def test_the_cost_benchmark_times_both_forms_of_every_smoke_case(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--reps", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [json.loads(x) for x in out if x.startswith("{")]
    assert {r["kernel"] for r in rows} == {"decode_paged", "decode_mla"}
    assert len(rows) == len(decode.build("smoke", CPU))
    for r in rows:
        assert r["one_at_a_time_s"] > 0 and r["batched_s"] > 0
        assert r["max_abs_diff"] < 1e-3  # the two forms agree; the table says by how much
    assert out[-len(rows) - 1].startswith("case")
