"""One settings object, read from ``KW_*`` environment variables and validated at start.

A wrong value fails here, with the variable's name, not deep inside a worker.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kernelwatch.kernels.verdict import CONFIDENCE, MIN_EFFECT, InconclusivePolicy


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kernelwatch"


class Settings(BaseSettings):
    """Service configuration (environment variables prefixed ``KW_``)."""

    model_config = SettingsConfigDict(env_prefix="KW_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = None
    broker_url: str | None = None
    webhook_secret: str | None = None
    github_token: str | None = None
    github_api_url: str = "https://api.github.com"
    # Report check runs (a GitHub App installation token) instead of commit statuses.
    github_checks: bool = False
    dashboard_url: str = "http://127.0.0.1:8501"
    # Reads of the REST API (/api/v1/*): a bearer token (jobs/api/auth.py). With
    # api_auth "auto" a token is required when one is set or when the API binds beyond
    # loopback (then without KW_API_TOKEN every read is refused); "on" always, "off" never.
    api_token: str | None = None
    api_auth: Literal["auto", "on", "off"] = "auto"
    # /metrics behind the same token (Prometheus: bearer_token); open by default.
    metrics_auth: bool = False
    # Per-run limits for the suite subprocess (seconds).
    suite_timeout_s: float = 1800.0
    case_timeout_s: float = 600.0
    install_timeout_s: float = 1800.0
    # Fleet behaviour (kernelwatch.worker.fleetconfig; None: its defaults).
    visibility_timeout_s: float | None = None
    heartbeat_s: float | None = None
    lease_stale_s: float | None = None
    restore_interval_s: float | None = None
    time_limit_s: float | None = None
    soft_time_limit_s: float | None = None
    health_command: str = ""
    health_recheck_s: float | None = None
    db_patience_s: float | None = None
    # Server-side git submodule mirrors for offline GPU hosts ("orig=mirror,...").
    submodule_mirrors: str = ""
    # Service-side .kernelwatch.toml files for libraries that carry none of their own
    # ("source=path,..." or JSON; jobs/library/served.py): a named file replaces the
    # repository's for that source, in planning, builds and runs alike.
    repo_configs: str = ""
    # An air-gapped host: from-source builds fail fast instead of reaching for the
    # network (pip without an index, git over file:// only; worker/venvs.py).
    offline: bool = False
    # What stays of a run's work directory when it ends (worker/workdirs.py): none, the
    # directories of runs that did not succeed (failed), or all; kept ones go after a day.
    keep_work: Literal["none", "failed", "all"] = "none"
    # Default minimum effect (relative, 1 %), the confidence of one measurement's interval,
    # and what an inconclusive case makes of its run: the rule's own defaults
    # (kernelwatch.kernels.verdict), so service, CLI and deploy examples agree.
    regression_threshold: float = MIN_EFFECT
    confidence: float = CONFIDENCE
    inconclusive_policy: InconclusivePolicy = InconclusivePolicy.NEUTRAL
    # CPU timings prove the plumbing only (design.md): a CPU run's timing verdicts are shown
    # ("slower on CPU (plumbing only)") but do not make its run fail or neutral unless this
    # is set; correctness (broken, less_accurate) and errors gate on the CPU as anywhere.
    # It acts where a run is judged (the worker's analysis); `kernelwatch gate` only reads
    # those verdicts and says so when it finds this set in its own environment.
    cpu_timing_gates: bool = False
    # Bisection steps ahead whose builds go to the ``build`` queue while a step measures
    # (jobs/planning/build_ahead.py): 2 sends the builds of both outcomes of the next two
    # steps (up to 6 commits); 0 turns build-ahead off.
    bisect_build_ahead: int = Field(default=2, ge=0, le=6)

    @field_validator("database_url", "broker_url")
    @classmethod
    def _known_scheme(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or value == "":
            return None
        scheme = value.split(":", 1)[0]
        if not scheme or "://" not in value and not value.startswith("sqlite:"):
            # each variable with its own examples: a broker is not a database
            examples = _BROKER_EXAMPLES if info.field_name == "broker_url" else _URL_EXAMPLES
            raise ValueError(f"not a URL: {masked(value)!r} (e.g. {examples})")
        return value

    @field_validator("database_url")
    @classmethod
    def _loadable_dialect(cls, value: str | None) -> str | None:
        """A URL SQLAlchemy can open, or the one line that says which one to write."""
        if value is None:
            return None
        scheme = value.split("://", 1)[0].lower()
        if scheme in ("postgres", "postgresql", "postgresql+psycopg2"):
            fixed = "postgresql+psycopg://" + value.split("://", 1)[1]
            raise ValueError(
                f"{scheme}:// needs a driver kernelwatch does not install; write "
                f"{masked(fixed)} (psycopg 3)"
            )
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            make_url(value).get_dialect().import_dbapi()  # the driver, too
        except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as exc:
            raise ValueError(
                f"SQLAlchemy cannot open {masked(value)!r} ({type(exc).__name__}: {exc}); "
                f"kernelwatch speaks {_URL_EXAMPLES}"
            ) from None
        return value

    @field_validator("regression_threshold")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not 0 < value < 10:
            raise ValueError("must be a positive fraction, e.g. 0.01 for 1 %")
        return value

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'kernelwatch.db'}"

    @property
    def broker_dir(self) -> Path:
        return self.data_dir / "broker"

    def ensure_dirs(self) -> None:
        """The data directory, made if missing; a ``SettingsError`` naming KW_DATA_DIR
        where it cannot be (a file there, no permission): one line, not a traceback."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SettingsError(
                f"KW_DATA_DIR: cannot use {self.data_dir} as the data directory: "
                f"{exc.strerror or exc}"
            ) from None


_URL_EXAMPLES = "postgresql+psycopg://USER:PASSWORD@HOST:5432/DB or sqlite:////PATH/kernelwatch.db"
_BROKER_EXAMPLES = "redis://HOST:6379/0, or unset for the embedded broker in the data directory"


def masked(url: str) -> str:
    """``url`` with its password replaced: error messages end up in logs."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{head}://{user}{':***' if ':' in creds else ''}@{host}"


class SettingsError(ValueError):
    """A ``KW_*`` variable that does not validate, said in one line per variable."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings from the environment; :class:`SettingsError` names what is wrong."""
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError(describe(exc)) from None


def describe(exc: ValidationError) -> str:
    """``KW_DATABASE_URL: not a URL: 'notaurl' (e.g. ...)``; several joined with ``; ``."""
    parts = []
    for error in exc.errors():
        name = "KW_" + "_".join(str(x) for x in error["loc"]).upper()
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {message}")
    return "; ".join(parts)
