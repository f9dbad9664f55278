"""``benchmarks/order_tilt.py``: the blocks' order is read back from stored groups with
the rule of the record's date, and a planted tilt reads back in the table."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks import order_tilt
from kernelwatch.kernels.paired import a_goes_first


def test_the_order_of_each_group_follows_the_rule_of_its_date() -> None:
    pairs = [0, 1, 2, 0, 1, 2, 0]  # a third round cut short after one group
    assert order_tilt.group_orders(pairs, order_tilt.by_round) == [True] * 3 + [False] * 3 + [True]
    alternating = [True, False, True, False, True, False, True]
    assert order_tilt.group_orders(pairs, a_goes_first) == alternating
    assert order_tilt.rule_at("2026-12-06T22:35:14Z")[1] is order_tilt.by_round
    assert order_tilt.rule_at("2026-12-08T00:00:00Z")[1] is a_goes_first


def test_groups_that_do_not_go_round_one_pair_order_are_not_guessed() -> None:
    assert order_tilt.group_orders([0, 1, 2, 1, 0, 2], a_goes_first) is None  # order changed
    assert order_tilt.group_orders([0, 1, 2, 0, 2, 0], a_goes_first) is None  # a pair dropped
    assert order_tilt.group_orders([], a_goes_first) is None


def _case(ratios: list[float], pairs: list[int], attempts: int = 1) -> dict[str, Any]:
    return {"group_ratios": ratios, "group_pairs": pairs, "attempts": attempts}


def _record(path: Path, date: str, device: str, cases: list[dict[str, Any]]) -> Path:
    body = {"cpu": False, "machine": {"date_utc": date, "device": device},
            "result": {"suites": [{"cases": cases}]}}  # fmt: skip
    with gzip.open(path, "wt") as f:
        json.dump(body, f)
    return path


def test_a_planted_second_side_speed_up_reads_back_per_card_and_rule(tmp_path: Path) -> None:
    fast = 0.01  # the side that goes second reads 1 % faster
    abba, baab = math.exp(-fast), math.exp(fast)  # B second reads B faster: ratio B/A < 1
    old = [_case([abba] * 4, [0, 1, 2, 3]) for _ in range(5)]  # one round, all ABBA
    old.append(_case([abba, abba, baab, baab], [0, 1, 0, 1]))  # two rounds by round
    old.append(_case([abba] * 8, [0, 1, 2, 3] * 2, attempts=2))  # not read
    new = [_case([abba, baab, baab, abba], [0, 1, 0, 1]) for _ in range(3)]  # per pair
    paths = [
        _record(tmp_path / "a-suite-aa.json.gz", "2026-12-06T10:00:00Z", "NVIDIA H200", old),
        _record(tmp_path / "b-suite-aa.json.gz", "2026-12-08T10:00:00Z", "NVIDIA H100 80GB", new),
    ]
    got = order_tilt.read(paths)
    assert got.skipped == 1
    rows = {(r[0], r[1]): r for r in order_tilt.table(got.tilts)}
    h200 = rows[("H200", "by round")]
    assert h200[2] == "5" and h200[3].startswith("-0.995 %")  # ABBA-only: e^-0.01 - 1
    assert h200[4] == "1" and h200[5] == f"{100 * (abba - baab):+.3f} %"
    h100 = rows[("H100", "by round and pair")]
    assert h100[2] == "0" and h100[4] == "3"
    assert h100[5] == f"{100 * (abba - baab):+.3f} %"
    assert "not read" in order_tilt.render(order_tilt.table(got.tilts), got.skipped)


def test_the_stored_gpu_records_read_a_tilt_far_under_the_gate_threshold() -> None:
    # docs/measurement.md §35c: the figure is this module's reading of docs/data
    got = order_tilt.read(order_tilt.stored_records())
    cards = {t.card for t in got.tilts}
    assert {"H100", "H200"} <= cards
    for row in order_tilt.table(got.tilts):
        if row[2] != "0":
            mean = float(row[3].split(" %")[0])
            assert abs(mean) < 0.25, row  # the gate's minimum effect is 1 %


def test_main_prints_the_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _record(tmp_path / "suite-aa.json.gz", "2026-12-06T10:00:00Z", "NVIDIA H200",
                   [_case([1.0, 1.0], [0, 1])])  # fmt: skip
    assert order_tilt.main([str(path)]) == 0
    assert "H200" in capsys.readouterr().out
    empty = _record(tmp_path / "empty-suite-aa.json.gz", "2026-12-06T10:00:00Z", "NVIDIA H200", [])
    assert order_tilt.main([str(empty)]) == 1
