"""Case patterns: which cases of a suite a run measures or a bisection follows.

A pattern is comma-separated globs (``fnmatch``), each matched against a case's kernel
name, ``"kernel label"`` (the label ``kernels.record.case_label`` writes, ``k=v`` by
sorted key) and its case id; empty selects every case. One home, so the suite runner's
``--case``, the paired coordinator's and a bisection's step judge agree on what a
pattern selects.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from kernelwatch.kernels.record import case_label


def case_names(kernel: str, label: str, case_id: str) -> tuple[str, ...]:
    """The names a case pattern may match: ``kernel``, ``kernel label``, the case id."""
    return (kernel, f"{kernel} {label}".strip(), case_id)


def names_of(kernel: str, params: Mapping[str, Any], case_id: str) -> tuple[str, ...]:
    """:func:`case_names` of a case given by its parameters."""
    return case_names(kernel, case_label(params), case_id)


def matches(names: Sequence[str], pattern: str) -> bool:
    """Whether any comma-separated glob of ``pattern`` matches any of ``names``."""
    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    return not pats or any(fnmatch.fnmatchcase(n, p) for p in pats for n in names)


__all__ = ["case_names", "matches", "names_of"]
