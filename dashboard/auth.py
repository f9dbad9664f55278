"""Who may triage: a shared password or a trusted reverse-proxy header.

Reading the dashboard needs no login. Writing (triage) needs an identity:

- ``KW_DASHBOARD_TRUSTED_HEADER`` names a header an authenticating proxy sets
  (e.g. ``X-Forwarded-User`` from oauth2-proxy); its value is the user. Only
  configure this when the dashboard is reachable through that proxy alone, since
  anyone who reaches Streamlit directly can send the header.
- ``KW_DASHBOARD_PASSWORD`` is a shared password; the person also gives a name,
  which goes into the audit trail.

With neither set, triage is disabled and the dashboard is read-only. The two
variables are read with ``os.environ`` because ``Settings`` ignores them.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

import streamlit as st

PASSWORD_ENV = "KW_DASHBOARD_PASSWORD"
HEADER_ENV = "KW_DASHBOARD_TRUSTED_HEADER"
SESSION_USER = "kw_user"


@dataclass(frozen=True)
class AuthConfig:
    password: str | None
    trusted_header: str | None

    @property
    def enabled(self) -> bool:
        return bool(self.password or self.trusted_header)


def auth_config(environ: Mapping[str, str] | None = None) -> AuthConfig:
    env = os.environ if environ is None else environ
    return AuthConfig(
        password=env.get(PASSWORD_ENV) or None,
        trusted_header=(env.get(HEADER_ENV) or "").strip() or None,
    )


def user_from_headers(config: AuthConfig, headers: Mapping[str, str]) -> str | None:
    """The user the trusted proxy vouches for, or None (header names are case-insensitive)."""
    if not config.trusted_header:
        return None
    want = config.trusted_header.lower()
    for name, value in headers.items():
        if name.lower() == want and value and value.strip():
            return value.strip()[:255]
    return None


def check_password(config: AuthConfig, supplied: str) -> bool:
    if not config.password or not supplied:
        return False
    return hmac.compare_digest(config.password.encode(), supplied.encode())


def _request_headers() -> Mapping[str, str]:
    try:
        return dict(st.context.headers)
    except Exception:  # no request context (bare mode, some test harnesses)
        return {}


def current_user(config: AuthConfig | None = None) -> str | None:
    """The identity allowed to write in this session, or None (read-only)."""
    config = config or auth_config()
    if not config.enabled:
        return None
    user = user_from_headers(config, _request_headers())
    if user:
        return user
    if config.password:
        value = st.session_state.get(SESSION_USER)
        return value if isinstance(value, str) and value else None
    return None


def login_box(config: AuthConfig | None = None) -> str | None:
    """Sidebar login (password mode) or the identity already established; returns the user."""
    config = config or auth_config()
    user = current_user(config)
    box = st.sidebar
    if not config.enabled:
        box.caption("Read-only: triage is disabled (no login configured).")
        return None
    if user:
        box.caption(f"Signed in as **{user}**")
        if SESSION_USER in st.session_state and box.button("Sign out", key="kw_signout"):
            del st.session_state[SESSION_USER]
            st.rerun()
        return user
    if not config.password:
        box.caption(f"Read-only: no `{config.trusted_header}` header from the proxy.")
        return None
    with box.form("kw_login", clear_on_submit=True):
        name = st.text_input("Your name", key="kw_login_name")
        password = st.text_input("Password", type="password", key="kw_login_password")
        if st.form_submit_button("Sign in to triage"):
            if not name.strip():
                st.error("Give your name: it goes into the triage audit trail.")
            elif check_password(config, password):
                st.session_state[SESSION_USER] = name.strip()[:255]
                st.rerun()
            else:
                st.error("Wrong password.")
    return None
