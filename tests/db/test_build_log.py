"""A run's build log names each environment it used; ``show`` reads them back whole.

The GPU driver brings back a build log's head and tail only, and FlashAttention-3's
first build line fell between them (2026-12-06): the times must come from the stored log.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from kernelwatch.db.build_log import (
    environment_line,
    environments,
    environments_text,
    release_line,
)
from kernelwatch.jobs.judging.analysis import analyze
from kernelwatch.jobs.judging.report import format_run, run_summary
from tests.jobs.judging.test_remeasure_rule import BASE, SETTINGS, measured

CANDIDATE, BASELINE = "c224b361a9ca2579169e0a43b962e732cdf33e2b", "2b90c90e929b945fda4"


def _paired_log() -> str:
    """A paired run's log as the worker writes it: megabytes of nvcc between the lines."""
    nvcc = "".join(f"[{i}/73] /opt/ccache nvcc -c flash_fwd_{i}.cu\n" for i in range(73))
    return (
        nvcc
        + environment_line(CANDIDATE, 119.6, "trimmed", Path("/data/venvs/entries/a"))
        + "paired mode: building baseline 2b90c90e929b\n"
        + nvcc
        + environment_line(BASELINE, None, "trimmed", Path("/data/venvs/entries/b"))
    )


def test_every_environment_line_is_read_back_in_order() -> None:
    builds = environments(_paired_log())
    assert [(b.commit, b.seconds, b.profile) for b in builds] == [
        (CANDIDATE[:12], 120.0, "trimmed"),
        (BASELINE[:12], None, "trimmed"),
    ]
    assert environments_text(builds) == (
        "c224b361a9ca built in 120 s, 2b90c90e929b cached (trimmed profile)"
    )
    # a line that only looks like one (a compiler's output, a version install) is not
    assert environments("x: built in 3 s (default profile)\ncached environment /p\n") == []


def test_a_released_versions_install_is_an_environment_too() -> None:
    """``run --version``: the environment is named by its pin and says "installed"."""
    log = (
        "Successfully installed flashinfer-python-0.6.0\n"
        + release_line("flashinfer-python==0.6.0", 41.4, Path("/data/venvs/entries/v"))
        + release_line("kwlib==0.2rc1+cu130", None, Path("/data/venvs/entries/w"))
    )
    builds = environments(log)
    assert [(b.commit, b.seconds, b.profile, b.released) for b in builds] == [
        ("flashinfer-python==0.6.0", 41.0, "release", True),
        ("kwlib==0.2rc1+cu130", None, "release", True),
    ]
    assert environments_text(builds) == (
        "flashinfer-python==0.6.0 installed in 41 s, kwlib==0.2rc1+cu130 cached (release profile)"
    )


def test_show_names_the_environments_a_run_used(session: Session) -> None:
    run = measured(session, BASE, 1.0e-4)
    run.build_log = _paired_log()
    assert analyze(session, run, SETTINGS)
    summary = run_summary(session, run)
    assert summary["environments"] == [
        {"commit": CANDIDATE[:12], "seconds": 120.0, "profile": "trimmed"},
        {"commit": BASELINE[:12], "seconds": None, "profile": "trimmed"},
    ]
    assert "  environments: c224b361a9ca built in 120 s, 2b90c90e929b cached" in format_run(summary)
