"""The host's launch time beside a paired verdict: a note, never a verdict.

The gate judges GPU time: the timer's host guard queues a spin before every timed call,
so the samples hold the kernel and not the Python wrapper that launched it
(``timing.HostGuard``). That is the right thing to gate on, and it hides one real change:
a wrapper that got slower to launch. An eager caller (no CUDA graph, no torch.compile)
waits on the host where its launch outlasts the kernel. FlashAttention-3's 59df2f9b
rewrote ``flash_attn_interface.py`` for torch.compile. Before the guard existed,
kernelwatch bisected a 1.68x slowdown on a 115 µs prefill to it; with the guard the
kernel reads 1.0004 (H200, 2026-12-06). A launch of about 110 µs fits the old figure.

Each side measures its host's time to queue one call in every timed block, while only
it runs (``timing.Sampler.launches_since``). Set-up's calls run beside every other side
setting up: from them an A/A pair read 28.4 against 50.3 µs on an H100 (2026-12-06). The
paired record carries a note where three things hold: the two roles' medians differ by
``LAUNCH_RATIO`` or more; every side of the slower role launched slower than every side
of the faster one (where a role has several); and the slower launch is at least
``LAUNCH_SHARE`` of the GPU time per call. It never moves the verdict: the host's time is
a CPU's, on a loaded host too, and blocking a merge on it would block on the machine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kernelwatch.kernels import stats

# A change of a half or more in the median launch: a launch is a CPU's time and varies
# with the host, and a note that cries wolf is worse than none.
LAUNCH_RATIO = 1.5
# ... of a launch long enough to matter beside the kernel it queues.
LAUNCH_SHARE = 0.25


def _measured(per_side: Iterable[float | None]) -> list[float]:
    """The sides that measured a launch: a positive, finite number of seconds."""
    return [v for v in per_side if v is not None and math.isfinite(v) and v > 0]


def role_launch_s(per_side: Iterable[float | None]) -> float | None:
    """A role's launch time: the median of its sides' medians (None where none said)."""
    values = _measured(per_side)
    return stats.median(values) if values else None


def launch_note(
    baseline_sides: Iterable[float | None],
    candidate_sides: Iterable[float | None],
    gpu_s: float | None,
) -> str:
    """The note a paired record carries about the host's launch, or ``""``.

    ``*_sides``: each side's median launch (seconds); ``gpu_s``: the candidate's GPU
    time per call (the verdict's median).
    """
    baseline_sides, candidate_sides = _measured(baseline_sides), _measured(candidate_sides)
    if not baseline_sides or not candidate_sides or not gpu_s or gpu_s <= 0:
        return ""
    base, cand = stats.median(baseline_sides), stats.median(candidate_sides)
    ratio = cand / base
    if 1 / LAUNCH_RATIO < ratio < LAUNCH_RATIO:
        return ""
    if max(base, cand) < LAUNCH_SHARE * gpu_s:
        return ""
    slow, fast = (
        (candidate_sides, baseline_sides) if ratio > 1 else (baseline_sides, candidate_sides)
    )
    if min(slow) <= max(fast):  # the roles' sides overlap: the host's spread, not the code
        return ""
    word = "slower" if ratio > 1 else "faster"
    return (
        f"host launch {base * 1e6:.1f} → {cand * 1e6:.1f} µs a call "
        f"({ratio:.2f}x, {word}; GPU {gpu_s * 1e6:.1f} µs): an eager caller waits on it; "
        "the verdict judges GPU time only"
    )


__all__ = ["LAUNCH_RATIO", "LAUNCH_SHARE", "launch_note", "role_launch_s"]
