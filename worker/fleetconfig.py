"""The fleet's delivery knobs: redelivery, heartbeats, the run lease, time limits, health.

These values decide how fast a crashed worker's run is picked up elsewhere and how
long a live worker may take before it is presumed dead, so they are derived from
each other with safe defaults rather than set one by one:

- the task's hard time limit covers install + suite + git (``install_timeout_s +
  suite_timeout_s + 1200``); the soft limit fires 120 s earlier;
- the Redis ``visibility_timeout`` (when an unacknowledged message is handed out
  again) exceeds the hard limit, so a live worker's message is not redelivered
  mid-run; if it is anyway (a shorter value), the run lease turns the second
  delivery into a delayed retry, never a second measurement;
- a worker beats every ``heartbeat_s``; one silent for ``lease_stale_s`` (3 beats
  plus 5 s) no longer holds its run.

Each knob reads ``Settings.<name>`` when the settings object has that field, else
the ``KW_<NAME>`` environment variable (``KW_VISIBILITY_TIMEOUT_S=10``). Values are
validated here, at start, and a bad one fails with the variable's name.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from celery import Celery

from kernelwatch.db.config import Settings


@dataclass(frozen=True)
class FleetConfig:
    visibility_timeout_s: float
    restore_interval_s: float
    heartbeat_s: float
    lease_stale_s: float
    soft_time_limit_s: float
    time_limit_s: float
    health_command: tuple[str, ...]
    health_recheck_s: float
    db_patience_s: float

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] | None = None
    ) -> FleetConfig:
        env = os.environ if environ is None else environ

        def num(name: str, default: float) -> float:
            raw = getattr(settings, name, None)
            if raw is None:
                raw = env.get(f"KW_{name.upper()}")
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise ValueError(f"KW_{name.upper()}: not a number: {raw!r}") from None
            if not value > 0:
                raise ValueError(f"KW_{name.upper()}: must be > 0, got {value}")
            return value

        hard = num("time_limit_s", settings.install_timeout_s + settings.suite_timeout_s + 1200.0)
        soft = num("soft_time_limit_s", max(hard - 120.0, hard * 0.9))
        if soft >= hard:
            raise ValueError("KW_SOFT_TIME_LIMIT_S must be below KW_TIME_LIMIT_S")
        visibility = num("visibility_timeout_s", hard + 300.0)
        heartbeat = num("heartbeat_s", 30.0)
        command = getattr(settings, "health_command", None) or env.get("KW_HEALTH_COMMAND", "")
        return cls(
            visibility_timeout_s=visibility,
            restore_interval_s=num("restore_interval_s", min(60.0, max(1.0, visibility / 10))),
            heartbeat_s=heartbeat,
            lease_stale_s=num("lease_stale_s", 3 * heartbeat + 5.0),
            soft_time_limit_s=soft,
            time_limit_s=hard,
            health_command=tuple(shlex.split(str(command))),
            health_recheck_s=num("health_recheck_s", 300.0),
            db_patience_s=num("db_patience_s", 300.0),
        )


def configure(app: Celery, fleet: FleetConfig) -> None:
    """Apply redelivery, reconnection and time limits to the worker's Celery app."""
    app.conf.update(
        task_soft_time_limit=fleet.soft_time_limit_s,
        task_time_limit=fleet.time_limit_s,
        # A broker outage must not end the worker: reconnect forever.
        broker_connection_retry=True,
        broker_connection_max_retries=None,
    )
    url = str(app.conf.broker_url or "")
    if url.startswith(("redis", "rediss")):
        options = dict(app.conf.broker_transport_options or {})
        options.update(
            visibility_timeout=int(fleet.visibility_timeout_s),
            # Sweep for messages of dead workers every restore_interval_s (kombu's
            # default sweeps every 10 s x 10 calls = 100 s).
            unacked_restore_interval=max(1, int(fleet.restore_interval_s)),
            unacked_restore_throttle=1,
            # The sweep takes a lock in Redis; a worker killed while holding it would
            # stop every sweep for kombu's default 300 s. A sweep takes milliseconds, so
            # the lock lapses after two intervals instead.
            unacked_mutex_expire=max(5, 2 * int(fleet.restore_interval_s)),
        )
        app.conf.broker_transport_options = options
