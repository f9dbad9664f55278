"""Builders for test repositories: real git repositories of small kernel libraries."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_repo(path: Path, files: dict[str, str], message: str = "initial") -> str:
    path.mkdir(parents=True, exist_ok=True)
    if not (path / ".git").exists():
        git(path, "init", "-q", "-b", "main")
    for name, content in files.items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)
    return git(path, "rev-parse", "HEAD")


KERNELWATCH_TOML = """
[library]
name = "{name}"
module = "{name}"
[install]
recipe = "{recipe}"
[suites]
names = ["basic"]
[thresholds]
# CPU timings on a shared 2-core machine swing by tens of percent: these tests
# check the plumbing, so only a doubling counts.
regression = 1.0
"""

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "{name}"
version = "0.1"
[tool.setuptools]
packages = ["{name}"]
"""

# A library whose kernels misbehave in every way the worker must survive.
BAD_KERNELS = """
import ctypes
import os
import time

from kernelwatch.kernels.triton_kernels import attention  # noqa: F401  (the good one)


def softmax(x, out):
    raise RuntimeError("softmax kernel exploded on purpose")


def rmsnorm(x, w, eps, out):
    while True:  # a kernel that never returns
        time.sleep(0.5)


def matmul(a, b, out):
    ctypes.string_at(0)  # segfault: the process dies mid-case
"""


# A torch matmul library for the accuracy tests: right, and a fork whose K is split in
# chunks, each rounded to the output dtype and accumulated in it, the realistic bug
# found on the H200 (8 chunks there: rel-L2 2.4x the correct kernel's, inside the bound).
# On the CPU smoke case (96^3, float16) 3 chunks keep it in the window the tests need on
# every seed: of 20,000 seeds none broke the bound and the smallest error growth was
# 1.64x (ACCURACY_MARGIN is 1.5). With 8 chunks 1.9 % of seeds broke the max-abs bound,
# so a bisection's confirmation could read ``broken`` instead of ``less_accurate``.
SPLIT_K_CHUNKS = 3
MATMUL_GOOD = """
import torch


def matmul(a, b, out):
    out.copy_((a.float() @ b.float()).to(out.dtype))
"""
MATMUL_SPLIT_K = """
import torch


def matmul(a, b, out):
    k = a.shape[1]
    step = -(-k // {chunks})
    acc = torch.zeros(out.shape, dtype=out.dtype)
    for s in range(0, k, step):
        part = (a[:, s:s + step].float() @ b[s:s + step].float()).to(out.dtype)
        acc = (acc.float() + part.float()).to(out.dtype)
    out.copy_(acc)
""".replace("{chunks}", str(SPLIT_K_CHUNKS))


# A library whose softmax is wrong (every row scaled by 1.5): broken on any seed.
BROKEN_SOFTMAX = (
    "from kernelwatch.kernels.triton_kernels import rmsnorm, matmul, attention\n"
    "from kernelwatch.kernels.triton_kernels import softmax as _softmax\n"
    "def softmax(x, out):\n"
    "    _softmax(x, out)\n"
    "    out.mul_(1.5)  # the normalisation broke\n"
)


def library_files(name: str, init: str, recipe: str = "pip") -> dict[str, str]:
    return {
        f"{name}/__init__.py": init,
        ".kernelwatch.toml": KERNELWATCH_TOML.format(name=name, recipe=recipe),
        "pyproject.toml": PYPROJECT.format(name=name),
    }


def make_wheel(
    house: Path, name: str, version: str, payload: int = 0, init: str | None = None
) -> Path:
    """A minimal pure-Python wheel, written by hand (no build backend, no network).

    ``init``: the package's ``__init__.py`` (default: a version marker and ``payload`` bytes).
    """
    house.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": init
        if init is not None
        else f"VERSION = {version!r}\nBLOB = {'x' * payload!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: kw-test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    whl = house / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return whl


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A loopback HTTP server answering with ``handler`` in a thread; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
