"""A library's own pytest suite ingested as per-test result records."""

from __future__ import annotations

import json
from pathlib import Path

from kernelwatch.kernels import pytest_ingest
from kernelwatch.kernels.record import ResultRecord, case_id

LIB_TESTS = """
import os
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")

def test_ok():
    assert 1 + 1 == 2

def test_wrong():
    assert 2 + 2 == 5, "arithmetic regressed"

def test_setup_error(broken):
    pass

@pytest.mark.skip(reason="needs sm_100")
def test_blackwell():
    pass

@pytest.mark.xfail(reason="known bug")
def test_known_bug():
    assert False

class TestAttention:
    @pytest.mark.parametrize("hdim", [64, 128])
    def test_fwd(self, hdim):
        assert hdim != 128, "hdim 128 wrong"
"""


def _lib(tmp_path: Path, body: str = LIB_TESTS) -> Path:
    root = tmp_path / "lib"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_lib.py").write_text(body)
    return root


def test_each_testcase_becomes_a_record(tmp_path: Path) -> None:
    root = _lib(tmp_path)
    records = pytest_ingest.run_pytest(
        ["tests"], cwd=root, suite="lib-tests", library={"name": "lib", "commit": "abc"}
    )
    by_node = {r.params["nodeid"]: r for r in records}
    assert set(by_node) == {
        "tests/test_lib.py::test_ok",
        "tests/test_lib.py::test_wrong",
        "tests/test_lib.py::test_setup_error",
        "tests/test_lib.py::test_blackwell",
        "tests/test_lib.py::test_known_bug",
        "tests/test_lib.py::TestAttention::test_fwd[64]",
        "tests/test_lib.py::TestAttention::test_fwd[128]",
    }
    status = {k.rsplit("::", 1)[-1]: r.status for k, r in by_node.items()}
    assert status == {
        "test_ok": "pass",
        "test_wrong": "fail",
        "test_setup_error": "error",
        "test_blackwell": "skip",
        "test_known_bug": "skip",
        "test_fwd[64]": "pass",
        "test_fwd[128]": "fail",
    }
    wrong = by_node["tests/test_lib.py::test_wrong"]
    assert "arithmetic regressed" in wrong.error and "assert" in wrong.log_tail
    assert "fixture exploded" in by_node["tests/test_lib.py::test_setup_error"].error
    assert "needs sm_100" in by_node["tests/test_lib.py::test_blackwell"].error
    for r in records:
        assert r.suite == "lib-tests" and r.backend == "pytest" and r.library["commit"] == "abc"
        assert r.timing is None and r.correctness is not None
        assert r.correctness.passed == (r.status in ("pass", "skip"))
        assert ResultRecord.from_dict(json.loads(r.to_json())) == r  # valid wire records
    assert len({r.case_id for r in records}) == len(records)


def test_case_ids_depend_on_the_node_id_only() -> None:
    """A parametrized test keeps its series across runs and machines: the id hashes the node
    id (exact with xunit1 reports, which run_pytest asks for), not timing or outcome."""
    xunit1 = (
        '<testsuites><testsuite><testcase classname="tests.test_lib.TestAttention" '
        'name="test_fwd[128]" file="tests/test_lib.py" time="0.1"/></testsuite></testsuites>'
    )
    xunit2 = (
        '<testsuites><testsuite><testcase classname="tests.test_lib.TestAttention" '
        'name="test_fwd[128]" time="9.9"><failure message="x"/></testcase></testsuite></testsuites>'
    )
    [a] = pytest_ingest.parse_junit(xunit1)
    [b] = pytest_ingest.parse_junit(xunit2)
    assert a.params["nodeid"] == "tests/test_lib.py::TestAttention::test_fwd[128]"
    assert a.case_id == case_id(a.params["nodeid"], "pytest", a.params)
    assert (a.status, b.status) == ("pass", "fail")


def test_a_crash_before_the_report_is_one_error_record(tmp_path: Path) -> None:
    root = _lib(tmp_path, "import os\n\ndef test_segfault():\n    os._exit(139)\n")
    [rec] = pytest_ingest.run_pytest(["tests"], cwd=root)
    assert rec.status == "error" and "139" in rec.error and rec.kernel == "<session>"


def test_command_line_appends_json_lines(tmp_path: Path) -> None:
    root = _lib(tmp_path)
    out = tmp_path / "r.jsonl"
    code = pytest_ingest.main(
        ["--out", str(out), "--suite", "x", "--cwd", str(root), "--", "tests", "-k", "test_ok"]
    )
    assert code == 0
    [line] = out.read_text().splitlines()
    rec = json.loads(line)
    assert rec["status"] == "pass" and rec["suite"] == "x" and rec["schema"] == 1
