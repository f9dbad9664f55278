"""Device classes and the nvidia-smi query: one torch-free rule for queues and series."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.jobs.planning.queues import queue_for
from kernelwatch.kernels import devclass
from kernelwatch.kernels.devclass import device_class, visible_rows


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("cpu", "cpu"),
        ("", "cpu"),
    ],
)
def test_device_class(name: str, cls: str) -> None:
    assert device_class(name) == cls


def test_queue_names_follow_design() -> None:
    assert queue_for("h200") == "gpu.h200"
    assert queue_for("cpu") == "cpu"


def test_cuda_visible_devices_selects_and_orders_gpus() -> None:
    rows = [["0", "GPU-aaa", "NVIDIA H100 80GB HBM3"], ["1", "GPU-bbb", "NVIDIA H200"]]
    assert [r[2] for r in visible_rows(rows, "1")] == ["NVIDIA H200"]
    assert [r[2] for r in visible_rows(rows, "GPU-bbb,0")] == [
        "NVIDIA H200",
        "NVIDIA H100 80GB HBM3",
    ]
    assert visible_rows(rows, "") == []
    assert visible_rows(rows, None) == rows


FAKE_SMI = """#!/bin/sh
echo "0, GPU-aaa, NVIDIA H100 80GB HBM3"
echo "1, GPU-bbb, NVIDIA H200"
"""


def test_local_class_comes_from_nvidia_smi_and_cuda_visible_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the nvidia-smi path, even on a GPU host
    assert devclass.local_gpu_names() == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert devclass.local_device_class() == "h100"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb")
    assert devclass.local_device_class() == "h200"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # a CPU host: no nvidia-smi
    assert devclass.local_gpu_names() == [] and devclass.local_device_class() == "cpu"


def test_the_device_class_rule_is_shared_and_torch_free() -> None:
    from kernelwatch.kernels import device
    from kernelwatch.worker import gpus

    assert device.device_class is devclass.device_class
    assert gpus.device_class is devclass.device_class
    code = (
        "import sys, kernelwatch.kernels.devclass as d, kernelwatch.jobs.planning.queues\n"
        "d.local_device_class()\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
