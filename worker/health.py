"""Is this worker's GPU fit to measure? Checked at start and between tasks.

A GPU that fell off the bus, leaked memory to a stuck process, overheats, is
throttled by hardware, or computes wrong results must stop taking work, because
every number it produced would be noise or worse. The worker cancels its queue
consumers when a check fails and re-checks every ``health_recheck_s``
(``worker/heartbeat.py``).

Checks, each with a one-line verdict in ``HealthReport.checks``:

- ``disk``: the data directory is writable and has at least 1 GiB free (every machine);
- ``smi`` (GPU machines): ``nvidia-smi`` answers; no hardware slowdown, thermal or
  power-brake throttling; temperature below 90 °C; under 10 % of memory in use
  while no task runs (memory held by an orphaned process skews every measurement);
- ``probe`` (GPU machines): a subprocess allocates 256 MiB on the GPU, runs a
  1024×1024 matmul and compares it with the CPU result; a hang, CUDA error or wrong
  answer fails it. It runs in a subprocess with a timeout so a wedged driver cannot
  wedge the worker, and so the worker itself never holds a CUDA context;
- ``command``: the site's own check (``KW_HEALTH_COMMAND``, e.g. a DCGM diagnostic);
  a non-zero exit fails it.

On a machine without a GPU only ``disk`` and ``command`` apply.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kernelwatch.db.config import Settings
from kernelwatch.worker import gpus
from kernelwatch.worker.fleetconfig import FleetConfig
from kernelwatch.worker.process import run_logged
from kernelwatch.worker.sandbox import clean_env

MIN_FREE_DISK = 1 << 30
MAX_TEMPERATURE_C = 90
MAX_IDLE_MEMORY_FRACTION = 0.10
PROBE_TIMEOUT_S = 120.0

PROBE = """
import sys, torch
if not torch.cuda.is_available():
    sys.exit("CUDA not available")
dev = torch.device("cuda", 0)
block = torch.empty(64 << 20, dtype=torch.float32, device=dev)  # 256 MiB
block.fill_(1.0)
assert float(block[-1]) == 1.0, "memory readback"
del block
g = torch.Generator().manual_seed(0)
a = torch.randn(1024, 1024, generator=g)
b = torch.randn(1024, 1024, generator=g)
got = (a.to(dev) @ b.to(dev)).cpu()
want = a.double() @ b.double()
err = float((got.double() - want).abs().max() / want.abs().max())
torch.cuda.synchronize()
if not err < 1e-2:
    sys.exit(f"matmul off by {err:.3g}")
print(f"ok {torch.cuda.get_device_name(0)} matmul rel err {err:.2e}")
"""


@dataclass
class HealthReport:
    healthy: bool = True
    checks: dict[str, str] = field(default_factory=dict)

    def fail(self, name: str, why: str) -> None:
        self.healthy = False
        self.checks[name] = f"FAIL {why}"

    def ok(self, name: str, what: str = "ok") -> None:
        self.checks[name] = what

    @property
    def summary(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.checks.items())


def check(
    settings: Settings, fleet: FleetConfig, found: list[gpus.Gpu] | None = None
) -> HealthReport:
    """Run every check that applies to this machine; ``found`` defaults to a fresh query."""
    report = HealthReport()
    check_disk(settings.data_dir, report)
    found = gpus.query() if found is None else found
    if found:
        check_smi(found[0], report)
        check_probe(report)
    if fleet.health_command:
        check_command(fleet.health_command, settings.data_dir, report)
    return report


def check_disk(data_dir: Path, report: HealthReport) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".health-probe"
        probe.write_text("ok")
        probe.unlink()
        free = shutil.disk_usage(data_dir).free
    except OSError as exc:
        report.fail("disk", f"{data_dir} not writable: {exc}")
        return
    if free < MIN_FREE_DISK:
        report.fail("disk", f"{free >> 20} MiB free in {data_dir}")
    else:
        report.ok("disk", f"{free >> 30} GiB free")


def check_smi(gpu: gpus.Gpu, report: HealthReport) -> None:
    problems = []
    if gpu.throttle_reasons:
        problems.append("throttled: " + ",".join(gpu.throttle_reasons))
    if gpu.temperature_c is not None and gpu.temperature_c >= MAX_TEMPERATURE_C:
        problems.append(f"{gpu.temperature_c} C")
    if gpu.memory_used_mib is not None and gpu.memory_total_mib:
        used = gpu.memory_used_mib / gpu.memory_total_mib
        if used > MAX_IDLE_MEMORY_FRACTION:
            problems.append(f"{gpu.memory_used_mib} MiB in use while idle")
    if problems:
        report.fail("smi", "; ".join(problems))
    else:
        report.ok(
            "smi",
            f"{gpu.name} {gpu.sm_mhz} MHz {gpu.temperature_c} C {gpu.memory_used_mib} MiB used",
        )


def check_probe(report: HealthReport, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    code, out, timed_out = run_logged(
        [sys.executable, "-c", PROBE], cwd=Path.cwd(), env=clean_env(), timeout=timeout_s
    )
    tail = out.strip().splitlines()[-1:] or [""]
    if timed_out:
        report.fail("probe", f"no answer in {timeout_s:.0f} s")
    elif code != 0:
        report.fail("probe", f"exit {code}: {tail[0][:300]}")
    else:
        report.ok("probe", tail[0][:300])


def check_command(argv: tuple[str, ...], cwd: Path, report: HealthReport) -> None:
    try:
        code, out, timed_out = run_logged(
            list(argv), cwd=cwd, env=clean_env(), timeout=PROBE_TIMEOUT_S
        )
    except OSError as exc:
        report.fail("command", f"{argv[0]}: {exc}")
        return
    if timed_out or code != 0:
        why = "timed out" if timed_out else f"exit {code}"
        report.fail("command", f"{' '.join(argv)}: {why} {out.strip()[-300:]}")
    else:
        report.ok("command", "ok")


def main() -> int:
    """``python -m kernelwatch.worker.health``: print this machine's report; exit 1 if unhealthy."""
    from kernelwatch.db.config import get_settings

    settings = get_settings()
    report = check(settings, FleetConfig.from_settings(settings))
    print(json.dumps({"healthy": report.healthy, "checks": report.checks}, indent=2))
    return 0 if report.healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
