"""One resolved configuration per run, made at planning and stored on the run.

The planner reads ``.kernelwatch.toml`` (through its one reader, ``repoconfig.read_at``)
once at each commit it plans (and, for a pull request, at its merge-base), decides
everything the file decides for the run, and stores it as the run's snapshot
(``RunOptions.config``, ``Run.suites`` and the threshold options). The worker then
executes that snapshot and never reads the file again, so the suites stored on a run
are the suites measured, whatever ``push_mode`` planned, and a bad file is refused by
the API or ``kernelwatch run`` before anything is queued.

What is decided here:

- suites: the run's own (``--suite``, a watched repository's ``suites``), else the file's;
- kernels: ``[suites] kernels`` as selectors, unless the run picks kernels itself; a
  run's ``--case`` narrows within them (a library's file names the kernels it has: a
  pattern such as ``*dtype=bfloat16*`` must not reach a suite's other kernels, which
  the library's adapter lacks, as an ``error`` each);
- library module and name; the install recipe of the commit and, for a paired run, of
  its baseline commit (each side builds as its own commit says);
- thresholds and confidence: the run's own values win, the file's fill the rest.

A pull request is judged by its base branch's rules (issue 24): its thresholds,
suites, kernels and library come from the baseline (merge-base) commit's file, and its
own file may only tighten them: a lower threshold or confidence, more suites, more
kernels. Anything looser is ignored and noted (``ConfigNote.loosened``); the PR
comment says what was ignored. Only how the candidate installs comes from its own file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.db.run_options import ConfigNote, RunOptions
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.library.config_model import RepoConfig, Thresholds
from kernelwatch.jobs.library.mirror import Mirror
from kernelwatch.jobs.library.served import served_file

# Runner options with which a run picks its own kernels or cases.
SELECTORS = ("--kernel", "--case")


@dataclass
class Configs:
    """The ``.kernelwatch.toml`` of a repository's commits, each read once per planning.

    ``served``: the service-side files (``KW_REPO_CONFIGS``); a mapped source's file
    stands in for the repository's at every commit (``repoconfig.read_at``).
    """

    mirror: Mirror
    served: Mapping[str, Path] | None = None
    _seen: dict[str, RepoConfig] = field(default_factory=dict)

    def at(self, sha: str) -> RepoConfig:
        """The configuration of ``sha``; a bad file raises ``ConfigError`` naming it."""
        if sha not in self._seen:
            try:
                self._seen[sha] = repoconfig.read_at(self.mirror, sha, self.served)
            except ConfigError as exc:
                raise ConfigError(f"{exc} (at commit {sha[:12]})") from exc
        return self._seen[sha]

    def served_path(self) -> Path | None:
        return served_file(self.mirror.source, self.served)


@dataclass(frozen=True)
class Resolved:
    """A run's snapshot: the suites it measures and its options with the decisions in."""

    suites: list[str]
    options: RunOptions


@dataclass(frozen=True)
class Rules:
    """What judges a run and what it measures, from one file or a base and its PR."""

    suites: tuple[str, ...]
    kernels: tuple[str, ...] | None
    regression: float | None
    confidence: float | None
    thresholds: Thresholds | None  # per suite and case pattern; None: the file has none
    module: str | None
    library: str | None
    loosened: tuple[str, ...] = ()
    gpu_budget: float | None = None


def resolve(
    configs: Configs,
    sha: str,
    options: RunOptions,
    suites: Sequence[str],
    *,
    baseline: str | None = None,
    base_rules: bool = False,
    default_threshold: float,
    default_confidence: float,
) -> Resolved:
    """The snapshot of a run of ``sha`` asked for with ``options`` and ``suites``.

    ``baseline``: the commit it is compared with; ``base_rules``: a pull request, judged
    by the baseline's file (its own may only tighten it); the defaults: the service's
    minimum effect and confidence (what a file that says nothing means).
    """
    own = configs.at(sha)
    if base_rules and baseline:
        rules = tightened(configs.at(baseline), own, default_threshold, default_confidence)
    else:
        rules = _rules(own)
    measured = list(suites) if options.suites_explicit else list(rules.suites)
    picks_own = "--kernel" in options.bench_args
    baseline_install = _table(configs.at(baseline).install) if options.paired and baseline else None
    served = configs.served_path()
    note = ConfigNote(
        module=rules.module,
        library=rules.library,
        suites=measured,
        kernels=list(rules.kernels) if rules.kernels and not picks_own else None,
        recipe=own.install.recipe,
        install=_table(own.install),
        baseline_install=baseline_install,
        served=str(served) if served is not None else None,
        loosened=list(rules.loosened),
        resolved=True,
        gpu_budget_s=rules.gpu_budget,
    )
    changes: dict[str, Any] = {"config": note}
    # the run's own values win; the file's fill what the run left unset
    if rules.regression is not None and options.regression_threshold is None:
        changes["regression_threshold"] = rules.regression
    if rules.confidence is not None and options.confidence is None:
        changes["confidence"] = rules.confidence
    if rules.thresholds is not None:
        changes["thresholds"] = rules.thresholds.to_options()
    return Resolved(measured, options.with_(**changes))


