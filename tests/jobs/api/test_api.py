"""The REST side of ``kernelwatch api``: health, metrics, runs, verdicts, OpenAPI, fuzzing.

Real databases (SQLite and PostgreSQL), real Redis for the queue-depth metric, and a
real ``kernelwatch api`` process on loopback for the command line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.build_log import environment_line
from kernelwatch.db.config import Settings
from kernelwatch.db.models import Result, Run
from kernelwatch.db.session import engine_for, make_engine
from kernelwatch.jobs.api import create_app
from kernelwatch.jobs.api.signature import sign
from kernelwatch.jobs.planning.broker import enqueue_run, make_celery
from tests.fake_github import load_payload
from tests.jobs.cli.test_gate import HEAD, add_commit_sharing_heads_prefix, seed

SECRET = "api-test-secret"


def make_app(db_url: str, tmp_path: Path, broker_url: str | None = None) -> FastAPI:
    settings = Settings(
        data_dir=tmp_path / "kw",
        database_url=db_url,
        broker_url=broker_url,
        webhook_secret=SECRET,
        dashboard_url="https://kw.example.com",
    )
    settings.ensure_dirs()
    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(db_url), expire_on_commit=False)
    return create_app(
        settings, factory, make_celery(settings), None, repos={}, reporter_interval_s=None
    )


@pytest.fixture
def client(db_url: str, tmp_path: Path) -> TestClient:
    seed(sessionmaker(bind=engine_for(db_url)))
    return TestClient(make_app(db_url, tmp_path))


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["database"] == "ok"


def test_healthz_reports_a_dead_database_as_503(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, webhook_secret=SECRET)
    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    app = create_app(settings, sessionmaker(bind=dead), None, None, repos={},
                     reporter_interval_s=None)  # fmt: skip
    r = TestClient(app).get("/healthz")
    assert r.status_code == 503 and r.json()["status"] == "degraded"
    assert 'kernelwatch_scrape_error{source="database"} 1.0' in TestClient(app).get("/metrics").text
    # every read is a JSON 503 too (it was a plain-text 500), the address not in it
    for path in ("/api/v1/runs", "/api/v1/runs/1", "/api/v1/runs/1/results",
                 "/api/v1/verdicts?repo=a/b&sha=ccccccc"):  # fmt: skip
        r = TestClient(app).get(path)
        assert r.status_code == 503 and r.headers["retry-after"] == "30", (path, r.text)
        assert r.json() == {"detail": "the database is unavailable; try again shortly"}


def test_runs_list_filters_and_detail(client: TestClient) -> None:
    r = client.get("/api/v1/runs", params={"repo": "acme/kernels"})
    assert r.status_code == 200
    data = r.json()
    assert data["total"] == 2 and [x["id"] for x in data["runs"]] == [2, 1]
    only = client.get("/api/v1/runs", params={"sha": HEAD[:10], "status": "succeeded"}).json()
    assert [x["commit"] for x in only["runs"]] == [HEAD]
    detail = client.get("/api/v1/runs/2").json()
    assert detail["verdict"] == "fail" and detail["baseline"] == "b" * 40
    kernels = {c["kernel"]: c for c in detail["cases"]}
    assert kernels["softmax"]["verdict"] == "regression"
    assert kernels["softmax"]["ratio_ci"] == [1.201, 1.262]
    assert client.get("/api/v1/runs/999").status_code == 404
    assert client.get("/api/v1/runs", params={"status": "bogus"}).status_code == 422
    assert client.get("/api/v1/runs", params={"limit": 0}).status_code == 422


def test_a_runs_detail_names_the_environments_it_used(db_url: str, client: TestClient) -> None:
    with sessionmaker(bind=make_engine(db_url))() as s, s.begin():
        run = s.get(Run, 2)
        assert run is not None
        run.build_log = (
            "[1/3] nvcc -c a.cu\n"
            + environment_line(HEAD, 96.2, "trimmed", Path("/venvs/a"))
            + environment_line("b" * 40, None, "trimmed", Path("/venvs/b"))
        )
    detail = client.get("/api/v1/runs/2").json()
    assert detail["environments"] == [
        {"commit": HEAD[:12], "seconds": 96.0, "profile": "trimmed"},
        {"commit": "b" * 12, "seconds": None, "profile": "trimmed"},
    ]
    assert client.get("/api/v1/runs/1").json()["environments"] == []


def test_a_runs_results_come_with_their_whole_records(db_url: str, client: TestClient) -> None:
    """design.md: /api/v1 serves runs, results and verdicts; the results are the stored
    records in full (samples, device, environment), which the run's detail summarizes."""
    factory = sessionmaker(bind=engine_for(db_url))
    with factory() as s, s.begin():
        row = s.scalars(
            select(Result).where(Result.run_id == 2, Result.case_id == "c-softmax")
        ).one()
        row.record = {"kernel": "softmax", "environment": {"torch": "2.11.0"}, "timing": None}
    r = client.get("/api/v1/runs/2/results")
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["run_id"] == 2 and data["total"] == 3 == len(data["results"])
    by_kernel = {x["kernel"]: x for x in data["results"]}
    softmax = by_kernel["softmax"]
    assert softmax["verdict"] == "regression" and softmax["ratio_ci"] == [1.201, 1.262]
    assert softmax["record"]["environment"] == {"torch": "2.11.0"}
    only = client.get("/api/v1/runs/2/results", params={"kernel": "rmsnorm", "limit": 1}).json()
    assert only["total"] == 1 and only["results"][0]["verdict"] == "improvement"
    page = client.get("/api/v1/runs/2/results", params={"limit": 2, "offset": 2}).json()
    assert page["total"] == 3 and len(page["results"]) == 1
    assert client.get("/api/v1/runs/999/results").status_code == 404
    assert client.get("/api/v1/runs/2/results", params={"limit": 501}).status_code == 422


