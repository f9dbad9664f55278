"""Builds ahead of a bisection: the commits its next steps may measure, sent to be built.

Why: a bisection step is a paired run on the GPU queue, and its worker builds the step
commit first; FlashAttention-3 takes ~100 s a build, all of it GPU time spent waiting.
While a step measures, the commits the next steps can measure are known
(:func:`bisect.upcoming`: both outcomes of each step, ``KW_BISECT_BUILD_AHEAD`` steps
deep), so idle CPU workers consuming the ``build`` queue (``queues.BUILD_QUEUE``) build
them into the environment cache the GPU workers share (``worker/prebuild.py``), and the
step run finds its environment there.

What is sent is what the search may need and was not sent before: the driver
(``bisect_driver.advance``) calls :func:`due` once per planned step. "Sent before" is
not stored: it is the union of what :func:`upcoming` said when each earlier step was
planned, recomputed from the steps alone, so a restarted process sends nothing twice
and no migration is needed. A send the broker refused is not retried (the step's own
run builds that commit then); a resent build would be harmless anyway, a cache hit.

This module decides and sends; it builds nothing and records nothing (a build-ahead
is not a run), and the search itself stays in ``bisect.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from celery import Celery

from kernelwatch.jobs.planning.bisect import Limits, Step, upcoming
from kernelwatch.jobs.planning.broker import enqueue_build
from kernelwatch.jobs.planning.queues import BUILD_QUEUE

log = logging.getLogger(__name__)


def due(
    last: int, steps: Sequence[Step], limits: Limits, *, establish: bool, depth: int
) -> list[int]:
    """The commit indices to send now that ``steps[-1]`` was planned (it is in flight).

    :func:`upcoming` of these steps, less what it said when each earlier step was
    planned (then ``steps[:k]`` had ended and ``steps[k]`` was in flight). The budget
    is left out of that replay: a step was planned each time, so it was not spent.
    """
    if depth < 1 or not steps:
        return []
    replay = Limits(max_steps=limits.max_steps)
    sent: set[int] = set()
    for k in range(len(steps) - 1):
        then = [*steps[:k], replace(steps[k], outcome=None)]
        sent.update(upcoming(last, then, replay, establish=establish, depth=depth))
    now = upcoming(last, steps, limits, establish=establish, depth=depth)
    return [i for i in now if i not in sent]


def wanted(
    last: int, steps: Sequence[Step], limits: Limits, *, establish: bool, depth: int
) -> set[int]:
    """The commits a build-ahead is still useful for: the ones in flight and upcoming.

    A build worker asks before it builds, so the branch the search did not take is
    dropped instead of holding the build queue (each step sends up to 2^depth builds,
    one of which the search will take).
    """
    flight = {i for s in steps if s.outcome is None for i in (s.index, s.against)}
    return flight | set(upcoming(last, steps, limits, establish=establish, depth=depth))


def send(app: Celery, bisection_id: int, shas: Sequence[str], depth: int) -> list[str]:
    """Send one build-ahead per sha to the ``build`` queue; the shas that were sent.

    The broker down (any error of the first failing send) ends the sending with a
    warning, never the bisection: its steps build for themselves.
    """
    sent: list[str] = []
    for sha in shas:
        try:
            enqueue_build(app, BUILD_QUEUE, bisection_id, sha, depth)
        except Exception as exc:  # kombu/redis raise several types for "broker down"
            log.warning(
                "bisection %s: build-ahead of %s not sent (%s: %s); its step builds it",
                bisection_id,
                sha[:12],
                type(exc).__name__,
                exc,
            )
            break
        sent.append(sha)
    return sent


__all__ = ["due", "send", "wanted"]
