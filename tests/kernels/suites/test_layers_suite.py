"""The layers suite (LayerNorm, SwiGLU, GeGLU) and basic's returned-output convention.

Implementations here are plain torch, in modules written to ``tmp_path``: a right one
passes the shared correctness rule against the suite's references, and wrong ones
(GeGLU with SiLU, LayerNorm without its bias, SwiGLU with sigmoid) fail it. GELU's
erf and tanh forms differ by at most ~5e-4, inside a half-precision bound: the rule
cannot tell them apart, and does not need to.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from kernelwatch.kernels import catalog, grid
from kernelwatch.kernels.runner import run_case
from kernelwatch.kernels.suite import load_suite
from kernelwatch.kernels.timing import TimerConfig

CPU = torch.device("cpu")
FAST = TimerConfig(budget_s=0.05, min_samples=3, min_time_s=0.0)

RIGHT = """
import torch
import torch.nn.functional as F

def layernorm(case):
    x = case["x"]
    return F.layer_norm(x.float(), x.shape[-1:], case["w"].float(), case["b"].float(),
                        case["eps"]).to(x.dtype)

def swiglu(case):
    return F.silu(case["a"].float()).to(case["b"].dtype) * case["b"]

def geglu(case):
    return F.gelu(case["a"].float(), approximate="tanh").to(case["b"].dtype) * case["b"]

def softmax(x, out):  # basic's convention, returning its own tensor
    return torch.softmax(x.float(), -1).to(x.dtype)
"""
WRONG = """
import torch
import torch.nn.functional as F

def layernorm(case):
    x = case["x"]
    return F.layer_norm(x.float(), x.shape[-1:], case["w"].float(), None,
                        case["eps"]).to(x.dtype)

def swiglu(case):
    return torch.sigmoid(case["a"].float()).to(case["b"].dtype) * case["b"]

def geglu(case):
    return F.silu(case["a"].float()).to(case["b"].dtype) * case["b"]  # SwiGLU's gate
"""


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> str:
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return name


def test_the_grid_has_smoke_quick_and_full_and_the_catalog_knows_its_kernels() -> None:
    parsed = grid.builtin("layers")
    assert {"smoke", "quick", "full"} <= set(parsed.size_names())
    assert catalog.suite_kernels("layers") == {"layernorm", "swiglu", "geglu"}
    smoke = load_suite("layers", "smoke", CPU)
    assert all(c.params["cols"] % 2 or c.params["cols"] & (c.params["cols"] - 1) for c in smoke)
    full = load_suite("layers", "full", CPU)
    assert {c.params["dtype"] for c in full} == {"bfloat16", "float16"}


@pytest.mark.parametrize("kernel", ["layernorm", "swiglu", "geglu"])
def test_a_right_implementation_passes_and_a_wrong_one_fails(
    kernel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = _module(tmp_path, monkeypatch, "kw_layers_right", RIGHT)
    wrong = _module(tmp_path, monkeypatch, "kw_layers_wrong", WRONG)
    (spec,) = [c for c in load_suite("layers", "smoke", CPU) if c.kernel == kernel]
    good = run_case(spec, "layers", "cid", "t", right, CPU, FAST)
    assert good.status == "pass", good.error
    bad = run_case(spec, "layers", "cid", "t", wrong, CPU, FAST)
    assert bad.status == "fail", (bad.status, bad.error)


def test_basic_checks_a_returned_tensor_when_it_is_not_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = _module(tmp_path, monkeypatch, "kw_layers_right2", RIGHT)
    (spec,) = [c for c in load_suite("basic", "smoke", CPU) if c.kernel == "softmax"]
    record = run_case(spec, "basic", "cid", "t", right, CPU, FAST)
    # out stays poisoned (never written): the returned tensor is the output checked
    assert record.status == "pass", record.error
