"""``prelude``: get a bare GPU host ready and record what it is.

kernelwatch made importable in the device python (the light install: links over
the repository folders, no service dependency), the carried wheels listed and,
with ``--flashinfer VERSION``, FlashInfer installed into ``/tmp/fi-VERSION``;
``nvidia-smi`` snapshot (name, UUID, driver, clocks, temperature, power, memory),
Python/torch/CUDA/triton versions, CPU count, ``nvcc`` and ``ccache``. Every other
sub-command does the import part itself; run this first in a call whose numbers
you will quote, so the machine is on record beside them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from typing import Any

from benchmarks.gpu import host

NAME = "prelude"
HELP = "light install of kernelwatch, carried wheels, nvidia-smi snapshot"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flashinfer", metavar="VERSION", help="install this carried FlashInfer")


def _tool(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[-1] if lines else ""


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    info = host.ensure_kernelwatch()
    smi = host.nvidia_smi()
    result: dict[str, Any] = {
        "kernelwatch": info,
        "nvidia_smi": smi,
        "machine": host.machine(),
        "carried": host.carried(),
        "nvcc": _tool(["nvcc", "--version"]),
        "ccache": shutil.which("ccache"),
        "kernelwatch_imports": host.importable("kernelwatch.kernels.runner"),
    }
    if args.flashinfer:
        path, why = host.flashinfer(ctx, args.flashinfer)
        result["flashinfer"] = {"path": path, "note": why}
    m = result["machine"]
    table = [
        f"kernelwatch  {info['how']} ({info['path']}), imports: {result['kernelwatch_imports']}",
        f"python {m['python']}  torch {m.get('torch')}  CUDA {m.get('cuda')}  "
        f"triton {m.get('triton')}  {m['cpus']} CPUs",
    ]
    if isinstance(smi, list):
        for g in smi:
            table.append(
                f"GPU {g.get('name')} {g.get('uuid', '')[:12]} driver {g.get('driver_version')} "
                f"SM {g.get('clocks.sm')}/{g.get('clocks.max.sm')} MHz "
                f"{g.get('temperature.gpu')} C {g.get('power.draw')} W"
            )
    else:
        table.append(f"GPU: {smi['error']}")
    table.append("carried: " + "  ".join(f"{k} {len(v)}" for k, v in result["carried"].items()))
    if "flashinfer" in result:
        table.append(f"flashinfer: {result['flashinfer']['note']}")
    return result, table
