"""Fork approvals that live in GitHub's signed events, not in a field anyone can write.

A fork's code runs only for a head commit that a user with write access approved by
adding the approval label. What proves that is the ``labeled`` delivery itself: its
body names the pull request, the label, the sender and the head commit at that
moment, and GitHub signed those bytes with the webhook secret. So the delivery is
kept byte for byte with its ``X-Hub-Signature-256`` (:class:`~kernelwatch.db.github.
Approval`), and deciding "is this head approved?" means:

1. find stored deliveries for (repository, PR, head sha);
2. re-verify each signature with the repository's secret (code under test that
   reaches the database can insert rows, but cannot sign them: the secret never
   reaches the sandbox);
3. re-read the signed body: a ``labeled`` action, the approval label, this PR
   number, this repository, this head sha;
4. ask GitHub again whether the sender has write access *now* (a signed label
   from a triage user copied into the table does not approve, and a maintainer
   who lost access no longer approves).

``PullRequest.approved_sha`` is still written, for people, and never read here.
What this does not protect against: a leaked webhook secret (then anything can be
signed; rotate it, and every stored approval stops verifying).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qs

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelwatch.db.github import Approval
from kernelwatch.jobs.api.signature import matching_secret

MAX_STORED_BODY = 2 * 1024 * 1024  # a labeled event is tens of KB; refuse to keep more


def record(
    session: Session,
    *,
    delivery: str,
    full_name: str,
    number: int,
    sha: str,
    sender: str,
    body: bytes,
    signature: str,
) -> bool:
    """Keep a signed ``labeled`` delivery that approved ``sha``; False if too large to keep."""
    if len(body) > MAX_STORED_BODY:
        return False
    exists = session.scalar(select(Approval.id).where(Approval.delivery_id == delivery))
    if exists is None:
        session.add(
            Approval(
                delivery_id=delivery,
                full_name=full_name,
                number=number,
                sha=sha,
                approved_by=sender,
                body=body,
                signature=signature,
            )
        )
    return True


def _decode(body: bytes) -> Any:
    if body.startswith(b"payload="):
        form = parse_qs(body.decode("utf-8"))
        return json.loads(form["payload"][0])
    return json.loads(body)


def _signed_fields(body: bytes) -> tuple[str, str, int, str, str] | None:
    """(full_name, label, number, head sha, sender) of a labeled event, or None."""
    try:
        data = _decode(body)
        if data.get("action") != "labeled":
            return None
        number = data["number"]
        if isinstance(number, bool) or not isinstance(number, int):
            return None
        return (
            str(data["repository"]["full_name"]),
            str(data["label"]["name"]),
            number,
            str(data["pull_request"]["head"]["sha"]),
            str(data["sender"]["login"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return None


def approver(
    session: Session,
    *,
    full_name: str,
    number: int,
    sha: str,
    label: str,
    secrets: Collection[str],
    may_approve: Callable[[str], bool],
) -> str | None:
    """The login whose signed label approved ``sha`` of this PR, or None."""
    if not secrets:
        return None
    rows = session.scalars(
        select(Approval)
        .where(Approval.full_name == full_name, Approval.number == number, Approval.sha == sha)
        .order_by(Approval.id)
    ).all()
    for row in rows:
        if matching_secret(row.signature, bytes(row.body), secrets) is None:
            continue  # not signed by GitHub: written by someone else
        fields = _signed_fields(bytes(row.body))
        if fields is None or fields[:4] != (full_name, label, number, sha):
            continue
        if may_approve(fields[4]):
            return fields[4]
    return None


__all__ = ["MAX_STORED_BODY", "approver", "record"]
