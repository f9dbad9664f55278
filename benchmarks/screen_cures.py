"""How often the paired screen's cure worked, by how far off the side was: read from
the GPU logs committed under ``docs/data``.

Why: the screen (``kernels/paired.py``, ``_Screen``) sets an off side up again, in
its own process or in a new one, and a new process costs 11-15 s a round on an H100
(docs/measurement.md §28). Whether a cheaper cure would do for small deviations is a
question the stored logs answer. A side off in one screen round counts as cured when
the next round of the same attempt does not list it; it was set up again in a new
process when the ``new processes for`` line between the rounds names it, else in
place.

    python -m benchmarks.screen_cures                 # every *logs.tgz under docs/data
    python -m benchmarks.screen_cures PATH [PATH...]  # these archives or .log files

What it does not do: run anything on a GPU, or tell a cure from a side whose next
level merely fell under the tolerance by chance.
"""

from __future__ import annotations

import argparse
import re
import tarfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"

_ROUND = re.compile(r"screen round (\d+): \d+ of \d+ sides off \[(.*)\]")
_OFF = re.compile(r"'(\w+) ([+-][\d.]+)%'")
_NEW = re.compile(r"new processes for \[(.*)\]")
_NAME = re.compile(r"'(\w+)'")
# a new attempt, case or the end of a comparison: the next round is not a re-level
_BREAK = ("attempt ", "KW-CASE-START", "stop (")
# upper edges of the deviation bands, per cent
BANDS = (10.0, 15.0, 30.0)
WAYS = ("in_place", "new_process")


def band(deviation_pct: float) -> str:
    """The band a deviation falls in: ``+5-10 %`` ... ``over +30 %``."""
    low = 5.0
    for high in BANDS:
        if deviation_pct < high:
            return f"+{low:g}-{high:g} %"
        low = high
    return f"over +{low:g} %"


def cures(lines: Iterable[str]) -> Counter[tuple[str, str, bool]]:
    """(band, way, cured) counts over one log's screen rounds."""
    counts: Counter[tuple[str, str, bool]] = Counter()
    pending: dict[str, float] | None = None
    renewed: set[str] = set()
    for line in lines:
        found = _ROUND.search(line)
        if found:
            off = {name: float(dev) for name, dev in _OFF.findall(found.group(2))}
            if pending is not None and int(found.group(1)) > 0:
                for name, dev in pending.items():
                    way = "new_process" if name in renewed else "in_place"
                    counts[(band(dev), way, name not in off)] += 1
            pending, renewed = off, set()
        elif (new := _NEW.search(line)) is not None:
            renewed |= set(_NAME.findall(new.group(1)))
        elif any(mark in line for mark in _BREAK):
            pending, renewed = None, set()
    return counts


def _logs(paths: Iterable[Path]) -> Iterator[list[str]]:
    """Each ``.log`` file's lines, from archives and plain files alike."""
    for path in paths:
        if path.name.endswith((".tgz", ".tar.gz")):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name.endswith(".log"):
                        fh = tar.extractfile(member)
                        if fh is not None:
                            yield fh.read().decode(errors="replace").splitlines()
        elif path.suffix == ".log":
            yield path.read_text(errors="replace").splitlines()


def table(counts: Counter[tuple[str, str, bool]]) -> list[str]:
    """One row per band: cured of tried, in place and in a new process."""
    rows = [f"{'deviation':<13}{'set up again in place':>24}{'in a new process':>22}"]
    for name in (band(low) for low in (5.0, *BANDS)):
        cells = []
        for way in WAYS:
            cured, still = counts[(name, way, True)], counts[(name, way, False)]
            tried = cured + still
            cells.append(f"{cured} of {tried} ({100 * cured / tried:.0f} %)" if tried else "-")
        rows.append(f"{name:<13}{cells[0]:>24}{cells[1]:>22}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", type=Path, help="log archives or .log files")
    args = p.parse_args(argv)
    paths = args.paths or sorted(DATA.rglob("*logs.tgz"))
    total: Counter[tuple[str, str, bool]] = Counter()
    logs = 0
    for lines in _logs(paths):
        found = cures(lines)
        logs += bool(found)
        total += found
    print(f"{logs} logs with a screen round that set sides up again, from {len(paths)} files")
    print("\n".join(table(total)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
