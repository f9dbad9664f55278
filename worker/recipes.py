"""Build recipes with profiles: how to build a library from source, trimmed or full.

A kernel library such as FlashAttention-3 compiles for an hour in full and for
a minute when its build flags leave out what a PR gate does not need. The
repository says both in ``.kernelwatch.toml``; the run picks a profile
(``trimmed`` for pull requests, ``full`` for nightly runs)::

    [install]
    recipe = "command"
    cwd = "hopper"                       # where the commands run, inside the checkout
    commands = [["{python}", "setup.py", "build_ext", "--inplace"]]
    pythonpath = ["hopper"]              # what the suite runner imports from
    submodules = ["csrc/cutlass"]        # fetched (through mirrors) before building
    env = { MAX_JOBS = "16", NVCC_THREADS = "4" }
    timeout_s = 5400
    profile_for = { pull_request = "trimmed", push = "trimmed", nightly = "full" }

    [install.profiles.trimmed]
    env = { FLASH_ATTENTION_DISABLE_BACKWARD = "TRUE" }   # merged over [install].env
    timeout_s = 900                                       # other keys replace

``{python}`` in a command is the interpreter of the environment being built.
Commands are argument lists, paths are relative and stay inside the checkout;
nothing here ever reaches a shell. ``jobs/library/repoconfig.py`` keeps parsing the
plain ``[install]`` table; this module reads the same table plus profiles.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from kernelwatch.jobs.errors import ConfigError

RECIPES = ("pip", "pythonpath", "command")
DEFAULT_PROFILE = "default"
_PROFILE_NAME = re.compile(r"^[A-Za-z][\w-]*$")
_REPLACEABLE = (
    "recipe",
    "commands",
    "cwd",
    "pythonpath",
    "submodules",
    "timeout_s",
    "subdirectory",
)


@dataclass(frozen=True)
class BuildRecipe:
    """One way to build: the commands, where they run, their environment and time limit."""

    recipe: str = "pip"
    commands: tuple[tuple[str, ...], ...] = ()
    cwd: str = ""
    subdirectory: str = ""  # for recipe "pip": the package inside the checkout
    pythonpath: tuple[str, ...] = ()
    submodules: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    profile: str = DEFAULT_PROFILE

    def argv(self, python: str) -> list[list[str]]:
        """The commands with ``{python}`` replaced by ``python``."""
        return [[python if a == "{python}" else a for a in cmd] for cmd in self.commands]

    def fingerprint(self) -> list[Any]:
        """What identifies the build's output (cache key material)."""
        return [
            self.recipe,
            [list(c) for c in self.commands],
            self.cwd,
            self.subdirectory,
            sorted(self.env.items()),
            list(self.submodules),
        ]


@dataclass(frozen=True)
class RecipeSet:
    """The base recipe, its named profiles and which trigger uses which profile."""

    base: BuildRecipe
    profiles: dict[str, BuildRecipe]
    profile_for: dict[str, str]

    def select(self, profile: str | None = None, trigger: str | None = None) -> BuildRecipe:
        """The recipe for an explicit ``profile``, else the one ``trigger`` maps to, else base."""
        name = profile or (self.profile_for.get(trigger, "") if trigger else "")
        if not name or name == DEFAULT_PROFILE:
            return self.base
        if name not in self.profiles:
            known = ", ".join([DEFAULT_PROFILE, *self.profiles])
            raise ConfigError(f"unknown build profile {name!r}; known: {known}")
        return self.profiles[name]


def parse(
    text: str | None, *, default_recipe: str = "pip", server: dict[str, Any] | None = None
) -> RecipeSet:
    """Recipes of a ``.kernelwatch.toml`` text (None: no file), with ``server`` overrides."""
    install: Any = {}
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f".kernelwatch.toml: {exc}") from exc
        install = data.get("install", {})
    if not isinstance(install, dict):
        raise ConfigError(".kernelwatch.toml: [install] must be a table")
    if server:
        install = merge_tables(install, server)
    return from_table(install, default_recipe=default_recipe)


