"""Formatting of times, ratios and commits for display; no Streamlit, no database."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import pandas as pd

from kernelwatch.kernels import units
from kernelwatch.kernels.verdict import CaseVerdict


def is_num(v: Any) -> TypeGuard[float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def short_sha(sha: Any, n: int = 10) -> str:
    return sha[:n] if isinstance(sha, str) else ""


def first_line(text: Any, n: int = 80) -> str:
    if not isinstance(text, str) or not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= n else line[: n - 1] + "…"


time_unit = units.time_unit  # one home: kernels/units.py
seconds = units.seconds_text


def duration(v: Any) -> str:
    """Wall-clock duration of a run or a wait: 42 s, 3 m 05 s, 2 h 10 m, 9 d 02 h."""
    if not is_num(v):
        return "–"
    s = int(round(v))
    if s < 60:
        return f"{v:.1f} s" if v < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    if s < 2 * 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


def change(ratio: Any, low: Any = None, high: Any = None) -> str:
    """A ratio as a relative change with its interval: ``+12.3 % [+8.1, +16.0]``."""
    if not is_num(ratio):
        return "–"
    text = f"{(ratio - 1) * 100:+.1f} %"
    if is_num(low) and is_num(high):
        text += f" [{(low - 1) * 100:+.1f}, {(high - 1) * 100:+.1f}]"
    return text


def ratio(ratio: Any, low: Any = None, high: Any = None) -> str:
    """A ratio with its interval and change: ``1.123× [1.081, 1.160] (+12.3 %)``.

    The one convention of every page, the CLI and the PR comment (``kernels/units.py``).
    """
    return units.ratio_text(ratio, low, high)


# How the pages name what started a run; scheduled runs (kernelwatch beat) say so.
TRIGGERS = {
    "push": "push",
    "pull_request": "pull request",
    "nightly": "scheduled: branch",
    "release": "scheduled: new release",
    "manual": "manual",
    "bisect": "bisection step",
    "auto": "automatic",
    "demo": "demo",
    "import": "import",
    "backfill": "backfill",
}
SCHEDULED = ("nightly", "release")


def trigger(word: Any) -> str:
    """``scheduled: new release`` for ``release``; an unknown word as it is."""
    return TRIGGERS.get(str(word), str(word)) if isinstance(word, str) and word else "–"


def text(value: Any) -> str:
    """A cell for people: ``–`` for a missing value (never ``None`` or ``nan``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return "–"
    return str(value)


def headers(table: pd.DataFrame) -> pd.DataFrame:
    """snake_case column names as words: ``gpu_seconds`` → ``gpu seconds``."""
    return table.rename(columns=lambda c: str(c).replace("_", " "))


def params(p: Any) -> str:
    if not isinstance(p, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in sorted(p.items()))


# Row colours of moved cases (runs, regressions, compare): red slower or wrong, green faster.
ROW_COLORS = {
    CaseVerdict.REGRESSION.value: "background-color: rgba(255, 75, 75, 0.18)",
    CaseVerdict.BROKEN.value: "background-color: rgba(255, 75, 75, 0.18)",
    CaseVerdict.LESS_ACCURATE.value: "background-color: rgba(255, 165, 0, 0.18)",
    CaseVerdict.IMPROVEMENT.value: "background-color: rgba(33, 195, 84, 0.15)",
}


def highlight(table: pd.DataFrame, column: str = "verdict") -> Any:
    """``table`` styled with moved rows coloured by their verdict (a pandas Styler)."""

    def colour(row: pd.Series) -> list[str]:
        return [ROW_COLORS.get(str(row[column]), "")] * len(row)

    return table.style.apply(colour, axis=1)
