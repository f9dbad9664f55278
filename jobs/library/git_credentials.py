"""A source URL's credentials, handed to git in its environment, never on its command line.

A server's source may carry a token (``https://x-access-token:TOKEN@github.com/o/r``).
Given to git as an argument it stood in the host's process list for as long as git ran
(any local user reads ``/proc/PID/cmdline``; only the owner and root read
``/proc/PID/environ``), and ``git clone`` wrote it into the mirror's ``config`` on disk.
Here the URL loses its user and password, and git gets them back as an HTTP header
through ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` (git 2.31+),
scoped to the URL's scheme, host and port: git sends it to that server only, for the
superproject and for submodules on the same host alike, as the token in a relative
submodule URL did before.

Only ``http``/``https`` URLs carry credentials this way; ``ssh`` keys and local paths
have none to move, and their URLs are returned unchanged.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit, urlunsplit


def split(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its user and password, the environment that gives them to git).

    The environment is empty when the URL has no credentials (or is not HTTP): merge it
    into git's environment as it is.
    """
    public, settings = credentials(url)
    return public, config_env(settings)


def credentials(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its user and password, the git settings that send them): one
    ``http.<scheme>://<host>/.extraHeader``, or none for a URL without credentials.
    Settings of several URLs merge into one :func:`config_env`."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or "@" not in parts.netloc:
        return url, {}
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    public = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    secret = f"{unquote(user)}:{unquote(password)}".encode()
    header = "Authorization: Basic " + base64.b64encode(secret).decode("ascii")
    scope = f"{parts.scheme.lower()}://{hostport}/"
    return public, {f"http.{scope}.extraHeader": header}


def config_env(settings: Mapping[str, str]) -> dict[str, str]:
    """git configuration as environment variables (``GIT_CONFIG_COUNT`` and its pairs);
    none for no settings."""
    if not settings:
        return {}
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for i, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


__all__ = ["config_env", "credentials", "split"]
