"""The database of a ``liger`` call as files: run summaries (JSON) and every record (JSONL).

Run as ``python -m benchmarks.gpu.liger_dump --out F --records R [RUN ...]`` with the
call's ``KW_DATA_DIR``: a subprocess, so the driver never holds service settings of its
own. Each run's summary is ``kernelwatch show RUN --json``'s (``report.run_summary``:
status, verdict, per-case status, median, ratio and interval against the baseline,
error), plus the tails of its build and runner logs; the records are the runner's
whole result records (raw samples, device, environment), one line each.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu.liger_dump")
    p.add_argument("--out", type=Path, required=True, help="JSON of the runs")
    p.add_argument("--records", type=Path, required=True, help="JSON lines of the records")
    p.add_argument("runs", nargs="*", type=int, help="run ids (default: every run)")
    args = p.parse_args(argv)

    from sqlalchemy import select

    from kernelwatch.db.models import Result, Run
    from kernelwatch.db.session import session_factory
    from kernelwatch.jobs.judging.report import run_summary
    from kernelwatch.worker.venvs import compiler_errors

    runs = []
    with session_factory()() as session, open(args.records, "w", encoding="utf-8") as rec:
        query = select(Run).order_by(Run.id)
        if args.runs:
            query = query.where(Run.id.in_(args.runs))
        for run in session.scalars(query).all():
            summary = run_summary(session, run)
            summary["build_log_tail"] = (run.build_log or "")[-4000:]
            # the tail of a native build is its Python traceback: where it went wrong
            # is pages above (the database keeps the whole log; the device does not)
            summary["build_log_head"] = (run.build_log or "")[:3000]
            summary["compiler_errors"] = compiler_errors(run.build_log or "", limit=20)
            summary["runner_log_tail"] = (run.options.runner_log_tail or "")[-3000:]
            runs.append(summary)
            results = session.scalars(select(Result).where(Result.run_id == run.id)).all()
            for r in results:
                rec.write(json.dumps({"run": run.id, **(r.record or {})}, default=str) + "\n")
    args.out.write_text(json.dumps({"runs": runs}, indent=1, default=str) + "\n")
    print(f"{len(runs)} runs to {args.out}, records to {args.records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
