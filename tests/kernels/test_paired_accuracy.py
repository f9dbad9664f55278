"""Accuracy as a verdict, the throttle guard and the two stages of paired mode (issue 13).

Unit tests of the pieces (the accuracy rule, the max-abs and FP8 terms of the
correctness rule, the clock guard), then ``bench-paired`` on the CPU between two
library trees: a split-K fork that accumulates in fp16 passes the absolute bound
but is ``less_accurate``; identical libraries see identical errors (same seed);
a flaky baseline check is re-checked instead of ending the case untimed; a
stage-1 finding the confirmation does not repeat is ``inconclusive``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelwatch.kernels.correctness import check, compute_dtype, error_stats, rounding_floor
from kernelwatch.kernels.paired import PairedConfig, judge, judge_reliable
from kernelwatch.kernels.paired_suite import main as bench_paired
from kernelwatch.kernels.telemetry import blocks_reliable
from kernelwatch.kernels.verdict import (
    ACCURACY_MARGIN,
    NOTE_STILL_BROKEN,
    CaseVerdict,
    accuracy_verdict,
    confirm_accuracy,
    excluded_effect,
)
from tests.helpers import MATMUL_GOOD, MATMUL_SPLIT_K

BF16_ROUNDOFF = 2.0**-8


def _errors(rel: float, max_abs: float, ref_max: float = 300.0) -> dict[str, float]:
    return {
        "rel_l2": rel,
        "max_abs": max_abs,
        "mean_abs": rel,
        "output_roundoff": BF16_ROUNDOFF,
        "ref_max_abs": ref_max,
    }


# --------------------------------------------------------------------------- the rule


def test_the_h200_split_k_fork_is_less_accurate_and_identical_errors_are_not() -> None:
    # the numbers: rel-L2 0.00166 -> 0.00403, max-abs ~1 -> 2.5, bound 0.0072
    base, fork = _errors(0.00166, 0.986), _errors(0.00403, 2.52)
    slip = accuracy_verdict(base, fork)
    assert slip.verdict == CaseVerdict.LESS_ACCURATE and slip.blocking
    assert slip.growth["rel_l2"] == pytest.approx(0.00403 / 0.00166)
    assert "rel_l2" in slip.detail and "max_abs" in slip.detail
    assert accuracy_verdict(base, dict(base)).verdict == CaseVerdict.UNCHANGED
    # just inside the margin is not a slip; a better candidate never is
    inside = _errors(0.00166 * (ACCURACY_MARGIN - 0.01), 0.986)
    assert accuracy_verdict(base, inside).verdict == CaseVerdict.UNCHANGED
    assert accuracy_verdict(fork, base).verdict == CaseVerdict.UNCHANGED


@pytest.mark.parametrize("draw", [0.85, 0.95, 1.0, 1.05, 1.15])
def test_a_true_one_and_a_half_times_loss_is_caught_on_any_draw(draw: float) -> None:
    # the promise: a 1.5x accuracy loss is caught. Each stage checks inputs of its own
    # seed, so a true 1.5x reads around 1.5; at a margin of 1.5 itself, a draw below it
    # left the case unchanged (an audit, 2026-12-05). Identical errors never block,
    # and a fifth more error, the noise of a reordered sum, does not either
    base = _errors(0.00166, 0.986)
    lost = _errors(0.00166 * 1.5 * draw, 0.986 * 1.5 * draw)
    assert accuracy_verdict(base, lost).verdict == CaseVerdict.LESS_ACCURATE
    assert accuracy_verdict(base, _errors(0.00166 * 1.2, 0.986 * 1.2)).verdict == (
        CaseVerdict.UNCHANGED
    )


def test_max_abs_alone_can_make_a_case_less_accurate() -> None:
    # a slip confined to a few outputs: rel-L2 barely moves, the largest error triples
    base, cand = _errors(0.00166, 0.986), _errors(0.0017, 3.0)
    decision = accuracy_verdict(base, cand)
    assert decision.verdict == CaseVerdict.LESS_ACCURATE
    assert decision.growth["rel_l2"] < ACCURACY_MARGIN < decision.growth["max_abs"]


def test_errors_under_the_noise_floor_are_not_told_apart() -> None:
    # a float32-accurate result in a bf16 case: 1e-7 -> 3e-7 is reordering, not a slip
    tiny, triple = _errors(1e-7, 1e-5), _errors(3e-7, 3e-5)
    assert accuracy_verdict(tiny, triple).verdict == CaseVerdict.UNCHANGED
    # without the scale keys (an old record) nothing is called less accurate
    old = {"rel_l2": 0.001, "max_abs": 0.1}
    assert accuracy_verdict(old, {"rel_l2": 0.01, "max_abs": 1.0}).verdict == "unchanged"


def test_confirmation_of_accuracy_and_the_excluded_effect() -> None:
    la, un = CaseVerdict.LESS_ACCURATE, CaseVerdict.UNCHANGED
    assert confirm_accuracy(la, la) == la
    assert confirm_accuracy(la, un) == CaseVerdict.INCONCLUSIVE
    assert confirm_accuracy(un, la) == un  # only a blocking first stage needs confirming
    assert excluded_effect(0.98, 1.015) == pytest.approx(1 / 0.98 - 1)
    assert excluded_effect(0.995, 1.03) == pytest.approx(0.03)
    assert excluded_effect(math.nan, 1.0) is None


# --------------------------------------------------------------------------- correctness


def _gemm(seed: int, m: int = 32, k: int = 256, n: int = 64) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16)
    b = torch.randn(k, n, generator=g).to(torch.bfloat16)
    return a, b, a.double() @ b.double(), (a.float() @ b.float()).to(torch.bfloat16)


def test_one_far_off_output_fails_on_max_abs_inside_the_l2_and_mean_bounds() -> None:
    _, _, ref, lowp = _gemm(0)
    out = lowp.clone()
    out[3, 5] += 12 * float(error_stats(lowp, ref).max_abs) + 1.0
    res = check(out, ref, lowp, torch.bfloat16)
    assert not res.passed and "max abs error" in res.detail, res
    assert res.errors["rel_l2"] <= res.bound
    assert res.errors["mean_abs"] <= res.errors["mean_abs_bound"]
    assert res.errors["max_abs"] > res.errors["max_abs_bound"]
    good = check(lowp, ref, lowp, torch.bfloat16)
    assert good.passed and good.errors["ref_max_abs"] == pytest.approx(float(ref.abs().max()))
    assert good.errors["output_roundoff"] == BF16_ROUNDOFF


def test_fp8_inputs_get_the_fp8_floor_not_the_output_dtype_floor() -> None:
    inputs: dict[str, Any] = {
        "a": torch.zeros(4, 4).to(torch.float8_e4m3fn),
        "scale_a": torch.ones(4, 1),
        "out": torch.empty(4, 4, dtype=torch.bfloat16),
    }
    assert compute_dtype(torch.bfloat16, inputs) == torch.float8_e4m3fn
    assert compute_dtype(torch.bfloat16, {"a": torch.zeros(2)}) == torch.bfloat16
    _, _, ref, lowp = _gemm(1)
    fp8 = check(lowp, ref, lowp, torch.float8_e4m3fn, kind="fp8")
    bf16 = check(lowp, ref, lowp, torch.bfloat16, kind="fp8")
    assert fp8.bound - bf16.bound == pytest.approx(
        rounding_floor(torch.float8_e4m3fn) - rounding_floor(torch.bfloat16)
    )
    # the output's resolution still sets the accuracy noise floor
    assert fp8.errors["output_roundoff"] == BF16_ROUNDOFF


def test_the_fp8_attention_reference_quantises_p_in_low_precision_only() -> None:
    from kernelwatch.kernels.suites.common import attention_ref

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(64, 2, 32, generator=g) for _ in range(3))
    hi = attention_ref(q, k, v, False, 32**-0.5, torch.float64)
    plain = attention_ref(q, k, v, False, 32**-0.5, torch.bfloat16)
    quantised = attention_ref(q, k, v, False, 32**-0.5, torch.bfloat16, torch.float8_e4m3fn)
    # P in e4m3 costs accuracy: the low-precision reference's error (the bound's scale) grows
    assert error_stats(quantised, hi).rel_l2 > 2 * error_stats(plain, hi).rel_l2


# --------------------------------------------------------------------------- telemetry


def test_low_clocks_or_unreliable_reasons_make_paired_blocks_unreliable() -> None:
    steady = [1980] * 12
    assert blocks_reliable(steady).reliable
    assert blocks_reliable([None] * 8).reliable  # no NVML: nothing known to be wrong
    dip = blocks_reliable([*steady, 1200, 1980])
    assert not dip.reliable and dip.throttled == [12] and dip.reference_mhz == 1980
    hot = blocks_reliable(steady, [[]] * 5 + [["hw_thermal", "sw_power_cap"]] + [[]] * 6)
    assert not hot.reliable and hot.throttled == [5] and hot.reasons == ["hw_thermal"]
    # a power cap alone is how a GEMM runs, not a sick GPU
    assert blocks_reliable(steady, [["sw_power_cap"]] * 12).reliable


def test_a_throttled_measurement_never_makes_a_regression() -> None:
    cfg = PairedConfig(min_effect=0.01, confidence=0.99)
    slow = [math.log(1.05) + d for d in (0.001, -0.001, 0.002, -0.002, 0.0, 0.001)]
    assert judge(slow, cfg)[3] == CaseVerdict.REGRESSION
    assert judge_reliable(slow, cfg, None, True)[3] == CaseVerdict.REGRESSION
    ratio, lo, hi, verdict = judge_reliable(slow, cfg, None, False)
    assert verdict == CaseVerdict.INCONCLUSIVE and lo > 1  # the interval is kept, not the word


# --------------------------------------------------------------------------- bench-paired

# the right matmul and the split-K fork (tests/helpers.py, shared with the bisection tests)
GOOD, SPLIT_K = MATMUL_GOOD, MATMUL_SPLIT_K

# wrong (or split-K) the first time any process of the test calls it, right afterwards
ONCE = (
    SPLIT_K.replace("def matmul(", "def split_k(")
    + """
