"""What runs on a schedule (``kernelwatch beat``), from the server's repositories file.

Nothing ran unless someone pushed (issue 27). Three kinds of scheduled work, all
server-side configuration in the ``KW_REPOS_FILE`` file, never in a payload:

- **a watched repository's branch** at a time of day: ``schedule = "02:00"`` (UTC, or a
  five-field cron line) on the repository or in ``[defaults]``; the run's trigger is
  ``nightly`` (a history run: change points, bisection of a step, the full build
  profile), whatever the time;
- **new releases of watched packages**, polled every ``releases_every_s`` seconds and
  measured against the previous release as soon as they appear (trigger ``release``,
  ``jobs/planning/releases.py``)::

      [watch]
      releases_every_s = 900         # how often indexes and wheelhouses are read
      selftest = "04:00"             # the cards' timer self-test ("" turns it off)
      selftest_budget_s = 20

      [[watch.releases]]
      package = "flashinfer-python"
      index = "https://pypi.org/simple"   # a PEP 503/691 simple index, or instead
      # wheelhouse = "/srv/wheels"        # a directory of wheels and sdists
      suite = "decode"                    # or suites = ["decode", "prefill"]
      adapter = "flashinfer"              # the module with the suite's kernels (--impl)
      device_classes = ["h100"]           # default: [defaults] device_classes, else cpu
      kernels = ["decode_attention"]      # optional: only these kernels
      prereleases = false                 # rc/dev versions too?

- **a timer self-test of every card** once a day (``selftest``): an A/A measurement of a
  reference kernel on each live worker's GPU, its noise recorded per card
  (``worker/selftest.py``).

This module parses and validates that configuration and turns it into Celery beat
entries; what each entry does is in ``jobs/planning/scheduled.py`` and ``releases.py``,
and the Celery app of ``kernelwatch beat`` in ``jobs/planning/beat_app.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.github.watched import (
    REPOS_FILE_ENV,
    WatchedRepo,
    parse_repos,
    read_repos_file,
)
from kernelwatch.jobs.library.libspec import normalize_name

# The queue the scheduled tasks go to; only ``kernelwatch beat``'s own worker consumes it.
SCHEDULE_QUEUE = "schedule"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_CLASS = re.compile(r"^[a-z0-9][a-z0-9_-]{0,30}$")
_HHMM = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_CRON_FIELD = re.compile(r"^[0-9*/,\-a-zA-Z]+$")


@dataclass(frozen=True)
class When:
    """A time of day (or any cron line) in UTC, as Celery's ``crontab`` takes it."""

    minute: str
    hour: str
    day_of_week: str = "*"
    day_of_month: str = "*"
    month_of_year: str = "*"

    def describe(self) -> str:
        if (self.day_of_week, self.day_of_month, self.month_of_year) == ("*", "*", "*") and (
            self.minute.isdigit() and self.hour.isdigit()
        ):
            return f"daily at {int(self.hour):02d}:{int(self.minute):02d} UTC"
        return (
            f"cron {self.minute} {self.hour} {self.day_of_month} {self.month_of_year} "
            f"{self.day_of_week} (UTC)"
        )


def parse_when(text: str, where: str = "schedule") -> When:
    """``"02:00"`` or a cron line ``"30 2 * * 1-5"``; ValueError says which it expected."""
    value = text.strip()
    m = _HHMM.match(value)
    if m:
        return When(minute=str(int(m.group(2))), hour=str(int(m.group(1))))
    fields = value.split()
    if len(fields) == 5 and all(_CRON_FIELD.match(f) for f in fields):
        minute, hour, dom, month, dow = fields
        when = When(minute, hour, dow, dom, month)
        from celery.schedules import crontab

        try:  # celery's own parser is the judge of a cron line
            crontab(minute=minute, hour=hour, day_of_week=dow, day_of_month=dom,
                    month_of_year=month)  # fmt: skip
        except ValueError as exc:
            raise ValueError(f"{where}: {value!r}: {exc}") from None
        return when
    raise ValueError(
        f"{where}: {value!r} is neither HH:MM (UTC) nor a five-field cron line like '30 2 * * *'"
    )