def _rules(config: RepoConfig) -> Rules:
    table = config.thresholds
    per_case = table.overrides(0.0) if (table.suites or table.cases) else None
    return Rules(
        suites=tuple(config.suites.names),
        kernels=config.suites.kernels,
        regression=table.regression,
        confidence=table.confidence,
        thresholds=per_case,
        module=config.library.module,
        library=config.library.name,
        gpu_budget=config.gate.gpu_budget,
    )


def tightened(
    base: RepoConfig, pr: RepoConfig, default_threshold: float, default_confidence: float
) -> Rules:
    """The base branch's rules, tightened (never loosened) by a pull request's own file.

    Every case is judged at the smaller of the two files' thresholds for it (the PR's
    thresholds are kept beside the base's, ``Thresholds.tighter``); the confidence is
    the lower one; suites and kernels are the union. What the PR's file loosens is
    listed in ``loosened``, one line each, and has no effect.
    """
    b, p = base.thresholds, pr.thresholds
    loosened: list[str] = []
    base_default = b.regression if b.regression is not None else default_threshold
    regression = b.regression
    if p.regression is not None:
        if p.regression > base_default:
            loosened.append(_looser("thresholds.regression", p.regression, base_default))
        else:
            regression = p.regression
    base_conf = b.confidence if b.confidence is not None else default_confidence
    confidence = b.confidence
    if p.confidence is not None:
        if p.confidence > base_conf:
            loosened.append(_looser("thresholds.confidence", p.confidence, base_conf))
        else:
            confidence = p.confidence
    base_rules = b.overrides(base_default)
    for suite, value in p.suites.items():
        if value > base_rules.suites.get(suite, base_default):
            loosened.append(
                _looser(
                    f"thresholds.suites.{suite}", value, base_rules.suites.get(suite, base_default)
                )
            )
    for i, rule in enumerate(p.cases):
        same = next(
            (c for c in b.cases if (c.kernel, c.params) == (rule.kernel, rule.params)), None
        )
        limit = same.regression if same is not None else base_default
        if rule.regression > limit:
            loosened.append(_looser(f"thresholds.cases[{i}].regression", rule.regression, limit))
    pr_rules = Thresholds(
        min(p.regression if p.regression is not None else base_default, base_default),
        dict(p.suites),
        tuple(p.cases),
    )
    per_case = Thresholds(base_default, dict(b.suites), tuple(b.cases), tighter=pr_rules)
    suites = tuple(dict.fromkeys([*base.suites.names, *pr.suites.names]))
    dropped = [s for s in base.suites.names if s not in pr.suites.names]
    if dropped:
        loosened.append(
            f"suites.names leaves out {', '.join(dropped)}: the base branch's suites are "
            "measured all the same"
        )
    kernels = _kernels(base.suites.kernels, pr.suites.kernels, loosened)
    module, library = base.library.module, base.library.name
    if pr.library.module is not None and pr.library.module != module:
        if module is None:
            module = pr.library.module
        else:
            loosened.append(
                f"library.module = {pr.library.module!r} differs from the base branch's "
                f"{module!r}: the base branch's module is measured"
            )
    if library is None:
        library = pr.library.name
    budget = base.gate.gpu_budget
    if pr.gate.gpu_budget is not None and pr.gate.gpu_budget != budget:
        loosened.append(
            f"gate.gpu_budget = {pr.gate.gpu_budget:g}: a pull request spends what its base "
            f"branch allows ({'the service default' if budget is None else f'{budget:g} s'})"
        )
    return Rules(
        suites=suites,
        kernels=kernels,
        regression=regression,
        confidence=confidence,
        thresholds=per_case
        if (b.suites or b.cases or p.suites or p.cases or p.regression is not None)
        else None,  # fmt: skip
        module=module,
        library=library,
        loosened=tuple(loosened),
        gpu_budget=budget,
    )


def _kernels(
    base: tuple[str, ...] | None, pr: tuple[str, ...] | None, loosened: list[str]
) -> tuple[str, ...] | None:
    """More kernels, never fewer: None (every kernel) wins; two lists are joined."""
    if base is None:
        if pr is not None:
            loosened.append(
                "suites.kernels keeps only " + ", ".join(pr) + ": every kernel is measured, "
                "as on the base branch"
            )
        return None
    if pr is None:
        return None
    missing = [k for k in base if k not in pr]
    if missing:
        loosened.append(
            f"suites.kernels leaves out {', '.join(missing)}: the base branch's kernels are "
            "measured all the same"
        )
    return tuple(dict.fromkeys([*base, *pr]))


def _looser(key: str, value: float, limit: float) -> str:
    return (
        f"{key} = {value:g} is looser than the base branch's {limit:g}: ignored "
        "(a pull request may only tighten its base branch's rules)"
    )


def _table(install: repoconfig.InstallRecipe) -> dict[str, Any]:
    """An ``[install]`` table as stored: what the file set, not the resolved profile name.

    Only the keys that were set: a profile's unset keys dumped as null would come back
    as set, and laying the profile over the recipe (``InstallRecipe.resolve``) would
    then replace the recipe's values with nulls.
    """
    return install.model_dump(mode="json", exclude_unset=True, exclude={"profile"})


def install_of(table: Mapping[str, Any] | None) -> repoconfig.InstallRecipe:
    """The stored ``[install]`` table back as the recipe the worker builds."""
    return repoconfig.InstallRecipe.model_validate(dict(table or {}))


__all__ = ["SELECTORS", "Configs", "Resolved", "Rules", "install_of", "resolve", "tightened"]
