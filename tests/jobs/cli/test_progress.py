"""Progress of long commands (issue 18, item 7): what a waiting person reads on stderr."""

from __future__ import annotations

import io

from kernelwatch.db.models import Run
from kernelwatch.jobs.cli.progress import RunProgress


def _runs(*states: str) -> list[Run]:
    return [Run(id=i + 1, status=s, device_class="cpu") for i, s in enumerate(states)]


def test_plain_lines_say_planned_building_done_and_eta() -> None:
    out = io.StringIO()
    p = RunProgress(out)
    p.update(_runs("queued", "queued"))
    p.update(_runs("queued", "queued"))  # nothing changed: no new line
    p.update(_runs("succeeded", "running"))
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("2 runs: 2 queued · 0 cases measured")
    assert "1 done, 1 building" in lines[1] and "ETA" in lines[1]


def test_quiet_and_json_print_nothing() -> None:
    p = RunProgress(None)
    p.update(_runs("queued"))
    p.close()
    assert p.last == ""
