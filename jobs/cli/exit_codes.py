"""The exit codes of ``run --wait``, ``gate``, ``bisect``, ``show`` and ``bench`` (design.md).

One mapping, so a script reads every command alike:

====  =========  ======================================================================
code  name       when
====  =========  ======================================================================
0     PASS       nothing regressed, lost accuracy or broke
1     FAIL       a regression, ``less_accurate`` or broken case (wins over an error
                 elsewhere: a definite finding is the more useful answer)
2     ERROR      an error, a timeout, bad input, or no finished answer
3     NEUTRAL    something stayed inconclusive after its re-measures
====  =========  ======================================================================

Every non-zero exit comes with a message on stderr (:func:`fail`). A reader that closes
the pipe early (``kernelwatch show 26 | head -1``) ends the command quietly with
:data:`BROKEN_PIPE`, the status a shell gives a process stopped by SIGPIPE.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import IntEnum

from kernelwatch.kernels.verdict import RunVerdict


class Exit(IntEnum):
    PASS = 0
    FAIL = 1
    ERROR = 2
    NEUTRAL = 3


BROKEN_PIPE = 128 + 13

# What each code tells a person, for the stderr line of a non-zero exit.
MEANING = {
    Exit.PASS: "nothing regressed, lost accuracy or broke",
    Exit.FAIL: "a case regressed, lost accuracy or broke",
    Exit.ERROR: "an error, a timeout or no finished answer",
    Exit.NEUTRAL: "a case stayed inconclusive after its re-measures",
}

# Which code wins when several answers are combined (first wins).
_PRECEDENCE = (Exit.FAIL, Exit.ERROR, Exit.NEUTRAL, Exit.PASS)

# A run's verdict, or a commit's overall answer (``gate``), to its code. ``pending`` and
# ``none`` (no runs) are no finished answer: an error for a script that asked for one.
_ANSWERS: dict[str, Exit] = {
    RunVerdict.PASS: Exit.PASS,
    RunVerdict.FAIL: Exit.FAIL,
    RunVerdict.ERROR: Exit.ERROR,
    RunVerdict.NEUTRAL: Exit.NEUTRAL,
    "pending": Exit.ERROR,
    "none": Exit.ERROR,
}

# Run states that end without a measurement to judge.
_UNMEASURED = frozenset({"failed", "error", "cancelled"})

# Result-record statuses (``kernelwatch bench``): a wrong result fails, a crash errors.
_CASE_STATUS = {"pass": Exit.PASS, "skip": Exit.PASS, "fail": Exit.FAIL, "error": Exit.ERROR}


def worst(codes: Iterable[Exit]) -> Exit:
    """The combined code of several answers; PASS for none."""
    seen = set(codes)
    return next((c for c in _PRECEDENCE if c in seen), Exit.PASS)


def for_answer(word: str | None) -> Exit:
    """The code of a run verdict or a gate answer; unknown or missing is ERROR."""
    return _ANSWERS.get(word or "none", Exit.ERROR)


def for_run(status: str, verdict: str | None) -> Exit:
    """One run after ``--wait``: a run that failed to build or errored is an ERROR."""
    if status in _UNMEASURED:
        return Exit.ERROR
    return for_answer(verdict)


# A bisection's state after ``bisect --wait``: a named culprit is a finding (something
# regressed, lost accuracy or broke); no culprit is an open question; the rest errors.
_BISECTION = {"found": Exit.FAIL, "not_found": Exit.NEUTRAL}


def for_bisection(status: str) -> Exit:
    """``bisect --wait``: 1 culprit found, 3 none found, 2 error, cancelled or still running."""
    return _BISECTION.get(status, Exit.ERROR)


def for_case_statuses(statuses: Iterable[str]) -> Exit:
    """``kernelwatch bench``: FAIL if a kernel was wrong, ERROR if one raised or crashed."""
    return worst(_CASE_STATUS.get(s, Exit.ERROR) for s in statuses)


def fail(command: str, message: str, code: Exit = Exit.ERROR) -> Exit:
    """Say why on stderr and return ``code``: no command exits non-zero in silence."""
    print(f"kernelwatch {command}: {message}", file=sys.stderr)
    return code


__all__ = [
    "BROKEN_PIPE",
    "MEANING",
    "Exit",
    "fail",
    "for_answer",
    "for_bisection",
    "for_case_statuses",
    "for_run",
    "worst",
]
