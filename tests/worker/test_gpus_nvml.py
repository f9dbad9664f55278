"""The GPU list from NVML where ``pynvml`` imports, from ``nvidia-smi`` only where it does not.

``pynvml`` is replaced at its import seam (``sys.modules``, ``tests/fake_nvml.py``): a
development machine has no NVIDIA driver. The rows NVML gives must read exactly as
nvidia-smi's do (the launcher, heartbeats and health check share them), a device that
refuses an optional call loses that field only, and a host where NVML cannot start or
nvidia-ml-py is missing asks nvidia-smi instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernelwatch.kernels import devclass
from kernelwatch.worker import fleet_cli, gpus
from tests.fake_nvml import FakeDevice, FakeNvml, NVMLError_LibraryNotFound

FAKE_SMI = """#!/bin/sh
echo "0, GPU-from-smi, NVIDIA H100 80GB HBM3, 570.86.15, 345, 1980, 1, 81559, 30, 0x0"
"""


@pytest.fixture
def smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def two_h200() -> FakeNvml:
    return FakeNvml(
        devices=[
            FakeDevice("GPU-11111111-aaaa", "NVIDIA H200", sm_mhz=345, temp_c=38),
            FakeDevice(
                "GPU-22222222-bbbb",
                "NVIDIA H200",
                used_bytes=20000 << 20,
                temp_c=91,
                reasons=0x48,
                power_mw=699_000,
            ),
        ]
    )


def test_nvml_answers_when_pynvml_imports_and_nvidia_smi_is_not_asked(
    smi_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = two_h200()
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    found = gpus.query()
    assert [(g.index, g.uuid, g.device_class) for g in found] == [
        ("0", "GPU-11111111-aaaa", "h200"),
        ("1", "GPU-22222222-bbbb", "h200"),
    ]
    a, b = found
    assert (a.driver, a.sm_mhz, a.max_sm_mhz, a.temperature_c) == ("580.159.04", 345, 1980, 38)
    assert (a.memory_used_mib, a.memory_total_mib) == (1, 143771)
    assert b.memory_used_mib == 20000 and b.throttle_reasons == ["hw_slowdown", "hw_thermal"]
    assert fake.inits == fake.shutdowns == 1  # one NVML session per query, closed again
    # the rows read as nvidia-smi's: the same parser takes them, power in watts
    rows = devclass.gpu_rows(("index", "name", "power.draw", "clocks_throttle_reasons.active"))
    assert rows == [
        ["0", "NVIDIA H200", "83.49", "0x0000000000000000"],
        ["1", "NVIDIA H200", "699.0", "0x0000000000000048"],
    ]
    # a worker pinned by UUID sees its GPU only, and the planner's class comes from NVML
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-22222222-bbbb")
    assert [g.index for g in gpus.query()] == ["1"]
    assert devclass.local_gpu_names() == ["NVIDIA H200"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    specs = fleet_cli.plan(gpus.query(), prefix="kw", host="node7")
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == [
        "GPU-11111111-aaaa",
        "GPU-22222222-bbbb",
    ]


def test_a_call_the_device_does_not_support_empties_that_field_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml(devices=[FakeDevice("GPU-old", "NVIDIA A100-SXM4-80GB", reasons=None)])
    module = fake.module()
    del module.nvmlDeviceGetCurrentClocksEventReasons  # an older binding: the old name
    module.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x20
    monkeypatch.setitem(sys.modules, "pynvml", module)
    (gpu,) = gpus.query()
    assert gpu.throttle_reasons == ["sw_thermal"] and gpu.device_class == "a100"
    module.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: (_ for _ in ()).throw(
        sys.modules["pynvml"].NVMLError_NotSupported()
    )
    (gpu,) = gpus.query()
    assert gpu.throttle_mask == 0 and gpu.sm_mhz == 1980 and gpu.uuid == "GPU-old"


def test_without_nvml_the_list_comes_from_nvidia_smi(
    smi_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    (gpu,) = gpus.query()
    assert (gpu.uuid, gpu.device_class, gpu.sm_mhz) == ("GPU-from-smi", "h100", 345)
    # importable but NVML cannot start (no driver library): nvidia-smi too
    fake = FakeNvml(devices=[FakeDevice("GPU-x", "NVIDIA H200")])
    fake.init_error = NVMLError_LibraryNotFound
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    assert [g.uuid for g in gpus.query()] == ["GPU-from-smi"]
    assert devclass.local_device_class() == "h100"


def test_a_cpu_host_has_no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert gpus.query() == [] and devclass.local_device_class() == "cpu"


def test_the_environment_key_reads_the_driver_from_nvml_then_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver version is part of an environment's key (``venvs.Toolchain``): where the
    kernel module's file is not readable (a container), NVML answers it, and nvidia-smi
    only where NVML does not start."""
    from kernelwatch.worker import venvs

    smi = tmp_path / "nvidia-smi"  # answers the one field asked, as nvidia-smi does
    smi.write_text('#!/bin/sh\n[ "$1" = --query-gpu=driver_version ] && echo 570.86.15\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(venvs, "Path", _NoProcFile)
    monkeypatch.setitem(sys.modules, "pynvml", two_h200().module())
    assert venvs.driver_version() == "580.159.04"
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert venvs.driver_version() == "570.86.15"
    monkeypatch.setenv("PATH", "/nonexistent")  # neither
    assert venvs.driver_version() == "none"


class _NoProcFile(type(Path())):  # type: ignore[misc]
    """A Path under which /proc/driver/nvidia/version does not exist."""

    def exists(self, *args: object, **kwargs: object) -> bool:
        return False if str(self) == "/proc/driver/nvidia/version" else super().exists()