def test_verdicts(client: TestClient) -> None:
    r = client.get("/api/v1/verdicts", params={"repo": "acme/kernels", "sha": HEAD})
    assert r.status_code == 200
    v = r.json()
    assert v["verdict"] == "fail"
    [cls] = v["classes"]
    assert cls["state"] == "failure"
    assert cls["target_url"] == "https://kw.example.com/?page=compare&a=1&b=2"
    assert cls["moved"][0]["kernel"] == "softmax"
    missing = client.get("/api/v1/verdicts", params={"repo": "acme/kernels", "sha": "d" * 40})
    assert missing.json()["verdict"] == "none"
    assert client.get("/api/v1/verdicts", params={"repo": "x/y", "sha": HEAD}).status_code == 404
    bad = client.get("/api/v1/verdicts", params={"repo": "acme/kernels", "sha": "HEAD;id"})
    assert bad.status_code == 422


def test_a_sha_prefix_of_two_commits_is_a_409(db_url: str, client: TestClient) -> None:
    add_commit_sharing_heads_prefix(sessionmaker(bind=engine_for(db_url)))
    r = client.get("/api/v1/verdicts", params={"repo": "acme/kernels", "sha": HEAD[:7]})
    assert r.status_code == 409 and "is ambiguous" in r.json()["detail"], r.text
    one = client.get("/api/v1/verdicts", params={"repo": "acme/kernels", "sha": HEAD[:8]})
    assert one.status_code == 200 and one.json()["verdict"] == "fail"


def test_openapi_document(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for path in ("/webhooks/github", "/healthz", "/metrics", "/api/v1/runs",
                 "/api/v1/runs/{run_id}", "/api/v1/runs/{run_id}/results",
                 "/api/v1/verdicts"):  # fmt: skip
        assert path in doc["paths"], path
    hook = doc["paths"]["/webhooks/github"]["post"]
    assert {"401", "413", "400"} <= set(hook["responses"])


def test_metrics_runs_by_state_durations_and_redis_queue_depth(
    pg_url: str, redis_db_url: str, tmp_path: Path
) -> None:
    from tests.conftest import _truncate

    _truncate(pg_url)
    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(pg_url))
    seed(factory, verdict=None, status="queued", classes=("h100",))
    app = make_app(pg_url, tmp_path, broker_url=redis_db_url)
    celery = make_celery(app.state.kw.settings)
    for _ in range(3):
        enqueue_run(celery, 2, "gpu.h100", "pull_request")  # priority 9: a sub-queue
    enqueue_run(celery, 2, "gpu.h100", "nightly")
    text = TestClient(app).get("/metrics").text
    assert 'kernelwatch_runs{state="queued"} 1.0' in text
    assert 'kernelwatch_runs{state="succeeded"} 1.0' in text
    assert 'kernelwatch_queue_depth{queue="gpu.h100"} 4.0' in text
    assert 'kernelwatch_oldest_queued_run_age_seconds{queue="cpu"}' in text
    assert 'kernelwatch_scrape_error{source="broker"} 0.0' in text


def test_metrics_count_webhook_deliveries(client: TestClient) -> None:
    body = json.dumps(load_payload("ping")).encode()
    client.post(
        "/webhooks/github",
        content=body,
        headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "m-1",
                 "X-Hub-Signature-256": sign(SECRET, body)},
    )  # fmt: skip
    client.post("/webhooks/github", content=body, headers={"X-GitHub-Event": "ping"})
    text = client.get("/metrics").text
    assert 'kernelwatch_webhook_deliveries_total{event="ping",outcome="pong"} 1.0' in text
    assert 'kernelwatch_webhook_deliveries_total{event="other",outcome="unauthorized"} 1.0' in text


