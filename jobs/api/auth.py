"""Who may read the REST API: a bearer token (``KW_API_TOKEN``) on ``/api/v1/*``.

Case error texts are whatever a kernel under test printed, and run lists name every
commit measured: reads are not for anyone who reaches the port (issue 24). The rule:

========================  ============================================================
``KW_API_AUTH``           reads of ``/api/v1/*`` need ``Authorization: Bearer <token>``
========================  ============================================================
``auto`` (default)        when ``KW_API_TOKEN`` is set, or when the API binds an
                          address beyond loopback (then, without a token configured,
                          every read is refused with a message that says so)
``on``                    always
``off``                   never (behind an authenticating proxy)
========================  ============================================================

``/healthz`` stays open (probes), the webhook is authenticated by its HMAC signature,
and ``/metrics`` follows the token only with ``KW_METRICS_AUTH=1``. Tokens are compared
in constant time. What this module does not do: users, scopes or token rotation; one
shared read token is the contract (design.md, "HTTP").
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from kernelwatch.db.config import Settings

# The OpenAPI document names the scheme; auto_error=False: the refusal is ours, worded.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="KW_API_TOKEN",
    description="Authorization: Bearer <KW_API_TOKEN of the server>",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (``0.0.0.0`` and ``::`` do not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


@dataclass(frozen=True)
class ReadAccess:
    """Whether reads need the token, and the token (None: none configured)."""

    required: bool
    token: str | None
    metrics: bool = False  # /metrics needs it too

    @classmethod
    def of(cls, settings: Settings, bind_host: str) -> ReadAccess:
        token = settings.api_token or None
        if settings.api_auth == "off":
            required = False
        elif settings.api_auth == "on":
            required = True
        else:
            required = token is not None or not is_loopback(bind_host)
        return cls(required=required, token=token, metrics=required and settings.metrics_auth)

    def check(self, credentials: HTTPAuthorizationCredentials | None) -> None:
        """Raise 401 unless ``credentials`` carry the token (or none is required)."""
        if not self.required:
            return
        challenge = {"WWW-Authenticate": "Bearer"}
        if self.token is None:
            raise HTTPException(
                401,
                "reads of this API need a token and the server has none: set KW_API_TOKEN "
                "where `kernelwatch api` runs (or KW_API_AUTH=off behind an authenticating "
                "proxy)",
                headers=challenge,
            )
        if credentials is None:
            raise HTTPException(
                401,
                "this API needs a token: send `Authorization: Bearer <KW_API_TOKEN>`",
                headers=challenge,
            )
        given = credentials.credentials.encode()
        if not hmac.compare_digest(given, self.token.encode()):
            raise HTTPException(
                401, "the token is not this server's KW_API_TOKEN", headers=challenge
            )


def _access(request: Request) -> ReadAccess:
    access: ReadAccess = request.app.state.kw.read_access
    return access


def require_read(request: Request, credentials: Credentials) -> None:
    """Dependency of every ``/api/v1`` route."""
    _access(request).check(credentials)


def require_metrics(request: Request, credentials: Credentials) -> None:
    """Dependency of ``/metrics``: the token only where ``KW_METRICS_AUTH`` asks for it."""
    access = _access(request)
    if access.metrics:
        access.check(credentials)


__all__ = ["ReadAccess", "bearer", "is_loopback", "require_metrics", "require_read"]
