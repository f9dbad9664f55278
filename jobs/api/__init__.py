"""``kernelwatch api``: the GitHub webhook endpoint and the read-only REST API.

- ``POST /webhooks/github``: signature, size and delivery checks, then
  :mod:`kernelwatch.jobs.github.events` plans runs.
- ``GET /healthz``, ``GET /metrics`` (Prometheus text).
- ``GET /api/v1/runs``, ``/api/v1/runs/{id}``, ``/api/v1/verdicts``.

Only this package knows HTTP: domain errors become status codes here and nowhere else.
"""

from kernelwatch.jobs.api.app import create_app
from kernelwatch.jobs.api.context import ApiContext

__all__ = ["ApiContext", "create_app"]
