"""Which kernels each built-in suite calls, known without torch.

Why: a mistyped ``--kernel`` or ``[suites] kernels`` used to reach the worker, which
found no case and turned the commit's result into an error (issue 18). The API
process and the CLI check names before anything is queued, and the API process
never imports torch, so the names come from the suites' grid files
(``kernels/suites/<suite>.toml``, read as data) and, for the two suites whose grids
are Python, from the table below (``tests/kernels/test_catalog.py`` builds every
suite at every size and checks it calls exactly these kernels).

Plugin suites (``kernels/plugins.py``) live in the environment of the library under
test, not on the server: their kernels are unknown here (``None``) and are checked
by the worker when the suite is built.

The same files say how many GPUs of one host a suite needs (``[suite] gpus = K``,
``suite_gpus``): the planner routes a run to the queue of workers that own that
many cards (``jobs/planning/queues.py``). Python-grid suites and plugin suites
need one; a plugin suite that needs more is not known to the server yet.

Suite names come from repositories' ``.kernelwatch.toml``; a name is looked up as a
file here only when it is a plain name (``grid.SUITE_NAME``) and one of this package's own
grid files, so no name (``../../etc/x``) reads a file elsewhere on the host.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Sequence
from importlib import resources

from kernelwatch.kernels import grid

# Suites whose grids are Python (``suites/basic.py``, ``suites/noop.py``).
_PYTHON_GRIDS: dict[str, frozenset[str]] = {
    "basic": frozenset({"softmax", "rmsnorm", "matmul", "attention"}),
    "noop": frozenset({"noop"}),
}


def is_suite_name(name: str) -> bool:
    """Whether ``name`` has the shape of a suite name (``grid.SUITE_NAME``: no path, no
    dots, no spaces)."""
    return bool(grid.SUITE_NAME.fullmatch(name))


@functools.cache  # the package's files never change while a process runs
def _grid_files() -> frozenset[str]:
    package = resources.files("kernelwatch.kernels.suites")
    return frozenset(e.name for e in package.iterdir() if e.name.endswith(".toml") and e.is_file())


def _builtin_grid(name: str) -> grid.GridFile | None:
    # Refused unless it is one of the package's own files: a name that is not a plain
    # suite name never reaches the file system (a path would read any *.toml on the host).
    if not is_suite_name(name) or f"{name}.toml" not in _grid_files():
        return None
    return grid.builtin(name)


@functools.cache  # a built-in grid file never changes while a process runs
def _grid_kernels(name: str) -> frozenset[str] | None:
    parsed = _builtin_grid(name)
    if parsed is None:
        return None
    return frozenset(str(c["kernel"]) for size in parsed.sizes for c in parsed.cases(size))


def suite_kernels(suite: str) -> frozenset[str] | None:
    """The kernels ``suite`` calls at any size; None when it is not a built-in suite."""
    if suite in _PYTHON_GRIDS:
        return _PYTHON_GRIDS[suite]
    return _grid_kernels(suite)


def suite_gpus(suite: str) -> int:
    """GPUs of one host ``suite`` needs: its grid file's ``[suite] gpus`` (default 1).

    Python-grid suites (``basic``, ``noop``) and suites that are not built in (plugins,
    whose files live with the library under test) need 1.
    """
    if suite in _PYTHON_GRIDS:
        return 1
    parsed = _builtin_grid(suite)
    return parsed.gpus if parsed is not None else 1


def run_gpus(suites: Iterable[str]) -> int:
    """GPUs a run of ``suites`` needs: the most any of them needs (1 for none)."""
    return max((suite_gpus(s) for s in suites), default=1)


def unknown_kernels(suites: Sequence[str], kernels: Iterable[str]) -> str:
    """Why ``kernels`` cannot be picked from ``suites`` ('' when they can, or when a
    suite is not built in, so its kernels are only known to the worker)."""
    known: set[str] = set()
    for s in suites:
        names = suite_kernels(s)
        if names is None:
            return ""
        known |= names
    bad = [k for k in kernels if k not in known]
    if not bad:
        return ""
    hints = []
    for k in bad:
        close = difflib.get_close_matches(k, sorted(known), n=1, cutoff=0.6)
        hints.append(f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k))
    return (
        f"unknown kernel {', '.join(hints)} in suite {', '.join(suites)}; "
        f"its kernels: {', '.join(sorted(known))}"
    )
