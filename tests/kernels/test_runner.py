"""The suite runner on the CPU: Triton kernels under the interpreter, real references."""

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_bench_runs_the_first_suite_and_every_kernel_is_correct(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_cli("bench", "--suite", "basic", "--out", str(out), "--budget", "0.2", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = _records(out)
    assert sorted(r["kernel"] for r in recs) == ["attention", "matmul", "rmsnorm", "softmax"]
    for r in recs:
        assert r["schema"] == 1
        assert r["status"] == "pass", r["error"]
        assert r["correctness"]["passed"] and r["correctness"]["errors"]["rel_l2"] < 1e-2
        assert r["timing"]["timer"] == "host_cpu" and r["timing"]["n"] == len(
            r["timing"]["samples"]
        )
        assert r["throughput"]["gbps"] > 0
        assert r["environment"]["triton_interpret"] is True
        assert r["device"]["class"] == "cpu"


def _impl(tmp_path: Path, body: str) -> str:
    mod = tmp_path / "impls"
    mod.mkdir(exist_ok=True)
    (mod / "brokenimpl.py").write_text(body)
    sys.path.insert(0, str(mod))
    return "brokenimpl"


@pytest.fixture
def wrong_impl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "impls"))
    return _impl(
        tmp_path,
        (
            "from kernelwatch.kernels.triton_kernels import softmax as _good\n"
            "def softmax(x, out):\n"
            "    _good(x, out)\n"
            "    out[:, -1] = 0.5  # wrong last column\n"
            "def rmsnorm(x, w, eps, out):\n"
            "    raise ValueError('no rmsnorm here')\n"
        ),
    )


def test_wrong_and_raising_kernels_become_fail_and_error_records(
    tmp_path: Path, wrong_impl: str
) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_cli(
        "bench",
        "--out",
        str(out),
        "--impl",
        wrong_impl,
        "--kernel",
        "softmax",
        "--kernel",
        "rmsnorm",
        "--budget",
        "0.1",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    by_kernel = {r["kernel"]: r for r in _records(out)}
    assert by_kernel["softmax"]["status"] == "fail"
    assert by_kernel["softmax"]["timing"] is None  # a wrong kernel is never timed
    assert "error" in by_kernel["softmax"]["error"]
    assert by_kernel["rmsnorm"]["status"] == "error"
    assert "ValueError: no rmsnorm here" in by_kernel["rmsnorm"]["error"]
    assert "Traceback" in by_kernel["rmsnorm"]["log_tail"]


def test_case_markers_name_each_case_before_it_runs(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = run_cli("bench", "--out", str(out), "--kernel", "softmax", "--budget", "0.05")
    markers = [ln for ln in proc.stderr.splitlines() if ln.startswith("KW-CASE-START")]
    assert len(markers) == 1
    assert markers[0].split()[1] == _records(out)[0]["case_id"]
