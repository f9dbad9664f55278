"""``kernelwatch worker --per-gpu --multi-gpu K``: which workers a host runs, from nvidia-smi rows.

The per-GPU workers are tested in ``test_fleet_units.py``; here the k-card workers.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelwatch.worker import fleet_cli, gpus
from tests.conftest import run_cli

FOUR_H200 = "".join(
    f"{i}, GPU-{i}{i}{i}{i}-h200, NVIDIA H200, 570.86.15, 1980, 1980, 1, 143771, 34, 0x0\n"
    for i in range(4)
)
PIN = "CUDA_VISIBLE_DEVICES"


def test_a_four_card_host_gets_a_two_card_worker_beside_its_per_gpu_workers() -> None:
    specs = fleet_cli.plan(gpus.parse(FOUR_H200), prefix="kw", host="node7", multi=[2])
    assert [(s.name, s.queues, s.env[PIN]) for s in specs] == [
        ("kw-gpu0@node7", "gpu.h200", "GPU-0000-h200"),
        ("kw-gpu1@node7", "gpu.h200", "GPU-1111-h200"),
        ("kw-gpu2@node7", "gpu.h200", "GPU-2222-h200"),
        ("kw-gpu3@node7", "gpu.h200", "GPU-3333-h200"),
        ("kw-gpus0-1@node7", "gpu.h200.x2", "GPU-0000-h200,GPU-1111-h200"),
    ]
    pair = specs[-1]
    assert pair.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    argv = pair.argv
    assert argv[argv.index("-Q") + 1] == "gpu.h200.x2" and argv[argv.index("-c") + 1] == "1"
    assert argv[argv.index("-n") + 1] == "kw-gpus0-1@node7"


def test_several_k_and_mixed_classes_get_a_worker_only_where_enough_cards_are() -> None:
    mixed = FOUR_H200 + (
        "4, GPU-4444-h100, NVIDIA H100 80GB HBM3, 570.86.15, 1980, 1980, 1, 81559, 30, 0x0\n"
    )
    specs = fleet_cli.plan(gpus.parse(mixed), host="n", multi=[2, 4, 8, 2])
    extra = [(s.name, s.queues, s.env[PIN]) for s in specs[5:]]
    assert extra == [
        ("kw-gpus0-1@n", "gpu.h200.x2", "GPU-0000-h200,GPU-1111-h200"),
        ("kw-gpus0-3@n", "gpu.h200.x4", ",".join(f"GPU-{i}{i}{i}{i}-h200" for i in range(4))),
    ]  # one H100 makes no pair; eight cards of a class are not there; 2 is asked twice


def test_a_one_card_host_gets_no_extra_worker() -> None:
    specs = fleet_cli.plan(gpus.parse(FOUR_H200)[:1], host="n", multi=[2])
    assert [(s.name, s.queues) for s in specs] == [("kw-gpu0@n", "gpu.h200")]
    (cpu,) = fleet_cli.plan([], host="n", multi=[2])
    assert cpu.queues == "cpu"


def test_multi_gpu_takes_two_or_more_cards() -> None:
    with pytest.raises(ValueError, match="2 or more"):
        fleet_cli.plan(gpus.parse(FOUR_H200), host="n", multi=[1])
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch.worker.fleet_cli", "--multi-gpu", "1", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--multi-gpu takes K >= 2" in proc.stderr


def test_the_worker_command_takes_multi_gpu_only_with_per_gpu() -> None:
    proc = run_cli("worker", "--multi-gpu", "2", timeout=120)
    assert proc.returncode == 2 and "--multi-gpu needs --per-gpu" in proc.stderr


def test_a_worker_with_bad_sandbox_settings_does_not_start(tmp_path: object) -> None:
    # KW_SANDBOX_MEMORY_GB=-1: the worker said ready, then took and failed every run
    # (an audit, 2026-12-05); its settings now fail fast, as KW_* settings do
    import os

    env = {**os.environ, "KW_SANDBOX_MEMORY_GB": "-1"}
    app = subprocess.run([sys.executable, "-c", "import kernelwatch.worker.app"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert app.returncode == 2, app.stderr
    assert app.stderr.strip() == (
        "kernelwatch worker: KW_SANDBOX_MEMORY_GB, _LOG_MB and _DISK_GB must be positive "
        "(0: the default), KW_SANDBOX_PIDS at least 16"
    )
    fleet = subprocess.run(
        [sys.executable, "-m", "kernelwatch.worker.fleet_cli", "--dry-run"],
        env={**env, "KW_SANDBOX": "firejail"}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert fleet.returncode == 2 and "KW_SANDBOX must be 'bwrap' or 'none'" in fleet.stderr
