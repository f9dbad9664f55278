"""A GPU timing made without NVML says so: in its record, in ``show``, the gate table, the
commit status and the PR comment (issue 26). Without telemetry the clock floor and the
throttle guard are off and ``reliable`` is always true, so the reader must be told."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Result, Run
from kernelwatch.jobs.github.render import format_gate, render_comment
from kernelwatch.jobs.github.reporter import status_text
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import CommitVerdict, class_verdict
from kernelwatch.kernels import runner
from kernelwatch.kernels.record import ResultRecord, Timing, telemetry_of
from kernelwatch.kernels.telemetry import Telemetry
from kernelwatch.kernels.timing import Measurement
from tests.fake_nvml import FakeDevice, FakeNvml
from tests.jobs.judging.test_cpu_plumbing import stored_run


def _timing(timer: str) -> dict[str, Any]:
    return {"unit": "s", "samples": [1e-3] * 8, "median": 1e-3, "ci_low": 1e-3, "ci_high": 1e-3,
            "n": 8, "cold_l2": True, "cuda_graph": True, "stop_reason": "converged",
            "timer": timer}  # fmt: skip


def _runner_record(kernel: str, nvml: bool) -> dict[str, Any]:
    """A record as ``kernelwatch bench`` wrote it on a GPU before the field existed."""
    return {"schema": 1, "suite": "basic", "case_id": f"case-{kernel}", "kernel": kernel,
            "backend": "lib", "params": {}, "status": "pass", "timing": _timing("cuda_event"),
            "device": {"name": "NVIDIA H200", "class": "h200", "nvml": nvml}}  # fmt: skip


def _paired_record(kernel: str, side: str) -> dict[str, Any]:
    """A paired record: the candidate side's sampler said whether NVML was on."""
    return {
        **_runner_record(kernel, True),
        "device": {"name": "NVIDIA H200", "paired_describe": {"telemetry": side}},
        "paired": {"verdict": "unchanged", "ratio": 1.0, "ci_low": 0.99, "ci_high": 1.01,
                   "min_effect": 0.01, "baseline_median": 1e-3, "groups": 16,
                   "clocks": [1980] * 16 if side == "live" else []},
    }  # fmt: skip


def test_a_cpu_run_of_the_runner_records_no_telemetry_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real runner on the CPU: nothing timed on a GPU, so neither live nor off."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "r.jsonl"
    argv = ["--impl", "kernelwatch.kernels.adapters.sdpa", "--suite", "decode", "--size"]
    assert (
        runner.main([*argv, "smoke", "--device", "cpu", "--budget", "0.02", "--out", str(out)]) == 0
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    timed = [r for r in records if r["timing"]]
    assert timed and all(r["timing"]["timer"] == "host_cpu" for r in timed)
    assert all("telemetry" in r and r["telemetry"] is None for r in records)
    assert all(ResultRecord.from_dict(r).telemetry is None for r in records)  # round-trips
    assert all(telemetry_of(r) is None for r in records)


def test_a_gpu_measurement_states_live_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    timing = Timing(**_timing("cuda_event"))
    assert Measurement(timing, {"nvml": True, "sm_mhz_min": 1980}).telemetry_state == "live"
    assert Measurement(timing, {"nvml": False}).telemetry_state == "off"
    assert Measurement(Timing(**_timing("host_cpu"))).telemetry_state is None
    # what decides it: whether NVML opened the device (no nvidia-ml-py: off)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert not Telemetry(0).available and Telemetry(0).read() is None
    fake = FakeNvml(devices=[FakeDevice("GPU-1", "NVIDIA H200", reasons=0x8)])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    tele = Telemetry(0)
    reading = tele.read()
    assert tele.available and reading is not None and reading.reasons == ("hw_slowdown",)
    with pytest.raises(Exception, match="telemetry"):
        ResultRecord.from_dict({**_runner_record("x", True), "telemetry": "maybe"})


def test_records_written_before_the_field_are_read_from_what_they_kept() -> None:
    assert telemetry_of(_runner_record("a", True)) == "live"
    assert telemetry_of(_runner_record("a", False)) == "off"
    assert telemetry_of(_paired_record("a", "off")) == "off"
    old = _paired_record("a", "live")
    del old["device"]["paired_describe"]
    assert telemetry_of(old) == "live"  # the blocks read clocks
    old["paired"]["clocks"] = []
    assert telemetry_of(old) == "off"
    unknown = {**_runner_record("a", True), "device": {}}
    assert telemetry_of(unknown) is None  # nothing kept says: not warned about


def _h200_run(session: Session, *records: dict[str, Any]) -> Run:
    return stored_run(session, "h200", *records)


def test_show_the_gate_the_status_and_the_comment_say_telemetry_was_off(
    session: Session,
) -> None:
    run = _h200_run(
        session,
        _paired_record("softmax", "off"),
        _paired_record("rmsnorm", "live"),
        _runner_record("swiglu", False),
    )
    stored = sorted(r.record["telemetry"] for r in session.query(Result).filter_by(run_id=run.id))
    assert stored == ["live", "off", "off"]  # the store states it in every record
    assert analyze(session, run, Settings())
    summary = run_summary(session, run)
    assert summary["telemetry"] == {"live": 1, "off": 2}
    assert {c["kernel"]: c["telemetry"] for c in summary["cases"]} == {
        "rmsnorm": "live", "softmax": "off", "swiglu": "off"}  # fmt: skip
    shown = format_run(summary)
    assert "warning: GPU telemetry off for 2 of 3 timed cases" in shown
    assert "install kernelwatch[gpu]" in shown
    cv = class_verdict(session, run)
    assert (cv.telemetry_off, cv.telemetry_timed) == (2, 3)
    verdict = CommitVerdict("o/lib", "c" * 40, (cv,))
    assert "h200: GPU telemetry off for 2 of 3 timed cases" in format_gate(verdict)
    comment = render_comment(verdict, dashboard_url="http://x")
    assert "⚠️ `h200`: GPU telemetry off for 2 of 3 timed cases" in comment
    assert status_text(cv).endswith("(GPU telemetry off: 2 cases)")


def test_a_run_with_live_telemetry_or_on_the_cpu_has_no_warning(session: Session) -> None:
    run = _h200_run(session, _paired_record("softmax", "live"), _runner_record("x", True))
    assert analyze(session, run, Settings())
    cv = class_verdict(session, run)
    assert cv.telemetry_off == 0 and cv.telemetry_timed == 2
    verdict = CommitVerdict("o/lib", "c" * 40, (cv,))
    assert "telemetry" not in render_comment(verdict, dashboard_url="http://x")
    assert "telemetry" not in format_run(run_summary(session, run)) + status_text(cv)
