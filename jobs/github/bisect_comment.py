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
from kernelwatch.jobs.judging.inert_text import code_span
from kernelwatch.kernels.units import ratio_text

log = logging.getLogger(__name__)

STATUS_CONTEXT = "kernelwatch/bisect"
MARKER = "<!-- kernelwatch-bisect -->"


def page_url(row: Bisection, dashboard_url: str) -> str:
    """The bisection's dashboard page (``dashboard/page_bisect.py``)."""
    return f"{dashboard_url.rstrip('/')}/?page=bisect&id={row.id}"


def render(row: Bisection, dashboard_url: str) -> str:
    """The comment's markdown: the culprit, its effect, the steps and the device time."""
    effect = "effect not measured"
    if row.culprit_ratio is not None:
        effect = (
            ratio_text(row.culprit_ratio, row.culprit_ci_low, row.culprit_ci_high)
            + " the time of its parent"
        )
    skipped = sum(1 for s in row.steps if s.skipped)
    url = page_url(row, dashboard_url)
    others = [c["sha"] for c in row.culprits[1:]]
    lines = [
        MARKER,
        f"**kernelwatch bisection {row.id}** names this commit: "
        f"**{row.culprit_verdict or 'changed'}** on `{row.device_class}`, {effect}, "
        f"paired against its parent `{(row.culprit_parent or '')[:12]}`.",
        "",
        f"Range `{row.good_sha[:12]}..{row.bad_sha[:12]}`"
        # the pattern may hold a kernel name or label from code under test: a code span
        # it cannot close, so nothing in it renders
        + (f", cases {code_span(row.case_pattern)}" if row.case_pattern else "")
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
            _link_from_bad(github, row, dashboard_url)
    return sent


def _link_from_bad(github: GitHubClient, row: Bisection, dashboard_url: str) -> None:
    """A status on the commit where the regression was seen, naming the culprit and
    linking to the bisection, so the failing commit's checks lead to the answer."""
    if row.full_name is None or not row.culprit_sha:
        return
    effect = ratio_text(row.culprit_ratio, row.culprit_ci_low, row.culprit_ci_high)
    what = f"culprit {row.culprit_sha[:12]}: {row.culprit_verdict or 'changed'} {effect}"
    try:
        url = page_url(row, dashboard_url)
        github.create_status(row.full_name, row.bad_sha, "failure", STATUS_CONTEXT, what, url)
    except GitHubError as exc:  # the comment went out; the link is a convenience
        log.warning("bisection %s: status on %s not sent: %s", row.id, row.bad_sha[:12], exc)


__all__ = ["MARKER", "STATUS_CONTEXT", "page_url", "render", "send_pending"]
