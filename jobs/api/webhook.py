"""``POST /webhooks/github``: size limit, signature, headers, JSON, then the handler.

Order matters: the body is read (at most ``max_body_bytes``), the signature checked
against the raw bytes, and only then parsed. A request that fails before the
signature check stores nothing and learns nothing about the repositories watched.
"""

from __future__ import annotations

import json
import re
import time
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from kernelwatch.jobs.api.context import ApiContext, context
from kernelwatch.jobs.api.schemas import ErrorResponse, WebhookResponse
from kernelwatch.jobs.api.signature import matching_secret
from kernelwatch.jobs.github.events import repository_of

router = APIRouter()

_DELIVERY = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_EVENT = re.compile(r"^[a-z_]{1,64}$")


class BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _parse(body: bytes, content_type: str) -> Any:
    if content_type.startswith("application/x-www-form-urlencoded"):
        form = parse_qs(body.decode("utf-8"), strict_parsing=False)
        if "payload" not in form:
            raise ValueError("form body without a payload field")
        return json.loads(form["payload"][0])
    return json.loads(body)


@router.post(
    "/webhooks/github",
    status_code=202,
    response_model=WebhookResponse,
    responses={
        200: {"model": WebhookResponse, "description": "ping, or a delivery seen before"},
        400: {"model": ErrorResponse, "description": "malformed JSON, headers or payload"},
        401: {"model": ErrorResponse, "description": "missing or wrong X-Hub-Signature-256"},
        413: {"model": ErrorResponse, "description": "body larger than the limit"},
        503: {"model": WebhookResponse, "description": "fetch failed; redeliver later"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
    summary="GitHub webhook deliveries (push, pull_request, ping)",
)
async def github_webhook(
    request: Request,
    ctx: Annotated[ApiContext, Depends(context)],
    x_hub_signature_256: Annotated[str | None, Header()] = None,
    x_github_event: Annotated[str | None, Header()] = None,
    x_github_delivery: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    started = time.perf_counter()
    try:
        body = await _read_body(request, ctx.max_body_bytes)
    except BodyTooLarge:
        ctx.metrics.delivery("unknown", "too_large", started)
        return _error(413, f"body larger than {ctx.max_body_bytes} bytes")
    secret = matching_secret(x_hub_signature_256, body, ctx.secrets.candidates())
    if secret is None:
        ctx.metrics.delivery("unknown", "unauthorized", started)
        return _error(401, "missing or invalid X-Hub-Signature-256")
    event = x_github_event or ""
    if not _EVENT.match(event):
        return _error(400, "missing or invalid X-GitHub-Event")
    if not x_github_delivery or not _DELIVERY.match(x_github_delivery):
        return _error(400, "missing or invalid X-GitHub-Delivery")
    try:
        payload = _parse(body, request.headers.get("content-type", "application/json"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        ctx.metrics.delivery(event, "malformed", started)
        return _error(400, "body is not valid JSON")
    if not isinstance(payload, dict):
        return _error(400, "body must be a JSON object")
    full_name = repository_of(payload)
    watched = full_name if full_name in ctx.repos else None
    if secret not in ctx.secrets.allowed_for(watched):
        ctx.metrics.delivery(event, "unauthorized", started)
        return _error(401, "signature does not match this repository's secret")
    outcome = await run_in_threadpool(ctx.handler.handle, event, x_github_delivery, payload)
    ctx.metrics.delivery(event, outcome.outcome, started)
    return JSONResponse(outcome.body(), status_code=outcome.http_status)
