import json

import pytest

from kernelwatch.kernels.record import ResultRecord, Timing, canonical_params, case_id


def test_case_id_ignores_key_order_and_is_stable() -> None:
    a = case_id("softmax", "triton", {"rows": 4, "cols": 8, "dtype": "float16"})
    b = case_id("softmax", "triton", {"dtype": "float16", "cols": 8, "rows": 4})
    assert a == b
    assert len(a) == 16
    # a pinned value: changing the hash silently would split every stored series in two
    assert a == "9e62f435cdb2b3e2"
    # and canonical params round-trip to the same id
    assert a == case_id(
        "softmax",
        "triton",
        json.loads(canonical_params({"cols": 8, "rows": 4, "dtype": "float16"})),
    )


def test_case_id_distinguishes_kernel_backend_and_params() -> None:
    base = case_id("softmax", "triton", {"rows": 4})
    assert base != case_id("rmsnorm", "triton", {"rows": 4})
    assert base != case_id("softmax", "torch", {"rows": 4})
    assert base != case_id("softmax", "triton", {"rows": 5})


def test_record_round_trip_keeps_samples() -> None:
    rec = ResultRecord(
        suite="basic",
        case_id="abc",
        kernel="softmax",
        backend="triton",
        params={"rows": 1},
        status="pass",
        timing=Timing(
            unit="s",
            samples=[1.0, 2.0, 3.0],
            median=2.0,
            ci_low=1.0,
            ci_high=3.0,
            n=3,
            cold_l2=True,
            cuda_graph=False,
            stop_reason="budget",
            timer="host",
        ),
    )
    back = ResultRecord.from_dict(json.loads(rec.to_json()))
    assert back.timing is not None and back.timing.samples == [1.0, 2.0, 3.0]
    assert back.schema == 1


def test_unknown_schema_is_refused() -> None:
    with pytest.raises(ValueError, match="schema"):
        ResultRecord.from_dict({"schema": 99})
