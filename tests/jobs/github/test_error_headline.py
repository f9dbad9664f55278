"""The PR comment's headline says whose error it was.

A kernel that now segfaults made the run's verdict ``error``, and the comment was headed
"could not judge every GPU class", which reads as the service's fault; a user's review
took it for infrastructure. Cases that ended in an error are named as such; a class
whose run itself failed keeps the old words.
"""

from __future__ import annotations

from kernelwatch.jobs.github.render import render_comment
from kernelwatch.jobs.judging.verdicts import ClassVerdict, CommitVerdict


def test_a_crashed_case_is_named_not_blamed_on_the_service() -> None:
    cv = ClassVerdict("h200", "error", "1 error, 3 unchanged", 7, "succeeded", "error",
                      counts={"error": 1, "unchanged": 3})  # fmt: skip
    comment = render_comment(CommitVerdict("o/kern", "a" * 40, (cv,)), dashboard_url="http://kw")
    assert "1 case ended in an error (crash, timeout, out of memory): not judged" in comment
    assert "could not judge every GPU class" not in comment
    two = ClassVerdict("h200", "error", "2 error", 7, "succeeded", "error", counts={"error": 2})
    assert "2 cases ended in an error" in render_comment(
        CommitVerdict("o/kern", "a" * 40, (two,)), dashboard_url="http://kw"
    )


def test_a_run_that_failed_keeps_could_not_judge() -> None:
    cv = ClassVerdict("h200", "error", "run failed: install failed", 7, "failed", "error")
    comment = render_comment(CommitVerdict("o/kern", "a" * 40, (cv,)), dashboard_url="http://kw")
    assert "could not judge every GPU class" in comment


def test_an_error_does_not_hide_the_regressions_beside_it() -> None:
    cv = ClassVerdict("h200", "error", "3 error, 75 regression", 7, "succeeded", "error",
                      counts={"error": 3, "regression": 75, "less_accurate": 1,
                              "unchanged": 42})  # fmt: skip
    comment = render_comment(CommitVerdict("o/kern", "a" * 40, (cv,)), dashboard_url="http://kw")
    headline = comment.splitlines()[1]
    assert headline.startswith("### kernelwatch: ⚠️ 3 cases ended in an error")
    assert headline.endswith("; ❌ 75 regressions, 1 less_accurate among the rest")
