"""The shape of ``.kernelwatch.toml``: one pydantic model per table, nothing unknown allowed.

The file used to be read by three parsers with two types for ``[install]``, and
tables they did not know were ignored: ``[suite]`` instead of ``[suites]`` ran the
default suite and went green. Here every table forbids keys it does not define,
and ``[install]`` has one type, :class:`InstallRecipe`, that is both what the file
says and, once a build profile is laid over it (:meth:`InstallRecipe.resolve`),
what the worker builds.

Validators raise ``PydanticCustomError(OWN_ERROR, "{why}", {"why": ..., "key": ...})``
whose ``why`` reads after the key ("must be ...") and may say ``{table}`` for the
table being validated; :mod:`kernelwatch.jobs.library.repoconfig` prefixes the key
and the file name. What this module does not do: read files or TOML
(``repoconfig.py``), pick a profile for a run or merge server overrides
(``worker/recipes.py``), build anything.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Annotated, Any, ClassVar, Literal, NoReturn, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictStr,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from kernelwatch.jobs.library import recipe_env
from kernelwatch.kernels.catalog import is_suite_name, unknown_kernels

Recipe = Literal["pip", "pythonpath", "command"]
RECIPES: tuple[str, ...] = get_args(Recipe)
DEFAULT_PROFILE = "default"
OWN_ERROR = "kw"  # the error type of our own validators (the reader formats it)
FROM_FILE = "from_file"  # validation context key: the data is the file's, not ours
_PROFILE_NAME = re.compile(r"^[A-Za-z][\w-]*$")
_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def shown(value: Any) -> str:
    """A value as the error message quotes it (TOML-ish, short)."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def fail(why: str, key: str = "") -> NoReturn:
    """Reject a value; ``key``: the sub-key it concerns, relative to where we validate."""
    raise PydanticCustomError(OWN_ERROR, "{why}", {"why": why, "key": key})


# ----------------------------------------------------------------------------- value types


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        fail(f"must be a number, got {shown(value)}")
    return float(value)


def _fraction(value: Any) -> float:
    v = _number(value)
    if not 0 < v < 10:
        fail(f"must be a positive fraction such as 0.05, got {shown(value)}")
    return v


def _confidence(value: Any) -> float:
    v = _number(value)
    if not 0.5 <= v < 1:
        fail(f"must lie in [0.5, 1), got {shown(value)}")
    return v


def _timeout(value: Any) -> float:
    v = _number(value)
    if not 0 < v <= 86400:
        fail(f"must be positive seconds (at most a day), got {shown(value)}")
    return v


def _recipe_kind(value: Any) -> str:
    if value not in RECIPES:
        fail(f"{shown(value)} is not one of {', '.join(RECIPES)}")
    return str(value)


def _module(value: Any) -> str:
    if not isinstance(value, str) or not _MODULE_NAME.match(value):
        fail(f"is not a module name such as tinykern or flash_attn.ops, got {shown(value)}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        fail(f"must be a non-empty list of names, got {shown(value)}")
    if not all(isinstance(v, str) and v for v in value):
        fail(f"must be a list of non-empty strings, got {shown(value)}")
    return tuple(value)


def _suite_name(value: Any) -> str:
    # The API process looks a name up among the built-in grid files: a path here read
    # any *.toml on the host into the push's error (found by an audit, 2026-12-05).
    if not isinstance(value, str) or not is_suite_name(value):
        fail(
            "must be a suite name such as basic or mylib-gemm (letters, digits, _ and -, "
            f"not starting with _ or -), got {shown(value)}"
        )
    return value


def _argv(value: Any) -> tuple[str, ...]:
    if (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(a, str) for a in value)
    ):
        fail(f"must be a non-empty list of strings (an argv, no shell line), got {shown(value)}")
    return tuple(value)


