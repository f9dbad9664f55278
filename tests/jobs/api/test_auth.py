"""Reads of the REST API need ``KW_API_TOKEN`` (issue 24, item 10); the verdicts answer.

Before: ``/api/v1/runs`` answered anyone who reached the port, case error texts included.
Real databases (SQLite and PostgreSQL), the application as ``kernelwatch api`` builds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.api import create_app
from kernelwatch.jobs.api.auth import ReadAccess, is_loopback
from kernelwatch.jobs.api.schemas import VERDICT_EXAMPLE, VerdictOut
from kernelwatch.jobs.planning.broker import make_celery
from tests.jobs.cli.test_gate import HEAD, seed

TOKEN = "read-token-0123456789"
READS = ("/api/v1/runs", "/api/v1/runs/2", f"/api/v1/verdicts?repo=acme/kernels&sha={HEAD}")


def app_for(db_url: str, tmp_path: Path, bind_host: str, **settings: object) -> FastAPI:
    s = Settings(
        data_dir=tmp_path / "kw",
        database_url=db_url,
        webhook_secret="auth-test-secret",
        dashboard_url="https://kw.example.com",
        **settings,  # type: ignore[arg-type]
    )
    s.ensure_dirs()
    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(db_url), expire_on_commit=False)
    return create_app(
        s, factory, make_celery(s), None, repos={}, reporter_interval_s=None, bind_host=bind_host
    )


@pytest.fixture
def seeded(db_url: str) -> str:
    seed(sessionmaker(bind=engine_for(db_url)))
    return db_url


def test_an_unauthenticated_read_is_refused_beyond_loopback(seeded: str, tmp_path: Path) -> None:
    client = TestClient(app_for(seeded, tmp_path, "0.0.0.0", api_token=TOKEN))
    for path in READS:
        r = client.get(path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer" in r.json()["detail"]
        wrong = client.get(path, headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401 and "not this server's" in wrong.json()["detail"]
        ok = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200, (path, ok.text)
    # probes and the schema stay open; /metrics unless KW_METRICS_AUTH
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200
    assert client.get("/openapi.json").status_code == 200


def test_beyond_loopback_without_a_token_every_read_is_refused_with_what_to_do(
    seeded: str, tmp_path: Path
) -> None:
    client = TestClient(app_for(seeded, tmp_path, "0.0.0.0"))
    r = client.get("/api/v1/runs", headers={"Authorization": "Bearer anything"})
    assert r.status_code == 401 and "set KW_API_TOKEN" in r.json()["detail"]
    assert client.get("/healthz").status_code == 200


def test_loopback_without_a_token_is_open_and_a_set_token_is_always_required(
    seeded: str, tmp_path: Path
) -> None:
    assert TestClient(app_for(seeded, tmp_path, "127.0.0.1")).get(READS[0]).status_code == 200
    guarded = TestClient(app_for(seeded, tmp_path, "127.0.0.1", api_token=TOKEN))
    assert guarded.get(READS[0]).status_code == 401
    off = TestClient(app_for(seeded, tmp_path, "0.0.0.0", api_auth="off"))
    assert off.get(READS[0]).status_code == 200


def test_metrics_behind_the_token_when_asked(seeded: str, tmp_path: Path) -> None:
    client = TestClient(app_for(seeded, tmp_path, "::", api_token=TOKEN, metrics_auth=True))
    assert client.get("/metrics").status_code == 401
    ok = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and "kernelwatch_runs" in ok.text


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("127.8.0.1", True),
     ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False),
     ("kw.example.com", False)],
)  # fmt: skip
def test_which_bind_addresses_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert ReadAccess.of(Settings(), host).required is not loopback


def test_the_openapi_document_names_the_token_and_shows_a_verdict(
    seeded: str, tmp_path: Path
) -> None:
    doc = (
        TestClient(app_for(seeded, tmp_path, "0.0.0.0", api_token=TOKEN))
        .get("/openapi.json")
        .json()
    )
    assert doc["components"]["securitySchemes"]["KW_API_TOKEN"]["scheme"] == "bearer"
    verdicts = doc["paths"]["/api/v1/verdicts"]["get"]
    assert verdicts["security"] == [{"KW_API_TOKEN": []}]
    assert {"200", "401", "404", "422"} <= set(verdicts["responses"])
    example = verdicts["responses"]["200"]["content"]["application/json"]["example"]
    assert VerdictOut.model_validate(example).verdict == "fail"
    assert "security" not in doc["paths"]["/healthz"]["get"]
    schema = doc["components"]["schemas"]["VerdictOut"]
    assert {"exit_code", "in_flight", "table", "markdown"} <= set(schema["properties"])


def test_the_documented_example_is_the_schema_example() -> None:
    """docs/github.md quotes the example response; both say the same."""
    import json

    docs = (Path(__file__).resolve().parents[3] / "docs" / "github.md").read_text()
    start = docs.index("```json\n", docs.index("GET /api/v1/verdicts?repo=")) + len("```json\n")
    quoted = json.loads(docs[start : docs.index("```", start)])
    assert quoted == VERDICT_EXAMPLE


def test_the_answer_carries_the_exit_code_table_and_comment(seeded: str, tmp_path: Path) -> None:
    client = TestClient(app_for(seeded, tmp_path, "127.0.0.1", api_token=TOKEN))
    v = client.get(READS[2], headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert v["verdict"] == "fail" and v["exit_code"] == 1 and v["in_flight"] == []
    assert v["table"].startswith("acme/kernels@cccccccccccc: FAIL")
    assert "<!-- kernelwatch:pr-comment -->" in v["markdown"]
    assert v["dashboard_url"] == "https://kw.example.com/?page=compare&a=1&b=2"


def test_the_gate_exit_codes_read_the_same_in_readme_docs_and_help() -> None:
    """Issue 27: the README and docs/github.md said 0/1/2 while --help said 0/1/2/3."""
    from kernelwatch.jobs.cli.gate_remote import EXIT_HELP
    from kernelwatch.jobs.cli.main import build_parser

    root = Path(__file__).resolve().parents[3]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    gate_help = sub.choices["gate"].format_help()  # type: ignore[attr-defined]
    assert EXIT_HELP in " ".join(gate_help.split())
    for doc in ("README.md", "docs/github.md"):
        assert EXIT_HELP in " ".join((root / doc).read_text().split()), doc
    action = (root / "action.yml").read_text()
    assert "exits 0 pass, 1 fail (regression, less_accurate, broken), 2 error or" in action
