# Without a resolvable kernelwatch.* (mypy and the editable install's import hook), the
# wrapped query functions read as Any; their return types are declared here again.
# mypy: disable-error-code="no-any-return"
"""The database as pages see it: cached wrappers over ``queries`` and the one write.

Each wrapper takes the database URL first, so two databases (tests, a second
deployment) never share cache entries. Lists that change while people watch
(runs, queue, fleet) live for seconds; history lives for a minute. A triage
write clears the regression caches so the author sees it at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st
from sqlalchemy import Engine

from kernelwatch.dashboard import queries
from kernelwatch.db.config import get_settings
from kernelwatch.db.session import engine_for, session_factory, transaction
from kernelwatch.db.triage import triage

LIVE_TTL = 10
HISTORY_TTL = 60


def database_url() -> str:
    return get_settings().resolved_database_url


def engine(url: str) -> Engine:
    return engine_for(url)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def schema_state(url: str) -> dict[str, bool]:
    return queries.schema_state(engine(url))


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def repositories(url: str) -> pd.DataFrame:
    return queries.repositories(engine(url))


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def device_classes(url: str, repository_id: int | None = None) -> list[str]:
    return queries.device_classes(engine(url), repository_id)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def resolve_run(url: str, ref: str, device_class: str | None = None) -> int | None:
    return queries.resolve_run(engine(url), ref, device_class)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def runs(
    url: str,
    repository_id: int | None = None,
    statuses: Sequence[str] = (),
    device_class: str | None = None,
    limit: int = queries.RUN_LIMIT,
    triggers: Sequence[str] = (),
) -> pd.DataFrame:
    return queries.runs(
        engine(url), repository_id, tuple(statuses), device_class, limit, tuple(triggers)
    )


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def triggers(url: str) -> list[str]:
    return queries.triggers(engine(url))


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def selftests(url: str) -> pd.DataFrame | None:
    return queries.selftests(engine(url))


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def commit_answer(url: str, run_id: int) -> dict[str, Any] | None:
    return queries.commit_answer(engine(url), run_id)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def run_detail(url: str, run_id: int) -> dict[str, Any] | None:
    return queries.run_detail(engine(url), run_id)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def run_counts(url: str) -> pd.DataFrame:
    return queries.run_counts(engine(url))


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def run_results(url: str, run_id: int, samples: bool = False) -> pd.DataFrame:
    return queries.run_results(engine(url), run_id, samples)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def run_spreads(url: str, run_id: int) -> dict[str, float]:
    return queries.run_spreads(engine(url), run_id)


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def cases_for(url: str, repository_id: int, device_class: str | None) -> pd.DataFrame:
    return queries.cases_for(engine(url), repository_id, device_class)


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def case_info(url: str, case_id: str) -> dict[str, Any] | None:
    return queries.case_info(engine(url), case_id)


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def case_repositories(url: str, case_id: str) -> list[int]:
    return queries.case_repositories(engine(url), case_id)


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def trend(url: str, case_ids: Sequence[str], repository_id: int, device_class: str) -> pd.DataFrame:
    return queries.trend(engine(url), tuple(case_ids), repository_id, device_class)


@st.cache_data(ttl=HISTORY_TTL, show_spinner=False)
def roofline(url: str, run_id: int) -> pd.DataFrame:
    return queries.roofline(engine(url), run_id)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def regressions(url: str, states: Sequence[str], repository_id: int | None = None) -> pd.DataFrame:
    return queries.regressions(engine(url), tuple(states), repository_id)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def triage_events(url: str, regression_ids: Sequence[int]) -> pd.DataFrame:
    return queries.triage_events(engine(url), tuple(regression_ids))


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def workers(url: str) -> pd.DataFrame:
    return queries.workers(engine(url))


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def running_runs(url: str) -> pd.DataFrame:
    return queries.running_runs(engine(url))


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def heartbeats(url: str) -> pd.DataFrame | None:
    return queries.heartbeats(engine(url))


def record_triage(url: str, regression_id: int, action: str, who: str, note: str) -> None:
    """Write one triage decision (audit row + regression state), then drop stale caches."""
    with transaction(session_factory(engine(url))) as session:
        triage(session, regression_id, action, who, note)
    regressions.clear()
    triage_events.clear()
