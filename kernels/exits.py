"""How a child process ended, in words: one text for every runner the service starts.

The worker describes the suite runner's end with it (``runner killed by SIGSEGV``,
``worker/process.py``) and the paired mode its side processes' (``candidate (side B)
killed by SIGSEGV``, ``kernels/paired.py``), so a crash reads the same in both modes.
Standard library only: ``kernels`` may not import the worker.
"""

from __future__ import annotations

import signal


def describe_exit(code: int | None) -> str:
    """``still running`` (None), ``exit code N`` or ``killed by SIGNAME`` (a negative
    code, as ``subprocess`` reports a death by signal)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


__all__ = ["describe_exit"]
