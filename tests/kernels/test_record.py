import importlib.metadata
import json

import pytest

from kernelwatch.kernels.device import describe_environment
from kernelwatch.kernels.record import (
    PairedSection,
    RecordError,
    ResultRecord,
    Timing,
    canonical_params,
    case_id,
    library_fields,
    paired_section,
)


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


def _minimal(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "schema": 1,
        "suite": "basic",
        "case_id": "abc",
        "kernel": "softmax",
        "backend": "triton",
        "params": {"rows": 1},
        "status": "pass",
    }
    return {**data, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schema": 2}, "unsupported result schema 2"),
        ({"schema": "1"}, "unsupported result schema '1'"),
        ({"status": "passed"}, "record.status: 'passed' is not one of"),
        ({"colour": "blue"}, "unknown field 'colour'"),
        ({"params": [1, 2]}, "record.params: expected an object"),
        ({"timing": {"unit": "s"}}, "record.timing: missing field 'samples'"),
        ({"throughput": {"flops": "many"}}, "record.throughput.flops: expected a number"),
        ({"paired": {"ratio": "1.2"}}, "record.paired.ratio: expected a number"),
        ({"paired": {"verdict": "regression", "extra": 1}}, "record.paired: unknown field"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused_with_the_field_named(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(RecordError, match=message.replace("(", r"\(")):
        ResultRecord.from_dict(_minimal(**changes))


def test_a_record_missing_a_field_or_not_an_object_is_refused() -> None:
    data = _minimal()
    del data["kernel"]
    with pytest.raises(RecordError, match="missing field 'kernel'"):
        ResultRecord.from_dict(data)
    with pytest.raises(RecordError, match="JSON object"):
        ResultRecord.from_dict(["schema", 1])


def test_the_paired_section_round_trips_and_reads_stored_nulls() -> None:
    rec = ResultRecord.for_case("basic", "abc", "softmax", "lib", {"rows": 1})
    assert rec.status == "error" and rec.schema == 1  # nothing ran yet
    rec.status = "pass"
    rec.paired = PairedSection(
        verdict="regression", attempts=2, ratio=1.2, ci_low=1.1, ci_high=1.3, groups=8,
        group_ratios=[1.2, 1.19], group_pairs=[0, 1], baseline_library={"commit": "b" * 40},
    )  # fmt: skip
    back = ResultRecord.from_dict(json.loads(rec.to_json()))
    assert back == rec and isinstance(back.paired, PairedSection)
    # as stored: NaN and infinities are null (db.store.json_safe), fields may be absent
    stored = {"paired": {"verdict": "inconclusive", "ratio": None, "group_ratios": [1.0, None]}}
    section = paired_section(stored)
    assert section is not None and section.ratio is None and section.groups is None
    assert section.group_ratios == [1.0, None]
    assert paired_section({"status": "pass"}) is None  # measured unpaired


def test_an_unpaired_records_cost_round_trips_and_an_older_record_without_it_reads() -> None:
    """``ResultRecord.cost`` (where an unpaired case's seconds went) is optional: records
    written before it, stored by the thousand, still parse, with an empty breakdown."""
    old = ResultRecord.from_dict(_minimal())
    assert old.cost == {} and "cost" not in _minimal()
    rec = ResultRecord.from_dict(
        _minimal(cost={"wall_s": 1.25, "check_call_s": 1, "timing_s": 0.2})
    )
    assert rec.cost == {"wall_s": 1.25, "check_call_s": 1.0, "timing_s": 0.2}
    assert isinstance(rec.cost["check_call_s"], float)
    assert ResultRecord.from_dict(json.loads(rec.to_json())) == rec
    with pytest.raises(RecordError, match="record.cost.wall_s: expected a number"):
        ResultRecord.from_dict(_minimal(cost={"wall_s": "slow"}))


def test_a_record_names_every_library_field_and_triton_as_installed() -> None:
    """design.md: library {name, version, commit}; environment {python, torch, triton}. A
    commit build wrote no version, a release no commit, and Triton was named only once a
    kernel had imported it, after the runner described its environment."""
    assert library_fields({"name": "lib", "commit": "a" * 40}) == {
        "name": "lib",
        "version": None,
        "commit": "a" * 40,
    }
    installed = importlib.metadata.version("triton")
    assert describe_environment()["triton"] == installed
