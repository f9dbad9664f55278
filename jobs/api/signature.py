"""``X-Hub-Signature-256``: HMAC-SHA256 of the raw body, compared in constant time.

Checked before the body is parsed. Several secrets may be configured (a global one
and per-repository ones); each is tried, every comparison with
:func:`hmac.compare_digest`, and the secret that matched is returned so the caller
can check, after parsing, that it belongs to the repository the payload names.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

PREFIX = "sha256="


def sign(secret: str, body: bytes) -> str:
    """The header value GitHub sends for ``body`` (tests and benchmarks sign with it)."""
    return PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def matching_secret(header: str | None, body: bytes, secrets: Iterable[str]) -> str | None:
    """The secret whose signature equals ``header``, or None (missing, malformed, forged)."""
    if not header or not header.startswith(PREFIX) or len(header) != len(PREFIX) + 64:
        return None
    found = None
    for secret in secrets:
        # Every candidate is compared, so timing does not tell which one matched.
        if hmac.compare_digest(sign(secret, body).encode(), header.encode()) and found is None:
            found = secret
    return found
