"""What every route gets: the settings, database, broker, GitHub client and handlers."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from fastapi import Request
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.jobs.api.auth import ReadAccess
from kernelwatch.jobs.api.metrics import Metrics
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.github.events import WebhookHandler
from kernelwatch.jobs.github.reporter import Reporter
from kernelwatch.jobs.github.watched import Secrets, WatchedRepo


@dataclass
class ApiContext:
    settings: Settings
    factory: sessionmaker[Session]
    celery: Celery | None
    github: GitHubClient | None
    repos: dict[str, WatchedRepo]
    secrets: Secrets
    reporter: Reporter
    handler: WebhookHandler
    metrics: Metrics
    max_body_bytes: int
    read_access: ReadAccess


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.kw
    return ctx
