"""The one retry policy (``jobs/retry.py``): what is retried, how long it waits, what escapes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kernelwatch.jobs.retry import retrying


class Flaky(Exception):
    def __init__(self, wait_s: float | None = None) -> None:
        super().__init__("flaky")
        self.wait_s = wait_s


def failing(times: int, exc: Exception) -> tuple[list[int], Callable[[], str]]:
    """A function that raises ``exc`` ``times`` times, then answers; and its calls."""
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise exc
        return "done"

    return calls, fn


def test_doubling_waits_capped_and_the_answer_returned() -> None:
    sleeps: list[float] = []
    calls, fn = failing(4, Flaky())
    policy = retrying(on=Flaky, attempts=5, first_s=1.0, max_s=5.0, sleep=sleeps.append)
    assert policy(fn) == "done"
    assert sleeps == [1.0, 2.0, 4.0, 5.0] and len(calls) == 5


def test_the_last_error_escapes_unchanged_after_the_attempts() -> None:
    sleeps: list[float] = []
    calls, fn = failing(10, Flaky())
    with pytest.raises(Flaky):  # not tenacity's RetryError
        retrying(on=Flaky, attempts=3, sleep=sleeps.append)(fn)
    assert len(calls) == 3 and len(sleeps) == 2


def test_other_errors_are_not_retried() -> None:
    calls, fn = failing(1, KeyError("x"))
    with pytest.raises(KeyError):
        retrying(on=Flaky, attempts=5, sleep=lambda s: None)(fn)
    assert len(calls) == 1


def test_a_failure_may_name_its_wait() -> None:
    sleeps: list[float] = []
    _, fn = failing(2, Flaky(wait_s=7.0))
    retrying(
        on=Flaky,
        attempts=3,
        wait_hint=lambda e: e.wait_s if isinstance(e, Flaky) else None,
        sleep=sleeps.append,
    )(fn)
    assert sleeps == [7.0, 7.0]


def test_jitter_waits_half_to_one_step() -> None:
    sleeps: list[float] = []
    _, fn = failing(3, Flaky())
    retrying(on=Flaky, attempts=4, first_s=2.0, jitter=True, sleep=sleeps.append)(fn)
    bands = [(1.0, 2.0), (2.0, 4.0), (4.0, 8.0)]
    assert len(sleeps) == 3
    assert all(lo <= s <= hi for s, (lo, hi) in zip(sleeps, bands, strict=True)), sleeps


def test_no_wait_that_would_end_past_the_patience() -> None:
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        time.sleep(s)

    calls, fn = failing(10, Flaky())
    with pytest.raises(Flaky):
        retrying(on=Flaky, within_s=0.25, first_s=0.1, sleep=sleep)(fn)
    # 0.1 s ends inside the patience; the next 0.2 s would end at ~0.3 s: give up instead
    assert sleeps == [0.1] and len(calls) == 2