@dataclass(frozen=True)
class ReleaseWatch:
    """One watched package: where its releases appear and how to measure them."""

    package: str
    suites: tuple[str, ...]
    adapter: str
    device_classes: tuple[str, ...] = ("cpu",)
    index: str | None = None
    wheelhouse: str | None = None
    kernels: tuple[str, ...] = ()
    bench_args: tuple[str, ...] = ()
    prereleases: bool = False

    @property
    def name(self) -> str:
        """The normalized project name (the repository the runs are filed under)."""
        return normalize_name(self.package)

    @property
    def where(self) -> str:
        return self.index or self.wheelhouse or ""


@dataclass(frozen=True)
class Watch:
    releases: tuple[ReleaseWatch, ...] = ()
    releases_every_s: float = 900.0
    selftest: When | None = field(default_factory=lambda: When("0", "4"))
    selftest_budget_s: float = 20.0


_WATCH_KEYS = {"releases", "releases_every_s", "selftest", "selftest_budget_s"}
_RELEASE_KEYS = {
    "package", "index", "wheelhouse", "suite", "suites", "adapter", "device_classes",
    "kernels", "bench_args", "prereleases",
}  # fmt: skip


def parse_watch(table: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> Watch:
    """The ``[watch]`` table; ValueError names the key that is wrong."""
    if not isinstance(table, Mapping):
        raise ValueError("[watch] must be a table")
    unknown = set(table) - _WATCH_KEYS
    if unknown:
        raise ValueError(f"[watch]: unknown keys {sorted(unknown)}")
    every = _number(table.get("releases_every_s", 900), "[watch] releases_every_s")
    if not 10 <= every <= 7 * 86400:
        raise ValueError("[watch] releases_every_s must lie between 10 s and a week")
    budget = _number(table.get("selftest_budget_s", 20), "[watch] selftest_budget_s")
    if not 1 <= budget <= 600:
        raise ValueError("[watch] selftest_budget_s must lie between 1 and 600 s")
    selftest = table.get("selftest", "04:00")
    if not isinstance(selftest, str):
        raise ValueError('[watch] selftest must be a string such as "04:00" ("" for none)')
    classes = (defaults or {}).get("device_classes", ["cpu"])
    releases = table.get("releases", [])
    if not isinstance(releases, list):
        raise ValueError("[[watch.releases]] must be an array of tables")
    return Watch(
        releases=tuple(release_watch(r, i, classes) for i, r in enumerate(releases)),
        releases_every_s=every,
        selftest=parse_when(selftest, "[watch] selftest") if selftest.strip() else None,
        selftest_budget_s=budget,
    )


def release_watch(table: Any, index: int, default_classes: Any = ("cpu",)) -> ReleaseWatch:
    """One ``[[watch.releases]]`` entry, validated (its values reach pip and the runner)."""
    where = f"[[watch.releases]] #{index + 1}"
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = set(table) - _RELEASE_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    package = table.get("package")
    if not isinstance(package, str) or not _PACKAGE.match(package):
        raise ValueError(f"{where}: package must be a PyPI project name, got {package!r}")
    where = f"[[watch.releases]] {package}"
    index_url, wheelhouse = table.get("index"), table.get("wheelhouse")
    if (index_url is None) == (wheelhouse is None):
        raise ValueError(f"{where}: give exactly one of index (a URL) or wheelhouse (a directory)")
    if index_url is not None and (
        not isinstance(index_url, str) or not re.match(r"^(https?|file)://\S+$", index_url)
    ):
        raise ValueError(f"{where}: index must be an http(s):// or file:// URL")
    if wheelhouse is not None and (
        not isinstance(wheelhouse, str) or not Path(wheelhouse).is_absolute()
    ):
        raise ValueError(f"{where}: wheelhouse must be an absolute directory path")
    if "suite" in table and "suites" in table:
        raise ValueError(f"{where}: give suite or suites, not both")
    suites = _strings(table.get("suites", [table["suite"]] if "suite" in table else None),
                      f"{where}: suites")  # fmt: skip
    if not suites:
        raise ValueError(f'{where}: name the suite to measure (suite = "...")')
    adapter = table.get("adapter")
    if not isinstance(adapter, str) or not _MODULE.match(adapter):
        raise ValueError(f"{where}: adapter must be a module name such as 'flashinfer'")
    classes = _strings(table.get("device_classes", default_classes), f"{where}: device_classes")
    if not classes or not all(_CLASS.match(c) for c in classes):
        raise ValueError(f"{where}: device_classes must be GPU classes such as 'h100' or 'cpu'")
    kernels = _strings(table.get("kernels", []), f"{where}: kernels")
    bench_args = _strings(table.get("bench_args", []), f"{where}: bench_args")
    pre = table.get("prereleases", False)
    if not isinstance(pre, bool):
        raise ValueError(f"{where}: prereleases must be true or false")
    return ReleaseWatch(
        package=package,
        suites=suites,
        adapter=adapter,
        device_classes=classes,
        index=index_url,
        wheelhouse=wheelhouse,
        kernels=kernels,
        bench_args=bench_args,
        prereleases=pre,
    )


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where} must be a list of strings")
    return tuple(value)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number")
    return float(value)


