"""``prepare-cutlass-dsl``: CUTLASS's CuTe DSL dense GEMM and the DSL wheel for an offline host.

Runs on a machine with a CUTLASS clone (and, with ``--download-wheel``, the
package index), not on the GPU host. Copies ``examples/python/CuTeDSL/hopper/
dense_gemm.py`` and CUTLASS's ``LICENSE.txt`` at a release tag into
``.dsl/examples/cutedsl_examples/``, with ``.dsl/examples/kw-source.json``
naming the commit and the tag: the ``cutlass-dsl`` adapter
(``kernels/adapters/cutlass_dsl.py``) loads the kernel from there. The
``nvidia-cutlass-dsl`` wheel of the tag's version goes beside it in ``.dsl/``;
the DSL's API changes between releases, so a wheel of another version is refused.

4.3.5 is the newest release that fits one device call: its single wheel is 55.9
MiB as published (cp312, manylinux_2_28 x86-64; it needs cuda-bindings, numpy and
typing-extensions, which the H200 image has), 40.2 MiB once its members are
recompressed with LZMA (``repack_lzma``: the same files, names and RECORD hashes;
pip installs it as it is), which leaves room for the working tree in a call's 64
MiB. From 4.4 on the DSL is split into packages of 74 MiB (4.4.x) and 95 MiB (4.8.x)
and more. Carry ``.dsl`` and run ``cutlass-dsl``. ``.dsl/`` is ignored: fetched
source is never committed.

    python -m benchmarks.gpu prepare-cutlass-dsl \\
        --cutlass-repo /work/.mirror/NVIDIA+cutlass/repo --download-wheel v4.3.5
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from benchmarks.gpu import host
from benchmarks.gpu.prepare import _git

NAME = "prepare-cutlass-dsl"
HELP = "(networked machine) CuTe DSL dense GEMM example + nvidia-cutlass-dsl wheel into .dsl/"
DEFAULT_REF = "v4.3.5"
DSL_DIR = host.ROOT / ".dsl"
EXAMPLES = "examples"  # .dsl/examples: the folder the GPU host puts on PYTHONPATH
CUTLASS_URL = "https://github.com/NVIDIA/cutlass"
WHEEL_GLOB = "nvidia_cutlass_dsl-*.whl"
CARRY_LIMIT = 64 * 2**20
# the GPU host: CPython 3.12, x86-64, glibc new enough for manylinux_2_28
PIP_TARGET = ["--python-version", "3.12", "--implementation", "cp"] + [
    arg
    for tag in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014")
    for arg in ("--platform", f"{tag}_x86_64")
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cutlass-repo", required=True, type=Path, help="a cutlass clone")
    p.add_argument("--dest", type=Path, default=DSL_DIR, help="carry folder (default .dsl)")
    p.add_argument(
        "--download-wheel",
        action="store_true",
        help="pip download the CuTe DSL wheel of the tag's version for the GPU host into DEST",
    )
    p.add_argument(
        "ref", nargs="?", default=DEFAULT_REF, help=f"release tag (default {DEFAULT_REF})"
    )


def copy_example(repo: Path, ref: str, dest: Path) -> dict[str, Any]:
    """The dense GEMM example of CUTLASS ``ref`` into ``dest/examples`` (a fresh copy),
    with the license that covers it; what was copied."""
    from kernelwatch.kernels.adapters.cutlass_dsl_env import (
        DENSE_GEMM,
        KERNEL_CLASS,
        PACKAGE,
        SOURCE_FILE,
        UPSTREAM,
        tag_version,
    )

    # upstream path -> path under .dsl/examples
    files_wanted = {UPSTREAM: f"{PACKAGE}/{DENSE_GEMM}", "LICENSE.txt": f"{PACKAGE}/LICENSE.txt"}
    full = _git(repo, "rev-parse", f"{ref}^{{commit}}").decode().strip()
    root = dest / EXAMPLES
    shutil.rmtree(root / PACKAGE, ignore_errors=True)
    files = []
    for src, rel in files_wanted.items():
        try:
            data = _git(repo, "show", f"{full}:{src}")
        except subprocess.CalledProcessError:
            if src == UPSTREAM:
                raise RuntimeError(f"CUTLASS {ref} ({full[:8]}) has no {src}") from None
            continue
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        files.append({"upstream": src, "path": rel, "bytes": len(data)})
    if KERNEL_CLASS not in (root / files_wanted[UPSTREAM]).read_text():
        raise RuntimeError(f"CUTLASS {ref}: {UPSTREAM} defines no {KERNEL_CLASS}")
    source = {
        "repository": CUTLASS_URL,
        "commit": full,
        "ref": ref,
        "dsl_version": tag_version(ref),
        "files": files,
    }
    (root / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")
    return source


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def wheel_problem(dest: Path, version: str | None) -> str | None:
    """Why the wheels in ``dest`` do not go with the example; None when they do or none is there."""
    from kernelwatch.kernels.adapters.cutlass_dsl_env import DIST

    wheels = sorted(dest.glob(WHEEL_GLOB))
    if len(wheels) > 1:
        return f"{len(wheels)} {DIST} wheels in {dest}: keep one (pip would install them all)"
    if wheels and version and wheel_version(wheels[0]) != version:
        return (
            f"{wheels[0].name} in {dest} is not {DIST} {version}, the example's release: "
            "the DSL's API changes between releases; remove it or prepare another tag"
        )
    return None


def download_argv(version: str, dest: Path) -> list[str]:
    """The pip line that fetches the GPU host's wheel (no dependencies: the image has them)."""
    from kernelwatch.kernels.adapters.cutlass_dsl_env import DIST

    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    return [*argv, *PIP_TARGET, "-d", str(dest), f"{DIST}=={version}"]


