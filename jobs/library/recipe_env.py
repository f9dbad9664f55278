"""What an ``[install] env`` may set: the build's own knobs, never the service's, never a host path.

A recipe's environment reaches code under test (the build and the suite runner).
Issue 24 showed two ways it reached further: a ``PATH`` entry spelt
``/./etc/kernelwatch`` passed the sandbox's deny-list and was bound into the
sandbox, and ``CCACHE_DIR`` became a writable, chowned bind of any path. The rules,
one home for the file's reader (``config_model.py``, at parse time) and the worker
(``worker/sandbox.py:confine_env``, at build time, where the paths exist):

- **Service-owned names** (:func:`service_owned`) are set by the service only:
  ``HOME``, ``TMPDIR``, ``USER``, every ``PIP_*``, ``CCACHE_*``, ``GIT_*``, ``KW_*``,
  ``XDG_*``, the Python start-up variables (``PYTHONPATH``, ``PYTHONHOME``, ...), the
  Triton cache and the GPU selection. A recipe that sets one is a ``ConfigError``
  naming the key: the file says what to build, the service where and with what.
- **Path-like variables** (:func:`path_like`: ``PATH``, ``LD_LIBRARY_PATH``, any
  ``*PATH``, ``*_HOME``, ``*_ROOT``, ``*_DIR``, ``*_DIRS``, ``*_PREFIX``, and the
  compiler commands ``CC``, ``CXX``, ``CUDAHOSTCXX``, ``NVCC``, ``PYTORCH_NVCC``,
  ``LD_PRELOAD``) may name only directories inside the checkout (a relative entry
  is relative to the checkout's root), its environment, or what the sandbox shows
  read-only anyway (the system's ``/usr``, ``/bin``, ``/lib*`` and the toolchain the
  service configures). Each entry is resolved with ``realpath`` (``.``, ``..``,
  ``//`` and symlinks undone) before it is judged; the worker does that, because
  only its filesystem can answer. The sandbox itself never binds a path that comes
  from an environment variable, so this check is the clear message, not the lock.

What this module does not do: build environments or run anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator

SERVICE_NAMES = frozenset(
    {
        "HOME",
        "TMPDIR",
        "TMP",
        "TEMP",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PYTHONNOUSERSITE",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX",
        "PYTHONSTARTUP",
        "PYTHONUNBUFFERED",
        "PYTHONSAFEPATH",
        "PYTHONEXECUTABLE",
        "PYTHONPLATLIBDIR",
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TRITON_DUMP_DIR",
        "TRITON_OVERRIDE_DIR",
        "TORCH_EXTENSIONS_DIR",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "LD_AUDIT",
    }
)
SERVICE_PREFIXES = ("PIP_", "CCACHE_", "GIT_", "KW_", "XDG_")
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NOT_A_NAME = "is not a variable name (letters, digits and _, not first a digit)"
# variables that hold a command line (a compiler, a wrapper and the compiler)
_COMMANDS = frozenset({"CC", "CXX", "CUDAHOSTCXX", "NVCC", "PYTORCH_NVCC", "LD_PRELOAD"})
_PATH_SUFFIXES = ("PATH", "_HOME", "_ROOT", "_DIR", "_DIRS", "_PREFIX")
# never visible in the sandbox, on any host: refused already when the file is read
NEVER_VISIBLE = (
    "/etc", "/var", "/run", "/home", "/root", "/tmp", "/srv", "/proc", "/sys", "/dev",
    "/boot", "/mnt", "/media",
)  # fmt: skip


def service_owned(key: str) -> bool:
    """Whether ``key`` is the service's to set (never the recipe's)."""
    upper = key.upper()
    return upper in SERVICE_NAMES or upper.startswith(SERVICE_PREFIXES)


def path_like(key: str) -> bool:
    """Whether the value of ``key`` names files or directories the code will use."""
    upper = key.upper()
    return upper in _COMMANDS or upper.endswith(_PATH_SUFFIXES)


_LIST_ENTRY = re.compile(r"[^:]+")
_COMMAND_WORD = re.compile(r"[^\s:]+")


def entries(key: str, value: str) -> Iterator[str]:
    """The paths a path-like value names: ``PATH``-style lists split on ``:``, command
    lines on blanks (only the words that are paths: ``ccache /usr/bin/nvcc``)."""
    if not path_like(key):
        return
    command = key.upper() in _COMMANDS
    for m in (_COMMAND_WORD if command else _LIST_ENTRY).finditer(value):
        if not command or "/" in m.group():
            yield m.group()


def rewrite(key: str, value: str, each: Callable[[str], str]) -> str:
    """``value`` with every entry :func:`entries` finds replaced by ``each(entry)``,
    separators kept."""
    if not path_like(key):
        return value
    command = key.upper() in _COMMANDS
    pattern = _COMMAND_WORD if command else _LIST_ENTRY
    return pattern.sub(
        lambda m: each(m.group()) if not command or "/" in m.group() else m.group(), value
    )


def normal(path: str) -> str:
    """``path`` with ``.``, ``..`` and repeated slashes undone, by text alone (POSIX keeps
    a leading ``//``; nothing here does)."""
    norm = os.path.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("/") else norm


def under(path: str, top: str) -> bool:
    """``path`` is ``top`` or below it (both normal, absolute)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def static_problem(key: str, value: str) -> str | None:
    """What is wrong with ``key = value`` that can be told without a filesystem:
    a service-owned name, an entry that leaves the checkout by ``..``, or one that
    names a directory no sandbox ever shows (``/./etc/kernelwatch`` is ``/etc``)."""
    if service_owned(key):
        return why_service_owned(key)
    if not path_like(key):
        return None
    for entry in entries(key, value):
        norm = normal(entry)
        if not norm.startswith("/") and (norm == ".." or norm.startswith("../")):
            return f"entry {entry!r} leaves the checkout; {WHERE}"
        if norm.startswith("/") and any(under(norm, top) for top in NEVER_VISIBLE):
            return f"entry {entry!r} is {norm}, outside what the sandbox shows; {WHERE}"
    return None


WHERE = (
    "a path in the recipe's environment must be inside the checkout (relative), its "
    "environment, or the system's read-only toolchain"
)


def why_service_owned(key: str) -> str:
    """The refusal for a recipe that sets a service-owned name."""
    return (
        f"is set by the service, not the recipe ({key} decides where the build writes, "
        "what it trusts or which GPU it gets); remove it"
    )


__all__ = [
    "NEVER_VISIBLE",
    "NOT_A_NAME",
    "VARIABLE",
    "WHERE",
    "entries",
    "normal",
    "path_like",
    "rewrite",
    "service_owned",
    "static_problem",
    "under",
    "why_service_owned",
]
