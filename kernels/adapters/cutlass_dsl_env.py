"""Where the CuTe DSL and CUTLASS's Hopper dense GEMM come from, and whether they belong together.

The library under test has two parts that travel separately:

- the compiler and runtime: the ``nvidia-cutlass-dsl`` wheel (import name
  ``cutlass``; ``cutlass.cute`` is the DSL);
- the kernel: CUTLASS ships its Hopper dense GEMM as an *example*,
  ``examples/python/CuTeDSL/hopper/dense_gemm.py`` (``HopperWgmmaGemmKernel``),
  not inside the wheel.

The DSL's Python API changes between releases, so the example must come from
the CUTLASS release tag of the wheel's version (wheel 4.3.5, tag ``v4.3.5``).
``python -m benchmarks.gpu prepare-cutlass-dsl`` copies the file from a CUTLASS
clone into ``ROOT/cutedsl_examples/hopper/dense_gemm.py`` and names its
commit and tag in ``ROOT/kw-source.json``. The adapter finds it through
``KW_CUTLASS_DSL_EXAMPLES=ROOT`` (or a CUTLASS checkout's
``examples/python/CuTeDSL``), else as ``cutedsl_examples/`` in a folder on
``sys.path``: the way kernelwatch puts any library under test on the path.

Nothing here imports the DSL at import time, so kernelwatch imports without it;
what is missing is raised as ``Unavailable`` with the sentence a skip shows.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelwatch.kernels.adapters import Unavailable

DIST = "nvidia-cutlass-dsl"
EXAMPLES_ENV = "KW_CUTLASS_DSL_EXAMPLES"
# The folder prepare-cutlass-dsl writes. The module's name goes into the kernel's name
# (kernel_cutlass_kernel_<module><class>_...): it holds no "cutlass" of its own, so the
# one in a profiled kernel name comes from the DSL.
PACKAGE = "cutedsl_examples"
DENSE_GEMM = "hopper/dense_gemm.py"  # relative to CUTLASS's examples/python/CuTeDSL
UPSTREAM = "examples/python/CuTeDSL/" + DENSE_GEMM
SOURCE_FILE = "kw-source.json"
KERNEL_CLASS = "HopperWgmmaGemmKernel"
MODULE_NAME = f"{PACKAGE}.hopper.dense_gemm"
_TAG = re.compile(r"^v?(\d+\.\d+\.\d+)$")


@dataclass(frozen=True)
class Dsl:
    """The imported DSL and example, with where they came from (``describe`` reports it)."""

    cutlass: ModuleType
    cute: ModuleType
    driver: ModuleType  # cuda.bindings.driver: the stream type the compiled kernel takes
    from_dlpack: Any
    example: ModuleType
    version: str | None
    source: dict[str, Any] = field(default_factory=dict)


def dsl_version() -> str | None:
    """The installed ``nvidia-cutlass-dsl`` version, or None (not installed, or no metadata)."""
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return None


def example_file(env: dict[str, str] | None = None, path: list[str] | None = None) -> Path | None:
    """``hopper/dense_gemm.py`` from ``KW_CUTLASS_DSL_EXAMPLES`` or a ``sys.path`` folder."""
    env = dict(os.environ) if env is None else env
    given = env.get(EXAMPLES_ENV)
    if given:  # prepare-cutlass-dsl's folder, or a CUTLASS checkout's examples/python/CuTeDSL
        for candidate in (Path(given) / PACKAGE / DENSE_GEMM, Path(given) / DENSE_GEMM):
            if candidate.is_file():
                return candidate
        raise Unavailable(
            f"{EXAMPLES_ENV}={given} holds neither {PACKAGE}/{DENSE_GEMM} nor {DENSE_GEMM}"
        )
    for root in sys.path if path is None else path:
        candidate = Path(root or ".") / PACKAGE / DENSE_GEMM
        if candidate.is_file():
            return candidate
    return None


def example_source(example: Path) -> dict[str, Any]:
    """What ``prepare-cutlass-dsl`` recorded beside the example (commit, tag), or just the path."""
    for parent in example.parents[:3]:
        record = parent / SOURCE_FILE
        if record.is_file():
            data = json.loads(record.read_text())
            return {**data, "path": str(example)} if isinstance(data, dict) else {}
    return {"path": str(example)}


def tag_version(ref: str | None) -> str | None:
    """The DSL version a CUTLASS release tag stands for (``v4.3.5`` → ``4.3.5``); None if no tag."""
    match = _TAG.match(ref or "")
    return match.group(1) if match else None


def version_mismatch(ref: str | None, version: str | None) -> str | None:
    """Why an example from CUTLASS ``ref`` does not belong with DSL ``version``; None if it does.

    Only a release tag (``v4.3.5``) and a known version are compared: an example
    taken at a plain commit is the caller's choice.
    """
    tagged = tag_version(ref)
    if tagged is None or version is None or tagged == version:
        return None
    return (
        f"the dense GEMM example comes from CUTLASS {ref} but {DIST} {version} is installed; "
        f"the DSL's API changes between releases: prepare the example at v{version}"
    )


def _import_dsl() -> tuple[ModuleType, ModuleType, ModuleType, Any]:
    try:
        cutlass = importlib.import_module("cutlass")
        cute = importlib.import_module("cutlass.cute")
        driver = importlib.import_module("cuda.bindings.driver")
        runtime = importlib.import_module("cutlass.cute.runtime")
    except ImportError as exc:
        raise Unavailable(f"{DIST} is not installed here ({exc})") from exc
    except Exception as exc:  # a wheel that is there but does not load (driver, ABI)
        raise Unavailable(f"{DIST} does not import here: {type(exc).__name__}: {exc}") from exc
    return cutlass, cute, driver, runtime.from_dlpack


def _import_example(path: Path) -> ModuleType:
    # By file, under a name no other module has: the DSL reads the source of the
    # kernel's methods (inspect), so the module must stay registered.
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise Unavailable(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE_NAME]
        raise
    if not hasattr(module, KERNEL_CLASS):
        raise Unavailable(f"{path} has no {KERNEL_CLASS} (another CUTLASS example API?)")
    return module


@functools.lru_cache(maxsize=1)
def load() -> Dsl:
    """The DSL and the example, imported once per process; ``Unavailable`` saying what is missing.

    A failure is not cached: the next case tries again (and raises the same reason).
    """
    cutlass, cute, driver, from_dlpack = _import_dsl()
    path = example_file()
    if path is None:
        raise Unavailable(
            f"CUTLASS's CuTe DSL example {UPSTREAM} is not on the path: set {EXAMPLES_ENV} "
            "or carry the folder that `python -m benchmarks.gpu prepare-cutlass-dsl` writes"
        )
    source = example_source(path)
    version = dsl_version()
    why = version_mismatch(source.get("ref"), version)
    if why:
        raise Unavailable(why)
    return Dsl(cutlass, cute, driver, from_dlpack, _import_example(path), version, source)


def describe() -> dict[str, Any]:
    """Library fields for a record: DSL version, example commit and tag (no import of the DSL)."""
    info: dict[str, Any] = {"name": DIST, "version": dsl_version()}
    try:
        path = example_file()
    except Unavailable as exc:
        return {**info, "example_error": str(exc)}
    if path is not None:
        src = example_source(path)
        info.update(commit=src.get("commit"), ref=src.get("ref"), example=src.get("path"))
    return info
