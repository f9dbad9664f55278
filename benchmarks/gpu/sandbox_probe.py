"""What the sandbox and NVML look like on this host, as JSON (a subprocess of ``service``).

    KW_SANDBOX=bwrap python -m benchmarks.gpu.sandbox_probe --scratch DIR

Outside the box: whether the service's sandbox starts (``Sandbox.check``: bubblewrap is
there and can make its namespaces), and the GPU list from NVML beside the one from
``nvidia-smi`` (``devclass.gpu_rows`` asks NVML first: the two must name the same
cards). Inside the box, through the worker's own ``Sandbox.wrap`` (the binds and the
allow-listed environment a suite process gets): the user it runs as, whether
``kernelwatch.kernels`` and torch import, whether CUDA sees the GPU through the bound
``/dev/nvidia*`` nodes, whether NVML reads the clocks there (the timer's telemetry), and
whether a Triton kernel compiles and launches (Triton builds its launcher with the host's
C compiler, which the box must show whole).
It measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

INSIDE = r"""
import json, os
out = {"uid": os.getuid(), "hostname": os.uname().nodename}
try:
    import kernelwatch.kernels, torch
    out["kernelwatch"] = kernelwatch.kernels.__file__
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.is_available()
    if out["cuda"]:
        out["device"] = torch.cuda.get_device_name(0)
        x = torch.ones(1 << 20, device="cuda")
        out["cuda_sum"] = float(x.sum())
    from kernelwatch.kernels.telemetry import Telemetry
    t = Telemetry(0)
    r = t.read()
    out["nvml"] = t.available
    out["nvml_sm_mhz"] = r.sm_mhz if r else None
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
if out.get("cuda"):
    # Triton compiles its launcher with the host's C compiler at the first launch:
    # the box must show the whole toolchain, not only its bin/
    import shutil
    out["cc"] = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def _double(x_ptr, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

        y = torch.ones(1000, device="cuda")
        _double[(1,)](y, 1000, BLOCK=1024)
        out["triton"] = f"ok {triton.__version__} sum {float(y.sum())}"
    except Exception as exc:
        out["triton"] = f"{type(exc).__name__}: {str(exc)[:300]}"
print(json.dumps(out))
"""


def outside_gpus() -> dict[str, Any]:
    """The GPU list from NVML and from nvidia-smi, and whether they agree."""
    from kernelwatch.kernels import devclass
    from kernelwatch.worker import gpus

    fields = gpus.FIELDS
    with devclass.nvml() as n:
        nvml_rows = devclass.nvml_rows(n, fields) if n is not None else None
    smi = devclass.smi_query(fields)
    smi_gpus = gpus.parse(smi) if smi is not None else None
    nvml_gpus = gpus.from_rows(nvml_rows) if nvml_rows is not None else None

    def ident(found: list[gpus.Gpu] | None) -> list[list[Any]] | None:
        if found is None:
            return None
        return [[g.uuid, g.name, g.driver, g.memory_total_mib] for g in found]

    a, b = ident(nvml_gpus), ident(smi_gpus)
    return {"nvml": a, "nvidia_smi": b, "agree": None if a is None or b is None else a == b}


def inside(scratch: Path) -> dict[str, Any]:
    """The probe run through the worker's sandbox (whatever KW_SANDBOX says)."""
    from kernelwatch.worker.sandbox import Sandbox, SandboxUnavailable, clean_env

    box = Sandbox.from_env()
    out: dict[str, Any] = {"mode": box.mode}
    try:
        box.check()
        out["check"] = "ok"
    except SandboxUnavailable as exc:
        out["check"] = f"unavailable: {exc}"
        return out
    tmp = box.scratch(scratch)  # the box's /tmp and $HOME
    work = scratch / "work"  # a writable work directory, as a suite's
    work.mkdir(exist_ok=True)
    box.owner([work], within=scratch)
    script = work / "probe_inside.py"  # a file: triton.jit reads its kernel's source
    script.write_text(INSIDE)
    argv, env = box.wrap(
        [sys.executable, str(script)], cwd=work, env=clean_env(), scratch=tmp, writable=[work]
    )
    out["argv_head"] = argv[:12]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["rc"] = done.returncode
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    out["inside"] = json.loads(lines[-1]) if lines else None
    failed = not lines or not str(out["inside"].get("triton", "ok")).startswith("ok")
    if done.returncode or failed:
        out["stderr_tail"] = done.stderr[-2000:]  # a compiler's own message lands here
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu.sandbox_probe")
    p.add_argument("--scratch", type=Path, required=True)
    args = p.parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    doc = {"sandbox": inside(args.scratch), "gpus": outside_gpus(),
           "path_bwrap": [d for d in os.environ.get("PATH", "").split(os.pathsep)
                          if (Path(d) / "bwrap").exists()]}  # fmt: skip
    print(json.dumps(doc, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
