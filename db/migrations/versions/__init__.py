"""Alembic's migration scripts, which Alembic loads by path (it skips this file); a
package only as design.md asks of every folder."""
