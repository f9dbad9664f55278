"""Which build a run gets: the ``[install]`` recipe with the run's profile laid over it.

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

A profile may also stub kernel files out of a build that has no switch for them
(``[install.profiles.trimmed.stub_sources]`` ``files``/``keep``: FlashAttention-2,
``docs/flash-attn2.kernelwatch.toml``); ``worker/stubs.py`` rewrites them in the
checkout before the commands run.

``{python}`` in a command is the interpreter of the environment being built.
Commands are argument lists, paths are relative and stay inside the checkout;
nothing here ever reaches a shell.

What this module does not do: read ``.kernelwatch.toml``. The file is read and
validated once per commit by ``jobs/library/repoconfig.py``; the worker hands
its ``[install]`` table (:class:`InstallRecipe`) here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.config_model import DEFAULT_PROFILE, InstallRecipe
from kernelwatch.jobs.library.repoconfig import parse_install

# The name the worker's build code uses: an InstallRecipe with its profile chosen.
BuildRecipe = InstallRecipe


@dataclass(frozen=True)
class RecipeSet:
    """The base recipe, its named profiles (each resolved) and which trigger uses which."""

    base: InstallRecipe
    profiles: dict[str, InstallRecipe]
    profile_for: dict[str, str]

    def select(self, profile: str | None = None, trigger: str | None = None) -> InstallRecipe:
        """The recipe for an explicit ``profile``, else the one ``trigger`` maps to, else base."""
        name = profile or (self.profile_for.get(trigger, "") if trigger else "")
        if not name or name == DEFAULT_PROFILE:
            return self.base
        if name not in self.profiles:
            known = ", ".join([DEFAULT_PROFILE, *self.profiles])
            raise ConfigError(f"unknown build profile {name!r}; known: {known}")
        return self.profiles[name]


def recipe_set(install: InstallRecipe, server: Mapping[str, Any] | None = None) -> RecipeSet:
    """The builds an ``[install]`` table allows, with ``server`` overrides laid over it.

    ``server`` is an ``[install]`` table from the server's own configuration; it is
    validated like the file's (the same :class:`InstallRecipe`), its errors named
    as the server's.
    """
    if server:
        install = parse_install(merge_tables(install.file_table(), server), "server [install]")
    return RecipeSet(
        base=install.resolve(DEFAULT_PROFILE),
        profiles={name: install.resolve(name) for name in install.profiles},
        profile_for=dict(install.profile_for),
    )


def merge_tables(repo: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side ``[install]`` config over the repository's: server keys win, ``env``,
    ``profile_for`` and each profile are merged key by key."""
    out = dict(repo)
    for key, value in server.items():
        if key in ("command", "commands"):  # either spelling replaces the other
            out.pop("commands" if key == "command" else "command", None)
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


__all__ = ["DEFAULT_PROFILE", "BuildRecipe", "RecipeSet", "merge_tables", "recipe_set"]
