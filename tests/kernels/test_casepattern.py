"""Case patterns (``kernels/casepattern.py``): what ``--case`` and a bisection select."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kernelwatch.kernels.casepattern import matches, names_of
from kernelwatch.kernels.record import case_label

ROOT = Path(__file__).resolve().parents[2]


def test_a_pattern_matches_the_kernel_the_label_or_the_case_id() -> None:
    params = {"model": "llama3-70b", "seq_q": 1024, "seq_k": 5120}
    names = names_of("prefill", params, "c35ca72f037837f4")
    assert case_label(params) == "model=llama3-70b, seq_k=5120, seq_q=1024"
    assert matches(names, "prefill")
    assert matches(names, "prefill *model=llama3-70b*")
    assert matches(names, "decode, c35ca72f*")  # any of the comma-separated globs
    assert not matches(names, "prefill *model=llama3-8b*")
    assert not matches(names, "decode")
    assert matches(names, "") and matches(names, " , ")  # empty: every case


def test_the_runner_measures_only_the_cases_the_pattern_selects(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", "basic",
         "--case", "softmax", "--budget", "0.05", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    kernels = {json.loads(line)["kernel"] for line in out.read_text().splitlines()}
    assert kernels == {"softmax"}
