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

    [thresholds.suites]        # per suite, over the repository's value
    decode = 0.03

    [[thresholds.cases]]       # per case pattern, first match wins, over both
    kernel = "attention*"      # fnmatch on the kernel name
    params = "*seq=128*"       # fnmatch on the case label ("dtype=float16, seq=128")
    regression = 0.10

A bad file becomes a ConfigError with the parser's message, never a crash.
Commands are argument lists: no shell ever sees them.
"""

from __future__ import annotations

import fnmatch
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
class CaseThreshold:
    """A threshold for the cases whose kernel and label match these fnmatch patterns."""

    regression: float
    kernel: str = "*"
    params: str = "*"

    def matches(self, kernel: str, label: str) -> bool:
        return fnmatch.fnmatchcase(kernel, self.kernel) and fnmatch.fnmatchcase(label, self.params)


@dataclass(frozen=True)
class Thresholds:
    """Regression thresholds: per case pattern, then per suite, then the default."""

    default: float
    suites: dict[str, float] = field(default_factory=dict)
    cases: tuple[CaseThreshold, ...] = ()

    def for_case(self, suite: str, kernel: str, label: str) -> float:
        for rule in self.cases:
            if rule.matches(kernel, label):
                return rule.regression
        return self.suites.get(suite, self.default)

    def smallest(self) -> float:
        """The most sensitive threshold: what a paired measurement must resolve."""
        return min([self.default, *self.suites.values(), *(c.regression for c in self.cases)])

    def to_options(self) -> dict[str, Any]:
        return {
            "suites": dict(self.suites),
            "cases": [
                {"kernel": c.kernel, "params": c.params, "regression": c.regression}
                for c in self.cases
            ],
        }

    @classmethod
    def from_options(cls, default: float, data: dict[str, Any] | None) -> Thresholds:
        data = data or {}
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
        )


@dataclass(frozen=True)
class RepoConfig:
    library_name: str | None = None
    module: str | None = None
    install: InstallRecipe = field(default_factory=InstallRecipe)
    suites: tuple[str, ...] = ("basic",)
    regression_threshold: float | None = None
    confidence: float | None = None
    suite_thresholds: dict[str, float] = field(default_factory=dict)
    case_thresholds: tuple[CaseThreshold, ...] = ()


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
    if threshold is not None:
        _fraction(threshold, "thresholds.regression")
    unknown = set(thr) - {"regression", "confidence", "suites", "cases"}
    if unknown:
        raise ValueError(f"[thresholds]: unknown keys {sorted(unknown)}")
    per_suite = _table(thr, "suites")
    suite_thresholds = {
        str(k): _fraction(v, f"thresholds.suites.{k}") for k, v in per_suite.items()
    }
    rules = thr.get("cases", [])
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise ValueError("thresholds.cases must be an array of tables ([[thresholds.cases]])")
    case_thresholds = []
    for i, rule in enumerate(rules):
        extra = set(rule) - {"kernel", "params", "regression"}
        if extra or "regression" not in rule:
            raise ValueError(
                f"thresholds.cases[{i}] takes kernel, params (fnmatch patterns) and regression"
            )
        case_thresholds.append(
            CaseThreshold(
                regression=_fraction(rule["regression"], f"thresholds.cases[{i}].regression"),
                kernel=str(rule.get("kernel", "*")),
                params=str(rule.get("params", "*")),
            )
        )
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
        suite_thresholds=suite_thresholds,
        case_thresholds=tuple(case_thresholds),
    )


def _fraction(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 10:
        raise ValueError(f"{where} must be a positive fraction such as 0.05, not {value!r}")
    return float(value)


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"[{key}] must be a table")
    return value
