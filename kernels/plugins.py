"""Suites and adapters that other packages ship, found through entry points.

Why: a kernel library knows its own kernels best. It can ship kernelwatch
suites (and implementation modules for kernelwatch's suites) in its own
distribution and declare them in its packaging metadata::

    [project.entry-points."kernelwatch.suites"]
    mylib-gemm = "mylib.kw_suites:build_gemm"     # builder(size, device) -> [CaseSpec]

    [project.entry-points."kernelwatch.adapters"]
    mylib = "mylib.kw_adapter"                    # an implementation module

Installed into the environment of the library under test, these show up in
``kernelwatch bench --list`` and run like built-in suites. Discovery reads the
metadata on every call (cheap, and a freshly installed environment needs no
restart); nothing is imported until a suite is loaded. Built-in names win over
plugins, so a plugin cannot silently replace a suite whose history exists.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points

SUITE_GROUP = "kernelwatch.suites"
ADAPTER_GROUP = "kernelwatch.adapters"
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_MODULE = re.compile(r"^[A-Za-z_][\w.]*$")


def discovered(group: str) -> dict[str, str]:
    """``{name: target}`` of every well-formed entry point in ``group``."""
    pattern = _TARGET if group == SUITE_GROUP else _MODULE
    found: dict[str, str] = {}
    for ep in entry_points(group=group):
        if pattern.match(ep.value.strip()) and ep.name not in found:
            found[ep.name] = ep.value.strip()
    return found


def plugin_suites(builtin: dict[str, str]) -> dict[str, str]:
    """Plugin suites (``module:function``) whose names do not collide with ``builtin``."""
    return {k: v for k, v in discovered(SUITE_GROUP).items() if k not in builtin}


def adapter_modules() -> dict[str, str]:
    """Implementation modules by short name: kernelwatch's adapters, then plugins'."""
    from kernelwatch.kernels.adapters import ADAPTERS

    names = {name: info.module for name, info in ADAPTERS.items()}
    for name, module in discovered(ADAPTER_GROUP).items():
        names.setdefault(name, module)
    return names


def resolve_impl(name: str) -> str:
    """The module behind ``--impl NAME``: a short adapter name, or a module path as given."""
    return adapter_modules().get(name, name)
