"""The torch-free kernel catalog agrees with what every built-in suite really builds."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest
import torch

from kernelwatch.kernels import grid
from kernelwatch.kernels.catalog import (
    is_suite_name,
    run_gpus,
    suite_gpus,
    suite_kernels,
    unknown_kernels,
)
from kernelwatch.kernels.suite import _SUITES, load_suite

SIZES = {"basic": ("smoke", "full"), "noop": ("smoke",)}


@pytest.mark.parametrize("suite", sorted(_SUITES))
def test_the_catalog_names_exactly_the_kernels_each_suite_builds(suite: str) -> None:
    sizes = SIZES.get(suite) or tuple(grid.builtin(suite).size_names())
    built = {c.kernel for size in sizes for c in load_suite(suite, size, torch.device("cpu"))}
    assert suite_kernels(suite) == built


def test_a_plugin_suites_kernels_are_left_to_the_worker() -> None:
    assert suite_kernels("mylib-gemm") is None
    assert unknown_kernels(["basic", "mylib-gemm"], ["anything"]) == ""


def test_an_unknown_kernel_is_named_with_the_closest_one() -> None:
    why = unknown_kernels(["gemm", "decode"], ["gemm", "decode_pagd", "zzz"])
    assert "'decode_pagd' (did you mean 'decode_paged'?)" in why
    assert "'zzz'" in why and "'gemm'," not in why.split(";")[0]
    assert unknown_kernels(["gemm"], ["gemm_grouped"]) == ""


def test_a_suite_declares_the_gpus_it_needs_in_its_grid_file() -> None:
    assert suite_gpus("collective") == 2  # [suite] gpus = 2 in suites/collective.toml
    assert suite_gpus("gemm") == 1  # no gpus key: one
    assert suite_gpus("basic") == 1 and suite_gpus("noop") == 1  # Python grids
    assert suite_gpus("mylib-gemm") == 1  # a plugin suite: unknown here, one GPU
    assert run_gpus(["basic", "collective", "mylib-gemm"]) == 2
    assert run_gpus(["basic", "gemm"]) == 1
    assert run_gpus([]) == 1


@pytest.mark.parametrize("bad", ["0", "-1", "true", "1.5", '"2"'])
def test_a_suites_gpus_must_be_a_positive_integer(bad: str) -> None:
    with pytest.raises(grid.GridError, match="gpus must be an integer >= 1"):
        grid.parse(f'[suite]\nname = "x"\ngpus = {bad}\n[[smoke]]\nkernel = "k"\n', "x.toml")
    assert grid.parse('[suite]\ngpus = 4\n[[smoke]]\nkernel = "k"\n').gpus == 4


def _path_to(target: Path) -> str:
    """``target`` (without .toml) as a suite name relative to the built-in grid files."""
    package = Path(str(resources.files("kernelwatch.kernels.suites")))
    return os.path.relpath(target, package)


def test_a_suite_name_that_is_a_path_reads_no_file_outside_the_package(tmp_path: Path) -> None:
    # audit, 2026-12-05: "../../tmp/x/grid" read /tmp/x/grid.toml and the error listed its keys
    (tmp_path / "grid.toml").write_text('[[smoke]]\nkernel = "SECRET_TOKEN_abc"\n')
    name = _path_to(tmp_path / "grid")
    assert suite_kernels(name) is None and suite_gpus(name) == 1
    assert "SECRET" not in unknown_kernels([name], ["softmax"])
    assert unknown_kernels([name], ["softmax"]) == unknown_kernels([name + "x"], ["softmax"])
    with pytest.raises(ValueError, match="not a built-in suite name"):
        grid.builtin(name)
    # a well-formed name that is no grid file of the package is not read either
    assert suite_kernels("grid") is None and suite_kernels("common") is None


def test_every_built_in_suite_has_a_valid_suite_name() -> None:
    assert all(is_suite_name(s) for s in [*_SUITES, "mylib-gemm", "plug-double", "v2_gemm"])
    assert not any(is_suite_name(s) for s in ["", "-x", "_x", "a/b", "..", "a.b", "a b"])
