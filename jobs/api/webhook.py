"""``POST /webhooks/github``: size limit, signature, headers, JSON, then the handler.

Order matters: a request without a well-formed signature header is refused before
its body is read; the body is then streamed (at most ``max_body_bytes``, GitHub's
25 MB by default) through the HMACs of every candidate secret and spooled to a
temporary file past ``SPOOL_BYTES``, so an unsigned body costs at most that much
memory however large it is and however many arrive at once; only a body whose
signature matched is read back and parsed. A request that fails before the
signature check stores nothing and learns nothing about the repositories watched.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from kernelwatch.jobs.api.context import ApiContext, context
from kernelwatch.jobs.api.schemas import ErrorResponse, WebhookResponse
from kernelwatch.jobs.api.signature import StreamVerifier, well_formed
from kernelwatch.jobs.github.events import Signed, repository_of

router = APIRouter()

_DELIVERY = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_EVENT = re.compile(r"^[a-z_]{1,64}$")
SPOOL_BYTES = 256 * 1024  # larger bodies wait on disk until their signature is known


class BodyTooLarge(Exception):
    pass


async def _read_body(
    request: Request, limit: int, verifier: StreamVerifier
) -> tempfile.SpooledTemporaryFile[bytes]:
    """The body, HMACed chunk by chunk into ``verifier``, in memory up to SPOOL_BYTES."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    # Returned open: the caller closes it (``with spool``) once the signature is known.
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
        max_size=SPOOL_BYTES, prefix="kw-body-"
    )
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            verifier.update(chunk)
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    return spool


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
    candidates = ctx.secrets.candidates()
    if not well_formed(x_hub_signature_256) or not candidates:
        ctx.metrics.delivery("unknown", "unauthorized", started)
        return _error(401, "missing or invalid X-Hub-Signature-256")
    verifier = StreamVerifier(candidates)
    try:
        spool = await _read_body(request, ctx.max_body_bytes, verifier)
    except BodyTooLarge:
        ctx.metrics.delivery("unknown", "too_large", started)
        return _error(413, f"body larger than {ctx.max_body_bytes} bytes")
    with spool:
        secret = verifier.matching(x_hub_signature_256)
        if secret is None:
            ctx.metrics.delivery("unknown", "unauthorized", started)
            return _error(401, "missing or invalid X-Hub-Signature-256")
        spool.seek(0)
        body = spool.read()
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
    signed = Signed(body, str(x_hub_signature_256))
    outcome = await run_in_threadpool(ctx.handler.handle, event, x_github_delivery, payload, signed)
    ctx.metrics.delivery(event, outcome.outcome, started)
    return JSONResponse(outcome.body(), status_code=outcome.http_status)
