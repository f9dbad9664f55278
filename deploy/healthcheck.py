#!/usr/bin/env python3
"""Container health probes for kernelwatch images (compose ``healthcheck:``).

``healthcheck.py http URL``  exit 0 when GET URL answers 2xx within the timeout.
``healthcheck.py worker [APP [TIMEOUT]]``
                             exit 0 when a Celery node on this host answers a ping.

The images are slim (no curl), hence a script. The worker probe matches the node name
by host (``*@<hostname>``), so it does not depend on how ``kernelwatch worker`` names
its nodes. A worker whose pool is busy with a measurement still answers a ping with the
prefork pool; with the solo pool it may not, so nothing should restart on this probe
alone (compose only reports it; the Kubernetes manifests do not use it).
"""

from __future__ import annotations

import socket
import sys
import urllib.request


def http(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 0 if 200 <= response.status < 300 else 1
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


def worker(app_path: str = "kernelwatch.worker.app", timeout: float = 10.0) -> int:
    from celery.app.utils import find_app

    app = find_app(app_path)
    host = socket.gethostname()
    replies = app.control.ping(timeout=timeout) or []
    nodes = [name for reply in replies for name in reply]
    if any(name.split("@", 1)[-1] == host for name in nodes):
        return 0
    print(f"unhealthy: no Celery node @{host} answered (got {nodes})", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "http":
        return http(argv[1])
    if argv and argv[0] == "worker" and len(argv) <= 3:
        app = argv[1] if len(argv) > 1 else "kernelwatch.worker.app"
        return worker(app, float(argv[2])) if len(argv) > 2 else worker(app)
    print("usage: healthcheck.py http URL | worker [APP [TIMEOUT]]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
