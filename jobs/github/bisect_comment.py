"""A bisection's culprit back on GitHub: one commit comment on the culprit commit.

Sent by the API process's reporter loop (``reporter.Reporter.reconcile``), never by a
worker: workers execute library code and never hold the GitHub token. Each found
bisection with a GitHub repository (``Bisection.full_name``) gets its comment once
(``comment_sent``); a GitHub failure is logged and retried on the next pass.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.bisect import Bisection
from kernelwatch.jobs.github.client import GitHubClient, GitHubError

log = logging.getLogger(__name__)

MARKER = "<!-- kernelwatch-bisect -->"


def render(row: Bisection, dashboard_url: str) -> str:
    """The comment's markdown: the culprit, its effect, the steps and the device time."""
    effect = "effect not measured"
    if row.culprit_ratio is not None:
        effect = f"{row.culprit_ratio:.2f}x the time of its parent"
        if row.culprit_ci_low is not None and row.culprit_ci_high is not None:
            effect += f" (interval {row.culprit_ci_low:.3f}–{row.culprit_ci_high:.3f})"
    skipped = sum(1 for s in row.steps if s.skipped)
    url = f"{dashboard_url.rstrip('/')}/bisect?id={row.id}"
    others = [c["sha"] for c in row.culprits[1:]]
    lines = [
        MARKER,
        f"**kernelwatch bisection {row.id}** names this commit: "
        f"**{row.culprit_verdict or 'changed'}** on `{row.device_class}`, {effect}, "
        f"paired against its parent `{(row.culprit_parent or '')[:12]}`.",
        "",
        f"Range `{row.good_sha[:12]}..{row.bad_sha[:12]}`"
        + (f", cases `{row.case_pattern}`" if row.case_pattern else "")
        + f": {len(row.steps)} steps ({skipped} skipped), "
        f"{row.gpu_seconds:.0f} device seconds.",
    ]
    if others:
        lines.append("A later step in the same range: " + ", ".join(f"`{s}`" for s in others))
    lines += ["", f"[Bisection on the dashboard]({url})"]
    return "\n".join(lines)


def send_pending(
    factory: sessionmaker[Session], github: GitHubClient | None, dashboard_url: str
) -> list[int]:
    """Comment on every found culprit not commented on yet; the bisection ids sent."""
    if github is None:
        return []
    with factory() as session:
        ids = list(
            session.scalars(
                select(Bisection.id).where(
                    Bisection.status == "found",
                    Bisection.comment_sent.is_(False),
                    Bisection.full_name.is_not(None),
                    Bisection.culprit_sha.is_not(None),
                )
            )
        )
    sent = []
    for bid in ids:
        with factory() as session, session.begin():
            row = session.get(Bisection, bid, with_for_update=True)
            if row is None or row.comment_sent or row.full_name is None or not row.culprit_sha:
                continue
            try:
                github.create_commit_comment(
                    row.full_name, row.culprit_sha, render(row, dashboard_url)
                )
            except GitHubError as exc:
                log.warning("bisection %s: culprit comment not sent, will retry: %s", bid, exc)
                continue
            row.comment_sent = True
            sent.append(bid)
    return sent


__all__ = ["MARKER", "render", "send_pending"]
