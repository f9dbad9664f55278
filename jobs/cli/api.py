"""``kernelwatch api``: the webhook receiver and REST API (OpenAPI at ``/openapi.json``).

Never imports torch (an import-linter contract and a test keep it so).
"""

from __future__ import annotations

import argparse

NAME = "api"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    api = sub.add_parser(
        NAME,
        help="webhook + REST API (OpenAPI at /openapi.json)",
        description="Serve GitHub webhooks (plan runs, report statuses and PR comments) and "
        "the REST API (/api/v1: runs, verdicts; reads need KW_API_TOKEN beyond loopback), "
        "/healthz and /metrics. Migrates the database first.",
    )
    api.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    api.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    api.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest webhook body accepted (default 25 MiB, GitHub's cap)",
    )
    api.add_argument(
        "--reporter-interval", type=float, default=2.0, help="seconds between status passes"
    )
    api.add_argument(
        "--no-reporter", action="store_true", help="do not send statuses from this process"
    )
    api.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    api.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.api.app import DEFAULT_MAX_BODY
    from kernelwatch.jobs.api.server import serve
    from kernelwatch.jobs.cli.common import settings

    serve(
        settings(),
        args.host,
        args.port,
        max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY,
        reporter_interval_s=None if args.no_reporter else args.reporter_interval,
        log_level=args.log_level,
    )
    return 0


__all__ = ["NAME", "add_parser", "handle"]
