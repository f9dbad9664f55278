"""Alembic's environment and migration scripts, which Alembic loads by path; a package
only as design.md asks of every folder."""
