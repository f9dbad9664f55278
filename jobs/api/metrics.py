"""``GET /metrics``: Prometheus text, computed from the database and the broker at scrape time.

- ``kernelwatch_runs{state}``: runs per state (database).
- ``kernelwatch_oldest_queued_run_age_seconds{queue}``: how long the oldest queued run waits.
- ``kernelwatch_queue_depth{queue}``: messages waiting per queue when the broker is Redis
  (LLEN of the queue and its priority sub-queues); absent for other brokers.
- ``kernelwatch_run_duration_seconds{device_class}``: histogram of started → finished of
  runs that finished in the last 24 hours.
- ``kernelwatch_webhook_deliveries_total{event,outcome}`` and
  ``kernelwatch_webhook_seconds``: this process's webhook traffic.

Each scrape runs a few small aggregate queries; a database or broker that does not
answer gives ``kernelwatch_scrape_error{source} 1`` instead of a failed scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import RUN_STATES, Run

log = logging.getLogger(__name__)

DURATION_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
PRIORITY_SEP = "\x06\x16"  # kombu's Redis transport: queue + SEP + priority step
PRIORITY_STEPS = (0, 3, 6, 9)


class DatabaseCollector(Collector):
    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        errors = GaugeMetricFamily(
            "kernelwatch_scrape_error", "1 if a source could not be read", labels=["source"]
        )
        queues: set[str] = {"cpu"}
        try:
            yield from self._database(queues)
            errors.add_metric(["database"], 0)
        except Exception as exc:
            log.warning("metrics: database unavailable: %s", exc)
            errors.add_metric(["database"], 1)
        if (self.settings.broker_url or "").startswith("redis"):
            try:
                yield self._queue_depth(sorted(queues))
                errors.add_metric(["broker"], 0)
            except Exception as exc:
                log.warning("metrics: broker unavailable: %s", exc)
                errors.add_metric(["broker"], 1)
        yield errors

    def _database(self, queues: set[str]) -> Iterator[Metric]:
        now = datetime.now(UTC)
        with self.factory() as session:
            by_state = dict(
                session.execute(select(Run.status, func.count()).group_by(Run.status)).all()
            )
            queued = session.execute(
                select(Run.queue, func.min(Run.created))
                .where(Run.status == "queued")
                .group_by(Run.queue)
            ).all()
            oldest = {q: c for q, c in queued}
            queues.update(session.scalars(select(Run.queue).distinct()))
            finished = session.execute(
                select(Run.device_class, Run.started, Run.finished).where(
                    Run.finished >= now - timedelta(days=1), Run.started.is_not(None)
                )
            ).all()
            durations: dict[str, list[float]] = {}
            for dc, started, ended in finished:
                if started is not None and ended is not None:
                    durations.setdefault(dc, []).append(
                        (_aware(ended) - _aware(started)).total_seconds()
                    )
        runs = GaugeMetricFamily("kernelwatch_runs", "Runs by state", labels=["state"])
        for state in sorted(set(RUN_STATES) | set(by_state)):
            runs.add_metric([state], by_state.get(state, 0))
        yield runs
        age = GaugeMetricFamily(
            "kernelwatch_oldest_queued_run_age_seconds",
            "Age of the oldest queued run per queue",
            labels=["queue"],
        )
        for queue, created in sorted(oldest.items()):
            if created is not None:
                age.add_metric([queue], max(0.0, (now - _aware(created)).total_seconds()))
        yield age
        hist = HistogramMetricFamily(
            "kernelwatch_run_duration_seconds",
            "Run duration (started to finished) of runs finished in the last 24 hours",
            labels=["device_class"],
        )
        for dc, values in sorted(durations.items()):
            buckets = [(str(b), float(sum(v <= b for v in values))) for b in DURATION_BUCKETS]
            buckets.append(("+Inf", float(len(values))))
            hist.add_metric([dc], buckets, sum_value=sum(values))
        yield hist

    def _queue_depth(self, queues: list[str]) -> Metric:
        import redis

        client = redis.Redis.from_url(
            self.settings.broker_url or "", socket_timeout=2, socket_connect_timeout=2
        )
        try:
            # Queues declared on the broker (kombu keeps their bindings) that are ours.
            for key in client.scan_iter(match="_kombu.binding.*", count=100):
                for member in client.smembers(key):
                    text = member.decode(errors="replace") if isinstance(member, bytes) else member
                    name = str(text).split(PRIORITY_SEP)[-1]
                    if name == "cpu" or name.startswith("gpu."):
                        queues.append(name)
            queues = sorted(set(queues))
            pipe = client.pipeline()
            for q in queues:
                for step in PRIORITY_STEPS:
                    pipe.llen(q if step == 0 else f"{q}{PRIORITY_SEP}{step}")
            lengths = pipe.execute()
        finally:
            client.close()
        depth = GaugeMetricFamily(
            "kernelwatch_queue_depth", "Messages waiting in the broker", labels=["queue"]
        )
        n = len(PRIORITY_STEPS)
        for i, q in enumerate(queues):
            depth.add_metric([q], float(sum(int(x) for x in lengths[i * n : (i + 1) * n])))
        return depth


def _aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; they were written in UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Metrics:
    """One registry per application (tests build many apps in one process)."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(DatabaseCollector(factory, settings))
        self.deliveries = Counter(
            "kernelwatch_webhook_deliveries",
            "Webhook deliveries by event and outcome",
            ["event", "outcome"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "kernelwatch_webhook_seconds",
            "Time to answer a webhook delivery",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0),
            registry=self.registry,
        )

    def delivery(self, event: str, outcome: str, started: float) -> None:
        event = event if event in ("ping", "push", "pull_request") else "other"
        self.deliveries.labels(event, outcome).inc()
        self.seconds.observe(time.perf_counter() - started)

    def render(self) -> bytes:
        return generate_latest(self.registry)
