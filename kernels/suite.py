"""What a suite is: a named list of cases, each a kernel call with its reference.

A case knows how to make fresh random inputs, how to call the implementation
under test (which must fill ``inputs["out"]``), how to compute a high-precision
reference and PyTorch's own low-precision result (for the correctness rule), and
how many FLOPs and bytes one call does (for the roofline).

Implementations are looked up by kernel name on an *implementation module*:
kernelwatch's own Triton kernels by default, or the library under test (e.g.
``--impl tinykern``), which must expose the same functions.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelwatch.kernels.record import CaseParams

# The inputs of one call of a case, by name: tensors (``out`` among them) and the
# scalars the kernel needs; what ``make_inputs`` builds and every adapter receives.
Inputs = dict[str, Any]


@dataclass
class CaseSpec:
    """One case of a suite. ``params`` identify it; the callables do the work.

    Not ``db.models.Case`` (the stored row of a case id) nor the ``(call, inputs)``
    pairs of ``benchcases``: a spec is what the runner needs to check and time it.
    """

    kernel: str
    params: CaseParams
    make_inputs: Callable[[torch.Generator, torch.device], Inputs]
    invoke: Callable[[Callable[..., Any], Inputs], Any]
    reference: Callable[[Inputs, torch.dtype], torch.Tensor]
    dtype: torch.dtype
    flops: float
    bytes: float
    tolerance_kind: str = "default"
    tags: dict[str, Any] = field(default_factory=dict)


SuiteBuilder = Callable[[str, torch.device], list[CaseSpec]]

_SUITES: dict[str, str] = {
    "basic": "kernelwatch.kernels.suites.basic:build",
    "noop": "kernelwatch.kernels.suites.noop:build",
    "prefill": "kernelwatch.kernels.suites.prefill:build",
    "decode": "kernelwatch.kernels.suites.decode:build",
    "gemm": "kernelwatch.kernels.suites.gemm:build",
    "collective": "kernelwatch.kernels.suites.collective:build",
    "layers": "kernelwatch.kernels.suites.layers:build",
}


def all_suites() -> dict[str, str]:
    """Built-in suites plus those other packages register (``kernels/plugins.py``)."""
    from kernelwatch.kernels.plugins import plugin_suites

    return {**plugin_suites(_SUITES), **_SUITES}


def suite_names() -> list[str]:
    return sorted(all_suites())


def unknown_suites(names: Sequence[str]) -> str:
    """Why ``names`` cannot run ('' when every one is a suite), with a did-you-mean: checked
    before anything runs or is queued (a mistyped ``--suite`` used to reach the worker,
    issue 18, and ``kernelwatch bench --suite basicc`` was a KeyError traceback, issue 27)."""
    known = suite_names()
    bad = [n for n in names if n not in known]
    if not bad:
        return ""
    hints = []
    for name in bad:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return f"unknown suite {', '.join(hints)}; suites: {', '.join(known)}"


def load_suite(name: str, size: str, device: torch.device) -> list[CaseSpec]:
    try:
        target = all_suites()[name]
    except KeyError:
        raise KeyError(unknown_suites([name])) from None
    module_name, func = target.split(":")
    builder: SuiteBuilder = getattr(importlib.import_module(module_name), func)
    return builder(size, device)


def load_impl(module_name: str, kernel: str) -> Callable[..., Any]:
    """The implementation of ``kernel`` from ``module_name`` (AttributeError if missing)."""
    module = importlib.import_module(module_name)
    fn = getattr(module, kernel, None)
    if fn is None:
        raise AttributeError(f"implementation module {module_name!r} has no kernel {kernel!r}")
    return fn  # type: ignore[no-any-return]
