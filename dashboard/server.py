"""The dashboard's server process: ``streamlit run app.py`` with the app's imports done first.

Why: Streamlit runs the script only when a browser connects, and the first run of a
cold server imported pandas, Altair, SQLAlchemy and every page (seconds on a loaded
2-core machine) before drawing anything, so the first page a person (or headless
Chromium) opened stayed blank until a reload (issue 18). The script runs in this
process, so importing those modules here, before the server starts, makes that first
run as fast as any later one; ``app.py`` also draws its frame before its first query.

``python -m kernelwatch.dashboard.server [streamlit run options]``; ``kernelwatch
dashboard`` execs this.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
# What the first script run would import, except the modules that decorate functions
# with ``st.cache_data`` (``cached.py`` and the pages importing it): decorated outside
# the server's runtime they would get a cache of their own, not the runtime's.
WARM = (
    "numpy",
    "pandas",
    "altair",
    "sqlalchemy",
    "kernelwatch.db.models",
    "kernelwatch.db.session",
    "kernelwatch.dashboard.fmt",
    "kernelwatch.dashboard.charts",
    "kernelwatch.dashboard.compare_stats",
    "kernelwatch.dashboard.queries",
    "kernelwatch.dashboard.nav",
)


def warm(modules: Sequence[str] = WARM) -> list[str]:
    """Import ``modules`` into this process; the ones that failed (left to the script run,
    which shows the error on the page)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # the page shows it; starting the server must not fail on it
            failed.append(name)
    return failed


def main(argv: Sequence[str] | None = None) -> None:
    """Warm the imports, then hand over to ``streamlit run APP <options>``."""
    from streamlit.web import cli

    warm()
    args = list(sys.argv[1:] if argv is None else argv)
    sys.argv = ["streamlit", "run", str(APP), *args]
    cli.main()


if __name__ == "__main__":
    main()
