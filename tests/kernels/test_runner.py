"""The suite runner on the CPU: Triton kernels under the interpreter, real references."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.kernels.runner import CHECK_PARTS
from tests.conftest import run_cli


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# each part is rounded to 4 decimals (record.COST_DIGITS), and so is the wall time
ROUNDING = 1e-3


def _spent(record: dict, parts: tuple[str, ...]) -> None:
    """The case's recorded seconds: exactly ``parts`` beside its ``wall_s``, each a number
    of seconds, together within the wall time (what is left is selecting the case and
    writing the record before it)."""
    cost = record["cost"]
    assert set(cost) == {*parts, "wall_s"}, cost
    assert all(isinstance(v, float) and v >= 0 for v in cost.values()), cost
    assert cost["wall_s"] > 0 and sum(cost[k] for k in parts) <= cost["wall_s"] + ROUNDING, cost


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
        # where its seconds went: every part of the check, the timing, its wall time
        _spent(r, (*CHECK_PARTS, "timing_s"))
        assert r["cost"]["timing_s"] + ROUNDING >= r["timing"]["total_s"] > 0  # timed inside
        assert r["cost"]["check_call_s"] > 0  # the kernel's first call, interpreted


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
    # A wrong result fails (1) and wins over the error beside it (design.md exit codes).
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "kernelwatch bench: 2 of 2 cases failed or errored" in proc.stderr
    summary = proc.stdout.splitlines()  # after the records: a table for people
    assert summary[0].split()[:2] == ["kernel", "status"]
    assert "2 cases: 1 fail, 1 error" in summary
    assert any("ValueError: no rmsnorm here" in line for line in summary)
    by_kernel = {r["kernel"]: r for r in _records(out)}
    assert by_kernel["softmax"]["status"] == "fail"
    assert by_kernel["softmax"]["timing"] is None  # a wrong kernel is never timed
    assert "error" in by_kernel["softmax"]["error"]
    assert by_kernel["rmsnorm"]["status"] == "error"
    assert "ValueError: no rmsnorm here" in by_kernel["rmsnorm"]["error"]
    assert "Traceback" in by_kernel["rmsnorm"]["log_tail"]
    # both held the card too: a wrong result its whole check, no timing; a raising kernel
    # the parts before its call (which raised), and each its wall time
    _spent(by_kernel["softmax"], CHECK_PARTS)
    _spent(by_kernel["rmsnorm"], ("check_load_s", "check_inputs_s"))


def test_case_markers_name_each_case_before_it_runs(tmp_path: Path) -> None:
    """The worker's entry announces each case; ``kernelwatch bench`` at a terminal does not
    (the markers are the worker's protocol, issue 27)."""
    out = tmp_path / "r.jsonl"
    args = ["--out", str(out), "--kernel", "softmax", "--budget", "0.05"]
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    markers = [ln for ln in proc.stderr.splitlines() if ln.startswith("KW-CASE-START")]
    assert len(markers) == 1
    assert markers[0].split()[1] == _records(out)[0]["case_id"]
    person = run_cli("bench", *args[:1], str(tmp_path / "p.jsonl"), *args[2:])
    assert person.returncode == 0 and "KW-CASE-START" not in person.stderr + person.stdout


def test_the_worker_entry_lists_its_cases_before_the_first_starts(tmp_path: Path) -> None:
    """``<case file>.plan`` names the pass's cases (suite, id, kernel, params), the skipped
    ones left out: what the worker records as not reached when a suite timeout ends the
    run (``worker/suite_process.unreached``)."""
    out, noted = tmp_path / "r.jsonl", tmp_path / "current-case"
    ran = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", "--out", str(out), "--kernel",
         "softmax", "--kernel", "rmsnorm", "--budget", "0.05", "--case-file", str(noted)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    plan = _records(tmp_path / "current-case.plan")
    records = _records(out)
    assert len(records) == 2
    assert [(r["suite"], r["case_id"], r["kernel"], r["params"]) for r in plan] == [
        (r["suite"], r["case_id"], r["kernel"], r["params"]) for r in records
    ]
    skipped = records[0]["case_id"]
    again = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", "--out", str(tmp_path / "2.jsonl"),
         "--kernel", "softmax", "--kernel", "rmsnorm", "--budget", "0.05",
         "--case-file", str(noted), "--skip-case", skipped],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["case_id"] for r in _records(tmp_path / "current-case.plan")] == [
        records[1]["case_id"]
    ]


def test_bench_exits_2_when_a_case_errored_but_the_worker_protocol_stays_0(
    tmp_path: Path, wrong_impl: str
) -> None:
    """``kernelwatch bench`` says a raising kernel is an error; ``python -m
    kernelwatch.kernels.runner`` (what the worker runs) exits 0 after any case outcome,
    because the worker reads a non-zero exit as a crash of the runner."""
    args = ["--impl", wrong_impl, "--kernel", "rmsnorm", "--budget", "0.05"]
    out = tmp_path / "a.jsonl"
    proc = run_cli("bench", "--out", str(out), *args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "1 case: 1 error" in proc.stdout
    assert [r["status"] for r in _records(out)] == ["error"]
    raw = tmp_path / "b.jsonl"
    worker_side = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", "--out", str(raw), *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert worker_side.returncode == 0, worker_side.stderr[-2000:]
    assert [r["status"] for r in _records(raw)] == ["error"]
    assert "case:" not in worker_side.stdout  # no table for the worker's log


def test_bench_summary_goes_to_stderr_when_records_go_to_stdout() -> None:
    proc = run_cli("bench", "--out", "-", "--kernel", "softmax", "--budget", "0.05", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines()]  # only JSON lines
    assert [r["kernel"] for r in records] == ["softmax"]
    assert "1 case: 1 pass" in proc.stderr


def test_a_cpu_run_pins_torch_to_one_thread_and_says_so(tmp_path: Path) -> None:
    """Issue 18: torch's default (a thread per core) on a loaded machine made untouched
    kernels look 100x slower; the runner pins a CPU run and records the count."""
    out = tmp_path / "r.jsonl"
    env_cmd = [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", "basic",
               "--kernel", "softmax", "--size", "smoke", "--budget", "0.05", "--no-peaks",
               "--device", "cpu", "--out", str(out)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "KW_CPU_THREADS")}
    proc = subprocess.run(env_cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = _records(out)
    assert recs and all(r["environment"]["threads"] == 1 for r in recs)
    out.unlink()
    proc = subprocess.run(
        env_cmd, capture_output=True, text=True, timeout=600, env={**env, "KW_CPU_THREADS": "2"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(r["environment"]["threads"] == 2 for r in _records(out))


def test_a_kernel_a_build_profile_left_out_is_unavailable_not_an_error() -> None:
    # what worker/stubs.py compiles into a stubbed kernel file, thrown at the first call
    from kernelwatch.kernels.adapters import Unavailable, build_profile_skips
    from kernelwatch.kernels.stubbed import LEFT_OUT

    message = f"csrc/flash_attn/src/flash_fwd_hdim64_bf16_sm80.cu {LEFT_OUT}"
    with pytest.raises(Unavailable, match="hdim64"), build_profile_skips():
        raise RuntimeError(message)
    with pytest.raises(RuntimeError, match="out of memory"), build_profile_skips():
        raise RuntimeError("CUDA out of memory")  # any other error stays an error
