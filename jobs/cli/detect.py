"""``kernelwatch detect [--batch]``: change points of a series, stdin JSON to stdout JSON.

The same detector the service records history with (``jobs/judging/detect.py``), for
series that live elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernelwatch.jobs.cli.exit_codes import Exit, fail

NAME = "detect"
USAGE = 'give {"values": [...], "lower_is_better": true}, or with --batch {"series": [...]}'


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    det = sub.add_parser(
        NAME,
        help="change points of a series (stdin JSON -> stdout JSON)",
        description='Change points of a series: stdin {"values": [...], "lower_is_better": '
        'true} gives {"change_points": [{"index", "direction", ...}]} on stdout. Exit 2 with a '
        "message on bad input.",
    )
    det.add_argument(
        "--batch", action="store_true", help='stdin is {"series": [{"id", "values"}, ...]}'
    )
    det.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.judging.detect import detect_json

    try:
        text = sys.stdin.read()
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:  # bare, it read "Expecting value: line 1 ..."
            what = "is empty" if not text.strip() else f"is not JSON ({exc})"
            raise ValueError(f"stdin {what}: {USAGE}") from None
        if args.batch and not (isinstance(payload, dict) and "series" in payload):
            raise ValueError('--batch expects {"series": [{"id", "values"}, ...]}')
        result = detect_json(payload)
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        return fail(NAME, str(exc))
    print(json.dumps(result))
    return Exit.PASS


__all__ = ["NAME", "add_parser", "handle"]
