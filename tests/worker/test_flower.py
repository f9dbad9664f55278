"""Flower, Celery's monitor, works with kernelwatch's app: it sees our workers and task.

A real worker consumes from Redis; ``celery -A kernelwatch.worker.app flower`` (what
deploy/compose.yaml runs) is started on loopback and asked over its HTTP API.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kernelwatch.db.config import Settings
from kernelwatch.jobs.cli.processes import start_worker
from kernelwatch.jobs.planning.broker import EXECUTE_RUN

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_flower_lists_our_worker_and_its_task(tmp_path: Path, redis_db_url: str) -> None:
    pytest.importorskip("flower")
    settings = Settings(data_dir=tmp_path / "kw", broker_url=redis_db_url)
    settings.ensure_dirs()
    worker = start_worker(settings, name="flowered")
    port = _free_port()
    env = {
        **os.environ,
        "KW_BROKER_URL": redis_db_url,
        "KW_DATA_DIR": str(settings.data_dir),
        "FLOWER_UNAUTHENTICATED_API": "true",
    }
    argv = [sys.executable, "-m", "celery", "-A", "kernelwatch.worker.app", "flower",
            "--address=127.0.0.1", f"--port={port}"]  # fmt: skip
    log = open(tmp_path / "flower.log", "wb")  # noqa: SIM115
    flower = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        found: dict[str, object] = {}
        while time.monotonic() < deadline and not found:
            time.sleep(1)
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/workers?refresh=1", timeout=10)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                # on a loaded machine a refresh may come back before every inspect reply
                # has: wait until the worker's entry holds both fields read below
                found = {
                    k: v
                    for k, v in r.json().items()
                    if k.startswith("flowered-")
                    and isinstance(v, dict)
                    and {"registered", "active_queues"} <= set(v)
                }
        assert found, (tmp_path / "flower.log").read_text()[-2000:]
        (info,) = found.values()
        assert isinstance(info, dict)
        assert EXECUTE_RUN in info["registered"]
        assert any(q["name"] == "cpu" for q in info["active_queues"])
    finally:
        flower.terminate()
        flower.wait(timeout=30)
        log.close()
        worker.terminate()
        worker.wait(timeout=30)