# ----------------------------------------------------------------------------- fuzzing


def test_schemathesis_finds_no_server_errors(sqlite_url: str, tmp_path: Path) -> None:
    """Every operation of /openapi.json with generated inputs: no 5xx anywhere."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    seed(sessionmaker(bind=engine_for(sqlite_url)))
    app = make_app(sqlite_url, tmp_path)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []
    calls: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=40, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            response = case.call()
            key = f"{case.method} {case.path}"
            calls[key] = calls.get(key, 0) + 1
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.status_code}")

        run()
    assert len(calls) == 7 and sum(calls.values()) >= 150, calls
    assert failures == []


# ----------------------------------------------------------------------------- process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def api_started(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real ``kernelwatch api`` process on loopback, answering ``/healthz``."""
    port = free_port()
    env = {
        **os.environ,
        "KW_DATABASE_URL": sqlite_url,
        "KW_DATA_DIR": str(tmp_path / "d"),
        "KW_WEBHOOK_SECRET": SECRET,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch.jobs.cli.main", "api", "--port", str(port),
         "--log-level", "warning"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield proc, url
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode in (0, -15), out


@pytest.fixture
def api_process(api_started: tuple[subprocess.Popen[bytes], str]) -> str:
    return api_started[1]


def test_kernelwatch_api_command_serves_on_loopback(api_process: str) -> None:
    body = json.dumps(load_payload("ping")).encode()
    r = httpx.post(
        api_process + "/webhooks/github",
        content=body,
        headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "proc-1",
                 "X-Hub-Signature-256": sign(SECRET, body),
                 "Content-Type": "application/json"},
    )  # fmt: skip
    assert r.status_code == 200 and r.json()["status"] == "pong"
    assert httpx.get(api_process + "/openapi.json").json()["info"]["title"] == "kernelwatch"


def test_metrics_live_workers_and_gpu_busy_fraction(sqlite_url: str, tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from kernelwatch.db.fleet import WorkerHeartbeat
    from kernelwatch.db.models import Run

    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(sqlite_url))
    seed(factory, verdict="pass", classes=("h100",))
    now = datetime.now(UTC)
    with factory() as s, s.begin():
        for name, state in (("gpu0", "busy"), ("gpu1", "idle")):
            s.add(WorkerHeartbeat(name=name, device_class="h100", state=state, last_seen=now))
        s.add(WorkerHeartbeat(name="old", device_class="h100", state="idle",
                              last_seen=now - timedelta(hours=2)))  # fmt: skip
        runs = s.query(Run).order_by(Run.id).all()
        # 30 min of a finished run and 15 min of a running one in the last hour, 2 GPUs
        runs[0].started, runs[0].finished = now - timedelta(minutes=50), now - timedelta(minutes=20)
        runs[1].status, runs[1].started, runs[1].finished = (
            "running",
            now - timedelta(minutes=15),
            None,
        )
    text = TestClient(make_app(sqlite_url, tmp_path)).get("/metrics").text
    assert 'kernelwatch_workers{device_class="h100",state="busy"} 1.0' in text
    assert 'kernelwatch_workers{device_class="h100",state="idle"} 1.0' in text  # "old" is gone
    line = next(x for x in text.splitlines() if x.startswith("kernelwatch_gpu_busy_fraction"))
    assert abs(float(line.split()[-1]) - 45 / 120) < 0.01


def test_the_api_process_never_loads_torch(
    api_started: tuple[subprocess.Popen[bytes], str],
) -> None:
    """Planning a webhook names a queue (``gpu.h200``); that must not cost torch."""
    proc, url = api_started
    body = json.dumps(load_payload("ping")).encode()
    r = httpx.post(
        url + "/webhooks/github",
        content=body,
        headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "torchless-1",
                 "X-Hub-Signature-256": sign(SECRET, body),
                 "Content-Type": "application/json"},
    )  # fmt: skip
    assert r.status_code == 200
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert os.path.realpath(sys.executable) in maps  # the API's own process, alive
    assert "libtorch" not in maps and "torch/_C" not in maps


def test_the_webhook_and_planning_modules_import_without_torch() -> None:
    """The same promise by ``sys.modules``: every module the API process loads to plan."""
    code = (
        "import sys\n"
        "import kernelwatch.jobs.api.app, kernelwatch.jobs.github.events\n"
        "import kernelwatch.jobs.planning.plan, kernelwatch.jobs.planning.queues\n"
        "from kernelwatch.jobs.planning.queues import local_device_class, queue_for\n"
        "queue_for(local_device_class())\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
