"""Every line the runner writes is validated before the worker hands it on to be stored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelwatch.kernels.record import ResultRecord, case_id, library_fields
from kernelwatch.worker import suite_process
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
    assert future.kernel == "softmax" and future.library == library_fields({"name": "lib"})

    (garbage,) = [r for cid, r in by_id.items() if cid.startswith("invalid-")]
    assert garbage.status == "error" and garbage.kernel == "invalid-record"
    assert "JSON object" in garbage.error

    # the crash record comes from the same constructor: a valid record of this schema
    dies = by_id["dies"]
    assert dies.status == "error" and dies.params == {"rows": 8}
    assert ResultRecord.from_dict(json.loads(dies.to_json())) == dies


# A runner whose one case hangs: the worker kills it at the case timeout.
HANGING_RUNNER = """
import sys, time
print("KW-CASE-START hangs softmax {}", file=sys.stderr, flush=True)
time.sleep(60)
"""


def test_a_killed_or_crashed_case_is_charged_the_seconds_it_held_the_gpu(tmp_path: Path) -> None:
    (tmp_path / "hanging.py").write_text(HANGING_RUNNER)
    outcome = run_suite(_request(tmp_path, "hanging", 1.5))
    (hung,) = outcome.records
    assert hung.status == "error" and "case timed out after 2s" in hung.error
    assert 1.5 <= hung.cost["wall_s"] < 30  # killed at its timeout, not at the sleep's end
    (tmp_path / "fake_runner.py").write_text(FAKE_RUNNER)
    crashed = {r.case_id: r for r in run_suite(_request(tmp_path, "fake_runner", 60)).records}
    assert 0 <= crashed["dies"].cost["wall_s"] < 30
    assert crashed["good"].cost == {}  # its own record, as the runner wrote it


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


# A runner whose code under test prints the case marker's prefix alone, then floods the
# records file with one line that has no end, then writes its records.
HOSTILE_RUNNER = """
import json, sys
out = sys.argv[sys.argv.index("--out") + 1]
flood = int(sys.argv[sys.argv.index("--flood-mb") + 1]) if "--flood-mb" in sys.argv else 0
def record(cid):
    return {"schema": 1, "suite": "basic", "case_id": cid, "kernel": "softmax",
            "backend": "fake", "params": {"rows": 4}, "status": "pass"}
print("KW-CASE-START first softmax {}", file=sys.stderr, flush=True)
print("KW-CASE-START    ", file=sys.stderr, flush=True)
with open(out, "a") as fh:
    fh.write(json.dumps(record("first")) + "\\n")
    for _ in range(flood):
        fh.write("x" * 2**20)
    fh.write("\\n" if flood else "")
    print("KW-CASE-START after softmax {}", file=sys.stderr, flush=True)
    fh.write(json.dumps(record("after")) + "\\n")
