"""One way to write a timing change and a time, for every page, the CLI and the PR comment.

A change is a ratio (candidate / baseline median time, above 1 is slower) with its
interval, and the relative change beside it where that reads better:
``1.063× [1.041, 1.085] (+6.3 %)``. Issue 18 found "5.85× slower" in the CLI and
"+485.3 %" on the dashboard for the same case; both now call this module.

Standard library only: the dashboard, ``jobs/`` (CLI, PR comment) and the suite runner's
environment all import it, and none of them may pull the other's dependencies in.
"""

from __future__ import annotations

import math

TIMES = "×"


def _num(v: object) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def pct(ratio: object) -> str:
    """The relative change of ``ratio``: ``+6.3 %``, ``-25.0 %``; ``–`` when unknown."""
    r = _num(ratio)
    return "–" if r is None else f"{(r - 1) * 100:+.1f} %"


def ratio_text(
    ratio: object, low: object = None, high: object = None, *, percent: bool = True
) -> str:
    """``1.063× [1.041, 1.085] (+6.3 %)``: the ratio, its interval when known, the change.

    ``–`` when the ratio is unknown (a new case, a broken one); without an interval the
    brackets are left out; ``percent=False`` leaves the change out (narrow columns).
    """
    r = _num(ratio)
    if r is None:
        return "–"
    text = f"{r:.3f}{TIMES}"
    lo, hi = _num(low), _num(high)
    if lo is not None and hi is not None:
        text += f" [{lo:.3f}, {hi:.3f}]"
    if percent:
        text += f" ({pct(r)})"
    return text


def time_unit(seconds: object) -> tuple[str, float]:
    """A unit that makes ``seconds`` readable, and its factor from seconds."""
    v = _num(seconds)
    if v is None or abs(v) >= 1:
        return "s", 1.0
    if abs(v) >= 1e-3:
        return "ms", 1e3
    if abs(v) >= 1e-6:
        return "µs", 1e6
    return "ns", 1e9


def seconds_text(seconds: object) -> str:
    """A time per call in the unit that reads best: ``48.56 ms``, ``11.26 µs``; ``–``."""
    v = _num(seconds)
    if v is None:
        return "–"
    unit, factor = time_unit(v)
    return f"{v * factor:.4g} {unit}"


def interval_text(low: object, high: object) -> str:
    """``[1.041, 1.085]``, or ``–`` when either bound is unknown."""
    lo, hi = _num(low), _num(high)
    return "–" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


__all__ = ["TIMES", "interval_text", "pct", "ratio_text", "seconds_text", "time_unit"]