def _commands(value: Any) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list | tuple):  # empty: none (recipe "command" needs some)
        fail(f"must be a list of argument lists, got {shown(value)}")
    return tuple(value)  # each item is checked as an Argv, with its index in the key


def _relpath(value: Any) -> str:
    if not isinstance(value, str):
        fail(f"must be a string path, got {shown(value)}")
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or value.startswith("-"):
        fail(f"must be a relative path inside the checkout, got {shown(value)}")
    return "" if str(path) == "." else str(path)


def _submodule_path(value: Any) -> str:
    path = _relpath(value)
    if not path:  # "" or ".": git refuses an empty pathspec, and "." is the checkout
        fail(f"must name a submodule's folder, not the checkout itself, got {shown(value)}")
    return path


def _relglob(value: Any) -> str:
    if not isinstance(value, str) or not value:
        fail(f"must be a glob pattern string, got {shown(value)}")
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or value.startswith("-"):
        fail(f"must be a relative pattern inside the checkout, got {shown(value)}")
    return str(path)


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        fail(f"must be a table of strings, got {shown(value)}")
    for k, v in value.items():
        if not recipe_env.VARIABLE.match(str(k)):
            fail(recipe_env.NOT_A_NAME, key=str(k))
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            fail(f"must be a string (quote it), got {shown(v)}", key=str(k))
        problem = recipe_env.static_problem(str(k), str(v))  # the worker checks the rest
        if problem:
            fail(problem, key=str(k))
    return {str(k): str(v) for k, v in value.items()}


Fraction = Annotated[float, BeforeValidator(_fraction)]
Confidence = Annotated[float, BeforeValidator(_confidence)]
Timeout = Annotated[float, BeforeValidator(_timeout)]
RecipeKind = Annotated[Recipe, BeforeValidator(_recipe_kind)]
ModuleName = Annotated[str, BeforeValidator(_module)]
Names = Annotated[tuple[str, ...], BeforeValidator(_names)]
SuiteName = Annotated[str, BeforeValidator(_suite_name)]
SuiteNames = Annotated[tuple[SuiteName, ...], BeforeValidator(_names)]
Argv = Annotated[tuple[str, ...], BeforeValidator(_argv)]
Commands = Annotated[tuple[Argv, ...], BeforeValidator(_commands)]
RelPath = Annotated[str, BeforeValidator(_relpath)]
SubmodulePath = Annotated[str, BeforeValidator(_submodule_path)]
RelGlob = Annotated[str, BeforeValidator(_relglob)]
Env = Annotated[dict[str, str], BeforeValidator(_env)]


class Table(BaseModel):
    """A TOML table: frozen, and a key it does not define is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Keys the file may use that are folded into a field (``command`` → ``commands``),
    # and fields the file may not set (chosen by the service): for error messages.
    FOLDED_KEYS: ClassVar[dict[str, str]] = {}
    NOT_IN_FILE: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def file_keys(cls) -> list[str]:
        """The keys this table takes in the file, in field order."""
        keys: list[str] = []
        for name in cls.model_fields:
            keys += [k for k, into in cls.FOLDED_KEYS.items() if into == name]
            if name not in cls.NOT_IN_FILE:
                keys.append(name)
        return keys


# ----------------------------------------------------------------------------- [library]


class Library(Table):
    """``[library]``: the library's name (its series) and the module exposing its kernels."""

    name: StrictStr | None = None
    module: ModuleName | None = None


# ----------------------------------------------------------------------------- [install]


def _one_command_form(data: Any) -> Any:
    """``command = [argv]`` is the one-command spelling of ``commands = [[argv]]``."""
    if not isinstance(data, dict) or "command" not in data:
        return data
    if "commands" in data:
        fail("and {table}.commands are both given: one argv or a list of them, not both", "command")
    out = {k: v for k, v in data.items() if k != "command"}
    out["commands"] = [_argv_at(data["command"], "command")]
    return out


