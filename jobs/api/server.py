"""``kernelwatch api``: build the application from the environment and serve it with uvicorn."""

from __future__ import annotations

import uvicorn

from kernelwatch.db.config import Settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.session import session_factory
from kernelwatch.jobs.api.app import DEFAULT_MAX_BODY, create_app
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.planning.broker import make_celery


def serve(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    reporter_interval_s: float | None = 2.0,
    log_level: str = "info",
) -> None:
    """Migrate the database, then serve until interrupted (uvicorn handles signals)."""
    upgrade(settings.resolved_database_url)
    github = (
        GitHubClient(settings.github_token, settings.github_api_url)
        if settings.github_token
        else None
    )
    app = create_app(
        settings,
        session_factory(),
        make_celery(settings),
        github,
        max_body_bytes=max_body_bytes,
        reporter_interval_s=reporter_interval_s,
        bind_host=host,
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=True)
    finally:
        if github is not None:
            github.close()
