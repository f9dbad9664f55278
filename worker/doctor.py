"""What a worker started on this machine would meet, checked without starting one.

``kernelwatch doctor`` runs ``python -m kernelwatch.worker.doctor`` (the command line
lives in ``jobs``, which may not import the worker) and shows its checks beside its own:

- ``sandbox``: the sandbox code under test runs in (``worker/sandbox.py``) can start
  here: bubblewrap installed and able to create namespaces (as the sandbox user when
  the worker is root). A missing or unusable bwrap is a failure: every run would end
  as an error (issue 27: ``doctor`` said "ok" on such a host). ``KW_SANDBOX=none`` is
  a warning (development only).
- ``nvml``: NVIDIA's management library, which the timer reads for clocks, throttle
  reasons and temperature: ``pynvml`` (the ``nvidia-ml-py`` distribution) when it is
  installed, its driver version and device count; without a driver it says the CPU path
  is used; with GPUs but no ``pynvml`` it is a warning (telemetry falls back to
  ``nvidia-smi``).
- ``queue``: the queue a worker here serves (``gpu.<class>`` of its GPUs, ``cpu``).

Prints one JSON object: ``{"checks": [{"check", "ok", "warn", "detail"}]}``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from kernelwatch.jobs.cli.doctor import Warn
from kernelwatch.jobs.planning.queues import local_device_class, queue_for


def sandbox() -> str:
    from kernelwatch.worker.sandbox import Sandbox

    box = Sandbox.from_env()
    if not box.confined:
        return Warn("KW_SANDBOX=none: code under test runs unconfined (development only)")
    box.check()  # raises SandboxUnavailable with what to do
    path = shutil.which("bwrap") or "bwrap"
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    who = f", code under test runs as uid {box.uid}" if box.uid is not None else ""
    return f"{(out.stdout or 'bubblewrap').strip()} usable ({path}{who})"


def nvml() -> str:
    try:
        import pynvml  # nvidia-ml-py: optional, the worker's telemetry uses it when present
    except ImportError:
        if shutil.which("nvidia-smi"):
            return Warn(
                "pynvml not installed: GPU telemetry falls back to nvidia-smi "
                "(pip install nvidia-ml-py)"
            )
        return "no NVIDIA driver and no pynvml: suites run on the CPU"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on a CPU host
        if shutil.which("nvidia-smi"):
            raise RuntimeError(f"NVML does not start although nvidia-smi exists: {exc}") from exc
        return f"no NVIDIA driver ({exc}): suites run on the CPU"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        names = [pynvml.nvmlDeviceGetName(h) for h in handles]
    finally:
        pynvml.nvmlShutdown()
    shown = ", ".join(sorted({text(n) for n in names})) or "no devices"
    return f"NVML driver {text(driver)}: {count} x {shown}"


def text(value: object) -> str:
    """NVML strings: ``bytes`` from old bindings, ``str`` from new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def queue() -> str:
    return queue_for(local_device_class())


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("sandbox", sandbox),
    ("nvml", nvml),
    ("queue", queue),
]


def run_checks() -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for name, fn in CHECKS:
        try:
            detail = fn()
            results.append({"check": name, "ok": True, "warn": isinstance(detail, Warn),
                            "detail": str(detail)})  # fmt: skip
        except Exception as exc:  # every failure reported, none stops the others
            results.append({"check": name, "ok": False, "warn": False, "detail": str(exc)})
    return results


def main() -> int:
    print(json.dumps({"checks": run_checks()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
