"""Telemetry reads the GPU the worker is pinned to, however CUDA_VISIBLE_DEVICES names it."""

from __future__ import annotations

from typing import Any

import pytest

from kernelwatch.kernels.telemetry import device_handle


class FakeNvml:
    """Records which lookup NVML was asked for."""

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return ("index", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        return ("uuid", uuid)


@pytest.mark.parametrize(
    ("visible", "logical", "expected"),
    [
        # the per-GPU supervisor pins by UUID: NVML must look that GPU up, not GPU 0
        ("GPU-f76d8284-bf9f-109a-a4e8-f2c848174ddf", 0,
         ("uuid", "GPU-f76d8284-bf9f-109a-a4e8-f2c848174ddf")),
        ("MIG-1234", 0, ("uuid", "MIG-1234")),
        ("3,5", 1, ("index", 5)),  # plain indices map by position
        ("", 2, ("index", 2)),  # nothing pinned: CUDA's index is NVML's
    ],
)  # fmt: skip
def test_device_handle_follows_the_pinning(
    monkeypatch: pytest.MonkeyPatch, visible: str, logical: int, expected: tuple[str, Any]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert device_handle(FakeNvml(), logical) == expected
