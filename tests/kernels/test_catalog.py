"""The torch-free kernel catalog agrees with what every built-in suite really builds."""

from __future__ import annotations

import pytest
import torch

from kernelwatch.kernels import grid
from kernelwatch.kernels.catalog import run_gpus, suite_gpus, suite_kernels, unknown_kernels
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