def _argv_at(value: Any, key: str) -> tuple[str, ...]:
    try:
        return _argv(value)
    except PydanticCustomError as exc:
        fail(str(exc.context["why"]) if exc.context else str(exc), key=key)


class StubSources(Table):
    """``stub_sources``: a build step that compiles only the kernels a suite needs.

    For libraries that put one template instantiation per ``.cu`` file and list them
    all in their build script (FlashAttention-2's ``csrc/flash_attn/src/flash_*_sm80.cu``):
    every file matching ``files`` but none of ``keep`` is replaced, before the
    commands run, by a stub that defines the same specialisation and throws when
    called (``worker/stubs.py``), so the extension still links and imports, and only
    the kept kernels cost compile time. Patterns are globs relative to the checkout.
    """

    files: tuple[RelGlob, ...]
    keep: tuple[RelGlob, ...] = ()

    @model_validator(mode="after")
    def _some_files(self) -> StubSources:
        if not self.files:
            fail("must name at least one pattern", key="files")
        return self


class InstallProfile(Table):
    """``[install.profiles.<name>]``: keys that replace ``[install]``'s; ``env`` merges over it."""

    FOLDED_KEYS = {"command": "commands"}

    recipe: RecipeKind | None = None
    commands: Commands | None = None
    cwd: RelPath | None = None
    subdirectory: RelPath | None = None
    pythonpath: tuple[RelPath, ...] | None = None
    submodules: tuple[SubmodulePath, ...] | None = None
    env: Env | None = None
    timeout_s: Timeout | None = None
    stub_sources: StubSources | None = None

    @model_validator(mode="before")
    @classmethod
    def _file_form(cls, data: Any) -> Any:
        return _one_command_form(data)


