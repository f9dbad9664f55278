"""``cards`` without a GPU: the offsets statistics, the part selection, the case choice.

The statistics are pure (numbers in, figures out) and checked against values worked
out by hand; the case choice reads the gemm suite's grid, so the ``--skip-case`` ids
the runner gets leave exactly the named shapes.
"""

from __future__ import annotations

import math
import statistics

import pytest

from benchmarks.gpu import cards, cli, fleet


def test_parts_default_to_both_in_a_fixed_order_each_once() -> None:
    assert cards.parts(None) == ["offsets", "interference"]
    assert cards.parts([]) == ["offsets", "interference"]
    assert cards.parts(["interference"]) == ["interference"]
    assert cards.parts(["interference", "offsets", "offsets"]) == ["offsets", "interference"]
    with pytest.raises(ValueError, match="unknown part"):
        cards.parts(["bogus"])


def test_part_flags_parse_through_the_driver() -> None:
    p = cli.parser()
    args = p.parse_args(["cards", "--part", "interference", "--part", "offsets", "--serial"])
    assert cards.parts(args.part) == ["offsets", "interference"] and args.serial
    assert p.parse_args(["cards"]).part is None
    with pytest.raises(SystemExit):
        p.parse_args(["cards", "--part", "nope"])


def test_two_cards_within_between_and_ratio() -> None:
    # card a: 10, 12 (mean 11, var 2); card b: 20, 22, 24 (mean 22, var 4)
    st = cards.offset_stats({"a": [10, 12], "b": [20, 22, 24]})
    assert st["cards"] == 2 and st["why"] == ""
    assert st["per_card"]["a"]["mean"] == 11 and st["per_card"]["b"]["n"] == 3
    assert st["per_card"]["a"]["sd"] == pytest.approx(math.sqrt(2))
    # pooled: (1 * 2 + 2 * 4) / 3
    within = math.sqrt(10 / 3)
    assert st["within_df"] == 3 and st["within_card_sd"] == pytest.approx(within)
    between = statistics.stdev([11, 22])
    assert st["between_card_sd"] == pytest.approx(between)
    assert st["mean"] == pytest.approx(16.5)
    assert st["between_card_pct"] == pytest.approx(100 * between / 16.5)
    assert st["ratio_between_within"] == pytest.approx(between / within)
    n_h = 2 / (1 / 2 + 1 / 3)
    assert st["ratio_without_offsets"] == pytest.approx(1 / math.sqrt(n_h))
    assert st["offset_sd"] == pytest.approx(math.sqrt(between**2 - within**2 / n_h))
    assert st["f"] == pytest.approx(n_h * between**2 / within**2)


def test_cards_alike_give_no_offset_and_ratio_near_its_null_value() -> None:
    st = cards.offset_stats({"a": [1.0, 3.0], "b": [1.0, 3.0], "c": [1.0, 3.0]})
    assert st["between_card_sd"] == 0 and st["offset_sd"] == 0 and st["ratio_between_within"] == 0
    assert st["ratio_without_offsets"] == pytest.approx(1 / math.sqrt(2))


def test_one_card_measures_only_the_within_part_and_says_why() -> None:
    st = cards.offset_stats({"gpu0": [12.0, 12.5, 11.5]})
    assert st["cards"] == 1 and st["within_card_sd"] == pytest.approx(0.5)
    assert st["between_card_sd"] is None and st["ratio_between_within"] is None
    assert "one card" in st["why"]


def test_one_process_per_card_has_no_within_part_and_empty_input_says_so() -> None:
    st = cards.offset_stats({"a": [1.0], "b": [2.0]})
    assert st["within_card_sd"] is None and st["between_card_sd"] == pytest.approx(
        statistics.stdev([1.0, 2.0])
    )
    assert st["ratio_between_within"] is None and "no within-card" in st["why"]
    st = cards.offset_stats({"a": [], "b": []})
    assert st["cards"] == 0 and st["mean"] is None and st["why"] == "no measurement"


def test_case_choice_skips_every_other_gemm_case() -> None:
    import torch

    from kernelwatch.kernels.record import case_id
    from kernelwatch.kernels.suite import load_suite

    chosen, skip = cards.pick_cases("quick", [*cards.GPU_CASES, "1x2x3"])
    got = {c["label"]: c for c in chosen}
    assert got["1x2x3"]["missing"]
    # the plain square, not the model layer of the same shape; the llama o layer at 64
    assert "model" not in got["8192x8192x8192"]["params"]
    assert got["64x4096x4096"]["params"]["layer"] == "o"
    assert got["64x28672x4096"]["params"]["layer"] == "gate_up"
    every = {
        case_id(s.kernel, cards.BACKEND, s.params)
        for s in load_suite("gemm", "quick", torch.device("cpu"))
        if s.kernel == "gemm"
    }
    kept = every - set(skip)
    assert kept == {c["case_id"] for c in chosen if not c.get("missing")} and len(kept) == 3


def test_children_are_pinned_and_keep_nvlink_multicast_off() -> None:
    card = {"pin": "GPU-1234", "label": "gpu1"}
    env = cards.child_env(card, cpu=False)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-1234"
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert cards.child_env(card, cpu=True)["CUDA_VISIBLE_DEVICES"] == ""


def test_fleet_runs_per_gpu_and_wait() -> None:
    assert fleet.plan_runs(1, None, 0, None) == (1, 90.0)
    assert fleet.plan_runs(4, None, 0, None) == (4, 180.0)  # one CPU worker: 4 rounds
    assert fleet.plan_runs(1, 4, 8, None) == (32, 180.0)  # 4 per GPU on 8 GPUs
    assert fleet.plan_runs(9, None, 8, 50) == (9, 50)
