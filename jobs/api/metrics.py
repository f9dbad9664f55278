"""``GET /metrics``: Prometheus text, computed from the database and the broker at scrape time.

- ``kernelwatch_runs{state}``: runs per state (database).
- ``kernelwatch_oldest_queued_run_age_seconds{queue}``: how long the oldest queued run waits.
- ``kernelwatch_queue_depth{queue}``: messages waiting per queue when the broker is Redis
  (LLEN of the queue and its priority sub-queues); absent for other brokers.
- ``kernelwatch_run_duration_seconds{device_class}``: histogram of started → finished of
  runs that finished in the last 24 hours.
- ``kernelwatch_workers{device_class,state}``: live workers (heartbeat within 2 minutes)
  by state (idle, busy, unhealthy).
- ``kernelwatch_gpu_busy_fraction{device_class}``: of the last hour, the share the live
  workers of a class spent measuring (run time overlapping the hour ÷ workers × 1 h).
  Low with a deep queue means workers are missing for that class; near 1, more GPUs.
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
from kernelwatch.db.fleet import live_workers
from kernelwatch.db.models import RUN_STATES, Run

log = logging.getLogger(__name__)

BUSY_WINDOW_S = 3600.0
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
        yield from self._fleet(now)

    def _fleet(self, now: datetime) -> Iterator[Metric]:
        window = timedelta(seconds=BUSY_WINDOW_S)
        with self.factory() as session:
            live = live_workers(session)
            spans = session.execute(
                select(Run.device_class, Run.started, Run.finished).where(
                    Run.started.is_not(None),
                    (Run.finished.is_(None)) | (Run.finished >= now - window),
                    Run.status.in_(("running", "succeeded", "failed", "error", "cancelled")),
                )
            ).all()
        workers = GaugeMetricFamily(
            "kernelwatch_workers", "Live workers by state", labels=["device_class", "state"]
        )
        per_class: dict[str, int] = {}
        counts: dict[tuple[str, str], int] = {}
        for w in live:
            counts[(w.device_class, w.state)] = counts.get((w.device_class, w.state), 0) + 1
            per_class[w.device_class] = per_class.get(w.device_class, 0) + 1
        for (dc, state), n in sorted(counts.items()):
            workers.add_metric([dc, state], n)
        yield workers
        busy = GaugeMetricFamily(
            "kernelwatch_gpu_busy_fraction",
            "Share of the last hour the live workers of a class spent measuring",
            labels=["device_class"],
        )
        for dc, n in sorted(per_class.items()):
            spent = sum(
                busy_seconds(started, finished, now, window)
                for c, started, finished in spans
                if c == dc
            )
            busy.add_metric([dc], min(1.0, spent / (n * window.total_seconds())))
        yield busy

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


def busy_seconds(
    started: datetime | None, finished: datetime | None, now: datetime, window: timedelta
) -> float:
    """Seconds of [started, finished or now] inside the window that ends now."""
    if started is None:
        return 0.0
    begin = max(_aware(started), now - window)
    end = min(_aware(finished) if finished is not None else now, now)
    return max(0.0, (end - begin).total_seconds())


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