class InstallRecipe(Table):
    """``[install]``: how to install or build the library at a commit, and its profiles.

    ``recipe``: ``pip`` (``pip install --no-deps --target ENV`` of the checkout, or of
    ``subdirectory``), ``pythonpath`` (import from the checkout) or ``command``
    (``commands``: argument lists run in ``cwd``, ``{python}`` the environment's
    interpreter; ``pythonpath``: what the suite runner imports from). ``submodules``
    are fetched through the server's mirrors first. ``env`` reaches the build and the
    suite runner. ``profiles`` are named variants (``trimmed`` for PR gates, ``full``
    nightly) and ``profile_for`` maps a run's trigger to one. ``stub_sources``
    (:class:`StubSources`) leaves kernels out of a build. ``profile`` is not a key
    of the file: it names the profile a resolved recipe was built from.
    """

    FOLDED_KEYS = {"command": "commands"}
    NOT_IN_FILE = ("profile",)

    recipe: RecipeKind = "pip"
    commands: Commands = ()
    cwd: RelPath = ""
    subdirectory: RelPath = ""
    pythonpath: tuple[RelPath, ...] = ()
    submodules: tuple[SubmodulePath, ...] = ()
    # What decides the build and what runs: a commit that changes none of these paths
    # (files, folders or submodules) builds the same library as its parent, so a
    # bisection never builds or blames it (``jobs/planning/bisect.py:distinct_builds``).
    inputs: tuple[RelPath, ...] = ()
    env: Env = Field(default_factory=dict)
    timeout_s: Timeout | None = Field(
        default=None,
        description="the build's time limit in seconds; the server's KW_INSTALL_TIMEOUT_S "
        "caps it (a recipe may shorten the server's limit, never lengthen it)",
    )
    stub_sources: StubSources | None = None
    profile_for: dict[str, StrictStr] = Field(default_factory=dict)
    profiles: dict[str, InstallProfile] = Field(default_factory=dict)
    profile: str = DEFAULT_PROFILE

    @model_validator(mode="before")
    @classmethod
    def _file_form(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and "profile" in data and (info.context or {}).get(FROM_FILE):
            is_table = isinstance(data["profile"], dict)
            raise PydanticCustomError(
                OWN_ERROR, "unknown", {"unknown": "profile", "table": is_table}
            )
        return _one_command_form(data)

    @model_validator(mode="after")
    def _consistent(self) -> InstallRecipe:
        for name, prof in self.profiles.items():
            if not _PROFILE_NAME.match(name) or name == DEFAULT_PROFILE:
                fail(
                    f"needs a plain name (letters, digits, _ and -) other than {DEFAULT_PROFILE!r}",
                    key=f"profiles.{name}",
                )
            commands = self.commands if prof.commands is None else prof.commands
            self._needs_commands(prof.recipe or self.recipe, commands, name)
        self._needs_commands(self.recipe, self.commands, "")
        known = [DEFAULT_PROFILE, *self.profiles]
        for trigger, name in self.profile_for.items():
            if name not in known:
                fail(
                    f"names unknown profile {shown(name)}; known: {', '.join(known)}",
                    key=f"profile_for.{trigger}",
                )
        return self

    @staticmethod
    def _needs_commands(recipe: str, commands: tuple[Any, ...], profile: str) -> None:
        if recipe == "command" and not commands:
            table = f"profiles.{profile}" if profile else ""
            where = "{table}" + (f".{table}" if table else "")
            key = f"{table}.recipe" if table else "recipe"
            fail(f'= "command" needs {where}.command or {where}.commands', key=key)

    def resolve(self, name: str = DEFAULT_PROFILE) -> InstallRecipe:
        """This recipe with profile ``name`` laid over it: what one build runs.

        Keys the profile sets replace this recipe's, ``env`` is merged key by key.
        The result has no profiles left and says which one it is (``profile``).
        Raises ``KeyError`` for a profile the file does not define.
        """
        base = self.model_dump(exclude={"profiles", "profile_for", "profile"})
        if name != DEFAULT_PROFILE:
            prof = self.profiles[name]
            base.update({k: getattr(prof, k) for k in prof.model_fields_set})
            if prof.env is not None:
                base["env"] = {**self.env, **prof.env}
        return InstallRecipe.model_validate({**base, "profile": name})

    def file_table(self) -> dict[str, Any]:
        """The keys the file set, as a plain table (for merging server overrides over it)."""
        return self.model_dump(exclude_unset=True, exclude={"profile"})

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
        ] + (  # only when set, so the keys of every other recipe stay what they were
            [["stub_sources", list(self.stub_sources.files), list(self.stub_sources.keep)]]
            if self.stub_sources is not None
            else []
        )


# ----------------------------------------------------------------------------- [gpus], [suites]


class Gpus(Table):
    """``[gpus]``: the GPU classes the repository asks for (the server runs those it offers)."""

    classes: Names | None = None

    def pick(self, offered: Sequence[str]) -> list[str]:
        """The asked-for classes the server offers; all it offers if none (or none asked)."""
        wanted = [c for c in self.classes or () if c in offered]
        return wanted or list(offered)


class Suites(Table):
    """``[suites]``: which suites to run and, for a library that has only some of their
    kernels, which kernels (every case of other kernels is left out, not an error)."""

    names: SuiteNames = ("basic",)
    kernels: Names | None = None

    @model_validator(mode="after")
    def _known_kernels(self) -> Suites:
        # Checked where the file is read (the API process plans from it), so a typo is
        # the push's config error, not an error on every commit the worker measures.
        why = unknown_kernels(self.names, self.kernels or ())
        if why:
            fail(why, key="kernels")
        return self


# ----------------------------------------------------------------------------- [thresholds]


class CaseThreshold(Table):
    """A threshold for the cases whose kernel and label match these fnmatch patterns."""

    kernel: StrictStr = "*"
    params: StrictStr = "*"
    regression: Fraction

    def matches(self, kernel: str, label: str) -> bool:
        return fnmatch.fnmatchcase(kernel, self.kernel) and fnmatch.fnmatchcase(label, self.params)