@dataclass(frozen=True)
class ScheduleConfig:
    repos: dict[str, WatchedRepo]
    watch: Watch

    def scheduled_repos(self) -> list[WatchedRepo]:
        return [r for r in self.repos.values() if r.schedule]

    def describe(self) -> list[str]:
        """What ``kernelwatch beat`` will do, one line each."""
        lines = [
            f"{r.full_name}: {r.scheduled_branch} {parse_when(r.schedule).describe()}"
            for r in self.scheduled_repos()
        ]
        lines += [
            f"release watch {w.package} ({w.where}): every {self.watch.releases_every_s:.0f} s, "
            f"suites {', '.join(w.suites)} with {w.adapter} on {', '.join(w.device_classes)}"
            for w in self.watch.releases
        ]
        if self.watch.selftest is not None:
            lines.append(f"timer self-test of every live card: {self.watch.selftest.describe()}")
        return lines or ["nothing is scheduled (no schedule, [[watch.releases]] or selftest)"]


def parse_schedule(data: Mapping[str, Any]) -> ScheduleConfig:
    defaults = data.get("defaults", {})
    return ScheduleConfig(
        repos=parse_repos(data),
        watch=parse_watch(data.get("watch", {}), defaults if isinstance(defaults, dict) else {}),
    )


def load_schedule(path: Path | str | None = None) -> ScheduleConfig:
    """The schedule of the repositories file (``KW_REPOS_FILE``; none: only the self-test)."""
    import os

    path = path or os.environ.get(REPOS_FILE_ENV)
    if not path:
        return ScheduleConfig(repos={}, watch=Watch())
    data = read_repos_file(path)
    try:
        return parse_schedule(data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"repositories file {path}: {exc}") from exc


# ------------------------------------------------------------------------------- beat

MAIN_TASK = "kernelwatch.schedule.main"
RELEASES_TASK = "kernelwatch.schedule.releases"
SELFTEST_ROUND_TASK = "kernelwatch.schedule.selftest"


def beat_entries(config: ScheduleConfig) -> dict[str, dict[str, Any]]:
    """Celery ``beat_schedule``: one entry per scheduled repository, one release poll, one
    self-test round; every task goes to :data:`SCHEDULE_QUEUE`."""
    from celery.schedules import crontab

    def cron(when: When) -> crontab:
        return crontab(
            minute=when.minute,
            hour=when.hour,
            day_of_week=when.day_of_week,
            day_of_month=when.day_of_month,
            month_of_year=when.month_of_year,
        )

    options = {"queue": SCHEDULE_QUEUE}
    entries: dict[str, dict[str, Any]] = {}
    for repo in config.scheduled_repos():
        entries[f"main {repo.full_name}"] = {
            "task": MAIN_TASK,
            "schedule": cron(parse_when(repo.schedule)),
            "args": [repo.full_name],
            "options": options,
        }
    if config.watch.releases:
        entries["releases"] = {
            "task": RELEASES_TASK,
            "schedule": config.watch.releases_every_s,
            "options": options,
        }
    if config.watch.selftest is not None:
        entries["selftest"] = {
            "task": SELFTEST_ROUND_TASK,
            "schedule": cron(config.watch.selftest),
            "options": options,
        }
    return entries


__all__ = [
    "MAIN_TASK",
    "RELEASES_TASK",
    "SCHEDULE_QUEUE",
    "SELFTEST_ROUND_TASK",
    "ReleaseWatch",
    "ScheduleConfig",
    "Watch",
    "When",
    "beat_entries",
    "load_schedule",
    "parse_schedule",
    "parse_watch",
    "parse_when",
    "release_watch",
]
