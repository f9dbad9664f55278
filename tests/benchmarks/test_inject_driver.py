"""The power benchmark (``python -m benchmarks.gpu inject``) in its CPU mode.

The whole path a GPU call takes, once, on the CPU with tiny sizes: the baseline timed
in the suite's timer, the probe comparison that sizes the injection where the gate
times it, the candidate's calibration, the trials. On the CPU no spin runs
(``benchmarks/inject.py`` injects on a GPU only), so the probe measures no added time
and the size falls back to the slope, saying so: what is checked is that each step ran
and that its reading reaches the JSON a reader of the figures relies on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.crowd  # bench-paired's side processes, twice


def test_the_power_benchmark_probes_then_runs_its_trials_on_the_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--cpu", "--out", str(tmp_path),
         "--deadline-s", "300", "inject", "--trials", "1", "--",
         "--budget", "0.2", "--retries", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "inject.json").read_text())
    assert doc["status"] == "ok", doc.get("error")
    (target,) = doc["result"]["targets"]
    assert target["trials"] >= 1 and target["rc"] in (0, 1, 3), target  # a case per record
    sizing = target["sizing"]
    # the probe comparison ran and measured a ratio; no spin ran on the CPU, so the
    # probe side logged no injection, the slope sized the trials, and the JSON says why
    assert sizing["probe_pct"] == 10.0 and sizing["probe_ratio"] is not None, sizing
    assert sizing["probe_extra_iters"] == 0, sizing
    assert sizing["extra_iters"] == 0 and "sized by the slope" in sizing["sized"], sizing
    assert (tmp_path / "logs").exists() or (tmp_path / "logs.tgz").exists()
    assert "sized: " in done.stdout


def test_a_cpu_check_says_whether_a_gpu_targets_library_is_there_to_carry(
    tmp_path: Path,
) -> None:
    """``inject --target`` naming GPU targets, on the CPU: nothing runs, and each target
    says whether the library its GPU call needs is here (2026-12-06: LayerNorm's call
    carried no Liger-Kernel and skipped, after a CPU check that had printed nothing)."""
    liger = tmp_path / "liger-src"
    (liger / "liger_kernel").mkdir(parents=True)

    def check(liger_path: Path) -> dict[str, str]:
        out = tmp_path / f"out-{liger_path.name}"
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.gpu", "--cpu", "--out", str(out),
             "--deadline-s", "60", "inject", "--target", "layernorm", "--target", "decode",
             "--flashinfer", "9.9.9", "--liger", str(liger_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        targets = json.loads((out / "inject.json").read_text())["result"]["targets"]
        return {t["target"].split()[0]: t["skipped"] for t in targets}

    found = check(liger)
    assert set(found) == {"layernorm", "decode"}  # no CPU target matched: none ran
    assert found["layernorm"] == f"GPU only; needs {liger}: here, carry .src"
    assert found["decode"].startswith("GPU only; MISSING here, the GPU call would skip it")
    assert "flashinfer_python-9.9.9-*.whl" in found["decode"]
    missing = check(tmp_path / "nowhere")
    assert missing["layernorm"].startswith("GPU only; MISSING here")
