"""The GitHub Action gates a simulated pull request against a live ``kernelwatch api``.

``docs/examples/kernelwatch-gate.yml`` (the workflow a library adds) names this
repository's ``action.yml``; its step is run as a hosted runner runs a composite action
(``tests/actions_runner.py``) while a real ``kernelwatch api`` process (PostgreSQL,
Redis, a read token) receives the pull request's signed webhook, a real worker measures
head against merge-base, and the step, started before the webhook arrived, waits, prints
the table and the dashboard link, and exits 1 for the broken head.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kernelwatch.db.config import Settings
from kernelwatch.jobs.cli.processes import start_worker, stop
from tests.actions_runner import finish, run_step, uses_step
from tests.conftest import _truncate
from tests.fake_github import delivery_headers, load_payload
from tests.helpers import BROKEN_SOFTMAX, git, library_files, make_repo
from tests.jobs.api.test_api import free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / "docs" / "examples" / "kernelwatch-gate.yml"
SECRET = "action-webhook-secret"
TOKEN = "action-read-token-7f3a"
FULL = "acme/kernels"
GOOD = "from kernelwatch.kernels.triton_kernels import softmax, rmsnorm, matmul, attention\n"


@pytest.fixture
def live_api(tmp_path: Path, pg_url: str, redis_db_url: str) -> Iterator[tuple[str, str, str]]:
    """(API URL, base sha, broken head sha): ``kernelwatch api`` and a worker, running."""
    _truncate(pg_url)
    src = tmp_path / "src"
    base = make_repo(src, library_files("kern", GOOD, recipe="pythonpath"), "A: kernels")
    git(src, "checkout", "-q", "-b", "feature")
    head = make_repo(src, {"kern/__init__.py": BROKEN_SOFTMAX}, "B: a faster softmax (wrong)")
    git(src, "checkout", "-q", "main")
    git(src, "update-ref", "refs/pull/7/head", head)
    repos = tmp_path / "repos.toml"
    repos.write_text(
        f'[repos."{FULL}"]\nsource = "{src}"\ndevice_classes = ["cpu"]\n'
        'bench_args = ["--kernel", "softmax", "--budget", "0.1"]\n'
    )
    settings = Settings(data_dir=tmp_path / "kw", database_url=pg_url, broker_url=redis_db_url,
                        suite_timeout_s=300)  # fmt: skip
    settings.ensure_dirs()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    env.update(KW_DATABASE_URL=pg_url, KW_BROKER_URL=redis_db_url, KW_DATA_DIR=str(tmp_path / "kw"),
               KW_WEBHOOK_SECRET=SECRET, KW_REPOS_FILE=str(repos), KW_API_TOKEN=TOKEN,
               KW_DASHBOARD_URL="https://kw.example.com")  # fmt: skip
    log = (tmp_path / "api.log").open("wb")
    api = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch.jobs.cli.main", "api", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = start_worker(settings, name="action-e2e")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert api.poll() is None and time.monotonic() < deadline, (
                tmp_path / "api.log"
            ).read_text()
            time.sleep(0.2)
        yield url, base, head
    finally:
        stop(worker)
        api.terminate()
        api.wait(timeout=30)
        log.close()


def test_the_action_gates_a_pull_request_from_a_hosted_runner(
    live_api: tuple[str, str, str], tmp_path: Path
) -> None:
    url, base, head = live_api
    # what the hosted runner has: the event, the repository variable and secret
    contexts = {
        "github": {
            "repository": FULL,
            "sha": "f" * 40,  # the PR's merge commit; the action gates the head instead
            "event": {"pull_request": {"head": {"sha": head}, "base": {"sha": base}}},
            "action_path": str(ROOT),
        },
        "vars": {"KERNELWATCH_API": url},
        "secrets": {"KERNELWATCH_TOKEN": TOKEN},
    }
    step = uses_step(WORKFLOW, "kernelwatch")
    runner_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # no KW_*, no database
    started = time.monotonic()
    proc = run_step(step, ROOT, contexts, tmp_path / "runner", env=runner_env, start_only=True)
    assert isinstance(proc, subprocess.Popen)

    # an unauthenticated read of the same API is refused
    anonymous = httpx.get(f"{url}/api/v1/verdicts", params={"repo": FULL, "sha": head})
    assert anonymous.status_code == 401

    time.sleep(3)  # the job starts before GitHub delivers the webhook
    assert proc.poll() is None, "the step did not wait for the runs"
    payload = load_payload(
        "pull_request_opened", pull_request__head__sha=head, pull_request__base__sha=base
    )
    body = json.dumps(payload).encode()
    r = httpx.post(f"{url}/webhooks/github", content=body,
                   headers=delivery_headers("pull_request", body, SECRET), timeout=60)  # fmt: skip
    assert r.status_code == 202 and r.json()["status"] == "planned", r.text

    result = finish(proc, ROOT, None, tmp_path / "runner", timeout_s=600)
    took = time.monotonic() - started
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout.startswith(f"{FULL}@{head[:12]}: FAIL"), result.stdout
    assert "broken" in result.stdout and "softmax" in result.stdout
    assert "dashboard (cpu): https://kw.example.com/?page=" in result.stdout
    assert "none: no runs of this commit yet" in result.stderr  # it waited from the start
    assert "kernelwatch gate: fail (exit 1)" in result.stderr
    assert result.outputs["verdict"] == "fail" and result.outputs["exit-code"] == "1"
    assert result.outputs["dashboard-url"].startswith("https://kw.example.com/?page=")
    assert "<!-- kernelwatch:pr-comment -->" in result.summary and "broken" in result.summary
    assert took < 600


def test_the_action_runs_under_an_interpreter_that_imports_nothing_at_start(
    tmp_path: Path,
) -> None:
    # the hosted runner's python3 is whatever it is; this project's virtualenv
    # interpreter imports no random at start-up, so without -I the script's folder
    # (jobs/cli, with its bisect.py) shadows the standard library's bisect, and the
    # Action died in a traceback before it asked anything (found 2026-12-03)
    bindir = Path(sys.executable).parent  # the virtualenv's bin: its python3 is the venv's
    probe = subprocess.run(
        [str(bindir / "python3"), "-c", "import sys; print('random' in sys.modules)"],
        capture_output=True, text=True, check=True, env={},
    )  # fmt: skip
    assert probe.stdout.strip() == "False", "this interpreter would hide the shadowing"
    contexts = {
        "github": {"repository": FULL, "sha": "a" * 40, "event": {}, "action_path": str(ROOT)},
        # an address the script refuses before it connects: a fast, known answer
        "vars": {"KERNELWATCH_API": "ftp://kw.example.com"},
        "secrets": {"KERNELWATCH_TOKEN": TOKEN},
    }
    env = {"PATH": f"{bindir}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path)}
    step = uses_step(WORKFLOW, "kernelwatch")
    got = run_step(step, ROOT, contexts, tmp_path / "runner", env=env)
    assert not isinstance(got, subprocess.Popen)
    assert "Traceback" not in got.stderr, got.stderr
    assert got.returncode == 2 and "--api must be an http(s) URL" in got.stderr
