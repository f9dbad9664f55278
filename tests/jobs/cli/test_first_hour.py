"""What a new user meets in the first hour (issue 27, items 3 to 5), each pinned.

Errors that were tracebacks are one line that says what to do; ``doctor`` fails a host
without a usable bubblewrap and names the worker runs would use; ``bench`` keeps its
worker protocol off the terminal; ``bisect --wait`` shows progress and formatted ratios;
the package metadata builds without setuptools' deprecation walls.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.jobs.cli.bisect import _text, progress_line
from kernelwatch.jobs.planning import bisect_driver as driver
from tests.conftest import run_cli
from tests.jobs.planning.test_bisect_driver import drive, world

ROOT = Path(__file__).resolve().parents[3]
world = world  # the bisection fixture, shared (pytest finds it by name)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "kernelwatch show: KW_DATABASE_URL: not a URL: 'notaurl' (e.g. "
                    "postgresql+psycopg://"),
        ("postgres://kw:hunter2@db.example/kw", "KW_DATABASE_URL: postgres:// needs a driver "
         "kernelwatch does not install; write postgresql+psycopg://kw:***@db.example/kw"),
        ("mysql://kw@db/kw", "KW_DATABASE_URL: SQLAlchemy cannot open 'mysql://kw@db/kw'"),
        ("postgresql+psycopg://kw:hunter2@127.0.0.1:1/kw", "cannot use the database "
         "postgresql+psycopg://kw:***@127.0.0.1:1/kw (KW_DATABASE_URL): connection failed"),
    ],
)  # fmt: skip
def test_a_bad_database_url_is_one_line_that_says_what_to_write(url: str, says: str) -> None:
    out = run_cli("show", "1", env={"KW_DATABASE_URL": url}, timeout=120)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert says in line and "hunter2" not in line
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "command", [("dashboard", "--port", "1"), ("worker",), ("worker", "--per-gpu")]
)
def test_long_running_commands_refuse_bad_settings_at_start_like_every_command(
    command: tuple[str, ...],
) -> None:
    """The dashboard served pages that each failed on a bad KW_DATABASE_URL (an audit,
    2026-12-05); the worker exec'd Celery, whose 32-line traceback said "Unable to load
    celery application" (a first-hour review, 2026-12-05)."""
    out = run_cli(*command, env={"KW_DATABASE_URL": "notaurl"}, timeout=60)
    assert out.returncode == 2
    assert one_line(out.stderr).startswith(f"kernelwatch {command[0]}: KW_DATABASE_URL: not a URL")