class ThresholdTable(Table):
    """``[thresholds]``: the repository's minimum effect and confidence, per suite
    (``[thresholds.suites]``) and per case pattern (``[[thresholds.cases]]``, first match)."""

    regression: Fraction | None = None
    confidence: Confidence | None = None
    suites: dict[str, Fraction] = Field(default_factory=dict)
    cases: tuple[CaseThreshold, ...] = ()

    def overrides(self, default: float) -> Thresholds:
        """The per-suite and per-case thresholds over ``default``."""
        return Thresholds(default, dict(self.suites), self.cases)


@dataclass(frozen=True)
class Thresholds:
    """A run's regression thresholds: per case pattern, then per suite, then the default.

    Not a table of the file: what a run stores in its options (``to_options``) and
    analysis reads back (``from_options``), with the default filled in. ``tighter``: a
    second set that may only lower a case's threshold (a pull request's own file over
    its base branch's, ``jobs/planning/resolve.py``): a case gets the smaller of the two.
    """

    default: float
    suites: dict[str, float] = field(default_factory=dict)
    cases: tuple[CaseThreshold, ...] = ()
    tighter: Thresholds | None = None

    def for_case(self, suite: str, kernel: str, label: str) -> float:
        own = self._own(suite, kernel, label)
        if self.tighter is None:
            return own
        return min(own, self.tighter.for_case(suite, kernel, label))

    def _own(self, suite: str, kernel: str, label: str) -> float:
        for rule in self.cases:
            if rule.matches(kernel, label):
                return rule.regression
        return self.suites.get(suite, self.default)

    def smallest(self) -> float:
        """The most sensitive threshold: what a paired measurement must resolve."""
        own = min([self.default, *self.suites.values(), *(c.regression for c in self.cases)])
        return own if self.tighter is None else min(own, self.tighter.smallest())

    def to_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "suites": dict(self.suites),
            "cases": [
                {"kernel": c.kernel, "params": c.params, "regression": c.regression}
                for c in self.cases
            ],
        }
        if self.tighter is not None:
            out["tighter"] = {"default": self.tighter.default, **self.tighter.to_options()}
        return out

    @classmethod
    def from_options(cls, default: float, data: dict[str, Any] | None) -> Thresholds:
        data = data or {}
        tighter = data.get("tighter")
        return cls(
            default=default,
            suites={str(k): float(v) for k, v in (data.get("suites") or {}).items()},
            cases=tuple(
                CaseThreshold(
                    regression=float(c["regression"]),
                    kernel=str(c.get("kernel", "*")),
                    params=str(c.get("params", "*")),
                )
                for c in data.get("cases") or []
            ),
            tighter=(
                cls.from_options(float(tighter.get("default", default)), tighter)
                if isinstance(tighter, dict)
                else None
            ),
        )


# ----------------------------------------------------------------------------- [gate]


class Gate(Table):
    """``[gate]``: what a gated (paired) run of this repository may spend.

    gpu_budget: GPU wall seconds for the whole run, side start-up included
    (``bench-paired --gpu-budget``): the cases it leaves unmeasured end inconclusive and
    the run neutral, never a pass. A pull request's own value is ignored: its base
    branch's file sets what a PR may spend (a smaller budget would turn cases it could
    not afford into neutral, which ``KW_INCONCLUSIVE_POLICY=pass`` lets through).
    """

    gpu_budget: Timeout | None = None


# ----------------------------------------------------------------------------- the file


class RepoConfig(Table):
    """The whole ``.kernelwatch.toml``; a repository without one gets these defaults."""

    library: Library = Field(default_factory=Library)
    install: InstallRecipe = Field(default_factory=InstallRecipe)
    gpus: Gpus = Field(default_factory=Gpus)
    suites: Suites = Field(default_factory=Suites)
    thresholds: ThresholdTable = Field(default_factory=ThresholdTable)
    gate: Gate = Field(default_factory=Gate)