def repack_lzma(wheel: Path) -> tuple[int, int]:
    """Recompress ``wheel``'s members with LZMA in place; its size before and after.

    A wheel is a zip, and pip reads it with ``zipfile``, which reads LZMA members: the
    files, their modes and the hashes in ``RECORD`` (of the uncompressed bytes) stay as
    published, only the carry shrinks (the DSL's 137 MiB MLIR library deflates to 54
    MiB and LZMA-compresses to 39). A wheel already repacked is left alone.
    """
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        if all(i.compress_type == zipfile.ZIP_LZMA for i in infos if i.file_size):
            return before, before
        tmp = wheel.with_name(wheel.name + ".part")
        with zipfile.ZipFile(tmp, "w") as zout:
            for info in infos:
                member = zipfile.ZipInfo(info.filename, info.date_time)
                member.external_attr = info.external_attr
                zout.writestr(member, zin.read(info), compress_type=zipfile.ZIP_LZMA)
    tmp.replace(wheel)
    return before, wheel.stat().st_size


def tree_bytes(root: Path = host.ROOT) -> int:
    """What a device call sends besides the carried folders: tracked and unignored files."""
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    paths = [root / p for p in listed.decode().split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file())


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    from kernelwatch.kernels.adapters.cutlass_dsl_env import DIST, PACKAGE, UPSTREAM

    dest: Path = args.dest
    dest.mkdir(parents=True, exist_ok=True)
    source = copy_example(args.cutlass_repo, args.ref, dest)
    version = source["dsl_version"]
    if args.download_wheel:
        if version is None:
            raise RuntimeError(f"--download-wheel needs a release tag, not {args.ref!r}")
        step = ctx.run("pip-download", download_argv(version, dest), 600, reserve=0)
        if not step.ok:
            raise RuntimeError(f"pip download {DIST}=={version} failed: {' '.join(step.tail)}")
    problem = wheel_problem(dest, version)
    if problem:
        raise RuntimeError(problem)
    wheels = []
    for wheel in sorted(dest.glob(WHEEL_GLOB)):
        before, after = repack_lzma(wheel)
        wheels.append({"name": wheel.name, "bytes": after, "repacked_from": before})
    carried = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    tree = tree_bytes()
    result = {"source": source, "wheels": wheels, "carry_bytes": carried, "tree_bytes": tree}
    result["fits"] = carried + tree <= CARRY_LIMIT
    mib = 2**20
    table = [
        f"CUTLASS {args.ref} {source['commit'][:8]}: {UPSTREAM} -> {dest / EXAMPLES / PACKAGE}"
    ]
    table += [
        f"wheel {w['name']}: {w['bytes'] / mib:.1f} MiB, members LZMA-compressed"
        + (f" (was {w['repacked_from'] / mib:.1f})" if w["repacked_from"] != w["bytes"] else "")
        for w in wheels
    ] or [f"no {DIST} wheel in {dest}: run again with --download-wheel"]
    table.append(
        f"{dest.name}/ {carried / mib:.1f} MiB + working tree {tree / mib:.1f} MiB = "
        f"{(carried + tree) / mib:.1f} MiB of a call's {CARRY_LIMIT // mib} MiB"
        + ("" if result["fits"] else ": DOES NOT FIT")
    )
    return result, table
