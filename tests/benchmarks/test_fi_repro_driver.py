"""``fi-repro``: FlashInfer's standalone reproductions run per carried release, their
findings kept in the driver's JSON (the script's JSON lines) and laid side by side."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.gpu import fi_repro, host

# A stand-in for docs/repro/flashinfer_fp8.py: one line per finding as it is measured,
# a decode variant whose build failed recorded as that row's error, text between
FAKE_REPRO = """
import json
print(json.dumps({"flashinfer": "0.6.0", "prefill": {"seq": 4096, "heads": "8/8",
                  "rel_l2_fp8_vs_fp32_ref": 0.573, "rel_l2_fp16_kernel_vs_fp32_ref": 0.0021}}))
print("a JIT's build line")
print(json.dumps({"flashinfer": "0.6.0", "decode": {"times": {
    "float16 tensor_cores=True backend=auto": {"us": 441.7, "TB/s": 0.1},
    "float16 tensor_cores=True backend=fa2": {"us": 18.4, "TB/s": 2.9},
    "float8_e4m3fn tensor_cores=True backend=auto": {"error": "RuntimeError: Ninja build failed"},
}}}))
"""


def _ctx(tmp_path: Path, cpu: bool) -> host.Context:
    logs = tmp_path / "logs"
    logs.mkdir()
    return host.Context(out=tmp_path, logs=logs, deadline=time.monotonic() + 120, cpu=cpu)


def _args(script: Path, versions: list[str] | None) -> fi_repro.argparse.Namespace:
    return fi_repro.argparse.Namespace(flashinfer=versions, script=script, version_timeout=60.0)


def test_each_release_runs_the_script_and_its_findings_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "repro.py"
    script.write_text(FAKE_REPRO)
    installed: list[str | None] = []

    def flashinfer(ctx: host.Context, version: str | None) -> tuple[str, str]:
        installed.append(version)
        return str(tmp_path), f"flashinfer {version}"

    monkeypatch.setattr(host, "flashinfer", flashinfer)
    result, table = fi_repro.run(_ctx(tmp_path, cpu=False), _args(script, ["0.5.3", "0.6.0"]))
    assert installed == ["0.5.3", "0.6.0"]
    assert [v["version"] for v in result["versions"]] == ["0.5.3", "0.6.0"]
    for v in result["versions"]:
        assert v["rc"] == 0 and not v["timed_out"]
        prefill, decode = v["findings"]
        assert prefill["prefill"]["rel_l2_fp8_vs_fp32_ref"] == 0.573
        assert "float8_e4m3fn tensor_cores=True backend=auto" in decode["decode"]["times"]
    text = "\n".join(table)
    assert "flashinfer 0.6.0: 2 finding(s), rc 0" in text
    assert "prefill seq 4096 heads 8/8: rel L2 fp8 0.573, fp16 kernel 0.0021" in text
    assert "decode float16 tensor_cores=True backend=fa2: 18.4 us" in text
    assert "decode float8_e4m3fn tensor_cores=True backend=auto: RuntimeError: Ninja" in text


def test_on_the_cpu_each_release_says_why_it_did_not_run(tmp_path: Path) -> None:
    result, table = fi_repro.run(_ctx(tmp_path, cpu=True), _args(fi_repro.SCRIPT, ["0.6.0"]))
    (only,) = result["versions"]
    assert only == {"version": "0.6.0", "skipped": "CPU mode: FlashInfer needs a GPU"}
    assert table == ["flashinfer 0.6.0: skipped (CPU mode: FlashInfer needs a GPU)"]


def test_the_driver_knows_the_sub_command_and_the_default_script_is_the_repro() -> None:
    from benchmarks.gpu import cli

    assert cli.commands()["fi-repro"] is fi_repro
    assert fi_repro.SCRIPT.is_file() and fi_repro.SCRIPT.name == "flashinfer_fp8.py"
