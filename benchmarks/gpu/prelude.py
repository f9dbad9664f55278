"""``prelude``: get a bare GPU host ready and record what it is.

kernelwatch made importable in the device python (the light install: links over
the repository folders, no service dependency), the carried wheels listed and,
with ``--flashinfer VERSION``, FlashInfer installed into ``/tmp/fi-VERSION``;
``nvidia-smi`` snapshot (name, UUID, driver, clocks, temperature, power, memory),
Python/torch/CUDA/triton versions, CPU count, ``nvcc`` and ``ccache``. On a GPU it
also compiles the bytecode of torch, transformers and triton that the host's install
lacks (``_compile_site``). Every other sub-command does the import part itself; run
this first in a call whose numbers you will quote, so the machine is on record beside
them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "prelude"
HELP = "light install of kernelwatch, carried wheels, nvidia-smi snapshot"


# what side processes import on their first call of a case and the host's install may
# hold no bytecode for (torch's lazy modules: _dynamo, distributed.fsdp; Liger imports
# transformers)
COMPILED = ("torch", "transformers", "triton")
# where a host keeps the note that a package was compiled (a warm machine keeps /tmp)
MARKERS = Path(tempfile.gettempdir())


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flashinfer", metavar="VERSION", help="install this carried FlashInfer")
    p.add_argument(
        "--no-compile-site",
        dest="compile_site",
        action="store_false",
        help="leave the host's torch, transformers and triton without the bytecode they lack",
    )


def _compile_site(ctx: host.Context) -> dict[str, Any]:
    """Compile the ``.pyc`` the host's torch, transformers and triton lack, once a host.

    On an H100 (2026-12-07, docs/measurement.md §33) a new side process's first
    LayerNorm set-up (Liger) took 8.2 s, and 3.3 s of it was ``compile`` of 1762 code
    objects, in the second generation of processes as in the first: the modules torch
    imports lazily (``torch._dynamo``, ``torch.distributed.fsdp``) had no bytecode, and
    none was written for the next process. The product's environments hold theirs
    (``worker/venvs.py`` compiles every entry); this puts the rig's host on that footing.
    """
    out: dict[str, Any] = {"dont_write_bytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))}
    for name in COMPILED:
        spec = importlib.util.find_spec(name)
        places = list(spec.submodule_search_locations or []) if spec else []
        if not places:
            continue
        folder = places[0]
        writable = os.access(folder, os.W_OK)
        row: dict[str, Any] = {"folder": folder, "writable": writable}
        # once a host: a warm machine's later calls would only stat every file again
        done = MARKERS / f"kw-bytecode-{name}.done"
        if writable and done.exists():
            row["seconds"] = 0.0
        elif writable:
            step = ctx.run(f"compile-{name}", [sys.executable, "-m", "compileall", "-q", "-j", "0",
                                               folder], 90, min_s=30)  # fmt: skip
            row.update(rc=step.rc, seconds=round(step.seconds, 1))
            if step.rc == 0:
                done.touch()
        out[name] = row
    return out


def _tool(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[-1] if lines else ""


def _bytecode_line(code: dict[str, Any]) -> str:
    flag = "set" if code["dont_write_bytecode"] else "unset"
    rows = [
        f"{name} {row['seconds']} s" if "seconds" in row else f"{name} read-only"
        for name, row in code.items()
        if isinstance(row, dict)
    ]
    return f"bytecode compiled (PYTHONDONTWRITEBYTECODE {flag}): " + "  ".join(rows)


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
    if args.compile_site and not ctx.cpu:
        result["bytecode"] = _compile_site(ctx)
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
    if "bytecode" in result:
        table.append(_bytecode_line(result["bytecode"]))
    return result, table
