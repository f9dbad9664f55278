"""``prepare-fa3``: the FlashAttention-3 sources an offline GPU host builds from.

Runs on a machine with a flash-attention clone and a CUTLASS clone (not on the GPU
host, which has no network): per commit, ``hopper/`` and ``README.md`` (what
``hopper/setup.py`` reads) with the commit's CUTLASS pin, and per pin CUTLASS's
``include/`` (the only part the build reads), as ``.src/fa3-<sha>.tar.xz`` and
``.src/cutlass-include-<pin>.tar.xz``: about 6 MB for the three default commits,
well inside a call's 64 MiB. Carry ``.src`` and run ``libraries --part fa3``.

    python -m benchmarks.gpu prepare-fa3 --fa-repo ../flash-attention \\
        --cutlass-repo ../cutlass 16c7f0f6 3e87e421 c75d019d

``prepare-fa2`` (``FA2`` below, a second sub-command of this module) does the same
for FlashAttention-2, the ``flash-attn`` package: see its own help.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
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


def resolve(fa_repo: Path, ref: str) -> tuple[str, str]:
    """(full sha, CUTLASS pin) of ``ref`` (a sha prefix or a tag)."""
    full = _git(fa_repo, "rev-parse", f"{ref}^{{commit}}").decode().strip()
    pin = _git(fa_repo, "rev-parse", f"{full}:csrc/cutlass").decode().strip()
    return full, pin


def pack(fa_repo: Path, full: str, pin: str, paths: list[str], target: Path, ref: str) -> Path:
    """``paths`` of commit ``full`` with ``.kw-commit``/``.kw-cutlass-pin``/``.kw-ref``."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = _git(fa_repo, "archive", full, *paths)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        Path(tmp, ".kw-cutlass-pin").write_text(pin + "\n")
        Path(tmp, ".kw-commit").write_text(full + "\n")
        Path(tmp, ".kw-ref").write_text(ref + "\n")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(target, "w:xz") as out:
            out.add(tmp, arcname=".")
    return target


def pack_cutlass(cutlass_repo: Path, pin: str, dest: Path) -> int:
    """``dest/cutlass-include-<pin>.tar.xz`` (made once per pin), checked; its file count."""
    inc = dest / f"cutlass-include-{pin}.tar.xz"
    if not inc.exists():
        archive = _git(cutlass_repo, "archive", "--format=tar", pin, "include")
        partial = inc.with_name(inc.name + ".part")
        with (
            tarfile.open(fileobj=io.BytesIO(archive)) as src,
            tarfile.open(partial, "w:xz") as out,
        ):
            for member in src:
                out.addfile(member, src.extractfile(member) if member.isfile() else None)
        partial.replace(inc)
    listed = _git(cutlass_repo, "ls-tree", "-r", "--name-only", pin, "include")
    headers = len(listed.split())
    with tarfile.open(inc) as tar:
        packed = sum(1 for m in tar if m.isfile())
    if packed != headers:
        raise RuntimeError(f"CUTLASS {pin}: {packed} files packed, {headers} in include/")
    return headers


def _sizes(dest: Path) -> tuple[int, list[str]]:
    size = sum(p.stat().st_size for p in dest.glob("*.tar.xz"))
    lines = [f"  {p.name}: {p.stat().st_size / 2**20:.2f} MiB" for p in sorted(dest.glob("*.xz"))]
    lines.append(f".src/: {size / 2**20:.1f} MiB of tarballs (a call carries at most 64 MiB)")
    return size, lines


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    host.SOURCES.mkdir(exist_ok=True)
    made: list[dict[str, Any]] = []
    for c in args.commits:
        full, pin = resolve(args.fa_repo, c)
        pack(
            args.fa_repo, full, pin, ["hopper", "README.md"], host.SOURCES / f"fa3-{full}.tar.xz", c
        )
        headers = pack_cutlass(args.cutlass_repo, pin, host.SOURCES)
        made.append({"commit": full, "cutlass_pin": pin, "headers": headers})
    size, sizes = _sizes(host.SOURCES)
    table = [
        f"{m['commit'][:8]}  CUTLASS {m['cutlass_pin'][:8]}  {m['headers']} files" for m in made
    ]
    return {"prepared": made, "bytes": size}, table + sizes


# --------------------------------------------------------------------------- prepare-fa2

