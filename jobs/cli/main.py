"""The ``kernelwatch`` command line: the parser and the dispatch, nothing else.

Each command is a module of this package with ``add_parser(subparsers)`` and the
handler it registers; command names and exit codes are contracts (design.md,
:mod:`.exit_codes`). Heavy imports (torch, Celery, Streamlit) happen inside each
handler, so ``kernelwatch --help`` and small commands start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata

from kernelwatch.jobs.cli import (
    api,
    beat,
    bench,
    bisect,
    dashboard,
    db,
    demo,
    detect,
    doctor,
    gate,
    importing,
    run,
    serve,
    show,
    worker,
)
from kernelwatch.jobs.cli.exit_codes import BROKEN_PIPE, Exit, fail

Handler = Callable[[argparse.Namespace], int]
AddParser = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

# One module a command, in the order ``kernelwatch --help`` lists them.
COMMANDS: tuple[AddParser, ...] = (
    demo.add_parser,
    run.add_parser,
    importing.add_parser,
    show.add_parser,
    bench.add_parser,
    worker.add_parser,
    dashboard.add_parser,
    db.add_parser,
    doctor.add_parser,
    api.add_parser,
    serve.add_parser,
    beat.add_parser,
    gate.add_parser,
    bisect.add_parser,
    detect.add_parser,
)


def version() -> str:
    try:
        return metadata.version("kernelwatch")
    except metadata.PackageNotFoundError:  # a source tree without an install
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelwatch", description="CI for GPU kernel libraries.")
    p.add_argument("--version", action="version", version=f"kernelwatch {version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_parser in COMMANDS:
        add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(argv)
    except BrokenPipeError:
        # The reader went away (``kernelwatch show 26 | head -1``): no traceback, and
        # no second error when the interpreter flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE


def _dispatch(argv: list[str]) -> int:
    # everything after bench and bench-paired goes to the suite runner untouched
    if argv[:1] == [bench.NAME]:
        return _guarded(bench.NAME, lambda: bench.main(argv[1:]))
    if argv[:1] == [bench.PAIRED]:
        return _guarded(bench.PAIRED, lambda: bench.main_paired(argv[1:]))
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    return _guarded(args.command, lambda: handler(args))


def _guarded(command: str, call: Callable[[], int]) -> int:
    """``call()``, whose failures exit 2 with one line that says why where a person can
    act on it, with the traceback where it is ours; never 1, which a script reads as
    "the kernels failed" (``bench --device cuda`` on a CPU machine did, 2026-12-05)."""
    from kernelwatch.jobs.errors import KernelwatchError

    try:
        return call()
    except KernelwatchError as exc:
        return fail(command, str(exc), Exit.ERROR)
    except BrokenPipeError:
        raise
    except Exception as exc:
        known = explain(exc)
        if known:  # a setting or a service: one line that says what to do
            return fail(command, known)
        # A bug or an unexpected failure: show where, but exit 2 (error)
        traceback.print_exc()
        return fail(command, f"unexpected {type(exc).__name__} (traceback above)")


def explain(exc: BaseException) -> str:
    """One line for a failure a person can fix (a bad ``KW_*`` value, a database or broker
    that does not answer); '' for anything else, which deserves its traceback."""
    from kernelwatch.db.config import SettingsError, get_settings

    if isinstance(exc, SettingsError):
        return str(exc)
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(exc, sa_exc.OperationalError):
        from kernelwatch.db.config import masked

        url = masked(get_settings().resolved_database_url)
        first = str(exc.orig or exc).strip().splitlines()[0] if str(exc.orig or exc) else ""
        return (
            f"cannot use the database {url} (KW_DATABASE_URL): {first}; is it running and "
            "reachable? `kernelwatch doctor` checks it"
        )
    kombu_exc = sys.modules.get("kombu.exceptions")
    if kombu_exc is not None and isinstance(exc, kombu_exc.OperationalError):
        from kernelwatch.db.config import masked

        broker = masked(get_settings().broker_url or "the filesystem broker")
        return (
            f"cannot reach the broker {broker} (KW_BROKER_URL): {exc}; is it running? "
            "`kernelwatch doctor` checks it"
        )
    return ""


if __name__ == "__main__":
    raise SystemExit(main())
