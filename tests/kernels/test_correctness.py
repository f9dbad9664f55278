import torch

from kernelwatch.kernels.correctness import check, poison_, rounding_floor


def _ref_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 300, generator=g)
    return torch.softmax(x.double(), -1), torch.softmax(x.half(), -1)


def test_low_precision_pytorch_result_passes_its_own_rule() -> None:
    ref, lowp = _ref_pair(0)
    res = check(lowp, ref, lowp, torch.float16)
    assert res.passed, res.detail
    assert res.errors["rel_l2"] <= res.bound


def test_unwritten_output_fails_as_non_finite() -> None:
    ref, lowp = _ref_pair(1)
    out = poison_(torch.empty_like(lowp))
    out[:, :150] = lowp[:, :150]  # the kernel "forgot" half the columns
    res = check(out, ref, lowp, torch.float16)
    assert not res.passed
    assert "non-finite" in res.detail


def test_wrong_values_fail_with_readable_reason() -> None:
    ref, lowp = _ref_pair(2)
    res = check(lowp * 1.01, ref, lowp, torch.float16)
    assert not res.passed
    assert "rel L2 error" in res.detail


def test_bound_is_k_times_pytorch_error_plus_floor() -> None:
    ref, lowp = _ref_pair(3)
    res = check(lowp, ref, lowp, torch.float16)
    pytorch_err = float(
        torch.linalg.vector_norm(lowp.double() - ref) / torch.linalg.vector_norm(ref)
    )
    assert abs(res.bound - (2 * pytorch_err + rounding_floor(torch.float16))) < 1e-12
    kv = check(lowp, ref, lowp, torch.float16, kind="kv_cache")
    assert kv.bound > res.bound


def test_nan_in_output_fails() -> None:
    ref, lowp = _ref_pair(4)
    out = lowp.clone()
    out[0, 0] = float("nan")
    assert not check(out, ref, lowp, torch.float16).passed