import os

def matmul(a, b, out):
    mark = os.environ["KW_TEST_MARK"]
    out.copy_((a.float() @ b.float()).to(out.dtype))
    if not os.path.exists(mark):
        open(mark, "w").close()
        {first}
"""
)

WRONG = """
import torch

def matmul(a, b, out):
    out.copy_((a.float() @ b.float()).to(out.dtype) * 1.05)
"""


def _lib(root: Path, name: str, code: str) -> str:
    tree = root / name
    (tree / "acclib").mkdir(parents=True)
    (tree / "acclib" / "__init__.py").write_text(code)
    return str(tree)


def _paired(tmp_path: Path, baseline: str, candidate: str, *args: str) -> dict[str, Any]:
    root = tmp_path / "trees"
    out = tmp_path / "paired.jsonl"
    argv = [
        "--baseline-path", _lib(root, "baseline", baseline),
        "--candidate-path", _lib(root, "candidate", candidate),
        "--suite", "basic", "--impl", "acclib", "--kernel", "matmul",
        # CPU times of a 96^3 matmul between two processes on a shared 2-core machine
        # differed by 1.5x for identical code: only a 5x change is a time change here,
        # accuracy is what is under test (the timing verdict is not asserted)
        "--min-effect", "4.0", "--budget", "0.3", "--retries", "0",
        "--case-timeout", "120", "--out", str(out), *args,
    ]  # fmt: skip
    assert bench_paired(argv) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert isinstance(record, dict)
    return record


def test_the_split_k_fork_is_inside_the_bound_and_beyond_the_margin_on_any_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bisection and paired tests draw a fresh seed per step: the fork must be
    # ``less_accurate`` and never ``broken`` whatever the inputs (tests/helpers.py).
    from kernelwatch.kernels.runner import checked_case
    from kernelwatch.kernels.suites import basic

    for name, code in (("goodmm", GOOD), ("splitmm", SPLIT_K)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    (spec,) = [c for c in basic.build("smoke", torch.device("cpu")) if c.kernel == "matmul"]
    for seed in range(0, 2**31, 2**31 // 400):
        good = checked_case(spec, "goodmm", torch.device("cpu"), seed=seed)[2]
        fork = checked_case(spec, "splitmm", torch.device("cpu"), seed=seed)[2]
        assert good.passed and fork.passed, (seed, fork.detail)
        decision = accuracy_verdict(good.errors, fork.errors)
        assert decision.verdict == CaseVerdict.LESS_ACCURATE, (seed, decision.growth)


def test_a_split_k_fork_inside_the_bound_is_less_accurate_and_confirmed(tmp_path: Path) -> None:
    record = _paired(tmp_path, GOOD, SPLIT_K, "--seed", "7")
    paired = record["paired"]
    assert record["status"] == "pass", record["error"]
    assert record["correctness"]["passed"]  # inside the absolute bound ...
    assert paired["verdict"] == "less_accurate", paired  # ... and still caught
    assert paired["accuracy_verdict"] == "less_accurate"
    base, cand = paired["baseline_correctness"]["errors"], record["correctness"]["errors"]
    assert cand["rel_l2"] > ACCURACY_MARGIN * base["rel_l2"]
    # a time comparison was made too, and both stages are in the record
    assert record["timing"] is not None and paired["ratio"] > 0
    first, second = paired["stage1"], paired["confirmation"]
    assert first["verdict"] == second["verdict"] == "less_accurate"
    assert first["seed"] == paired["seed"] == 7 and second["seed"] != 7  # new inputs
    assert second["candidate_errors"]["rel_l2"] != cand["rel_l2"]
    assert record["device"]["reliable"] is True and paired["reliable"] is True
    # the card the sides ran on, as the runner's records name it (history's per-card key)
    assert record["device"]["name"] == "cpu" and record["device"]["class"] == "cpu"


def test_identical_libraries_see_identical_errors_on_the_same_seed(tmp_path: Path) -> None:
    record = _paired(tmp_path, GOOD, GOOD)
    paired = record["paired"]
    assert record["status"] == "pass" and paired["verdict"] != "less_accurate"
    base, cand = paired["baseline_correctness"]["errors"], record["correctness"]["errors"]
    assert base == cand and base["rel_l2"] > 0
    assert paired["accuracy_verdict"] == "unchanged"
    assert paired["stage1"]["accuracy_growth"] == {"rel_l2": 1.0, "max_abs": 1.0}
    assert isinstance(paired["seed"], int)
    if paired["verdict"] == "inconclusive":  # the interval says what it ruled out
        assert paired["excluded_effect"] > 0 and "excluded" in paired["detail"]


def test_a_flaky_baseline_check_is_re_checked_and_the_case_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KW_TEST_MARK", str(tmp_path / "failed-once"))
    flaky = ONCE.format(first="out.mul_(1.05)")
    record = _paired(tmp_path, flaky, GOOD)
    paired = record["paired"]
    assert (tmp_path / "failed-once").exists()  # the first check did fail
    assert record["status"] == "pass" and "re-checked" in paired["note"], paired
    assert paired["verdict"] not in ("broken", "less_accurate") and paired["ratio"] > 0
    assert record["timing"] is not None and paired["baseline_correctness"]["passed"]


def test_a_truly_broken_baseline_still_ends_untimed_after_its_re_check(tmp_path: Path) -> None:
    record = _paired(tmp_path, WRONG, GOOD)
    paired = record["paired"]
    assert record["status"] == "pass" and paired["verdict"] == "unchanged"
    assert "baseline was broken" in paired["note"] and record["timing"] is None
    assert not paired["baseline_correctness"]["passed"]


def test_a_less_accurate_stage_the_confirmation_does_not_repeat_is_inconclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KW_TEST_MARK", str(tmp_path / "slipped-once"))
    # the candidate is less accurate on its first call only (once across processes)
    once = ONCE.format(first="split_k(a, b, out)")
    record = _paired(tmp_path, GOOD, once, "--seed", "3")
    paired = record["paired"]
    assert paired["stage1"]["verdict"] == "less_accurate", paired
    assert paired["confirmation"]["accuracy_verdict"] == "unchanged"
    assert paired["verdict"] == "inconclusive"
    assert record["status"] == "pass" and record["timing"] is not None


# one library whose recipe variable picks the accumulation at run time
BY_ENV = (
    "import os\n"
    + MATMUL_SPLIT_K.replace("def matmul(", "def _split(")
    + MATMUL_GOOD.replace("import torch\n", "").replace("def matmul(", "def _good(")
    + "\n\ndef matmul(a, b, out):\n"
    + "    (_split if os.environ.get('KWTEST_ACCUMULATE') == 'split' else _good)(a, b, out)\n"
)


@pytest.mark.parametrize(
    ("candidate_env", "verdict"),
    [({"KWTEST_ACCUMULATE": "split"}, "less_accurate"), ({}, "unchanged")],
)
def test_each_side_runs_with_its_own_recipes_variables(
    tmp_path: Path, candidate_env: dict[str, str], verdict: str
) -> None:
    """Two commits whose recipes differ in a run-time variable are compared as such.

    The sides used to inherit the coordinator's environment, the candidate's recipe,
    so a baseline ran with the candidate's knob and two configurations compared A/A.
    """
    tree = _lib(tmp_path / "trees", "lib", BY_ENV)
    out = tmp_path / "paired.jsonl"
    argv = [
        "--baseline-path", tree, "--candidate-path", tree,
        "--baseline-env", "{}", "--candidate-env", json.dumps(candidate_env),
        "--suite", "basic", "--impl", "acclib", "--kernel", "matmul",
        "--min-effect", "4.0", "--budget", "0.3", "--retries", "0",
        "--case-timeout", "120", "--out", str(out), "--seed", "7",
    ]  # fmt: skip
    assert bench_paired(argv) == 0  # the worker's entry: records only
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["paired"]["accuracy_verdict"] == verdict, record["paired"]


def test_a_side_environment_must_be_a_json_object_of_strings(tmp_path: Path) -> None:
    base = ["--baseline-path", "", "--candidate-path", "", "--suite", "basic", "--impl", "x"]
    for bad in ("[1]", '{"A": 1}', "{nope"):
        with pytest.raises(SystemExit) as exc:
            bench_paired([*base, "--out", str(tmp_path / "o"), "--candidate-env", bad])
        assert exc.value.code == 2


# wrong by far more than WRONG's 5 %: the same bug made worse
WORSE = WRONG.replace("* 1.05", "* 1.5")


def test_a_kernel_broken_on_both_sides_as_before_is_not_this_changes_doing(
    tmp_path: Path,
) -> None:
    """A docs-only pull request on a broken main: both sides fail the same check on the
    same inputs with the same error, and the candidate is not blocked for it."""
    record = _paired(tmp_path, WRONG, WRONG)
    paired = record["paired"]
    assert record["status"] == "fail"  # still broken, and the record says so
    assert paired["verdict"] == "unchanged" and paired["note"] == NOTE_STILL_BROKEN
    base, cand = paired["baseline_correctness"]["errors"], record["correctness"]["errors"]
    assert not paired["baseline_correctness"]["passed"] and base == cand


def test_a_broken_kernel_made_worse_is_broken(tmp_path: Path) -> None:
    record = _paired(tmp_path, WRONG, WORSE)
    paired = record["paired"]
    assert record["status"] == "fail" and paired["verdict"] == "broken"
    assert not paired["baseline_correctness"]["passed"]
