"""The pytest integration writes pytest-benchmark-compatible JSON from our timer."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

# pytest-benchmark measures nothing under pytest-xdist: make test runs these in one process
pytestmark = pytest.mark.serial

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_suite_as_pytest_module_fills_benchmark_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(REPO / "tests" / "kernels" / "suites" / "test_basic_suite.py"),
            "-k",
            "softmax or matmul",
            f"--benchmark-json={out}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    benches = {b["name"]: b for b in data["benchmarks"]}
    assert set(benches) == {"test_kernel[softmax-float16]", "test_kernel[matmul-float16]"}
    for b in benches.values():
        info = b["extra_info"]
        assert info["kernelwatch_timer"] == "host_cpu"
        assert b["stats"]["rounds"] == len(b["stats"]["data"]) >= 10
        assert abs(b["stats"]["median"] - info["kernelwatch_median_s"]) < 1e-12
    # and pytest-benchmark's own tooling reads it
    cmp = subprocess.run(
        [str(Path(sys.executable).with_name("pytest-benchmark")), "compare", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cmp.returncode == 0, cmp.stderr[-2000:]
    assert "test_kernel[matmul-float16]" in cmp.stdout
