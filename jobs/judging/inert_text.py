"""Untrusted text as inert markdown: the PR comment and the dashboard.

Text from code under test or from a repository (an exception message, a case label, a
kernel name, a commit message) is rendered where markdown is: the bot's PR comment
(``jobs/github/render.py``) and the dashboard's pages (Streamlit markdown). There it
could ping teams, link issues, post links and images in the bot's name or load an
image in every viewer's browser (an audit, 2026-12-05). One home for the rule, so both
surfaces neutralise the same things.
"""

from __future__ import annotations

import re

# A zero-width joiner after "@" and "#" breaks mentions and references (whatever
# GitHub does with escapes); a backslash escapes "[", "]" and "!" (no link, image or
# footnote starts without "["; the parentheses of "(1 not measured)" stay as they are);
# a zero-width space breaks a bare URL's autolink.
_ZWJ = "\u200d"
_ZWSP = "\u200b"
_MD_ESCAPED = str.maketrans(
    {
        "\\": "\\\\",
        "&": "&amp;",  # "&#64;team" would decode to a mention
        "|": "\\|",
        "`": "'",
        "<": "&lt;",
        ">": "&gt;",
        "[": "\\[",
        "]": "\\]",
        "!": "\\!",
        "#": "\\#" + _ZWJ,
        "@": "@" + _ZWJ,
    }
)
_AUTOLINK = re.compile(r"(?i)(?<=[a-z])(?=://)|(?<=\bwww)(?=\.)")


def inert(text: str) -> str:
    """Untrusted text as inert markdown, table-cell safe: newlines folded, pipes escaped,
    backticks and HTML neutralised, no mention, reference, link, image or autolink."""
    return _AUTOLINK.sub(_ZWSP, " ".join(text.split()).translate(_MD_ESCAPED))


def code_span(text: str) -> str:
    """Untrusted text as an inline code span (nothing inside one renders), table-cell
    safe: newlines folded, a backtick cannot close it, pipes escaped (GFM splits cells
    on them even inside code)."""
    return "`" + " ".join(text.split()).replace("`", "'").replace("|", "\\|") + "`"


__all__ = ["code_span", "inert"]
