"""The device-side bisection (``benchmarks/gpu/bisect.py``): the service's search and step
judge driven over built commits, with each paired step replaced by a fake measurement.

The real steps need FA3 builds and a GPU; what is checked here is that the device
command asks the service's search, judges records with the service's rule, skips a
commit whose build failed, and reports design.md's bisection JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gpu import bisect, host


def _ctx(tmp_path: Path) -> host.Context:
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    return host.Context(tmp_path, logs, time.monotonic() + 300, cpu=True)


def _args(**kw: Any) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bisect.add_arguments(p)
    return p.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])


def _builds(n: int, failed: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    return [
        {"commit": f"{i:02d}" + "a" * 38, **({} if i in failed else {"pythonpath": [f"/b{i}"]})}
        for i in range(n)
    ]


def _record(verdict: str, ratio: float, *, model: str = "llama3-70b") -> dict[str, Any]:
    return {
        "kernel": "prefill",
        "case_id": "c35ca72f037837f4",
        "status": "pass",
        "params": {"model": model, "seq_q": 1024, "seq_k": 5120},
        "paired": {"verdict": verdict, "ratio": ratio, "ci_low": ratio - 0.05,
                   "ci_high": ratio + 0.05},
    }  # fmt: skip


def _fake_measure(culprit: int, calls: list[tuple[int, int]]) -> Any:
    def measure(ctx, args, n, base, cand, env):  # type: ignore[no-untyped-def]
        b, c = int(base["commit"][:2]), int(cand["commit"][:2])
        calls.append((c, b))
        slow = c >= culprit > b
        records = [
            _record("regression" if slow else "unchanged", 2.2 if slow else 1.0),
            _record("regression", 3.0, model="llama3-8b"),  # outside the case pattern
        ]
        return records, 12.5, 0

    return measure


def test_the_device_search_names_the_culprit_with_its_confirmation_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(bisect, "_measure", _fake_measure(4, calls))
    got = bisect.search(_ctx(tmp_path), _args(), _builds(6))
    assert got["status"] == "found"
    assert got["culprit"]["sha"].startswith("04") and got["culprit"]["parent"].startswith("03")
    assert got["culprit"]["ratio"] == 2.2 and got["culprit"]["verdict"] == "regression"
    assert got["culprit"]["interval"] == pytest.approx([2.15, 2.25])
    purposes = [r["purpose"] for r in got["step_rows"]]
    assert purposes[0] == "establish" and "confirm" in purposes
    assert (4, 3) in calls  # the confirmation: culprit against its parent
    assert got["gpu_seconds"] == pytest.approx(12.5 * len(calls))
    # design.md's shape
    assert set(got["steps"][0]) == {"sha", "verdict", "skipped"}
    assert len(calls) <= 6


def test_a_commit_whose_build_failed_is_skipped_never_blamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(bisect, "_measure", _fake_measure(4, calls))
    got = bisect.search(_ctx(tmp_path), _args(), _builds(6, frozenset({2})))
    assert got["culprit"]["sha"].startswith("04")
    skipped = [r for r in got["step_rows"] if r["skipped"]]
    assert skipped and all(r["sha"].startswith("02") and r["verdict"] == "failed" for r in skipped)
    assert all(c != 2 and b != 2 for c, b in calls)  # never measured


def test_a_failed_build_just_before_the_change_leaves_the_culprit_unnamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as git bisect: the culprit is the skipped commit or the first bad one
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(bisect, "_measure", _fake_measure(3, calls))
    got = bisect.search(_ctx(tmp_path), _args(), _builds(6, frozenset({2})))
    assert got["culprit"] is None and got["status"] == "not_found"
    assert "only skipped commits" in got["reason"]


def test_a_range_that_does_not_differ_names_no_culprit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(bisect, "_measure", _fake_measure(99, calls))
    got = bisect.search(_ctx(tmp_path), _args(), _builds(6))
    assert got["culprit"] is None and got["status"] == "not_found"
    assert calls == [(5, 0)]  # establish only


def test_a_search_resumes_from_an_earlier_calls_steps_and_builds_only_what_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the H200 call 1 of 2026-12-01: establish and two search steps, then out of time
    first = Path(__file__).resolve().parents[2] / "docs/data/h200-2026-12-01-s21/call1/bisect.json"
    commits = list(bisect.FA3_DISTINCT)
    prior = bisect.prior_steps(first, commits)
    assert [s.index for s in prior[0]] == [5, 2, 1] and prior[2] == pytest.approx(322.8)
    # bc0e4ac0 (3) may be the next segment's middle; d2340513 (4) is three steps away
    assert bisect.needed_builds(5, prior[0]) == [0, 1, 2, 3, 5]
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(bisect, "_measure", _fake_measure(2, calls))
    got = bisect.search(_ctx(tmp_path), _args(), _builds(6), prior)
    assert calls[0] == (2, 1)  # the confirmation comes next, nothing measured twice
    assert got["culprit"]["sha"].startswith("02") and got["step_rows"][0]["prior"] is True
