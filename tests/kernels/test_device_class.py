import pytest

from kernelwatch.jobs.planning.queues import queue_for, visible_rows
from kernelwatch.kernels.device import device_class


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
