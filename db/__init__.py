"""kernelwatch.db: the schema, sessions and settings every service part shares.

Typed SQLAlchemy 2 models, Alembic migrations, and the one settings object. The
database is SQLite in the data directory unless ``KW_DATABASE_URL`` names
another (PostgreSQL in a fleet). Nothing here knows about Celery or HTTP.
"""
