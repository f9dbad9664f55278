"""Every command and every option says what it is for (issue 27, item 5).

The argparse tree is walked, the suite runners' own parsers (``bench``, ``bench-paired``)
included: each command has a description in plain words (no reStructuredText), each
option a help line, hidden ones (``argparse.SUPPRESS``) aside.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from kernelwatch.jobs.cli.main import build_parser
from kernelwatch.kernels import paired_suite, runner
from tests.conftest import run_cli


def _commands(
    parser: argparse.ArgumentParser, path: str = "kernelwatch"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    # bench and bench-paired hand their arguments to the runners' own parsers
    found = [(p, x) for p, x in _commands(build_parser()) if p.split()[-1] not in ("bench",
             "bench-paired")]  # fmt: skip
    return [*found, ("kernelwatch bench", runner.build_parser()),
            ("kernelwatch bench-paired", paired_suite.build_parser())]  # fmt: skip


def test_every_command_has_a_plain_description_and_every_option_a_help_line() -> None:
    missing: list[str] = []
    parsers = all_parsers()
    assert len(parsers) >= 17  # the tree was walked, not just its root
    for path, parser in parsers:
        if not (parser.description or "").strip():
            missing.append(f"{path}: no description")
        elif "``" in (parser.description or "") or ":mod:" in (parser.description or ""):
            missing.append(f"{path}: reStructuredText in the description")
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not (choice.help or "").strip():
                        missing.append(f"{path} {choice.dest}: no help line")
                continue
            if not (action.help or "").strip():
                name = "/".join(action.option_strings) or action.dest
                missing.append(f"{path} {name}: no help line")
    assert missing == []


def test_the_bench_help_reads_as_plain_text() -> None:
    out = run_cli("bench", "--help", timeout=120)
    assert out.returncode == 0
    assert "``" not in out.stdout and "Run suites in this environment" in out.stdout
    assert "--cuda-graph" in out.stdout and "time through a captured CUDA graph" in out.stdout
