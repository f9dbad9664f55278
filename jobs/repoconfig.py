"""``.kernelwatch.toml``: what a library repository tells kernelwatch about itself.

Read at the commit under test. Example::

    [library]
    name = "tinykern"
    module = "tinykern"        # module exposing the kernels the suites call

    [install]
    recipe = "pip"             # "pip" (pip install --no-deps --target ENV .), "pythonpath"
                               # (import from the checkout), or "command"
    command = ["python", "setup.py", "build_ext", "--inplace"]   # argv, recipe = "command"
    env = { MAX_JOBS = "16" }
    timeout_s = 1800

    [suites]
    names = ["basic"]

    [thresholds]
    regression = 0.05          # relative slowdown that counts, per repository
    confidence = 0.99

A bad file becomes a ConfigError with the parser's message, never a crash.
Commands are argument lists: no shell ever sees them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from kernelwatch.jobs.errors import ConfigError

RECIPES = ("pip", "pythonpath", "command")


@dataclass(frozen=True)
class InstallRecipe:
    recipe: str = "pip"
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None


@dataclass(frozen=True)
class RepoConfig:
    library_name: str | None = None
    module: str | None = None
    install: InstallRecipe = field(default_factory=InstallRecipe)
    suites: tuple[str, ...] = ("basic",)
    regression_threshold: float | None = None
    confidence: float | None = None


def parse(text: str | None, *, default_recipe: str = "pip") -> RepoConfig:
    """Parse the file's text (None: no file → defaults)."""
    if text is None:
        return RepoConfig(install=InstallRecipe(recipe=default_recipe))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f".kernelwatch.toml: {exc}") from exc
    try:
        return _build(data, default_recipe)
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f".kernelwatch.toml: {exc}") from exc


def _build(data: dict[str, Any], default_recipe: str) -> RepoConfig:
    lib = _table(data, "library")
    inst = _table(data, "install")
    suites = _table(data, "suites")
    thr = _table(data, "thresholds")
    recipe = str(inst.get("recipe", default_recipe))
    if recipe not in RECIPES:
        raise ValueError(f"install.recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
    command = inst.get("command", [])
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise ValueError("install.command must be a list of strings (an argv, not a shell line)")
    if recipe == "command" and not command and not inst.get("commands"):
        raise ValueError("install.recipe = 'command' needs install.command")
    env = inst.get("env", {})
    if not isinstance(env, dict):
        raise ValueError("install.env must be a table of strings")
    names = suites.get("names", ["basic"])
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError("suites.names must be a non-empty list of suite names")
    threshold = thr.get("regression")
    if threshold is not None and not 0 < float(threshold) < 10:
        raise ValueError("thresholds.regression must be a positive fraction such as 0.05")
    confidence = thr.get("confidence")
    if confidence is not None and not 0.5 <= float(confidence) < 1:
        raise ValueError("thresholds.confidence must lie in [0.5, 1)")
    module = lib.get("module")
    if module is not None and not str(module).replace(".", "").replace("_", "").isalnum():
        raise ValueError(f"library.module is not a module name: {module!r}")
    return RepoConfig(
        library_name=lib.get("name"),
        module=module,
        install=InstallRecipe(
            recipe=recipe,
            command=tuple(command),
            env={str(k): str(v) for k, v in env.items()},
            timeout_s=float(inst["timeout_s"]) if "timeout_s" in inst else None,
        ),
        suites=tuple(names),
        regression_threshold=float(threshold) if threshold is not None else None,
        confidence=float(confidence) if confidence is not None else None,
    )


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"[{key}] must be a table")
    return value