FA2_DOC = """``prepare-fa2``: the FlashAttention-2 (``flash-attn``) sources an offline host builds.

Like ``prepare-fa3``, on a machine with a flash-attention clone and a CUTLASS clone:
per commit what the top-level ``setup.py`` of that commit reads for the CUDA build
(``setup.py``, ``flash_attn/`` for the package and ``__version__``, ``csrc/flash_attn/``
for the extension's sources and headers, ``README.md`` for ``long_description``, and
``LICENSE``/``AUTHORS`` where that setup.py names them) as ``.src/fa2-<sha>.tar.xz``,
with the commit's CUTLASS pin, and per pin CUTLASS's ``include/`` as
``.src/cutlass-include-<pin>.tar.xz`` (shared with ``prepare-fa3``). Every
``csrc/flash_attn/...`` source the setup.py lists is checked to be in the tarball.
The v2.8.x tags all pin CUTLASS dc481792: 1.4 MiB for the two default commits.
Carry ``.src`` and run ``libraries --part fa2 --fa2 SHA --fa2 SHA``.

    python -m benchmarks.gpu prepare-fa2 --fa-repo ../flash-attention \\
        --cutlass-repo ../cutlass v2.8.2 v2.8.3
"""
FA2_NAME = "prepare-fa2"
FA2_HELP = "(networked machine) pack FA2 (flash-attn) commits + CUTLASS include/ into .src/"
# released, the FA2 csrc layout the stubs understand, identical csrc/flash_attn/
# (only setup.py differs between them), one CUTLASS pin
FA2_DEFAULT_COMMITS = ("v2.8.2", "v2.8.3")
FA2_PATHS = ("setup.py", "flash_attn", "csrc/flash_attn", "README.md")
FA2_OPTIONAL = ("LICENSE", "AUTHORS")  # packed only where setup.py names them
_FA2_SOURCE = re.compile(r"""["'](csrc/flash_attn/[^"']+\.(?:cpp|cu))["']""")


def fa2_add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fa-repo", required=True, type=Path, help="a flash-attention clone")
    p.add_argument("--cutlass-repo", required=True, type=Path, help="a cutlass clone")
    p.add_argument("commits", nargs="*", default=list(FA2_DEFAULT_COMMITS))


def fa2_paths(fa_repo: Path, full: str) -> tuple[list[str], list[str]]:
    """(paths to pack, CUDA sources setup.py lists) of commit ``full``."""
    setup = _git(fa_repo, "show", f"{full}:setup.py").decode()
    top = set(_git(fa_repo, "ls-tree", "--name-only", full).decode().split())
    paths = list(FA2_PATHS)
    paths += [name for name in FA2_OPTIONAL if name in setup and name in top]
    missing = [p for p in paths if p not in top and p.split("/")[0] not in top]
    if missing:
        raise RuntimeError(f"{full[:8]}: no {', '.join(missing)} at this commit")
    return paths, sorted(set(_FA2_SOURCE.findall(setup)))


def pack_fa2(fa_repo: Path, ref: str, dest: Path) -> dict[str, Any]:
    """``dest/fa2-<sha>.tar.xz`` of ``ref``, checked against its setup.py; what was packed."""
    full, pin = resolve(fa_repo, ref)
    paths, sources = fa2_paths(fa_repo, full)
    if not any(s.endswith("_sm80.cu") for s in sources):
        raise RuntimeError(f"{ref} ({full[:8]}): setup.py lists no csrc/flash_attn/src/*_sm80.cu")
    target = pack(fa_repo, full, pin, paths, dest / f"fa2-{full}.tar.xz", ref)
    with tarfile.open(target) as tar:
        names = {m.name.removeprefix("./") for m in tar if m.isfile()}
    absent = [s for s in sources if s not in names]
    if absent:
        raise RuntimeError(f"{ref}: setup.py lists {len(absent)} sources not packed: {absent[:3]}")
    kernels = [s for s in sources if s.startswith("csrc/flash_attn/src/flash_")]
    return {
        "ref": ref,
        "commit": full,
        "cutlass_pin": pin,
        "paths": paths,
        "sources": len(sources),
        "kernel_files": len(kernels),
        "tarball": str(target),
        "bytes": target.stat().st_size,
    }


def fa2_run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    host.SOURCES.mkdir(exist_ok=True)
    made: list[dict[str, Any]] = []
    for ref in args.commits:
        m = pack_fa2(args.fa_repo, ref, host.SOURCES)
        m["headers"] = pack_cutlass(args.cutlass_repo, m["cutlass_pin"], host.SOURCES)
        made.append(m)
    size, sizes = _sizes(host.SOURCES)
    table = [
        f"{m['ref']:<10} {m['commit'][:8]}  {m['kernel_files']} kernel files  "
        f"CUTLASS {m['cutlass_pin'][:8]} ({m['headers']} files)  {m['bytes'] / 2**20:.2f} MiB"
        for m in made
    ]
    return {"prepared": made, "bytes": size}, table + sizes


def _sub_command(
    name: str,
    help_: str,
    doc: str,
    add: Callable[[argparse.ArgumentParser], None],
    run_: Callable[[host.Context, argparse.Namespace], tuple[dict[str, Any], list[str]]],
) -> ModuleType:
    """A sub-command the driver registers like a module (``NAME``, ``HELP``, ``run``, ...)."""
    mod = ModuleType(f"{__name__}:{name}", doc)
    mod.__dict__.update(NAME=name, HELP=help_, add_arguments=add, run=run_)
    return mod


FA2 = _sub_command(FA2_NAME, FA2_HELP, FA2_DOC, fa2_add_arguments, fa2_run)
