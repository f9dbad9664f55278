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


def well_formed(header: str | None) -> bool:
    """Whether ``header`` could be a signature at all (checked before reading a body)."""
    return header is not None and header.startswith(PREFIX) and len(header) == len(PREFIX) + 64


class StreamVerifier:
    """HMAC-SHA256 of a body under every candidate secret, fed one chunk at a time."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._macs = [(s, hmac.new(s.encode(), digestmod=hashlib.sha256)) for s in secrets]

    def update(self, chunk: bytes) -> None:
        for _, mac in self._macs:
            mac.update(chunk)

    def matching(self, header: str | None) -> str | None:
        """The secret whose signature equals ``header``, or None; constant-time compares."""
        if header is None or not well_formed(header):
            return None
        found = None
        for secret, mac in self._macs:
            expected = (PREFIX + mac.hexdigest()).encode()
            if hmac.compare_digest(expected, header.encode()) and found is None:
                found = secret
        return found


def matching_secret(header: str | None, body: bytes, secrets: Iterable[str]) -> str | None:
    """The secret whose signature equals ``header``, or None (missing, malformed, forged)."""
    verifier = StreamVerifier(secrets)
    verifier.update(body)
    # Every candidate is compared, so timing does not tell which one matched.
    return verifier.matching(header)
