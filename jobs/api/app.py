"""The FastAPI application: ``create_app`` wires settings, database, broker and GitHub.

Everything the routes need is built here and handed over explicitly (no globals), so
tests build an app around a real database, a real broker and a loopback GitHub.
The reporter loop (:class:`~kernelwatch.jobs.github.reporter.ReporterThread`) runs inside
the application's lifespan unless ``reporter_interval_s`` is None, and so does the
reconciler (:class:`~kernelwatch.jobs.planning.reconcile.ReconcilerThread`: outbox
sends, lost messages, dead workers, crash loops) unless ``reconcile`` is None or
there is no broker.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from celery import Celery
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.jobs.api import rest, webhook
from kernelwatch.jobs.api.auth import ReadAccess
from kernelwatch.jobs.api.context import ApiContext
from kernelwatch.jobs.api.metrics import Metrics
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.github.events import WebhookHandler
from kernelwatch.jobs.github.reporter import Reporter, ReporterThread
from kernelwatch.jobs.github.watched import Secrets, WatchedRepo, repos_from_env
from kernelwatch.jobs.planning.bisect_driver import BisectThread
from kernelwatch.jobs.planning.passlock import pass_lock
from kernelwatch.jobs.planning.reconcile import ReconcileConfig, ReconcilerThread

log = logging.getLogger(__name__)

# GitHub caps webhook payloads at 25 MB; a large push can come close. Bodies are
# streamed and spooled before their signature is known (jobs/api/webhook.py), so the
# limit costs disk for a moment, not memory.
DEFAULT_MAX_BODY = 25 * 1024 * 1024


async def _database_unavailable(_: Request, exc: Exception) -> JSONResponse:
    """A database that cannot be reached is a 503 in the API's JSON error shape (it was
    a plain-text 500), with a hint to retry: GitHub's redelivery, ``gate --api``'s wait.
    The driver's message stays in the log; it may name the server's address."""
    log.warning("database unavailable: %s", str(exc).splitlines()[0][:300])
    return JSONResponse(
        {"detail": "the database is unavailable; try again shortly"},
        status_code=503,
        headers={"Retry-After": "30"},
    )


def create_app(
    settings: Settings,
    session_factory: sessionmaker[Session],
    celery_app: Celery | None,
    github_client: GitHubClient | None,
    *,
    repos: Mapping[str, WatchedRepo] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    reporter_interval_s: float | None = 2.0,
    reconcile: ReconcileConfig | None | bool = True,
    bind_host: str = "127.0.0.1",
) -> FastAPI:
    """The API. ``repos``: watched repositories (default: the ``KW_REPOS_FILE`` file).

    ``reconcile``: True reads :class:`ReconcileConfig` from the settings and
    environment, a config is used as given, None or False runs no reconciler.
    ``bind_host``: the address served, which decides whether reads need the token
    (``jobs/api/auth.py``).
    """
    if reconcile is True:
        reconcile = ReconcileConfig.from_settings(settings)
    watched = dict(repos) if repos is not None else repos_from_env()
    secrets = Secrets.of(watched, settings.webhook_secret)
    if not secrets.candidates():
        log.warning("no webhook secret configured: every delivery will be refused (401)")
    reporter = Reporter(session_factory, settings, github_client)
    ctx = ApiContext(
        settings=settings,
        factory=session_factory,
        celery=celery_app,
        github=github_client,
        repos=watched,
        secrets=secrets,
        reporter=reporter,
        handler=WebhookHandler(session_factory, settings, celery_app, watched, reporter),
        metrics=Metrics(session_factory, settings),
        max_body_bytes=max_body_bytes,
        read_access=ReadAccess.of(settings, bind_host),
    )
    if ctx.read_access.required and ctx.read_access.token is None:
        log.warning(
            "reads of /api/v1 need a token here (the API binds %s, KW_API_AUTH=%s) and "
            "KW_API_TOKEN is not set: every read is refused (401) until it is",
            bind_host,
            settings.api_auth,
        )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        threads: list[ReporterThread | ReconcilerThread | BisectThread] = []
        if reporter_interval_s is not None:
            threads.append(ReporterThread(reporter, reporter_interval_s))
        if isinstance(reconcile, ReconcileConfig) and celery_app is not None:
            lock = pass_lock(
                settings.broker_url, settings.data_dir, "reconcile", reconcile.interval_s
            )
            threads.append(ReconcilerThread(session_factory, celery_app, reconcile, lock, settings))
            # bisections advance where runs are kept alive (jobs/planning/bisect_driver.py)
            threads.append(BisectThread(session_factory, settings, celery_app))
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            for thread in threads:
                thread.stop()

    app = FastAPI(
        title="kernelwatch",
        version=_version(),
        description="CI for GPU kernel libraries: GitHub webhooks in, verdicts out.",
        lifespan=lifespan,
    )
    app.state.kw = ctx
    app.add_exception_handler(OperationalError, _database_unavailable)
    app.include_router(webhook.router)
    app.include_router(rest.router)
    app.include_router(rest.reads)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelwatch")
    except PackageNotFoundError:
        return "0+unknown"
