"""Every line the runner writes is validated before the worker hands it on to be stored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelwatch.kernels.record import ResultRecord
from kernelwatch.worker.sandbox import Sandbox
from kernelwatch.worker.suite_process import SuiteRequest, run_suite

# A stand-in runner speaking the runner's protocol (marker on stderr, JSON lines to
# --out): one good record, one of a future schema, one that is not a record at all,
# then a case that dies mid-way.
FAKE_RUNNER = """
import json, os, sys
out = sys.argv[sys.argv.index("--out") + 1]
skip = {sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--skip-case"}
good = {"schema": 1, "suite": "basic", "case_id": "good", "kernel": "softmax",
        "backend": "fake", "params": {"rows": 4}, "status": "pass"}
lines = [
    ("good", good),
    ("future", {**good, "case_id": "future", "schema": 2, "timing": {"novel": True}}),
    ("garbage", ["not", "a", "record"]),
]
with open(out, "a") as fh:
    for cid, data in lines:
        print("KW-CASE-START", cid, "softmax", "{}", file=sys.stderr, flush=True)
        fh.write(json.dumps(data) + "\\n")
        fh.flush()
if "dies" not in skip:
    print("KW-CASE-START dies softmax", json.dumps({"rows": 8}), file=sys.stderr, flush=True)
    os._exit(3)
"""


def _request(tmp_path: Path, module: str, case_timeout_s: float) -> SuiteRequest:
    """The stand-in runner ``module`` (a file in ``tmp_path``) as the worker would start it."""
    return SuiteRequest(
        python=sys.executable,
        pythonpath=(str(tmp_path),),
        env={},
        workdir=tmp_path / "work",
        suites=["basic"],
        impl="fake",
        backend="fake",
        library={"name": "lib"},
        case_timeout_s=case_timeout_s,
        suite_timeout_s=120,
        module=module,
        # the protocol is under test here, not the confinement (tests/worker/test_sandbox*)
        sandbox=Sandbox.from_env({"KW_SANDBOX": "none"}),
    )


def test_records_of_another_schema_or_no_shape_become_error_results(tmp_path: Path) -> None:
    (tmp_path / "fake_runner.py").write_text(FAKE_RUNNER)
    seen: list[ResultRecord] = []
    outcome = run_suite(_request(tmp_path, "fake_runner", 60), on_record=seen.append)
    assert not outcome.aborted
    by_id = {r.case_id: r for r in outcome.records}
    assert all(isinstance(r, ResultRecord) for r in seen) and len(seen) == len(by_id)

    assert by_id["good"].status == "pass"
    future = by_id["future"]
    assert future.status == "error" and future.schema == 1
    assert "unsupported result schema 2" in future.error
    assert '"novel"' in future.log_tail  # the line itself, to read what was sent
    assert future.kernel == "softmax" and future.library == {"name": "lib"}

    (garbage,) = [r for cid, r in by_id.items() if cid.startswith("invalid-")]
    assert garbage.status == "error" and garbage.kernel == "invalid-record"
    assert "JSON object" in garbage.error

    # the crash record comes from the same constructor: a valid record of this schema
    dies = by_id["dies"]
    assert dies.status == "error" and dies.params == {"rows": 8}
    assert ResultRecord.from_dict(json.loads(dies.to_json())) == dies


# A runner whose last case is recorded, then spends longer than the case timeout
# closing down (the paired mode reaping side processes that are still importing torch).
SLOW_EXIT_RUNNER = """
import json, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
record = {"schema": 1, "suite": "basic", "case_id": "last", "kernel": "softmax",
          "backend": "fake", "params": {"rows": 4}, "status": "pass"}
print("KW-CASE-START last softmax {}", file=sys.stderr, flush=True)
with open(out, "a") as fh:
    fh.write(json.dumps(record) + "\\n")
time.sleep(2.5)
"""


def test_time_after_a_cases_record_is_not_charged_to_that_case(tmp_path: Path) -> None:
    (tmp_path / "slow_exit.py").write_text(SLOW_EXIT_RUNNER)
    outcome = run_suite(_request(tmp_path, "slow_exit", 1.0))
    assert not outcome.aborted, outcome.aborted
    (record,) = outcome.records
    assert record.case_id == "last" and record.status == "pass"
