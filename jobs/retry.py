"""One retry policy for kernelwatch's transient failures, on tenacity.

Who retries with it: the GitHub client (5xx answers, transport errors, rate limits),
the worker's database writes (an outage of up to ``db_patience_s``) and the worker's
result insert that can race another delivery of the same task. The rule is the same
for all of them:

- exponential backoff, ``first_s`` doubling per attempt, capped at ``max_s``, with
  optional half jitter (a wait in [½, 1] of the step: many clients do not retry in step);
- a failure may name its own wait (``wait_hint``: GitHub's ``retry-after``);
- stop after ``attempts`` attempts, or before a wait would end past ``within_s``;
- the last exception propagates unchanged (never tenacity's ``RetryError``), so a
  caller's error types mean what they meant without retries.

What it does not cover: Celery's task retries (``worker/app.py``: across processes, by
the broker), the suite runner's restart after a crash (``worker/suite_process.py``: a
crash costs one case, it is not retried), and the paired mode's re-measures of an
inconclusive case (statistics, not failure).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    stop_before_delay,
    stop_never,
)
from tenacity.stop import stop_base

Failure = type[BaseException] | tuple[type[BaseException], ...]


def backoff(
    first_s: float, max_s: float, *, jitter: bool = False, rand: Callable[[], float] = random.random
) -> Callable[[RetryCallState], float]:
    """The wait before the next attempt: ``first_s · 2^(n-1)`` (jittered), at most ``max_s``."""

    def wait(state: RetryCallState) -> float:
        step: float = first_s * 2.0 ** (state.attempt_number - 1)
        if jitter:
            step *= 0.5 + rand() / 2
        return min(max_s, step)

    return wait


def retrying(
    *,
    on: Failure,
    attempts: int | None = None,
    within_s: float | None = None,
    first_s: float = 1.0,
    max_s: float = 60.0,
    jitter: bool = False,
    wait_hint: Callable[[BaseException], float | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Retrying:
    """The policy as a tenacity ``Retrying``: ``retrying(on=E, attempts=3)(fn, *args)``.

    ``attempts`` counts every call, the first included. ``sleep`` is injectable so tests
    record the waits instead of spending them.
    """
    stops: list[stop_base] = []
    if attempts is not None:
        stops.append(stop_after_attempt(attempts))
    if within_s is not None:
        stops.append(stop_before_delay(within_s))
    base = backoff(first_s, max_s, jitter=jitter)

    def wait(state: RetryCallState) -> float:
        if wait_hint is not None and state.outcome is not None and state.outcome.failed:
            exc = state.outcome.exception()
            hinted = wait_hint(exc) if exc is not None else None
            if hinted is not None:
                return hinted
        return base(state)

    return Retrying(
        sleep=sleep,
        stop=stop_any(*stops) if stops else stop_never,
        wait=wait,
        retry=retry_if_exception_type(on),
        reraise=True,
    )


__all__ = ["Failure", "backoff", "retrying"]
