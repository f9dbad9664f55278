"""``kernelwatch dashboard``: the Streamlit dashboard, as this process (``exec``)."""

from __future__ import annotations

import argparse
import os
import sys

NAME = "dashboard"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ds = sub.add_parser(
        NAME,
        help="Streamlit dashboard",
        description="Serve the dashboard (runs, trends, regressions, compare, bisections, "
        "fleet) from the database in KW_DATABASE_URL.",
    )
    ds.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    ds.add_argument("--address", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ds.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.jobs.cli.common import settings

    # the settings fail fast here, as every other command's do (design.md): a bad
    # KW_DATABASE_URL served a dashboard whose every page then failed
    settings()
    # the launcher imports the app's modules before serving: the first page is not blank
    argv = [
        sys.executable,
        "-m",
        "kernelwatch.dashboard.server",
        "--server.headless",
        "true",
        "--server.port",
        str(args.port),
        "--server.address",
        args.address,
        "--browser.gatherUsageStats",
        "false",
    ]
    os.execv(sys.executable, argv)  # the server becomes this process: signals reach it
    return 0  # pragma: no cover


__all__ = ["NAME", "add_parser", "handle"]
