"""The host's launch time is reported beside a paired verdict and never judged.

FlashAttention-3's 59df2f9b was bisected at 1.68x on a 115 µs prefill before the timer's
host guard; with the guard the kernel reads 1.0004. A wrapper that got slower to launch
is real to an eager caller, and the gate judges GPU time only: the paired record carries
each role's launch (``baseline_host_launch_s``, ``candidate_host_launch_s``) and a
``launch_note`` where it changed enough to matter (``kernels/launch.py``); ``show``
and the PR comment print it; the verdict stays the GPU time's.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from kernelwatch.db.config import Settings
from kernelwatch.jobs.github.render import LAUNCH_SHOWN, render_comment
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.jobs.judging.verdicts import CommitVerdict, class_verdict
from kernelwatch.kernels.launch import LAUNCH_RATIO, LAUNCH_SHARE, launch_note, role_launch_s
from kernelwatch.kernels.record import PairedSection, launch_notes
from tests.jobs.judging.test_cpu_plumbing import _record, stored_run

GPU_S = 115e-6  # FA3's GQA-8 prefix case


def test_a_launch_that_grew_beside_the_kernel_is_named() -> None:
    note = launch_note([12e-6], [110e-6], GPU_S)
    assert "12.0 → 110.0 µs" in note and "slower" in note and "GPU 115.0 µs" in note
    assert "verdict judges GPU time only" in note
    assert "faster" in launch_note([110e-6], [12e-6], GPU_S)


@pytest.mark.parametrize(
    ("baseline", "candidate", "gpu", "why"),
    [
        ([12e-6], [12e-6 * (LAUNCH_RATIO - 0.01)], GPU_S, "within the host's own spread"),
        ([2e-6], [20e-6], 1e-3, "10x, but both far below a 1 ms kernel"),
        ([], [110e-6], GPU_S, "a role without a launch time (CPU path)"),
        ([12e-6], [110e-6], None, "no GPU time to compare with"),
        # medians 1.67x apart, but a candidate side launched as fast as a baseline one
        ([30e-6, 30e-6, 60e-6], [50e-6, 50e-6, 29e-6], GPU_S, "the roles' sides overlap"),
    ],
)
def test_no_note_where_the_launch_did_not_change_or_does_not_matter(
    baseline: list[float], candidate: list[float], gpu: float | None, why: str
) -> None:
    assert launch_note(baseline, candidate, gpu) == "", why


def test_the_share_threshold_is_of_the_slower_launch() -> None:
    gpu = 100e-6
    assert launch_note([1e-6], [LAUNCH_SHARE * gpu], gpu) != ""
    assert launch_note([1e-6], [LAUNCH_SHARE * gpu * 0.99], gpu) == ""


def test_every_side_of_the_slower_role_must_be_slower() -> None:
    apart = launch_note([11e-6, 12e-6, 13e-6], [100e-6, 110e-6, 120e-6], GPU_S)
    assert "12.0 → 110.0 µs" in apart
    # a side that measured nothing (None, NaN) is left out of the medians and the overlap
    gaps = launch_note([11e-6, None, 13e-6], [100e-6, float("nan"), 120e-6], GPU_S)
    assert "12.0 → 110.0 µs" in gaps


def test_a_roles_launch_is_the_median_of_its_sides() -> None:
    assert role_launch_s([10e-6, 12e-6, None, 50e-6]) == pytest.approx(12e-6)
    assert role_launch_s([None, float("nan")]) is None
    assert role_launch_s([]) is None


def test_the_section_keeps_both_launches_and_the_note() -> None:
    note = launch_note([12e-6], [110e-6], GPU_S)
    section = PairedSection.from_dict(
        {
            "verdict": "unchanged",
            "baseline_host_launch_s": 12e-6,
            "candidate_host_launch_s": 110e-6,
            "launch_note": note,
        }
    )
    assert section.baseline_host_launch_s == 12e-6 and section.launch_note == note
    old = PairedSection.from_dict({"verdict": "unchanged"})  # a record from before
    assert old.launch_note == "" and old.candidate_host_launch_s is None


def _launched(kernel: str, ratio: float, note: str) -> dict[str, Any]:
    record = _record(kernel, "pass", "unchanged", ratio)
    record["paired"].update(
        baseline_host_launch_s=12e-6, candidate_host_launch_s=110e-6, launch_note=note
    )
    return record


def test_show_and_the_pr_comment_name_it_and_the_verdict_stays(session: Session) -> None:
    note = launch_note([12e-6], [110e-6], GPU_S)
    run = stored_run(
        session,
        "h100",
        _launched("attention", 1.0004, note),
        _record("rmsnorm", "pass", "unchanged", 1.001),
    )
    assert analyze(session, run, Settings(cpu_timing_gates=True))
    assert run.verdict == "pass"  # a launch note never moves the gate
    session.commit()
    summary = run_summary(session, run)
    (said,) = summary["launch"]
    assert said.startswith("attention: ") and note in said
    text = format_run(summary)
    assert "host launch changed (reported, not gated):" in text and note in text
    comment = render_comment(
        CommitVerdict("o/lib", "c" * 40, (class_verdict(session, run),)),
        dashboard_url="http://x",
    )
    assert "Host launch changed on `h100` (not gated):" in comment
    assert note in comment and "rmsnorm" not in comment.split("Host launch changed")[1]


def test_the_comment_names_a_few_and_counts_the_rest(session: Session) -> None:
    note = launch_note([12e-6], [110e-6], GPU_S)
    records = [_launched(f"k{i}", 1.0, note) for i in range(LAUNCH_SHOWN + 3)]
    run = stored_run(session, "h100", *records)
    assert analyze(session, run, Settings(cpu_timing_gates=True))
    session.commit()
    comment = render_comment(
        CommitVerdict("o/lib", "c" * 40, (class_verdict(session, run),)),
        dashboard_url="http://x",
    )
    assert comment.count("host launch 12.0 → 110.0") == LAUNCH_SHOWN
    assert "- and 3 more (see the run)" in comment
    assert len(launch_notes(r.record for r in run.results)) == LAUNCH_SHOWN + 3
