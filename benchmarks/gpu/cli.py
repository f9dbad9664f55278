"""Command line of the GPU driver: sub-commands, chains, deadlines, output.

    python -m benchmarks.gpu [--out DIR] [--deadline-s S] [--cpu] SUB [ARGS] [+ SUB [ARGS] ...]

``+`` chains sub-commands in one process (one device call, one machine start).
``--deadline-s`` is counted from the driver's start, for the whole chain and, given
after a sub-command's name, for that sub-command: ``paired --deadline-s 300 +
suite-aa`` ends the paired trials by 300 s and the whole call by the global
deadline (default 540 s, inside the device's 600 s). Each sub-command writes
``DIR/SUB.json``; logs of every step travel as one ``DIR/logs.tgz`` (a device call
returns at most 8 files, so chain at most 7). A later invocation into the same DIR
writes ``SUB-run2.json`` and ``logs-run2.tgz`` (``invocation_tag``), never over the
first's; the 8 files count both invocations'. The short table of every sub-command is
printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.gpu import host

DEFAULT_DEADLINE_S = 540.0


def invocation_tag(out: Path) -> str:
    """The empty string for the first driver invocation into ``out``; ``-run2``, ``-run3``... after.

    One device command may run the driver twice (``prelude ... ; python -m
    benchmarks.gpu service ...``); the second used to write ``logs.tgz`` and
    ``prelude.json`` over the first's, and on the H200 (2026-12-04) a FlashInfer run's
    only log went so. Each invocation now names its files apart.
    """
    if not (out / "logs.tgz").exists():
        return ""
    n = 2
    while (out / f"logs-run{n}.tgz").exists():
        n += 1
    return f"-run{n}"


def commands() -> dict[str, ModuleType]:
    """Every sub-command module by name.

    Importing them must not import kernelwatch: on a bare GPU host the parser is
    built before ``host.ensure_kernelwatch`` links the namespace (a sub-command's
    kernelwatch imports live inside its functions;
    ``tests/benchmarks/test_gpu_driver.py`` holds it so).
    """
    from benchmarks.gpu import (
        bisect,
        cards,
        cutlass_dsl,
        fi_repro,
        first_call,
        fleet,
        gputests,
        host_gap,
        libraries,
        liger,
        liger_replay,
        measure,
        paired,
        power,
        prelude,
        prepare,
        prepare_cutlass_dsl,
        reference_cost,
        service,
        states,
        suite_aa,
    )

    mods = (
        prelude, gputests, measure, paired, states, suite_aa, power, libraries, bisect, fleet,
        cards, host_gap, fi_repro, reference_cost, first_call,
        cutlass_dsl, prepare, prepare_cutlass_dsl,
        liger, liger_replay, service,
    )  # fmt: skip
    return {m.NAME: m for m in (*mods, prepare.FA2)}  # prepare-fa2: in prepare.py


def _common(p: argparse.ArgumentParser, *, top: bool) -> None:
    # after a sub-command's name --out/--cpu mean the same as before it (SUPPRESS: not
    # given there, the value from before stays); --deadline-s there is that
    # sub-command's own deadline (dest own_deadline_s)
    # $OUT on the device machine; elsewhere a folder outside the working tree
    default_out = os.environ.get("OUT") or str(Path(tempfile.gettempdir()) / "kwgpu-out")
    p.add_argument(
        "--out",
        default=default_out if top else argparse.SUPPRESS,
        help="folder for JSON and logs ($OUT)",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        dest="deadline_s" if top else "own_deadline_s",
        metavar="S",
        default=DEFAULT_DEADLINE_S if top else None,
        help="end by this many seconds after the driver's start",
    )
    p.add_argument(
        "--cpu",
        "--dry-run",
        dest="cpu",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="CPU device, tiny sizes: checks the driver without a GPU",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0]
    )
    _common(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="SUB")
    for name, mod in commands().items():
        sp = sub.add_parser(
            name,
            help=mod.HELP,
            description=mod.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common(sp, top=False)
        mod.add_arguments(sp)
    return p


def split_chain(argv: Sequence[str]) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    for a in argv:
        if a == "+":
            chunks.append([])
        else:
            chunks[-1].append(a)
    return [c for c in chunks if c]


def _archive(logs: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(logs, arcname="logs")
    partial.replace(target)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    t0 = time.monotonic()
    # first of all: a bare GPU host has no kernelwatch until the namespace is linked
    bootstrap = host.ensure_kernelwatch()
    p = parser()
    chunks = split_chain(argv)
    if not chunks:
        p.print_help()
        return 2
    first = p.parse_args(chunks[0])
    parsed = [first] + [p.parse_args(c) for c in chunks[1:]]
    out = Path(first.out)
    cpu = bool(first.cpu)
    end = t0 + float(first.deadline_s)
    out.mkdir(parents=True, exist_ok=True)
    tag = invocation_tag(out)
    # logs are staged outside DIR and travel as one archive, rewritten after each
    # sub-command: a device call returns 8 files at most, and a killed call keeps
    # the logs of what finished
    logs = Path(tempfile.mkdtemp(prefix="kwgpu-")) / "logs"
    logs.mkdir()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    os.environ.setdefault("KW_PEAKS_DIR", str(logs))  # the peak probe's cache travels too
    if cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    mods = commands()
    tables: list[tuple[str, list[str]]] = []
    worst = 0
    seen: dict[str, int] = {}
    for args in parsed:
        name = args.command
        seen[name] = seen.get(name, 0) + 1
        label = (name if seen[name] == 1 else f"{name}-{seen[name]}") + tag
        own = t0 + args.own_deadline_s if args.own_deadline_s is not None else end
        sub_logs = logs / label
        sub_logs.mkdir(exist_ok=True)
        ctx = host.Context(
            out=out, logs=sub_logs, deadline=min(own, end), cpu=bool(args.cpu) or cpu
        )
        started = time.monotonic()
        doc: dict[str, Any] = {
            "command": name,
            "argv": chunks[parsed.index(args)],
            "cpu": ctx.cpu,
            "machine": host.machine(),
            "kernelwatch": bootstrap,
            "deadline_s": round(ctx.deadline - t0, 1),
        }
        try:
            result, table = mods[name].run(ctx, args)
            doc["status"] = "ok"
        except Exception as exc:  # one broken sub-command must not lose the others' data
            result, table = {}, [f"FAILED: {type(exc).__name__}: {exc}"]
            doc["status"] = "error"
            doc["error"] = traceback.format_exc()
            worst = 1
        doc["seconds"] = round(time.monotonic() - started, 2)
        doc["result"] = result
        doc["steps"] = [s.to_dict() for s in ctx.steps]
        (out / f"{label}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        tables.append((f"{label} ({doc['seconds']:.0f} s, {doc['status']})", table))
        _archive(logs, out / f"logs{tag}.tgz")
    shutil.rmtree(logs.parent, ignore_errors=True)
    for title, table in tables:
        print(f"\n== {title}")
        for line in table:
            print(line)
    print(f"\n{len(tables)} sub-command(s) in {time.monotonic() - t0:.0f} s; JSON in {out}")
    return worst
