"""Text from code under test is inert in the bot's PR comment (an audit, 2026-12-05).

A kernel's exception message reached the comment with only HTML, pipes and backticks
escaped: ``@org/team`` pinged a team, ``[log in](https://evil.example)`` and
``![x](...)`` posted a link and an image in the bot's name, ``#1`` linked an issue.
"""

from __future__ import annotations

import re

from kernelwatch.jobs.github.render import render_comment
from kernelwatch.jobs.judging.verdicts import ClassVerdict, CommitVerdict, MovedCase

HOSTILE = (
    "RuntimeError: @acme/security-team please re-auth at [the portal](https://evil.example/login)"
    " ![pixel](https://evil.example/p.png) see #1 and www.evil.example or https://evil.example"
    " &#64;acme/admins <img src=x> | `x` [ref]: https://evil.example\n# heading"
)
# what GitHub turns into a mention, a reference, a link, an image or an autolink
LIVE = [
    re.compile(r"(?<![\w`])@[A-Za-z0-9]"),  # @user, @org/team
    re.compile(r"(?<![\w\\`])#[0-9]"),  # #123
    re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\("),  # [text](url), ![alt](url)
    re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]:"),  # [ref]: url
    re.compile(r"(?i)https?://|www\."),  # bare autolinks
    re.compile(r"&#"),  # an entity that decodes to "@" or "#"
    re.compile(r"<img|^#(?!## kernelwatch: )", re.M),  # HTML, a heading (not our own)
]


def _verdict(**moved: str) -> CommitVerdict:
    case = MovedCase(
        kernel=moved.get("kernel", "softmax"),
        backend="mylib",
        label=moved.get("label", "n=1024"),
        verdict="error",
        ratio=None,
        ci_low=None,
        ci_high=None,
        baseline_median_s=None,
        median_s=None,
        error=moved.get("error", ""),
        run_id=9,
        source=moved.get("source", ""),
    )
    cls = ClassVerdict(
        "h100",
        "neutral",
        moved.get("description", "no cases measured: the suites selected none"),
        7,
        "succeeded",
        "neutral",
        baseline_sha="b" * 40,
        moved=(case,),
        ignored_config=(moved.get("note", "thresholds.regression 0.5 is looser"),),
    )
    return CommitVerdict("acme/lib", "a" * 40, (cls,))


def _without_own_links(body: str) -> str:
    """The comment less the bot's own dashboard links (``[run 7](https://kw...)``)."""
    return re.sub(r"\[run \d+\]\(https://kw\.example\.com/\?page=[^)\s]*\)", "", body)


def _live(body: str) -> list[str]:
    """What would render live, outside code spans (nothing inside one renders)."""
    text = re.sub(r"`[^`\n]*`", "``", body)
    return [m.group(0) for p in LIVE for m in p.finditer(text)]


def test_a_hostile_error_renders_as_inert_text() -> None:
    body = render_comment(_verdict(error=HOSTILE), dashboard_url="https://kw.example.com")
    ours = _without_own_links(body)
    assert _live(ours) == [], ours
    row = next(line for line in body.splitlines() if line.startswith("| `softmax`"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 7  # six cells: no pipe of theirs splits one
    assert "@\u200dacme/security-team" in row  # still legible, without the ping


def test_every_untrusted_field_of_the_comment_is_neutralised() -> None:
    for field in ("kernel", "label", "source", "description", "note"):
        verdict = _verdict(**{field: HOSTILE})
        body = render_comment(verdict, dashboard_url="https://kw.example.com")
        ours = _without_own_links(body)
        assert _live(ours) == [], (field, ours)
        assert "\n# heading" not in body and "\n- # " not in body, field


def test_the_bisection_comment_keeps_a_hostile_case_pattern_in_its_code_span() -> None:
    from types import SimpleNamespace

    from kernelwatch.jobs.github import bisect_comment

    row = SimpleNamespace(
        id=3,
        culprit_ratio=None,
        culprit_ci_low=None,
        culprit_ci_high=None,
        steps=[],
        culprits=[{"sha": "c" * 40}],
        culprit_verdict="regression",
        device_class="h100",
        culprit_parent="d" * 40,
        good_sha="e" * 40,
        bad_sha="f" * 40,
        case_pattern="soft` @acme/team [x](https://evil.example) `max",
        gpu_seconds=1.0,
    )
    body = bisect_comment.render(row, "https://kw.example.com")  # type: ignore[arg-type]
    assert "cases `soft' @acme/team [x](https://evil.example) 'max`" in body