print("the end of the output", file=sys.stderr, flush=True)
"""


def test_a_bare_case_marker_is_not_a_case_and_the_log_drains_on(tmp_path: Path) -> None:
    # ``KW-CASE-START`` and spaces raised IndexError in the log's pump thread: the rest
    # of the output went unlogged and unlimited, and the case "timed out"
    (tmp_path / "hostile.py").write_text(HOSTILE_RUNNER)
    outcome = run_suite(_request(tmp_path, "hostile", 20))
    assert not outcome.aborted, outcome.aborted
    assert [r.case_id for r in outcome.records] == ["first", "after"]
    assert all(r.status == "pass" for r in outcome.records)
    assert "the end of the output" in outcome.log


def test_a_records_line_without_an_end_is_read_in_bounded_pieces_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 600 MB with no newline once took the worker from 0.2 to 2 GB: the watch read it
    # whole at every poll. Lines over the cap are passed by and named; the records on
    # either side stay. (The cap is lowered so that a few MB show it.)
    monkeypatch.setattr(suite_process, "RECORD_LINE_MAX", 2**20)
    (tmp_path / "hostile.py").write_text(HOSTILE_RUNNER)
    request = _request(tmp_path, "hostile", 20)
    request.extra_args += ["--flood-mb", "5"]
    outcome = run_suite(request)
    assert [r.case_id for r in outcome.records] == ["first", "after"]
    assert outcome.aborted == "records file: 1 line(s) over 1 MiB, not records"


def test_the_records_watch_holds_no_more_than_a_line_cap_of_a_long_line(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"")
    watch = suite_process._RecordWatch(path)
    cap = suite_process.RECORD_LINE_MAX
    with path.open("ab") as fh:
        fh.write(b"y" * (cap + 10))
    assert watch.new_case_ids() == set() and watch.skipping
    assert watch.offset == cap  # passed by, a whole read at a time
    with path.open("ab") as fh:
        fh.write(b"tail\n" + json.dumps({"case_id": "kept"}).encode() + b"\n")
    assert watch.new_case_ids() == {"kept"} and not watch.skipping


# A runner announcing its cases as the real one does (runner._announce), whose case "b"
# first hides its stderr (dup2 of /dev/null, or output left without a line end) and then
# ends the process: by os._exit(0), or by SIGABRT.
ENDING_RUNNER = """
import json, os, sys
from kernelwatch.kernels import runner
from kernelwatch.kernels.runner import _announce
runner._case_file = sys.argv[sys.argv.index("--case-file") + 1]
out = sys.argv[sys.argv.index("--out") + 1]
skip = {sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--skip-case"}
how = os.environ["HOW"]
for cid in ("a", "b", "c"):
    if cid in skip:
        continue
    if cid == "b" and how == "hidden":
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    if cid == "b" and how == "glued":
        os.write(2, b"a progress bar with no line end")
    _announce(f"KW-CASE-START {cid} softmax {{}}")
    if cid == "b":
        os._exit(0) if how == "exit0" else os.abort()
    with open(out, "a") as fh:
        fh.write(json.dumps({"schema": 1, "suite": "basic", "case_id": cid, "kernel":
                 "softmax", "backend": "fake", "params": {}, "status": "pass"}) + "\\n")
"""


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("exit0", "the runner exited with code 0 inside the case"),
        ("hidden", "SIGABRT"),
        ("glued", "SIGABRT"),
    ],
)
def test_a_case_that_ends_its_runner_is_that_cases_error_and_the_rest_still_run(
    tmp_path: Path, how: str, said: str
) -> None:
    # an audit (2026-12-05): os._exit(0) in a kernel made the run a PASS with the rest
    # of the suite unmeasured; a stderr redirected, or a marker glued to a kernel's
    # unended output, made a crash "outside a case" and ended the whole run
    (tmp_path / "ending.py").write_text(ENDING_RUNNER)
    request = _request(tmp_path, "ending", 20)
    request.env = {"HOW": how}
    outcome = run_suite(request)
    assert not outcome.aborted, outcome.aborted
    by_id = {r.case_id: r for r in outcome.records}
    assert set(by_id) == {"a", "b", "c"}
    assert by_id["a"].status == by_id["c"].status == "pass"
    assert by_id["b"].status == "error" and said in by_id["b"].error, by_id["b"].error


def test_a_records_free_text_is_capped_so_its_line_is_read() -> None:
    # a kernel raising RuntimeError("E" * 30_000_000) made a 30 MB record line: not read,
    # and the case vanished
    record = ResultRecord.for_case("basic", "c1", "softmax", "lib", {})
    record.error = "RuntimeError: " + "E" * 30_000_000
    line = record.to_json()
    assert len(line) < 10_000 and "more characters cut" in line
    assert ResultRecord.from_dict(json.loads(line)).error.startswith("RuntimeError: EEEE")


# A runner that lists its cases beside the case file (``runner.note_plan``), with a line of
# no known shape and a repeat among them, records the first, then hangs in the second.
PLANNED_RUNNER = """
import json, sys, time
from kernelwatch.kernels.record import case_id
out = sys.argv[sys.argv.index("--out") + 1]
case_file = sys.argv[sys.argv.index("--case-file") + 1]
def row(rows, cid=None):
    params = {"rows": rows}
    return {"suite": "basic", "case_id": cid or case_id("softmax", "fake", params),
            "kernel": "softmax", "params": params}
a, b = row(1), row(2)
with open(case_file + ".plan", "w") as fh:
    for line in [a, b, ["no", "shape"], row(3), a, row(4), row(5, cid="another-case")]:
        fh.write(json.dumps(line) + "\\n")
    fh.write("not json\\n")
print("KW-CASE-START", a["case_id"], "softmax {}", file=sys.stderr, flush=True)
with open(out, "a") as fh:
    fh.write(json.dumps({"schema": 1, **a, "backend": "fake", "status": "pass"}) + "\\n")
print("KW-CASE-START", b["case_id"], "softmax {}", file=sys.stderr, flush=True)
time.sleep(600)
"""


def _planned(rows: int) -> str:
    return case_id("softmax", "fake", {"rows": rows})


def test_the_cases_a_suite_timeout_left_are_recorded_as_not_reached(tmp_path: Path) -> None:
    """FlashInfer 0.6.0's suite on the H200 (2026-12-05) lost 48 of 204 cases to its
    timeout without a word: each case of the runner's plan without a record is now a
    ``skip`` that says why, and nothing else in the plan becomes a record."""
    (tmp_path / "planned.py").write_text(PLANNED_RUNNER)
    req = _request(tmp_path, "planned", case_timeout_s=60)
    req.suite_timeout_s = 3
    seen: list[str] = []
    outcome = run_suite(req, on_record=lambda r: seen.append(r.case_id))
    assert outcome.aborted.startswith("suite timed out after 3s")
    by_id = {r.case_id: r for r in outcome.records}
    a, b, c, d = (_planned(n) for n in (1, 2, 3, 4))
    # the row filed under an id that is not its own ("another-case") is passed over
    assert sorted(by_id) == sorted([a, b, c, d]) and sorted(seen) == sorted(by_id)
    assert by_id[a].status == "pass"
    assert by_id[b].status == "error" and "suite timed out" in by_id[b].error
    for cid, rows in ((c, 3), (d, 4)):
        r = by_id[cid]
        assert r.status == "skip" and r.error == "not reached: suite timed out after 3s"
        assert r.params == {"rows": rows} and r.library["name"] == "lib"


def test_a_suite_that_ends_in_time_adds_nothing_from_its_plan(tmp_path: Path) -> None:
    """The plan speaks only for a suite its timeout ended: a runner that listed more
    cases than it ran and exited on its own (a crash between cases) keeps its records."""
    runner = PLANNED_RUNNER.replace("time.sleep(600)", "sys.exit(0)")
    (tmp_path / "planned_exit.py").write_text(runner)
    outcome = run_suite(_request(tmp_path, "planned_exit", case_timeout_s=60))
    assert {r.status for r in outcome.records} <= {"pass", "error"}
    assert not any("not reached" in r.error for r in outcome.records)


def test_a_plan_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    """The code under test writes the work folder: a plan swapped for a link to a host
    file is read as nothing (``open_regular``)."""
    req = _request(tmp_path, "unused", case_timeout_s=1)
    req.workdir.mkdir(parents=True)
    host = tmp_path / "host-secret"
    x = case_id("k", "fake", {})
    host.write_text(json.dumps({"suite": "s", "case_id": x, "kernel": "k", "params": {}}))
    (req.workdir / "current-case.plan").symlink_to(host)
    assert suite_process.unreached(req, set(), "why") == []
    (req.workdir / "current-case.plan").unlink()
    (req.workdir / "current-case.plan").write_text(host.read_text() + "\n")
    (only,) = suite_process.unreached(req, set(), "why")
    assert only.case_id == x and only.status == "skip" and only.error == "why"
