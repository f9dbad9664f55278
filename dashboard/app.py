"""kernelwatch dashboard: Streamlit entry point (``kernelwatch dashboard``).

Pages (``?page=``): runs (queue, history, one run), trend (a case over commits),
regressions (open ones, triage), compare (two runs, ratio table and heatmap),
fleet (workers and queues), roofline. The database is the one ``Settings`` names
(``KW_DATABASE_URL`` or the SQLite file in ``KW_DATA_DIR``); the dashboard reads
through ``kernelwatch.db`` only and writes nothing but triage decisions.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from kernelwatch.dashboard import (
    auth,
    cached,
    nav,
    page_bisect,
    page_compare,
    page_fleet,
    page_regressions,
    page_roofline,
    page_runs,
    page_trend,
)

RENDER: dict[str, Callable[[str], None]] = {
    "runs": page_runs.render,
    "trend": page_trend.render,
    "regressions": page_regressions.render,
    "compare": page_compare.render,
    "fleet": page_fleet.render,
    "roofline": page_roofline.render,
    "bisect": page_bisect.render,
}


def _navigation() -> str:
    """The page named by ``?page=``; the sidebar switch changes it and resets the view."""
    unknown = nav.unknown_page(nav.param("page"))
    if unknown is not None:
        st.error(
            f"There is no page {unknown!r}: showing Runs. Pages: "
            + ", ".join(p.key for p in nav.PAGES)
        )
    current: str = nav.page_key(nav.param("page"))
    keys = [p.key for p in nav.PAGES]
    choice = st.sidebar.radio(
        "Page", keys, index=keys.index(current), format_func=lambda k: nav.BY_KEY[k].title
    )
    if choice is not None and choice != current:
        st.query_params.clear()
        current = choice
    if st.query_params.get("page") != current:
        st.query_params["page"] = current
    return current


def main() -> None:
    st.set_page_config(page_title="kernelwatch", page_icon="⏱", layout="wide")
    st.sidebar.markdown("### kernelwatch")
    page = _navigation()
    url = cached.database_url()
    auth.login_box()
    st.sidebar.caption(f"Database: `{make_url(url).render_as_string(hide_password=True)}`")
    try:
        schema = cached.schema_state(url)
    except OperationalError as exc:
        st.error(f"Cannot reach the database: {exc.orig or exc}")
        return
    if not schema["core"]:
        st.error("This database has no kernelwatch schema yet: run `kernelwatch db upgrade`.")
        return
    RENDER[page](url)


main()