def test_an_unknown_suite_is_one_line_with_a_did_you_mean(tmp_path: Path) -> None:
    out = run_cli("bench", "--suite", "basicc", "--out", str(tmp_path / "r.jsonl"), timeout=120)
    assert out.returncode == 2
    assert one_line(out.stderr).startswith(
        "kernelwatch bench: unknown suite 'basicc' (did you mean 'basic'?); suites: basic,"
    )
    paired = run_cli("bench-paired", "--baseline-path", ".", "--candidate-path", ".",
                     "--suite", "gemmm", "--impl", "x", "--out", "-", timeout=120)  # fmt: skip
    assert paired.returncode == 2 and "(did you mean 'gemm'?)" in one_line(paired.stderr)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # a misspelt kernel selected no case, and exit 0 read as a pass
        (["bench", "--kernel", "sofmax"], "kernelwatch bench: unknown kernel 'sofmax' (did "
         "you mean 'softmax'?) in suite basic; its kernels: attention, matmul,"),
        # an AssertionError deep in torch, its traceback and exit 1 ("the kernels failed")
        (["bench", "--device", "cuda", "--kernel", "softmax"], "kernelwatch bench: --device "
         "cuda: this torch ("),
        (["bench-paired", "--baseline-path", ".", "--candidate-path", ".", "--suite", "gemm",
          "--kernel", "gemmm", "--impl", "x"], "kernelwatch bench-paired: unknown kernel "
         "'gemmm' (did you mean 'gemm'?)"),
    ],
)  # fmt: skip
def test_bench_refuses_what_it_cannot_run_in_one_line_with_2(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    if "--device" in argv and shutil.which("nvidia-smi"):
        pytest.skip("this machine has a GPU")
    out = run_cli(*argv, "--out", str(tmp_path / "r.jsonl"), timeout=120)
    assert out.returncode == 2, out.stderr
    assert one_line(out.stderr).startswith(says)


def test_a_data_dir_that_cannot_be_one_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    out = run_cli("gate", "--repo", "x/y", "--sha", "abcdef1",
                  env={"KW_DATA_DIR": str(tmp_path / "afile")}, timeout=120)  # fmt: skip
    assert out.returncode == 2
    assert one_line(out.stderr).startswith(
        f"kernelwatch gate: KW_DATA_DIR: cannot use {tmp_path / 'afile'} as the data directory"
    )


def test_bench_keeps_its_worker_protocol_off_the_terminal(tmp_path: Path) -> None:
    out = run_cli("bench", "--suite", "basic", "--kernel", "softmax", "--budget", "0.02",
                  "--no-peaks", "--out", str(tmp_path / "r.jsonl"), timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "KW-CASE-START" not in out.stdout + out.stderr
    assert "softmax" in out.stdout and "pass" in out.stdout  # the table is there
    # the worker's entry keeps the markers (worker/suite_process.py reads them)
    import subprocess
    import sys

    worker_side = subprocess.run(
        [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", "basic", "--kernel",
         "softmax", "--budget", "0.02", "--no-peaks", "--out", str(tmp_path / "w.jsonl")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert worker_side.returncode == 0 and "KW-CASE-START" in worker_side.stderr


def _bin_without_bwrap(tmp_path: Path) -> str:
    """A PATH with git and a compiler but no bubblewrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "cc"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return f"{bin_dir}:{Path(os.sys.executable).parent}"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_doctor_checks_the_sandbox_and_fails_without_bubblewrap(tmp_path: Path) -> None:
    env = {"KW_DATABASE_URL": f"sqlite:///{tmp_path / 'kw.db'}", "KW_SANDBOX": "bwrap"}
    ready = run_cli("doctor", "--json", env=env, timeout=300)
    checks = {c["check"]: c for c in json.loads(ready.stdout)["checks"]}
    assert checks["sandbox"]["ok"] and "usable" in checks["sandbox"]["detail"]
    assert checks["nvml"]["ok"]
    assert (
        checks["workers"]["warn"]
        and "no live worker serves queue cpu" in (checks["workers"]["detail"])
    )
    assert ready.returncode == 0, ready.stderr

    missing = run_cli("doctor", env={**env, "PATH": _bin_without_bwrap(tmp_path)}, timeout=300)
    assert missing.returncode == 1
    sandbox = next(ln for ln in missing.stdout.splitlines() if ln.split()[1:2] == ["sandbox"])
    assert sandbox.startswith("BAD  sandbox") and "apt-get install bubblewrap" in sandbox
    assert missing.stderr.strip() == "kernelwatch doctor: not ready: sandbox"

    dev = run_cli("doctor", "--json", env={**env, "KW_SANDBOX": "none"}, timeout=300)
    dev_checks = {c["check"]: c for c in json.loads(dev.stdout)["checks"]}
    assert dev_checks["sandbox"]["warn"]


def test_doctor_reads_nvml_through_pynvml_when_it_is_there(tmp_path: Path) -> None:
    """pynvml is optional (the gpu extra); where importable, doctor reports its driver and
    devices. A module of that name on the path stands in for the bindings on this CPU host."""
    fake = tmp_path / "nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(
        "def nvmlInit(): pass\n"
        "def nvmlShutdown(): pass\n"
        "def nvmlSystemGetDriverVersion(): return b'560.35.03'\n"
        "def nvmlDeviceGetCount(): return 2\n"
        "def nvmlDeviceGetHandleByIndex(i): return i\n"
        "def nvmlDeviceGetName(h): return 'NVIDIA H200'\n"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "kernelwatch.worker.doctor"], capture_output=True, text=True,
        timeout=120, check=True, env={**os.environ, "PYTHONPATH": str(fake), "KW_SANDBOX": "none"},
    )  # fmt: skip
    nvml = next(c for c in json.loads(out.stdout)["checks"] if c["check"] == "nvml")
    assert nvml == {"check": "nvml", "ok": True, "warn": False,
                    "detail": "NVML driver 560.35.03: 2 x NVIDIA H200"}  # fmt: skip


def test_bisect_wait_shows_progress_and_formatted_ratios(
    world: tuple[sessionmaker[Session], Settings, list[str]],
) -> None:
    factory, settings, (src, *shas) = world
    req = driver.BisectRequest(src, shas[0], shas[-1], case_pattern="soft*", budget_s=1e6)
    bid = driver.start(factory, settings, req)
    driver.advance(factory, settings, None, bid)
    with factory() as s:
        first = progress_line(s, bid)
    assert first.startswith(f"bisection {bid}: ") and "0 steps done" in first
    assert f"now {shas[-1][:12]} against {shas[0][:12]} (establish): run " in first
    assert first.endswith("queued")
    assert drive(factory, settings, bid, shas) == "found"
    with factory() as s:
        done = progress_line(s, bid)
        summary = driver.summary(s, bid)
    assert "steps done (last " in done and "now " not in done
    assert summary is not None
    text = _text(bid, "found", "", summary)
    assert "regression, ratio 3.000× [2.700, 3.300] (+200.0 %)" in text
    assert "None" not in text and "device seconds: " in text
    none_named = _text(bid, "not_found", "range did not differ",
                       {"culprit": None, "steps": [], "gpu_seconds": 12.3456})  # fmt: skip
    assert "culprit: none named" in none_named and "device seconds: 12.3" in none_named


def test_the_package_metadata_has_no_deprecated_license_table() -> None:
    """``make demo`` printed ~50 lines of setuptools warnings about ``project.license``."""
    import tomllib

    from setuptools.config.pyprojecttoml import read_configuration

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(data["project"]["license"], str)  # PEP 639: an SPDX expression
    assert "setuptools>=77" in data["build-system"]["requires"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_configuration(ROOT / "pyproject.toml")


def test_make_demo_installs_without_the_dev_tools() -> None:
    """The dev extras (pytest, ruff, mypy, schemathesis, ...) belong to make test only."""
    makefile = (ROOT / "Makefile").read_text()
    assert "\ndemo: install\n" in makefile
    runtime = makefile[makefile.index("$(STAMP): ") : makefile.index("$(DEV_STAMP): ")]
    assert "[dev]" not in runtime and '-e ".[dev]"' in makefile
    assert "\ntest: install-dev check\n" in makefile


def test_an_out_file_in_a_missing_folder_is_refused_before_anything_runs() -> None:
    """It was a FileNotFoundError traceback after the suite ran (a first-hour review)."""
    out = run_cli("bench", "--suite", "basic", "--out", "/nonexistent/dir/r.jsonl", timeout=120)
    assert out.returncode == 2
    assert one_line(out.stderr) == (
        "kernelwatch bench: --out /nonexistent/dir/r.jsonl: the folder /nonexistent/dir "
        "does not exist"
    )


def test_a_bad_broker_url_is_shown_broker_examples() -> None:
    """It was shown database URLs as examples (a first-hour review)."""
    out = run_cli("show", "1", env={"KW_BROKER_URL": "notaurl"}, timeout=120)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert "KW_BROKER_URL: not a URL: 'notaurl' (e.g. redis://HOST:6379/0" in line
    assert "postgresql" not in line
