"""The command line's conventions: one exit-code contract, a message for every non-zero
exit, help on every option, ``--version``, warnings when no worker would serve a run.

Exit codes go through the real ``kernelwatch`` process (``run_cli``) where that is cheap;
the contract's table itself is checked in-process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.fleet import beat
from kernelwatch.db.models import Commit, Repository, Run
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.cli.exit_codes import (
    BROKEN_PIPE,
    Exit,
    for_answer,
    for_case_statuses,
    for_run,
    worst,
)
from kernelwatch.jobs.cli.main import build_parser
from tests.conftest import run_cli
from tests.helpers import make_repo

# ----------------------------------------------------------------------------- the contract


def test_the_exit_code_table_is_the_design_contract() -> None:
    assert [int(e) for e in (Exit.PASS, Exit.FAIL, Exit.ERROR, Exit.NEUTRAL)] == [0, 1, 2, 3]
    assert [for_answer(w) for w in ("pass", "fail", "error", "neutral")] == [0, 1, 2, 3]
    assert for_answer("pending") == for_answer("none") == for_answer(None) == Exit.ERROR
    # run --wait: a run that failed to build, errored or was cancelled is an error
    assert for_run("succeeded", "pass") == Exit.PASS
    assert for_run("succeeded", "neutral") == Exit.NEUTRAL
    assert for_run("failed", None) == for_run("error", "error") == Exit.ERROR
    assert for_run("cancelled", None) == Exit.ERROR
    assert for_run("succeeded", None) == Exit.ERROR  # finished but never judged
    # a definite finding wins over an error elsewhere, an error over a shrug
    assert worst([Exit.PASS, Exit.ERROR, Exit.FAIL, Exit.NEUTRAL]) == Exit.FAIL
    assert worst([Exit.NEUTRAL, Exit.ERROR]) == Exit.ERROR
    assert worst([Exit.PASS, Exit.NEUTRAL]) == Exit.NEUTRAL
    assert worst([]) == Exit.PASS
    assert for_case_statuses(["pass", "skip"]) == Exit.PASS
    assert for_case_statuses(["pass", "error"]) == Exit.ERROR
    assert for_case_statuses(["error", "fail"]) == Exit.FAIL


def test_every_option_of_every_command_says_what_it_does() -> None:
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "kernelwatch")
    assert missing == []


def test_version() -> None:
    proc = run_cli("--version", timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.startswith("kernelwatch ") and proc.stdout.split()[1][0].isdigit()


# ----------------------------------------------------------------------------- show


def _seed_runs(url: str) -> dict[str, int]:
    """One run per outcome ``show`` can report, in a fresh database."""
    factory = sessionmaker(bind=engine_for(url), expire_on_commit=False)
    ids: dict[str, int] = {}
    outcomes = {
        "pass": ("succeeded", "pass"),
        "fail": ("succeeded", "fail"),
        "error": ("error", "error"),
        "neutral": ("succeeded", "neutral"),
        "build": ("failed", None),
        "queued": ("queued", None),
    }
    with factory() as s, s.begin():
        repo = Repository(name="acme/kernels", source="https://github.com/acme/kernels.git")
        s.add(repo)
        s.flush()
        for i, (key, (status, verdict)) in enumerate(outcomes.items()):
            commit = Commit(repository_id=repo.id, sha=f"{i:x}" * 40, message=key)
            s.add(commit)
            s.flush()
            run = Run(repository_id=repo.id, commit_id=commit.id, status=status,
                      verdict=verdict, device_class="cpu", suites=["basic"],
                      error="pip install failed: no matching distribution" if key == "build"
                      else "")  # fmt: skip
            s.add(run)
            s.flush()
            ids[key] = run.id
    return ids


@pytest.fixture
def seeded(sqlite_url: str, tmp_path: Path) -> tuple[dict[str, str], dict[str, int]]:
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "d")}
    return env, _seed_runs(sqlite_url)


@pytest.mark.parametrize(
    ("outcome", "code"),
    [("pass", 0), ("fail", 1), ("error", 2), ("neutral", 3), ("build", 2), ("queued", 2)],
)
def test_show_exits_with_the_runs_code_and_says_why(
    seeded: tuple[dict[str, str], dict[str, int]], outcome: str, code: int
) -> None:
    env, ids = seeded
    proc = run_cli("show", str(ids[outcome]), env=env, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout.startswith(f"run {ids[outcome]} ")
    if code:
        assert proc.stderr.startswith("kernelwatch show: "), proc.stderr
    else:
        assert proc.stderr == ""


def test_show_of_an_unknown_run_is_an_error_with_a_message(
    seeded: tuple[dict[str, str], dict[str, int]],
) -> None:
    env, _ = seeded
    proc = run_cli("show", "9999", env=env, timeout=120)
    assert proc.returncode == 2 and "no run 9999" in proc.stderr


def test_a_reader_that_closes_the_pipe_gets_no_traceback(
    seeded: tuple[dict[str, str], dict[str, int]],
) -> None:
    """``kernelwatch show 26 | head -1``: the reader is gone before we write."""
    env, ids = seeded
    import os

    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch.jobs.cli.main", "show", str(ids["pass"]), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # before the command has started writing
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert proc.returncode == BROKEN_PIPE


# ----------------------------------------------------------------------------- run


@pytest.fixture
def library(tmp_path: Path) -> tuple[Path, str, str]:
    src = tmp_path / "lib"
    old = make_repo(src, {"README.md": "one"}, "first")
    new = make_repo(src, {"README.md": "two"}, "second")
    return src, old, new


def test_a_reversed_range_is_an_error_not_a_silent_success(
    library: tuple[Path, str, str], sqlite_url: str, tmp_path: Path
) -> None:
    src, old, new = library
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "d")}
    proc = run_cli("run", str(src), "--range", f"{new}..{old}", env=env, timeout=120)
    assert proc.returncode == 2
    assert "has no commits" in proc.stderr and "reversed" in proc.stderr
    factory = sessionmaker(bind=engine_for(sqlite_url))
    with factory() as s:
        queued = s.scalars(select(Run).where(Run.status == "queued")).all()
        assert queued == []  # nothing waits for a worker


def test_a_bad_file_in_a_range_is_that_commits_error_the_others_are_measured(
    sqlite_url: str, tmp_path: Path
) -> None:
    src = tmp_path / "lib"
    toml = '[library]\nname = "lib"\n[suites]\nnames = ["basic"]\n'
    first = make_repo(src, {"README.md": "one", ".kernelwatch.toml": toml}, "first")
    bad = make_repo(src, {".kernelwatch.toml": toml.replace("names", "nmes")}, "typo")
    fixed = make_repo(src, {".kernelwatch.toml": toml}, "fix the typo")
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "d")}
    one = run_cli("run", str(src), "--commit", bad, env=env, timeout=120)
    assert one.returncode == 2 and "unknown key suites.nmes" in one.stderr  # refused
    proc = run_cli("run", str(src), "--range", f"{first}..{fixed}", env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    factory = sessionmaker(bind=engine_for(sqlite_url))
    with factory() as s:
        rows = s.execute(select(Commit.sha, Run.status, Run.error).join(Run.commit)).all()
    states = {sha: (status, error) for sha, status, error in rows}
    assert states[bad][0] == "error" and "unknown key suites.nmes" in states[bad][1]
    assert states[first][0] == states[fixed][0] == "queued"  # measured all the same


def test_run_warns_without_a_live_worker_and_wait_times_out_with_2(
    library: tuple[Path, str, str], sqlite_url: str, tmp_path: Path
) -> None:
    src, _, new = library
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "d")}
    queued = run_cli(
        "run", str(src), "--commit", new, "--no-baseline-run", "--device-class", "cpu", env=env,
        timeout=120,
    )  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    assert "no live worker serves queue 'cpu'" in queued.stderr
    assert "kernelwatch worker" in queued.stderr

    waited = run_cli(
        "run", str(src), "--commit", new, "--no-baseline-run", "--device-class", "cpu",
        "--wait", "--timeout", "1", env=env, timeout=120,
    )  # fmt: skip
    assert waited.returncode == 2
    assert "queued" in waited.stderr  # a progress line, so a long wait is not silent
    assert "kernelwatch run: timed out after 1 s" in waited.stderr


def test_run_is_quiet_about_workers_when_one_serves_the_queue(
    library: tuple[Path, str, str], sqlite_url: str, tmp_path: Path
) -> None:
    src, _, new = library
    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(sqlite_url))
    with factory() as s, s.begin():
        beat(s, "w1@box", queues="cpu,gpu.h200", state="idle")
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "d")}
    proc = run_cli(
        "run", str(src), "--commit", new, "--no-baseline-run", "--device-class", "cpu", env=env,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "no live worker" not in proc.stderr, proc.stderr


def test_run_without_anything_to_measure_says_so(tmp_path: Path) -> None:
    proc = run_cli("run", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "--commit" in proc.stderr


# ----------------------------------------------------------------------------- doctor


def test_doctor_lists_live_workers(sqlite_url: str, tmp_path: Path) -> None:
    env = {"KW_DATABASE_URL": sqlite_url, "KW_DATA_DIR": str(tmp_path / "d")}
    alone = json.loads(run_cli("doctor", "--json", env=env, timeout=120).stdout)
    [workers] = [c for c in alone["checks"] if c["check"] == "workers"]
    assert workers["ok"] and workers["warn"] and "no live worker" in workers["detail"]

    factory: sessionmaker[Session] = sessionmaker(bind=engine_for(sqlite_url))
    with factory() as s, s.begin():
        beat(s, "kw-gpu0@node7", queues="gpu.h200", state="busy")
    elsewhere = json.loads(run_cli("doctor", "--json", env=env, timeout=120).stdout)
    [workers] = [c for c in elsewhere["checks"] if c["check"] == "workers"]
    # a worker of another queue does not take this machine's runs (issue 27: doctor names
    # the worker it would use)
    assert (
        workers["ok"]
        and workers["warn"]
        and "no live worker serves queue cpu" in (workers["detail"])
    )
    assert "other live workers: kw-gpu0@node7 [gpu.h200] busy" in workers["detail"]
    with factory() as s, s.begin():
        beat(s, "kw-cpu@node7", queues="cpu,build", state="idle")
    served = json.loads(run_cli("doctor", "--json", env=env, timeout=120).stdout)
    [workers] = [c for c in served["checks"] if c["check"] == "workers"]
    assert workers["ok"] and not workers["warn"]
    assert workers["detail"].startswith("queue cpu served by kw-cpu@node7 (idle)")


def test_doctor_says_a_bad_setting_once(tmp_path: Path) -> None:
    env = {"KW_DATABASE_URL": "notaurl", "KW_DATA_DIR": str(tmp_path / "d")}
    proc = run_cli("doctor", env=env, timeout=120)
    assert proc.returncode == 1
    bad = [ln for ln in proc.stdout.splitlines() if ln.startswith("BAD")]
    assert len(bad) == 1 and bad[0].split()[1] == "settings", proc.stdout
    assert "KW_DATABASE_URL: not a URL: 'notaurl'" in bad[0]
    assert proc.stdout.count("notaurl") == 1  # not repeated by database, broker, workers
    for check in ("database", "broker", "workers"):
        assert f"{check:<9} not checked: the settings are not valid" in proc.stdout
    assert proc.stderr.strip() == "kernelwatch doctor: not ready: settings"


# ----------------------------------------------------------------------------- bench


def test_bench_list_needs_no_out_and_running_needs_it() -> None:
    listed = run_cli("bench", "--list", timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert "basic" in listed.stdout.split()
    bare = run_cli("bench", "--suite", "basic", timeout=300)
    assert bare.returncode == 2 and "--out" in bare.stderr
