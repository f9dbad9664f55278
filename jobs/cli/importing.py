"""``kernelwatch import RECORDS``: store result records measured elsewhere, then judge them.

For numbers from a machine kernelwatch does not manage (``kernelwatch bench --out F``
there, ``kernelwatch import F`` here): the records become a run of ``--commit`` and are
compared with ``--parent`` like any run. A ``.toml`` argument is a dataset manifest
(``jobs/planning/dataset.py``) that names many files with their repository, commits,
card and dates: ``kernelwatch import docs/data/h200-dataset.toml`` loads the H200 dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAME = "import"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    im = sub.add_parser(
        NAME,
        help="store result records measured elsewhere (kernelwatch bench output)",
        description="Store result records measured on another machine (the JSON lines of "
        "`kernelwatch bench --out`) as a run of --repo at --commit on --device-class, "
        "compared with --parent when given; or load a dataset manifest (.toml).",
    )
    im.add_argument(
        "records",
        help="JSON-lines file of result records (.jsonl, or .jsonl.gz), or a dataset manifest "
        "(.toml)",
    )
    im.add_argument("--repo", help="repository (or library) name (required for records)")
    im.add_argument("--commit", help="commit sha or a label for this run (required for records)")
    im.add_argument("--device-class", help="e.g. h200 (required for records)")
    im.add_argument("--parent", help="an earlier imported commit to compare with")
    im.add_argument("--message", help="commit message or note stored with the run")
    im.add_argument("--json", action="store_true", help="print the run summary as JSON")
    im.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.db.models import Run
    from kernelwatch.jobs.cli.common import factory, settings
    from kernelwatch.jobs.cli.exit_codes import Exit
    from kernelwatch.jobs.judging.report import run_summary
    from kernelwatch.jobs.planning.importer import ImportRequest, import_records

    if Path(args.records).suffix == ".toml":
        return _dataset(args)
    missing = [f"--{k.replace('_', '-')}" for k in ("repo", "commit", "device_class")
               if not getattr(args, k)]  # fmt: skip
    if missing:
        print(f"kernelwatch import: {args.records} needs {', '.join(missing)}", file=sys.stderr)
        return int(Exit.ERROR)
    req = ImportRequest(
        path=Path(args.records),
        repository=args.repo,
        commit=args.commit,
        device_class=args.device_class,
        parent=args.parent,
        message=args.message or "",
    )
    sessions = factory()
    run_id = import_records(sessions, settings(), req)
    with sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        summary = run_summary(session, run)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        where = f"{summary['repository']}@{str(summary['commit'])[:12]} on {run.device_class}"
        print(f"imported {req.path} as run {run_id} of {where} ({run.verdict or 'not judged'})")
    return 0


def _dataset(args: argparse.Namespace) -> int:
    """Every run of a dataset manifest; one line (or one JSON list) of what was imported."""
    from kernelwatch.jobs.cli.common import factory, settings
    from kernelwatch.jobs.planning.dataset import import_dataset

    done = import_dataset(factory(), settings(), Path(args.records))
    if args.json:
        rows = [{"file": d.file, "run": d.run_id, "created": d.created} for d in done]
        print(json.dumps({"runs": rows}, indent=2))
    else:
        for d in done:
            print(f"{d.file}: run {d.run_id}" + ("" if d.created else " (imported before)"))
    return 0


__all__ = ["NAME", "add_parser", "handle"]