def from_table(install: dict[str, Any], *, default_recipe: str = "pip") -> RecipeSet:
    """Recipes of an ``[install]`` table (from the repository or from server config)."""
    try:
        table = dict(install)
        profiles_raw = table.pop("profiles", {})
        profile_for = _str_table(table.pop("profile_for", {}), "install.profile_for")
        base = _recipe(table, BuildRecipe(recipe=default_recipe), DEFAULT_PROFILE)
        if not isinstance(profiles_raw, dict):
            raise ValueError("[install.profiles] must be a table of tables")
        profiles = {}
        for name, prof in profiles_raw.items():
            if not _PROFILE_NAME.match(name) or not isinstance(prof, dict):
                raise ValueError(f"[install.profiles.{name}] must be a table with a plain name")
            profiles[name] = _recipe(prof, base, name)
        for trigger, name in profile_for.items():
            if name != DEFAULT_PROFILE and name not in profiles:
                raise ValueError(f"install.profile_for.{trigger} names unknown profile {name!r}")
    except (TypeError, ValueError) as exc:
        raise ConfigError(f".kernelwatch.toml: {exc}") from exc
    return RecipeSet(base, profiles, profile_for)


def merge_tables(repo: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    """Server-side ``[install]`` config over the repository's: server keys win, ``env``,
    ``profile_for`` and each profile are merged key by key."""
    out = dict(repo)
    for key, value in server.items():
        if key in ("env", "profile_for") and isinstance(value, dict):
            out[key] = {**repo.get(key, {}), **value}
        elif key == "profiles" and isinstance(value, dict):
            profiles = dict(repo.get("profiles", {}))
            for name, prof in value.items():
                profiles[name] = merge_tables(profiles.get(name, {}), prof)
            out[key] = profiles
        else:
            out[key] = value
    return out


def _recipe(table: dict[str, Any], base: BuildRecipe, profile: str) -> BuildRecipe:
    unknown = set(table) - {*_REPLACEABLE, "command", "env"}
    if unknown:
        raise ValueError(f"unknown install keys: {', '.join(sorted(unknown))}")
    changes: dict[str, Any] = {"profile": profile}
    if "recipe" in table:
        if table["recipe"] not in RECIPES:
            raise ValueError(f"install.recipe must be one of {', '.join(RECIPES)}")
        changes["recipe"] = table["recipe"]
    if "command" in table and "commands" in table:
        raise ValueError("give install.command (one argv) or install.commands, not both")
    if "command" in table:
        changes["commands"] = (_argv(table["command"]),)
    if "commands" in table:
        cmds = table["commands"]
        if not isinstance(cmds, list) or not cmds:
            raise ValueError("install.commands must be a non-empty list of argument lists")
        changes["commands"] = tuple(_argv(c) for c in cmds)
    for key in ("cwd", "subdirectory"):
        if key in table:
            changes[key] = _relpath(table[key], f"install.{key}")
    for key in ("pythonpath", "submodules"):
        if key in table:
            value = table[key]
            if not isinstance(value, list):
                raise ValueError(f"install.{key} must be a list of relative paths")
            changes[key] = tuple(_relpath(v, f"install.{key}") for v in value)
    if "env" in table:
        changes["env"] = {**base.env, **_str_table(table["env"], "install.env")}
    if "timeout_s" in table:
        t = float(table["timeout_s"])
        if not 0 < t <= 86400:
            raise ValueError("install.timeout_s must be positive seconds (at most a day)")
        changes["timeout_s"] = t
    recipe = replace(base, **changes)
    if recipe.recipe == "command" and not recipe.commands:
        raise ValueError("install.recipe = 'command' needs install.command or install.commands")
    return recipe


def _argv(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise ValueError("a command must be a non-empty list of strings (an argv, no shell)")
    return tuple(value)


def _relpath(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string path")
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or value.startswith("-"):
        raise ValueError(f"{what} must be a relative path inside the checkout: {value!r}")
    return "" if str(path) == "." else str(path)


def _str_table(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a table of strings")
    return {str(k): str(v) for k, v in value.items()}
