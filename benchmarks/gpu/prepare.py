"""``prepare-fa3``: the FlashAttention-3 sources an offline GPU host builds from.

Runs on a machine with a flash-attention clone and a CUTLASS clone (not on the GPU
host, which has no network): per commit, ``hopper/`` and ``README.md`` (what
``hopper/setup.py`` reads) with the commit's CUTLASS pin, and per pin CUTLASS's
``include/`` (the only part the build reads), as ``.src/fa3-<sha>.tar.xz`` and
``.src/cutlass-include-<pin>.tar.xz``: about 6 MB for the three default commits,
well inside a call's 64 MiB. Carry ``.src`` and run ``libraries --part fa3``.

    python -m benchmarks.gpu prepare-fa3 --fa-repo ../flash-attention \\
        --cutlass-repo ../cutlass 16c7f0f6 3e87e421 c75d019d
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.gpu import host

NAME = "prepare-fa3"
HELP = "(networked machine) pack FA3 commits + CUTLASS include/ into .src/"
# all build with CUDA 13's own nvcc; two CUTLASS pins (docs/results-h200.md)
DEFAULT_COMMITS = ("16c7f0f6", "3e87e421", "c75d019d")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fa-repo", required=True, type=Path, help="a flash-attention clone")
    p.add_argument("--cutlass-repo", required=True, type=Path, help="a cutlass clone")
    p.add_argument("commits", nargs="*", default=list(DEFAULT_COMMITS))


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    host.SOURCES.mkdir(exist_ok=True)
    made: list[dict[str, Any]] = []
    for c in args.commits:
        full = _git(args.fa_repo, "rev-parse", f"{c}^{{commit}}").decode().strip()
        pin = _git(args.fa_repo, "rev-parse", f"{full}:csrc/cutlass").decode().strip()
        with tempfile.TemporaryDirectory() as tmp:
            archive = _git(args.fa_repo, "archive", full, "hopper", "README.md")
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(tmp, filter="data")
            Path(tmp, ".kw-cutlass-pin").write_text(pin + "\n")
            Path(tmp, ".kw-commit").write_text(full + "\n")
            with tarfile.open(host.SOURCES / f"fa3-{full}.tar.xz", "w:xz") as out:
                out.add(tmp, arcname=".")
        inc = host.SOURCES / f"cutlass-include-{pin}.tar.xz"
        if not inc.exists():
            archive = _git(args.cutlass_repo, "archive", "--format=tar", pin, "include")
            with (
                tarfile.open(fileobj=io.BytesIO(archive)) as src,
                tarfile.open(inc, "w:xz") as out,
            ):
                for member in src:
                    out.addfile(member, src.extractfile(member) if member.isfile() else None)
        listed = _git(args.cutlass_repo, "ls-tree", "-r", "--name-only", pin, "include")
        headers = len(listed.split())
        with tarfile.open(inc) as tar:
            packed = sum(1 for m in tar if m.isfile())
        if packed != headers:
            raise RuntimeError(f"CUTLASS {pin}: {packed} files packed, {headers} in include/")
        made.append({"commit": full, "cutlass_pin": pin, "headers": headers})
    size = sum(p.stat().st_size for p in host.SOURCES.glob("*.tar.xz"))
    table = [
        f"{m['commit'][:8]}  CUTLASS {m['cutlass_pin'][:8]}  {m['headers']} files" for m in made
    ]
    table.append(f".src/: {size / 2**20:.1f} MiB of tarballs (a call carries at most 64 MiB)")
    return {"prepared": made, "bytes": size}, table
