"""One rule: the gate, the Compare page and the PR comment give the same verdict.

The same comparisons go through the run analysis (paired records re-judged at each
case's threshold, and the unpaired path from raw samples), the dashboard's
``compare_stats`` and the PR comment renderer; each must say what
``kernels.verdict.decide`` says. Issue 12's example is the first: 1.06 in
[1.02, 1.10] at 5 % was a regression at the gate and inconclusive on the Compare page.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy.orm import Session

from kernelwatch.dashboard import compare_stats
from kernelwatch.db.config import Settings
from kernelwatch.db.models import Result, Run
from kernelwatch.db.store import get_or_create_repository, store_record, upsert_commit
from kernelwatch.jobs.github.render import render_comment
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.comparison import compare
from kernelwatch.jobs.judging.verdicts import CommitVerdict, class_verdict
from kernelwatch.kernels.record import ResultRecord
from kernelwatch.kernels.verdict import MOVED, decide

# (ratio, low, high, minimum effect, the rule's verdict)
INTERVALS = [
    (1.06, 1.02, 1.10, 0.05, "regression"),  # issue 12: the gate and Compare disagreed
    (1.009, 1.004, 1.014, 0.01, "regression"),  # a true +1 %, flagged (the old rule: not)
    (1.004, 1.001, 1.007, 0.01, "unchanged"),  # significant, below the minimum effect
    (1.0, 0.995, 1.005, 0.01, "unchanged"),
    (1.008, 0.99, 1.03, 0.01, "inconclusive"),
    (0.95, 0.93, 0.97, 0.01, "improvement"),
    (1.03, 1.01, 1.045, 0.05, "unchanged"),  # +5 % excluded
]


def _record(i: int, ratio: float, lo: float, hi: float) -> dict[str, Any]:
    t = 1e-3 * ratio
    return {
        "schema": 1,
        "suite": f"s{i}",
        "case_id": f"case-{i}",
        "kernel": f"k{i}",
        "backend": "lib",
        "params": {"i": i},
        "status": "pass",
        "timing": {
            **{"unit": "s", "ci_low": t, "ci_high": t, "median": t, "n": 8, "samples": [t] * 8},
            **{"cold_l2": True, "cuda_graph": False, "stop_reason": "paired", "timer": "cpu"},
        },
        "device": {"reliable": True},
        "error": "",
        "paired": {
            "verdict": "inconclusive",  # measured at another threshold: judged again
            "ratio": ratio,
            "ci_low": lo,
            "ci_high": hi,
            "min_effect": 0.5,
            "baseline_median": 1e-3,
            "groups": 16,
        },
    }


def test_the_rule_says_what_the_table_expects() -> None:
    for ratio, lo, hi, d, expected in INTERVALS:
        assert decide(ratio, lo, hi, d).verdict == expected, (ratio, lo, hi, d)


def test_gate_compare_page_and_pr_comment_agree(session: Session) -> None:
    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, "d" * 40, [])
    suites = {f"s{i}": d for i, (_, _, _, d, _) in enumerate(INTERVALS)}
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=sorted(suites),
        status="succeeded",
        baseline_sha="e" * 40,
        device_class="h200",
        options={"paired": True, "thresholds": {"suites": suites}},
    )
    session.add(run)
    session.flush()
    for i, (ratio, lo, hi, _, _) in enumerate(INTERVALS):
        store_record(session, run, ResultRecord.from_dict(_record(i, ratio, lo, hi)))
    session.flush()
    session.expire(run)
    assert analyze(session, run, Settings())
    gate = {r.record["kernel"]: r.verdict for r in session.query(Result).all()}

    cv = class_verdict(session, run)
    comment = render_comment(CommitVerdict("o/lib", "d" * 40, (cv,)), dashboard_url="http://x")
    rows = {line.split("`")[1]: line for line in comment.splitlines() if line.startswith("| `k")}

    for i, (ratio, lo, hi, d, expected) in enumerate(INTERVALS):
        kernel = f"k{i}"
        assert gate[kernel] == expected, kernel
        assert compare_stats.verdict("pass", "pass", ratio, lo, hi, d) == expected, kernel
        if expected in MOVED:
            assert f" {expected} |" in rows[kernel], rows[kernel]
        else:
            assert kernel not in rows
    assert cv.counts["unchanged"] == 3 and cv.counts["regression"] == 2
    assert run.verdict == "fail" and cv.state == "failure"


def test_unpaired_gate_and_compare_page_draw_the_same_interval() -> None:
    rng = np.random.default_rng(5)
    cases = {
        "slow": (1.0, 1.03),
        "same": (1.0, 1.0),
        "fast": (1.0, 0.9),
        "noisy": (1.0, 1.004),
    }
    rows_a, rows_b = [], []
    for name, (a, b) in cases.items():
        sd = 0.05 if name == "noisy" else 0.002
        for level, rows, n in ((a, rows_a, 40), (b, rows_b, 30)):
            samples = list(level * (1 + sd * rng.standard_normal(n)))
            rows.append(
                {
                    "case_id": name,
                    "suite": "s",
                    "kernel": name,
                    "label": "",
                    "params": {},
                    "status": "pass",
                    "median_s": float(np.median(samples)),
                    "ci_low_s": None,
                    "ci_high_s": None,
                    "samples": samples,
                    "verdict": None,
                    "ratio": None,
                    "reliable": True,
                }
            )
    page = compare_stats.compare(pd.DataFrame(rows_a), pd.DataFrame(rows_b), 0.01)
    page = page.set_index("case_id")
    seen = set()
    for ra, rb in zip(rows_a, rows_b, strict=True):
        gate = compare(ra["samples"], rb["samples"], 0.01)
        row = page.loc[ra["case_id"]]
        assert (row["ratio"], row["ratio_low"], row["ratio_high"]) == pytest.approx(
            (gate.ratio, gate.ci_low, gate.ci_high), rel=1e-12
        )
        assert row["verdict"] == gate.verdict
        seen.add(str(gate.verdict))
    assert seen == {"regression", "unchanged", "improvement", "inconclusive"}


def test_the_trends_page_draws_only_the_change_points_history_recorded() -> None:
    from kernelwatch.dashboard.page_trend import change_points

    step = [1e-3] * 8 + [1.3e-3] * 8  # a 30 % step the service did not record
    data = pd.DataFrame(
        {
            "case_id": "c",
            "label": "x=1",
            "sequence": range(16),
            "sha": [f"{i:040x}" for i in range(16)],
            "status": "pass",
            "median_s": step,
            "reliable": True,
            "regression": None,
            "regression_ratio": None,
        }
    )
    assert change_points(data).empty
    data.loc[8, ["regression", "regression_ratio"]] = ["changepoint", 1.3]
    (row,) = change_points(data).itertuples()
    assert (row.sequence, row.direction) == (8, "regression")
    assert row.magnitude == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("policy", "run_verdict", "state"),
    [("neutral", "neutral", "neutral"), ("fail", "fail", "failure"), ("pass", "pass", "success")],
)
def test_an_inconclusive_case_is_never_green_by_accident(
    session: Session, policy: str, run_verdict: str, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelwatch.db.config import get_settings
    from kernelwatch.jobs.cli.exit_codes import for_answer

    # the worker judges the run with its policy; a commit's answer is composed, wherever it
    # is read, with that process's policy: both the same service configuration
    monkeypatch.setenv("KW_INCONCLUSIVE_POLICY", policy)
    get_settings.cache_clear()

    repo = get_or_create_repository(session, "lib", "/src/lib")
    commit = upsert_commit(session, repo, "f" * 40, [])
    run = Run(
        repository_id=repo.id,
        commit_id=commit.id,
        suites=["s0", "s1"],
        status="succeeded",
        baseline_sha="e" * 40,
        device_class="h200",
        options={"paired": True},
    )
    session.add(run)
    session.flush()
    store_record(session, run, ResultRecord.from_dict(_record(0, 1.008, 0.99, 1.03)))
    store_record(session, run, ResultRecord.from_dict(_record(1, 1.0, 0.998, 1.002)))
    session.flush()
    session.expire(run)
    assert analyze(session, run, Settings(inconclusive_policy=policy))  # type: ignore[arg-type]
    assert run.verdict == run_verdict
    cv = class_verdict(session, run)
    verdict = CommitVerdict("o/lib", "f" * 40, (cv,))
    assert cv.state == state and verdict.overall == run_verdict
    assert for_answer(verdict.overall) == {"neutral": 3, "fail": 1, "pass": 0}[policy]
    comment = render_comment(verdict, dashboard_url="http://x")
    assert ("⚪ inconclusive" in comment) and "| `k0`" in comment  # the open case is listed
    if policy == "neutral":
        assert "⚪ neutral | 1 inconclusive" in comment  # the state is said once


def test_the_service_defaults_are_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from kernelwatch.kernels.verdict import CONFIDENCE, MIN_EFFECT

    settings = Settings()
    assert settings.regression_threshold == MIN_EFFECT == 0.01
    assert settings.confidence == CONFIDENCE and settings.inconclusive_policy == "neutral"
    monkeypatch.setenv("KW_INCONCLUSIVE_POLICY", "fail")
    assert Settings().inconclusive_policy == "fail"
    monkeypatch.setenv("KW_INCONCLUSIVE_POLICY", "maybe")
    with pytest.raises(ValidationError, match="inconclusive_policy"):
        Settings()
