"""How much the order of a group's blocks tilts the paired gate, from stored A/A records.

A paired group times one side, the other twice, then the first again (ABBA) or the
reverse (BAAB). If the side that goes second reads faster (its two blocks back to
back, caches warm), an ABBA group reads B faster and a BAAB group A faster. On a 2-core
CPU that was 10-12 % (``docs/measurement.md`` §35c); this reads what it is on the GPUs,
from the suite A/A passes the GPU calls stored under ``docs/data/``.

Each case's stored ``group_ratios`` and ``group_pairs`` give back which order every group
ran in, with the rule that was in force when the record was taken: by round only before
:data:`PER_PAIR_SINCE` (the landing of the per-pair rule), ``paired.a_goes_first`` after.
A case is read only where its groups go round the same pairs in the same order (one
attempt, no pair dropped); the others are counted as skipped, not guessed.

Per card and rule, two readings:

- cases whose groups all ran ABBA (one round under the old rule): the mean of their
  log-ratios, in %, with a 95 % interval over cases. Identical work reads 0 without a
  tilt; a second side that is faster reads below 0 (B went second).
- cases with groups in both orders: the median over cases of the ABBA groups' mean
  minus the BAAB groups' mean, in %.

    python -m benchmarks.order_tilt                 # every docs/data/**/*suite-aa* record
    python -m benchmarks.order_tilt PATH [PATH ...]  # these records
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwatch.kernels.paired import a_goes_first

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
# 30e8fa6 landed the per-pair rule; GPU records taken before it used the round's parity
PER_PAIR_SINCE = "2026-12-07T15:33:35Z"

OrderRule = Callable[[int, int], bool]  # (round, slot) -> ABBA


def by_round(round_: int, slot: int) -> bool:
    """The rule before :data:`PER_PAIR_SINCE`: ABBA on even rounds, every pair alike."""
    return round_ % 2 == 0


def rule_at(date_utc: str) -> tuple[str, OrderRule]:
    """The order rule in force for a record taken at ``date_utc`` (ISO, UTC)."""
    if date_utc and date_utc < PER_PAIR_SINCE:
        return "by round", by_round
    return "by round and pair", a_goes_first


def group_orders(pairs: Sequence[int], rule: OrderRule) -> list[bool] | None:
    """Whether each group ran ABBA, or None where the groups do not go round one pair
    order (a pair dropped): then the order is not known. The last round may be cut
    short, as ``paired.compare`` stops at a group count, not at a round's end."""
    if not pairs:
        return None
    seen: list[int] = []
    for p in pairs:
        if p in seen:
            break
        seen.append(p)
    width = len(seen)
    if any(p != seen[g % width] for g, p in enumerate(pairs)):
        return None
    return [rule(g // width, g % width) for g in range(len(pairs))]


@dataclass(frozen=True)
class CaseTilt:
    card: str
    rule: str
    abba: list[float]  # log-ratios of the groups that ran ABBA
    baab: list[float]


def case_tilt(case: dict[str, Any], card: str, rule_name: str, rule: OrderRule) -> CaseTilt | None:
    ratios = case.get("group_ratios") or []
    if case.get("attempts", 1) != 1:  # attempts' groups are stored one after another
        return None
    orders = group_orders(case.get("group_pairs") or [], rule)
    if orders is None or len(orders) != len(ratios):
        return None
    logs = [math.log(r) for r in ratios]
    return CaseTilt(
        card,
        rule_name,
        abba=[x for x, o in zip(logs, orders, strict=True) if o],
        baab=[x for x, o in zip(logs, orders, strict=True) if not o],
    )


def _open(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def record_cases(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for suite in (record.get("result") or {}).get("suites") or []:
        yield from suite.get("cases") or []


def card_name(device: str) -> str:
    """'NVIDIA H200' -> 'H200'; the card as the tables name it."""
    return device.removeprefix("NVIDIA ").split()[0] if device else "?"


@dataclass
class Read:
    tilts: list[CaseTilt]
    skipped: int


def read(paths: Iterable[Path]) -> Read:
    tilts: list[CaseTilt] = []
    skipped = 0
    for path in paths:
        record = _open(path)
        machine = record.get("machine") or {}
        if record.get("cpu"):
            continue
        rule_name, rule = rule_at(machine.get("date_utc", ""))
        card = card_name(machine.get("device", ""))
        for case in record_cases(record):
            if not case.get("group_ratios"):
                continue
            tilt = case_tilt(case, card, rule_name, rule)
            if tilt is None:
                skipped += 1
            else:
                tilts.append(tilt)
    return Read(tilts, skipped)


def _pct(log: float) -> float:
    return 100.0 * math.expm1(log)


def _mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the 95 % half-width (normal, over cases) of ``values``, in %."""
    m = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.inf
    return _pct(m), 100.0 * half


def table(tilts: Sequence[CaseTilt]) -> list[tuple[str, ...]]:
    """One row per (card, rule): ABBA-only cases and cases with both orders."""
    rows: list[tuple[str, ...]] = []
    for key in sorted({(t.card, t.rule) for t in tilts}):
        mine = [t for t in tilts if (t.card, t.rule) == key]
        only = [statistics.fmean(t.abba) for t in mine if t.abba and not t.baab]
        both = [
            _pct(statistics.fmean(t.abba)) - _pct(statistics.fmean(t.baab))
            for t in mine
            if t.abba and t.baab
        ]
        m, half = _mean_ci(only) if only else (math.nan, math.nan)
        rows.append(
            (
                *key,
                str(len(only)),
                f"{m:+.3f} % ± {half:.3f} %" if only else "-",
                str(len(both)),
                f"{statistics.median(both):+.3f} %" if both else "-",
            )
        )
    return rows


HEADER = (
    "card",
    "order rule",
    "ABBA-only cases",
    "their mean ratio - 1",
    "both orders",
    "median ABBA - BAAB",
)


def render(rows: Sequence[Sequence[str]], skipped: int) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(f"cases not read (several attempts or a pair dropped): {skipped}")
    return "\n".join(lines)


def stored_records(root: Path = DATA) -> list[Path]:
    return sorted(p for p in root.rglob("*suite-aa*.json*") if p.suffix in (".json", ".gz"))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, help="suite-aa records (default: docs/data)")
    args = ap.parse_args(argv)
    got = read(args.paths or stored_records())
    if not got.tilts:
        print("no suite A/A case with group ratios found", file=sys.stderr)
        return 1
    print(render(table(got.tilts), got.skipped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
