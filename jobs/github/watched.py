"""Server-side configuration of the GitHub repositories kernelwatch watches.

Which repositories, where their code is fetched from, their webhook secrets, the
branches that trigger runs and the GPU classes they run on are decided by whoever
runs kernelwatch, never by a webhook payload. The file is TOML, named by the
environment variable ``KW_REPOS_FILE`` (or handed to ``create_app`` directly)::

    [defaults]
    branches = ["main"]            # pushes to these (fnmatch patterns) are measured,
                                   # pull requests into them are gated
    device_classes = ["h100"]      # one run and one commit status per class
    push_mode = "head"             # "head": the pushed head only; "each": every commit
    max_commits_per_push = 20
    approval_label = "kernelwatch:run"
    skip_drafts = true

    [repos."flashinfer-ai/flashinfer"]
    source = "https://github.com/flashinfer-ai/flashinfer.git"  # URL or local path
    secret_env = "FLASHINFER_WEBHOOK_SECRET"   # or secret = "..." (else the global one)
    branches = ["main", "release/*"]
    device_classes = ["h100", "b200"]
    allow_users = ["trusted-fork-author"]      # their fork PRs run without the label
    bench_args = ["--budget", "0.5"]           # extra suite runner arguments
    schedule = "02:00"             # also measure the branch below daily at 02:00 UTC
    schedule_branch = "main"       # (default: the first of branches without a wildcard)

A repository without its own secret is verified with the global webhook secret.
The ``[watch]`` table of the same file (package releases, the cards' self-test) is read
by :mod:`kernelwatch.jobs.planning.schedule`, which also checks ``schedule``.
What this module does not do: read ``.kernelwatch.toml`` (that is the library's own
file, read at the commit under test by the webhook layer and the worker).
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.github.client import check_full_name

PUSH_MODES = ("head", "each")
REPOS_FILE_ENV = "KW_REPOS_FILE"
_CLASS = re.compile(r"^[a-z0-9][a-z0-9_-]{0,30}$")


@dataclass(frozen=True)
class WatchedRepo:
    full_name: str
    source: str
    secret: str | None = None
    branches: tuple[str, ...] = ("main",)
    device_classes: tuple[str, ...] = ("cpu",)
    push_mode: str = "head"
    max_commits_per_push: int = 20
    approval_label: str = "kernelwatch:run"
    allow_users: frozenset[str] = frozenset()
    skip_drafts: bool = True
    suites: tuple[str, ...] | None = None  # None: what .kernelwatch.toml says
    bench_args: tuple[str, ...] = ()
    case_timeout_s: float | None = None
    # "paired": a PR's head and merge-base measured interleaved on one GPU in one run
    # (kernels/paired_suite.py); "separate": two runs compared afterwards.
    pr_mode: str = "paired"
    # Scheduled runs of the branch (``kernelwatch beat``): "HH:MM" (UTC) or a cron line;
    # "" for none. The branch defaults to the first entry of ``branches`` without a wildcard.
    schedule: str = ""
    schedule_branch: str | None = None

    @property
    def scheduled_branch(self) -> str:
        """The branch a scheduled run measures."""
        if self.schedule_branch:
            return self.schedule_branch
        plain = [b for b in self.branches if not any(c in b for c in "*?[")]
        return plain[0] if plain else "main"

    def watches_branch(self, branch: str) -> bool:
        return any(fnmatch.fnmatchcase(branch, pattern) for pattern in self.branches)

    def run_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if self.bench_args:
            opts["bench_args"] = list(self.bench_args)
        if self.case_timeout_s is not None:
            opts["case_timeout_s"] = self.case_timeout_s
        if self.suites is not None:
            opts["suites_explicit"] = True
        return opts


_KEYS = {
    "source",
    "secret",
    "secret_env",
    "branches",
    "device_classes",
    "push_mode",
    "max_commits_per_push",
    "approval_label",
    "allow_users",
    "skip_drafts",
    "suites",
    "bench_args",
    "case_timeout_s",
    "pr_mode",
    "schedule",
    "schedule_branch",
}
PR_MODES = ("paired", "separate")


def read_repos_file(path: Path | str) -> dict[str, Any]:
    """The repositories file as TOML data; ConfigError names the file and the problem."""
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"repositories file {path}: {exc}") from exc


def load_repos_file(path: Path | str) -> dict[str, WatchedRepo]:
    """Parse the repositories file; ConfigError names the file and the problem."""
    data = read_repos_file(path)
    try:
        return parse_repos(data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"repositories file {path}: {exc}") from exc


def repos_from_env() -> dict[str, WatchedRepo]:
    path = os.environ.get(REPOS_FILE_ENV)
    return load_repos_file(path) if path else {}


def parse_repos(data: Mapping[str, Any]) -> dict[str, WatchedRepo]:
    unknown = set(data) - {"defaults", "repos", "watch"}  # [watch]: jobs/planning/schedule.py
    if unknown:
        raise ValueError(f"unknown top-level keys: {sorted(unknown)}")
    defaults = data.get("defaults", {})
    repos = data.get("repos", {})
    if not isinstance(defaults, dict) or not isinstance(repos, dict):
        raise ValueError("[defaults] and [repos.*] must be tables")
    out = {}
    for full_name, table in repos.items():
        if not isinstance(table, dict):
            raise ValueError(f"[repos.{full_name!r}] must be a table")
        out[full_name] = watched_repo(full_name, {**defaults, **table})
    return out


def watched_repo(full_name: str, table: Mapping[str, Any]) -> WatchedRepo:
    """One repository's entry, validated."""
    try:
        check_full_name(full_name)
    except Exception as exc:
        raise ValueError(str(exc)) from None
    unknown = set(table) - _KEYS
    if unknown:
        raise ValueError(f"{full_name}: unknown keys {sorted(unknown)}")
    source = table.get("source")
    if not isinstance(source, str) or not source:
        raise ValueError(f"{full_name}: source (URL or path of the git repository) is required")
    secret = table.get("secret")
    if "secret_env" in table:
        secret = os.environ.get(str(table["secret_env"]))
        if not secret:
            raise ValueError(f"{full_name}: environment variable {table['secret_env']} is empty")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 8):
        raise ValueError(f"{full_name}: a webhook secret must be a string of 8 characters or more")
    classes = _strings(table.get("device_classes", ["cpu"]), "device_classes", full_name)
    for c in classes:
        if not _CLASS.match(c):
            raise ValueError(f"{full_name}: not a device class: {c!r}")
    mode = str(table.get("push_mode", "head"))
    if mode not in PUSH_MODES:
        raise ValueError(f"{full_name}: push_mode must be one of {PUSH_MODES}")
    max_commits = int(table.get("max_commits_per_push", 20))
    if not 1 <= max_commits <= 1000:
        raise ValueError(f"{full_name}: max_commits_per_push must lie in 1..1000")
    suites = table.get("suites")
    timeout = table.get("case_timeout_s")
    pr_mode = str(table.get("pr_mode", "paired"))
    if pr_mode not in PR_MODES:
        raise ValueError(f"{full_name}: pr_mode must be one of {PR_MODES}")
    schedule = table.get("schedule", "")
    if not isinstance(schedule, str):
        raise ValueError(f'{full_name}: schedule must be a string such as "02:00"')
    if schedule:
        from kernelwatch.jobs.planning.schedule import parse_when

        parse_when(schedule, f"{full_name}: schedule")
    branch = table.get("schedule_branch")
    if branch is not None and (not isinstance(branch, str) or not branch or branch[0] == "-"):
        raise ValueError(f"{full_name}: schedule_branch must be a branch name")
    return WatchedRepo(
        full_name=full_name,
        source=source,
        secret=secret,
        branches=_strings(table.get("branches", ["main"]), "branches", full_name),
        device_classes=classes,
        push_mode=mode,
        max_commits_per_push=max_commits,
        approval_label=str(table.get("approval_label", "kernelwatch:run")),
        allow_users=frozenset(_strings(table.get("allow_users", []), "allow_users", full_name)),
        skip_drafts=bool(table.get("skip_drafts", True)),
        suites=_strings(suites, "suites", full_name) if suites is not None else None,
        bench_args=_strings(table.get("bench_args", []), "bench_args", full_name),
        case_timeout_s=float(timeout) if timeout is not None else None,
        pr_mode=pr_mode,
        schedule=schedule,
        schedule_branch=branch,
    )


def _strings(value: Any, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: {key} must be a list of strings")
    return tuple(value)


@dataclass
class Secrets:
    """Which secrets may sign a delivery, and for which repositories.

    The signature is checked before the body is parsed, so before the repository is
    known: every distinct secret is tried (a few HMACs). After parsing, the secret that
    matched must belong to the repository the payload names.
    """

    global_secret: str | None
    per_repo: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, repos: Mapping[str, WatchedRepo], global_secret: str | None) -> Secrets:
        return cls(global_secret or None, {n: r.secret for n, r in repos.items() if r.secret})

    def candidates(self) -> list[str]:
        seen: list[str] = []
        for s in [self.global_secret, *self.per_repo.values()]:
            if s and s not in seen:
                seen.append(s)
        return seen

    def allowed_for(self, full_name: str | None) -> set[str]:
        """Secrets that may sign an event of ``full_name`` (None: no repository in it)."""
        if full_name is not None and full_name in self.per_repo:
            return {self.per_repo[full_name]}
        return {self.global_secret} if self.global_secret else set()
