"""What every route gets: the settings, database, broker, GitHub client and handlers."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from fastapi import Request
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.jobs.api.metrics import Metrics
from kernelwatch.jobs.github import GitHubClient
from kernelwatch.jobs.reporting import Reporter
from kernelwatch.jobs.watched import Secrets, WatchedRepo
from kernelwatch.jobs.webhooks import WebhookHandler


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


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.kw
    return ctx
