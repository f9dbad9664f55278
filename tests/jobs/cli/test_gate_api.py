"""``kernelwatch gate --api URL --token-env NAME`` and ``gate --wait`` on runs still moving.

The API is the real application served by uvicorn on loopback (a thread of this test),
over real databases; the client is ``jobs/cli/gate_remote.py``, the GitHub Action's
script, called as a function and as the ``kernelwatch gate`` command.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Commit, Run
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.api import create_app
from kernelwatch.jobs.cli import gate_remote
from kernelwatch.jobs.cli.exit_codes import Exit, for_answer
from kernelwatch.jobs.cli.gate import CPU_TIMING_NOTE, gate
from kernelwatch.jobs.planning.broker import make_celery
from tests.conftest import run_cli
from tests.jobs.cli.test_gate import HEAD, seed

TOKEN = "gate-api-token-42"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def factory(db_url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=engine_for(db_url), expire_on_commit=False)


@pytest.fixture
def api(db_url: str, tmp_path: Path, factory: sessionmaker[Session]) -> Iterator[str]:
    """The API on loopback with a read token, serving from a thread."""
    settings = Settings(
        data_dir=tmp_path / "kw",
        database_url=db_url,
        webhook_secret="gate-api-secret",
        dashboard_url="https://kw.example.com",
        api_token=TOKEN,
    )
    settings.ensure_dirs()
    app = create_app(settings, factory, make_celery(settings), None, repos={},
                     reporter_interval_s=None)  # fmt: skip
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def ask(api: str, sha: str = HEAD, token: str | None = TOKEN, **kw: object) -> tuple[int, str]:
    lines: list[str] = []
    err = io.StringIO()
    code = gate_remote.gate(api, "acme/kernels", sha, token, out=lines.append, err=err, **kw)  # type: ignore[arg-type]
    return code, "\n".join(lines) + "\n" + err.getvalue()


@pytest.mark.parametrize(
    ("verdict", "status", "code"),
    [("fail", "succeeded", 1), ("pass", "succeeded", 0), ("error", "succeeded", 2),
     ("error", "failed", 2)],
)  # fmt: skip
def test_gate_over_the_api_gives_the_database_gates_answer(
    factory: sessionmaker[Session], api: str, verdict: str, status: str, code: int
) -> None:
    seed(factory, verdict=verdict, status=status)
    got, text = ask(api)
    assert got == code == gate(factory, "acme/kernels", HEAD, out=lambda _: None)
    assert f"acme/kernels@{HEAD[:12]}" in text
    assert "dashboard (h100): https://kw.example.com/?page=" in text


def test_neutral_is_3_unless_mapped_to_pass_or_fail(
    factory: sessionmaker[Session], api: str
) -> None:
    seed(factory, verdict="neutral")
    assert ask(api)[0] == Exit.NEUTRAL
    assert ask(api, neutral="pass")[0] == Exit.PASS
    assert ask(api, neutral="fail")[0] == Exit.FAIL
    assert gate(factory, "acme/kernels", HEAD, out=lambda _: None, neutral="pass") == Exit.PASS


def test_a_wrong_or_missing_token_is_exit_2_at_once_with_the_apis_reason(
    factory: sessionmaker[Session], api: str
) -> None:
    seed(factory)
    start = time.monotonic()
    code, text = ask(api, token="wrong", wait=True, timeout_s=60)
    assert code == Exit.ERROR and time.monotonic() - start < 10  # no waiting on a refusal
    assert "HTTP 401" in text and "not this server's KW_API_TOKEN" in text
    code, text = ask(api, token=None)
    assert code == Exit.ERROR and "Authorization: Bearer" in text


def test_an_unknown_commit_or_repository_waits_then_times_out(
    factory: sessionmaker[Session], api: str
) -> None:
    seed(factory)
    progress = io.StringIO()
    code, text = ask(api, sha="d" * 40, wait=True, timeout_s=1.5, poll_s=0.3, progress=progress)
    assert code == Exit.ERROR and "timed out after 2 s; the answer is still none" in text
    assert "none: no runs of this commit yet" in progress.getvalue()
    lines: list[str] = []
    code = gate_remote.gate(api, "nobody/there", HEAD, TOKEN, out=lines.append, err=io.StringIO())
    assert code == Exit.ERROR


def test_an_api_that_is_down_is_exit_2_with_where_it_asked() -> None:
    port = _free_port()  # nothing listens here
    code, text = ask(f"http://127.0.0.1:{port}")
    assert code == Exit.ERROR and f"no answer from http://127.0.0.1:{port}" in text


def test_the_server_decides_the_code_the_client_only_maps_neutral() -> None:
    for word in ("pass", "fail", "neutral", "error", "pending", "none"):
        body = {"verdict": word, "exit_code": int(for_answer(word))}
        assert gate_remote.exit_code(body) == for_answer(word)
    assert gate_remote.exit_code({"exit_code": 7}) == Exit.ERROR
    assert gate_remote.exit_code({}) == Exit.ERROR


def test_gate_wait_waits_for_a_queued_rerun_instead_of_the_older_verdict(
    factory: sessionmaker[Session], api: str
) -> None:
    """Issue 23, item 7: a newer run of the same sha still queued was ignored by --wait."""
    seed(factory, verdict="fail")
    with factory() as s, s.begin():
        head = s.scalars(select(Commit).where(Commit.sha == HEAD)).one()
        old = s.scalars(select(Run).where(Run.commit_id == head.id)).one()
        rerun = Run(repository_id=head.repository_id, commit_id=head.id, status="queued",
                    device_class="h100", suites=["basic"], baseline_sha=old.baseline_sha,
                    baseline_run_id=old.baseline_run_id, trigger="push")  # fmt: skip
        s.add(rerun)
        s.flush()
        rerun_id = rerun.id
    lines: list[str] = []
    assert gate(factory, "acme/kernels", HEAD, out=lines.append) == Exit.ERROR  # pending
    assert f"PENDING (run {rerun_id} of this commit still queued or running" in lines[0]
    assert ask(api)[0] == Exit.ERROR
    body = gate_remote.fetch(api, "acme/kernels", HEAD, TOKEN)
    assert body["verdict"] == "pending" and body["in_flight"] == [rerun_id]

    def finish() -> None:  # the re-run ends after the gates started waiting
        time.sleep(2.0)
        with factory() as s, s.begin():
            s.execute(update(Run).where(Run.id == rerun_id).values(status="cancelled"))

    for ask_gate in (
        lambda: gate(factory, "acme/kernels", HEAD, wait=True, timeout_s=30, poll_s=0.2,
                     out=lambda _: None),
        lambda: ask(api, wait=True, timeout_s=30, poll_s=0.2)[0],
    ):  # fmt: skip
        with factory() as s, s.begin():
            s.execute(update(Run).where(Run.id == rerun_id).values(status="queued"))
        t = threading.Thread(target=finish)
        t.start()
        start = time.monotonic()
        code = ask_gate()
        t.join()
        assert time.monotonic() - start >= 1.5  # it waited for the re-run
        assert code == Exit.FAIL


def test_the_gate_command_over_the_api_and_its_cpu_timing_note(
    factory: sessionmaker[Session], api: str
) -> None:
    seed(factory, verdict="pass")
    out = run_cli("gate", "--api", api, "--token-env", "MY_KW_TOKEN", "--repo", "acme/kernels",
                  "--sha", HEAD[:10], "--json", env={"MY_KW_TOKEN": TOKEN})  # fmt: skip
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["verdict"] == "pass" and body["exit_code"] == 0 and body["timed_out"] is False
    missing = run_cli("gate", "--api", api, "--token-env", "NOT_SET_ANYWHERE", "--repo", "a/b",
                      "--sha", HEAD, env={"NOT_SET_ANYWHERE": ""})  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "kernelwatch gate: environment variable NOT_SET_ANYWHERE (--token-env) is empty or unset"
    ]
    gpu_only = run_cli("gate", "--api", api, "--repo", "acme/kernels", "--sha", HEAD,
                       env={"KW_API_TOKEN": TOKEN, "KW_CPU_TIMING_GATES": "1"})  # fmt: skip
    assert gpu_only.returncode == 0 and CPU_TIMING_NOTE not in gpu_only.stderr


def test_cpu_timing_gates_set_on_the_gate_says_it_acts_in_the_worker(
    db_url: str, api: str, tmp_path: Path
) -> None:
    """Issue 23, item 7: set on ``gate`` it printed PASS with 2 regressions and said nothing."""
    seed(sessionmaker(bind=engine_for(db_url)), verdict="pass", classes=("cpu",))
    env = {"KW_DATABASE_URL": db_url, "KW_DATA_DIR": str(tmp_path / "d"),
           "KW_CPU_TIMING_GATES": "1", "KW_API_TOKEN": TOKEN}  # fmt: skip
    for args in (("--api", api), ()):
        out = run_cli("gate", *args, "--repo", "acme/kernels", "--sha", HEAD, env=env)
        assert out.returncode == 0, out.stderr
        assert f"kernelwatch gate: {CPU_TIMING_NOTE}" in out.stderr.splitlines()
        quiet = run_cli("gate", *args, "--repo", "acme/kernels", "--sha", HEAD,
                        env={**env, "KW_CPU_TIMING_GATES": "0"})  # fmt: skip
        assert CPU_TIMING_NOTE not in quiet.stderr


def test_the_action_script_runs_alone_under_its_own_name(
    factory: sessionmaker[Session], api: str, tmp_path: Path
) -> None:
    """What action.yml runs: the file itself, no package import, outputs for the step."""
    import subprocess
    import sys

    seed(factory, verdict="fail")
    script = Path(gate_remote.__file__)
    outputs, summary = tmp_path / "out", tmp_path / "summary.md"
    proc = subprocess.run(
        [sys.executable, "-I", str(script), "--api", api, "--token-env", "T",
         "--repo", "acme/kernels", "--sha", HEAD, "--wait", "--timeout", "30"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        env={"T": TOKEN, "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(summary),
             "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "regression" in proc.stdout and "kernelwatch gate: fail (exit 1)" in proc.stderr
    assert "verdict=fail\nexit-code=1\n" in outputs.read_text()
    assert "<!-- kernelwatch:pr-comment -->" in summary.read_text()


def test_without_wait_no_progress_line_says_it_waits(
    factory: sessionmaker[Session], api: str
) -> None:
    # `gate --api URL` without --wait printed "[0s] none: no runs of this commit yet
    # (waiting for the webhook's runs)" and returned at once (an audit, 2026-12-05)
    seed(factory)
    for sha in ("d" * 40, HEAD):
        progress = io.StringIO()
        code, _ = ask(api, sha=sha, progress=progress)
        assert code in (Exit.ERROR, Exit.FAIL) and progress.getvalue() == ""


def test_gate_json_is_one_shape_from_the_database_and_from_the_api(
    factory: sessionmaker[Session], api: str
) -> None:
    """A script that reads ``gate --json`` must not care where the gate asked: the two
    printed different keys (the database's whole internal record per class; an audit)."""
    seed(factory)  # a regression: fail
    local: list[str] = []
    code = gate(factory, "acme/kernels", HEAD[:10], as_json=True, out=local.append,
                dashboard_url="https://kw.example.com")  # fmt: skip
    remote: list[str] = []
    remote_code = gate_remote.gate(api, "acme/kernels", HEAD[:10], TOKEN, as_json=True,
                                   out=remote.append, err=io.StringIO())  # fmt: skip
    mine, theirs = json.loads(local[0]), json.loads(remote[0])
    assert code == remote_code == Exit.FAIL
    assert mine == theirs
    assert mine["verdict"] == "fail" and mine["timed_out"] is False and mine["exit_code"] == 1
    [cls] = mine["classes"]
    assert cls["target_url"].startswith("https://kw.example.com/?page=")
    assert cls["moved"][0]["verdict"] == "regression"
