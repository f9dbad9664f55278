"""A neutral verdict on GitHub: check-run conclusion ``neutral``, a status that says what is open.

When cases stay inconclusive after their re-measures (``KW_INCONCLUSIVE_POLICY``
neutral, the default), the check run concludes ``neutral`` and the commit status
(which has no neutral state) is ``success`` with a description naming each open
case and the change its interval excluded. Sent to the loopback GitHub.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.github.client import GitHubClient
from kernelwatch.jobs.github.reporter import Reporter, status_text
from kernelwatch.jobs.judging.verdicts import ClassVerdict, MovedCase
from tests.fake_github import FakeGitHub

FULL, SHA = "acme/kernels", "c" * 40


def _moved(kernel: str, verdict: str, lo: float | None, hi: float | None) -> MovedCase:
    return MovedCase(kernel, "kern", "m=64", verdict, 1.01, lo, hi, 1e-5, 1.01e-5)


NEUTRAL = ClassVerdict(
    device_class="h200",
    state="neutral",
    description="2 inconclusive, 8 unchanged",
    run_id=1,
    run_status="succeeded",
    run_verdict="neutral",
    moved=(
        _moved("gemm", "inconclusive", 0.963, 1.066),
        _moved("decode_paged", "inconclusive", None, None),
        _moved("softmax", "improvement", 0.9, 0.95),
    ),
    paired=True,
)


def test_the_status_text_names_the_open_cases_and_the_excluded_change() -> None:
    text = status_text(NEUTRAL)
    assert text.startswith("neutral: 2 inconclusive, 8 unchanged. Inconclusive: ")
    # [0.963, 1.066]: neither a 6.6 % slowdown nor a 3.8 % speed-up is ruled out
    assert "gemm m=64 (a change beyond ±6.6 % is excluded)" in text
    assert "decode_paged m=64 (no interval)" in text
    assert "softmax" not in text  # decided cases are the comment's business
    plain = ClassVerdict("h200", "success", "10 unchanged", 1, "succeeded", "pass")
    assert status_text(plain) == "10 unchanged"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def factory(tmp_path: Path) -> sessionmaker[Session]:
    settings = Settings(data_dir=tmp_path / "data")
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    return sessionmaker(bind=make_engine(settings.resolved_database_url))


def _reporter(
    factory: sessionmaker[Session], fake: FakeGitHub, tmp_path: Path, checks: bool
) -> Reporter:
    settings = Settings(data_dir=tmp_path / "data", github_checks=checks)
    return Reporter(factory, settings, GitHubClient("test-token", fake.url, max_retries=0))


def test_a_neutral_class_is_a_neutral_check_run(
    factory: sessionmaker[Session], fake: FakeGitHub, tmp_path: Path
) -> None:
    reporter = _reporter(factory, fake, tmp_path, checks=True)
    assert reporter.send_status(FULL, SHA, "h200", "neutral", status_text(NEUTRAL))
    (run,) = fake.check_runs
    assert run["status"] == "completed" and run["conclusion"] == "neutral"
    assert "±6.6 % is excluded" in run["output"]["title"]


def test_a_neutral_class_is_a_success_status_that_says_so(
    factory: sessionmaker[Session], fake: FakeGitHub, tmp_path: Path
) -> None:
    reporter = _reporter(factory, fake, tmp_path, checks=False)
    assert reporter.send_status(FULL, SHA, "h200", "neutral", status_text(NEUTRAL))
    status = fake.latest_status(FULL, SHA, "kernelwatch/h200")
    assert status is not None and status["state"] == "success"
    assert status["description"].startswith("neutral: 2 inconclusive")
    assert "gemm m=64" in status["description"] and len(status["description"]) <= 140
    # the same state and text again is not sent twice
    assert not reporter.send_status(FULL, SHA, "h200", "neutral", status_text(NEUTRAL))
