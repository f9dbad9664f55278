"""``kernelwatch db upgrade``: Alembic migrations of the configured database."""

from __future__ import annotations

import argparse

NAME = "db"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser(
        NAME,
        help="database maintenance",
        description="Database maintenance on KW_DATABASE_URL (every command also migrates "
        "on start; this is for deployments that migrate as a step of their own).",
    )
    dbs = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = dbs.add_parser(
        "upgrade",
        help="Alembic migrations to head",
        description="Apply the Alembic migrations up to REVISION (default: head).",
    )
    up.add_argument("revision", nargs="?", default="head", help="target revision (default head)")
    up.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kernelwatch.db.migrate import upgrade
    from kernelwatch.jobs.cli.common import settings

    upgrade(revision=args.revision)
    print(f"database at {args.revision}: {settings().resolved_database_url.split('@')[-1]}")
    return 0


__all__ = ["NAME", "add_parser", "handle"]
