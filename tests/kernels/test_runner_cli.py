"""The runner's own command line, as the worker calls it."""

from __future__ import annotations

import pytest


def test_an_unknown_suite_is_one_line_in_the_runner_too(capsys: pytest.CaptureFixture[str]) -> None:
    """A .kernelwatch.toml may name a plugin suite, known only in the library's
    environment, so the planner cannot refuse it: the runner said KeyError in a
    15-line traceback that ``run --wait`` printed (a first-hour review)."""
    from kernelwatch.kernels import paired_suite, runner

    assert runner.main(["--suite", "nosuchsuite", "--out", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelwatch runner: unknown suite 'nosuchsuite'; suites: basic,")
    assert "\n" not in err
    argv = ["--baseline-path", ".", "--candidate-path", ".", "--suite", "gemmm", "--impl", "x",
            "--out", "-"]  # fmt: skip
    assert paired_suite.main(argv) == 2
    assert "unknown suite 'gemmm' (did you mean 'gemm'?)" in capsys.readouterr().err
