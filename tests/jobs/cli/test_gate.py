"""``kernelwatch gate`` and the verdict views it shares with statuses and PR comments.

Runs and results are written straight into real databases (SQLite and PostgreSQL);
the rendered PR comment and gate table are pinned by golden files in tests/jobs/cli/golden
(``KW_TEST_UPDATE_GOLDEN=1`` rewrites them).
"""

from __future__ import annotations

import io
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.models import Case, Commit, Repository, Result, Run
from kernelwatch.db.session import engine_for
from kernelwatch.jobs.cli.gate import current, gate
from kernelwatch.jobs.github.render import COMMENT_MARKER, format_gate, render_comment
from kernelwatch.jobs.judging.verdicts import (
    AmbiguousSha,
    ClassVerdict,
    CommitVerdict,
    MovedCase,
    summarize,
)
from tests.conftest import run_cli

GOLDEN = Path(__file__).resolve().parent / "golden"
BASE, HEAD = "b" * 40, "c" * 40


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KW_TEST_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; KW_TEST_UPDATE_GOLDEN=1 rewrites it"


def seed(
    factory: sessionmaker[Session],
    *,
    verdict: str | None = "fail",
    status: str = "succeeded",
    classes: tuple[str, ...] = ("h100",),
) -> None:
    """acme/kernels: a baseline run of BASE and a candidate run of HEAD per class."""
    with factory() as s, s.begin():
        repo = Repository(name="acme/kernels", source="https://github.com/acme/kernels.git")
        s.add(repo)
        s.flush()
        base = Commit(repository_id=repo.id, sha=BASE, message="base")
        head = Commit(repository_id=repo.id, sha=HEAD, message="head")
        s.add_all(
            [
                base,
                head,
                Case(id="c-softmax", suite="basic", kernel="softmax", backend="kern",
                     params={"rows": 4096, "cols": 1024}, label="cols=1024, rows=4096"),
                Case(id="c-rmsnorm", suite="basic", kernel="rmsnorm", backend="kern",
                     params={"rows": 4096}, label="rows=4096"),
                Case(id="c-matmul", suite="basic", kernel="matmul", backend="kern",
                     params={"n": 2048}, label="n=2048"),
            ]
        )  # fmt: skip
        s.flush()
        for dc in classes:
            b = Run(repository_id=repo.id, commit_id=base.id, status="succeeded",
                    verdict="pass", device_class=dc, suites=["basic"])  # fmt: skip
            s.add(b)
            s.flush()
            for cid, med in (("c-softmax", 1.2e-4), ("c-rmsnorm", 8e-5), ("c-matmul", 2e-3)):
                s.add(Result(run_id=b.id, case_id=cid, status="pass", median_s=med))
            c = Run(repository_id=repo.id, commit_id=head.id, status=status, verdict=verdict,
                    device_class=dc, suites=["basic"], baseline_sha=BASE,
                    baseline_run_id=b.id if status == "succeeded" else None,
                    options={"confidence": 0.99})  # fmt: skip
            s.add(c)
            s.flush()
            if status != "succeeded":
                continue
            slow, err = verdict == "fail", verdict == "error"
            # the class's answer is composed from its cases: neutral needs an undecided one
            undecided = verdict == "neutral"
            s.add_all(
                [
                    Result(
                        run_id=c.id, case_id="c-softmax", status="pass",
                        median_s=1.48e-4 if slow else 1.2e-4,
                        verdict="regression" if slow else "unchanged",
                        ratio=1.233 if slow else 1.0,
                        ratio_ci_low=1.201 if slow else 0.99,
                        ratio_ci_high=1.262 if slow else 1.01,
                    ),
                    Result(
                        run_id=c.id, case_id="c-rmsnorm", status="pass", median_s=6e-5,
                        verdict="improvement", ratio=0.75, ratio_ci_low=0.73, ratio_ci_high=0.77,
                    ),
                    Result(
                        run_id=c.id, case_id="c-matmul", status="error" if err else "pass",
                        median_s=2e-3,
                        verdict="error" if err else "inconclusive" if undecided else "unchanged",
                        ratio=None if err else 1.001,
                        error="CUDA error: illegal address" if err else "",
                    ),
                ]
            )  # fmt: skip


@pytest.fixture
def factory(db_url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=engine_for(db_url), expire_on_commit=False)


@pytest.mark.parametrize(
    ("verdict", "status", "code", "word"),
    [
        ("fail", "succeeded", 1, "FAIL"),
        ("pass", "succeeded", 0, "PASS"),
        ("error", "succeeded", 2, "ERROR"),
        (None, "running", 2, "PENDING"),
        ("error", "failed", 2, "ERROR"),
    ],
)
def test_gate_exit_codes(
    factory: sessionmaker[Session], verdict: str | None, status: str, code: int, word: str
) -> None:
    seed(factory, verdict=verdict, status=status)
    lines: list[str] = []
    assert gate(factory, "acme/kernels", HEAD, out=lines.append) == code
    assert lines[0].startswith(f"acme/kernels@{HEAD[:12]}: {word}")


def test_gate_by_prefix_source_and_unknown(factory: sessionmaker[Session]) -> None:
    seed(factory)
    out: list[str] = []
    assert gate(factory, "https://github.com/acme/kernels.git", HEAD[:9], out=out.append) == 1
    assert gate(factory, "acme/kernels", "d" * 40, out=out.append) == 2
    assert out[-1] == f"no runs of {'d' * 12} in acme/kernels yet"
    assert gate(factory, "nobody/nothing", HEAD, out=out.append) == 2
    assert out[-1].endswith("(no repository of that name is known here: a typo?)")


def add_commit_sharing_heads_prefix(factory: sessionmaker[Session]) -> str:
    """A commit whose sha begins like HEAD's, with a queued run of its own (a100)."""
    other = HEAD[:7] + "1" * 33
    with factory() as s, s.begin():
        repo = s.scalars(select(Repository)).one()
        commit = Commit(repository_id=repo.id, sha=other, message="other")
        s.add(commit)
        s.flush()
        s.add(Run(repository_id=repo.id, commit_id=commit.id, status="queued",
                  device_class="a100", suites=["basic"]))  # fmt: skip
    return other


def test_a_prefix_of_two_commits_is_refused_not_answered_for_both(
    factory: sessionmaker[Session], capsys: pytest.CaptureFixture[str]
) -> None:
    # "ccccccc" answered with both commits' runs: the other's queued run made HEAD's
    # failure "pending" (an audit, 2026-12-05)
    seed(factory)
    other = add_commit_sharing_heads_prefix(factory)
    with pytest.raises(AmbiguousSha, match=f"sha {HEAD[:7]} is ambiguous: it begins "):
        gate(factory, "acme/kernels", HEAD[:7], out=print)
    out: list[str] = []
    assert gate(factory, "acme/kernels", HEAD[:8], out=out.append) == 1  # HEAD's alone
    assert gate(factory, "acme/kernels", other[:8], out=out.append) == 2  # pending
    assert "PENDING" in out[-2]


def test_gate_wait_times_out_with_2(factory: sessionmaker[Session]) -> None:
    seed(factory, verdict=None, status="queued")
    out: list[str] = []
    assert (
        gate(factory, "acme/kernels", HEAD, wait=True, timeout_s=0.3, poll_s=0.1, out=out.append)
        == 2
    )
    assert "timed out" in out[-1]


@pytest.mark.parametrize(
    ("repo", "says"),
    [
        ("acme/kernels", f"no runs of {'9' * 12} in acme/kernels yet; waiting up to 0 s"),
        ("acme/kernles", "(no repository of that name is known here: a typo?)"),
    ],
)
def test_gate_wait_with_no_runs_says_so_at_once(
    factory: sessionmaker[Session], repo: str, says: str
) -> None:
    """A typo in --repo waited an hour without a word (a first-hour review)."""
    seed(factory)
    progress = io.StringIO()
    code = gate(factory, repo, "9" * 40, wait=True, timeout_s=0.2, poll_s=0.1, out=print,
                progress=progress)  # fmt: skip
    assert code == 2 and says in progress.getvalue()


def test_regression_in_one_class_beats_an_error_in_another(
    factory: sessionmaker[Session],
) -> None:
    seed(factory, classes=("b200", "h100"))
    with factory() as s, s.begin():
        run = s.query(Run).filter(Run.device_class == "b200", Run.commit_id.is_not(None)).all()[-1]
        run.status, run.verdict, run.error = "error", "error", "worker lost"
    v = current(factory, "acme/kernels", HEAD)
    assert [c.state for c in v.classes] == ["error", "failure"]
    assert v.overall == "fail"


def test_gate_json(factory: sessionmaker[Session]) -> None:
    seed(factory)
    out: list[str] = []
    gate(factory, "acme/kernels", HEAD, as_json=True, out=out.append)
    data = json.loads(out[0])
    assert data["verdict"] == "fail" and data["sha"] == HEAD
    [cls] = data["classes"]
    assert cls["state"] == "failure" and cls["moved"][0]["verdict"] == "regression"


def test_class_verdict_from_the_database(factory: sessionmaker[Session]) -> None:
    seed(factory)
    [cls] = current(factory, "acme/kernels", HEAD).classes
    assert cls.description == "1 regression, 1 improvement, 1 unchanged"
    assert [m.kernel for m in cls.moved] == ["softmax", "rmsnorm"]
    assert cls.moved[0].baseline_median_s == pytest.approx(1.2e-4)
    assert cls.dashboard_path == f"/?page=compare&a={cls.baseline_run_id}&b={cls.run_id}"
    # manual runs: their baseline is not a merge-base (the comment said so for every run)
    assert cls.baseline_word == "baseline"
    comment = render_comment(current(factory, "acme/kernels", HEAD), dashboard_url="http://x")
    assert "against baseline `" in comment and "merge-base" not in comment


@pytest.mark.parametrize(
    ("trigger", "word"),
    [("pull_request", "merge-base"), ("gate", "merge-base"), ("push", "parent"),
     ("nightly", "parent"), ("manual", "baseline"), ("import", "baseline")],
)  # fmt: skip
def test_the_baseline_is_named_as_the_runs_trigger_knows_it(
    factory: sessionmaker[Session], trigger: str, word: str
) -> None:
    seed(factory)
    with factory() as session, session.begin():
        for run in session.scalars(select(Run)):
            run.trigger = trigger
    verdict = current(factory, "acme/kernels", HEAD)
    assert [c.baseline_word for c in verdict.classes] == [word]
    assert f"against {word} `" in render_comment(verdict, dashboard_url="http://x")


def test_classes_whose_baselines_are_named_differently_say_baseline() -> None:
    v = sample_verdict()
    mixed = replace(v, classes=(v.classes[0], replace(v.classes[1], baseline_word="parent")))
    assert f"against baseline `{BASE[:12]}`" in render_comment(mixed, dashboard_url="http://x")


def test_missing_baseline_measurement_is_an_error_not_a_pass(
    factory: sessionmaker[Session],
) -> None:
    seed(factory, verdict="pass")
    with factory() as s, s.begin():
        for run in s.query(Run).filter(Run.baseline_sha.is_not(None)):
            run.baseline_run_id = None
    [cls] = current(factory, "acme/kernels", HEAD).classes
    assert cls.state == "error" and "nothing compared" in cls.description


def test_gate_command_line(db_url: str, tmp_path: Path) -> None:
    seed(sessionmaker(bind=engine_for(db_url)))
    env = {"KW_DATABASE_URL": db_url, "KW_DATA_DIR": str(tmp_path / "d")}
    proc = run_cli("gate", "--repo", "acme/kernels", "--sha", HEAD, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "regression" in proc.stdout and "softmax" in proc.stdout
    assert proc.stderr.startswith("kernelwatch gate: fail: ")  # every non-zero exit says why
    bad = run_cli("gate", "--repo", "acme/kernels", "--sha", "HEAD;id", env=env, timeout=120)
    assert bad.returncode == 2 and "hex" in bad.stderr
    add_commit_sharing_heads_prefix(sessionmaker(bind=engine_for(db_url)))
    both = run_cli("gate", "--repo", "acme/kernels", "--sha", HEAD[:7], env=env, timeout=120)
    assert both.returncode == 2 and both.stdout == "", both.stderr
    assert both.stderr.startswith(f"kernelwatch gate: sha {HEAD[:7]} is ambiguous"), both.stderr


# ----------------------------------------------------------------------------- rendering


def sample_verdict() -> CommitVerdict:
    moved = (
        MovedCase("softmax", "kern", "cols=1024, rows=4096", "regression", 1.2331, 1.2012,
                  1.2624, 1.2e-4, 1.48e-4),
        MovedCase("matmul", "kern", "n=2048 | tf32", "broken", None, None, None, 2e-3, 2e-3,
                  "max error 3.1e-02 > bound 1.0e-03"),
        MovedCase("rmsnorm", "kern", "rows=4096", "improvement", 0.75, 0.731, 0.769, 8e-5, 6e-5),
    )  # fmt: skip
    h100 = ClassVerdict(
        device_class="h100", state="failure",
        description=summarize({"regression": 1, "broken": 1, "improvement": 1, "unchanged": 9}),
        run_id=42, run_status="succeeded", run_verdict="fail", baseline_sha=BASE,
        baseline_run_id=41, confidence=0.99,
        counts={"regression": 1, "broken": 1, "improvement": 1, "unchanged": 9}, moved=moved,
        baseline_word="merge-base",
    )  # fmt: skip
    b200 = ClassVerdict(
        device_class="b200", state="success", description="12 unchanged", run_id=44,
        run_status="succeeded", run_verdict="pass", baseline_sha=BASE, baseline_run_id=43,
        confidence=0.99, counts={"unchanged": 12}, baseline_word="merge-base",
    )  # fmt: skip
    return CommitVerdict("acme/kernels", HEAD, (b200, h100))


def test_pr_comment_golden_failure() -> None:
    text = render_comment(sample_verdict(), dashboard_url="https://kw.example.com/")
    assert text.startswith(COMMENT_MARKER)
    check_golden("pr_comment_failure.md", text)


def test_pr_comment_golden_pass_and_pending() -> None:
    v = sample_verdict()
    ok = replace(v.classes[1], state="success", description="12 unchanged", moved=(),
                 counts={"unchanged": 12}, run_verdict="pass")  # fmt: skip
    pending = replace(v.classes[0], state="pending", description="measuring on gpu-07")
    text = render_comment(
        replace(v, classes=(ok,)), dashboard_url="https://kw.example.com", paired=True
    )
    check_golden("pr_comment_pass.md", text)
    text = render_comment(replace(v, classes=(pending, ok)), dashboard_url="https://kw.example.com")
    check_golden("pr_comment_pending.md", text)


def test_gate_table_golden() -> None:
    check_golden("gate_failure.txt", format_gate(sample_verdict(), "https://kw.example.com") + "\n")


def test_comment_cells_cannot_break_the_table() -> None:
    v = sample_verdict()
    evil = replace(
        v.classes[1],
        moved=(MovedCase("x|y`z", "k", "<script>a|b\nc</script>", "regression", 2.0, 1.9, 2.1,
                         1e-3, 2e-3),),
    )  # fmt: skip
    text = render_comment(replace(v, classes=(evil,)), dashboard_url="https://kw")
    row = next(line for line in text.splitlines() if "x\\|y'z" in line)
    assert row.count(" | ") - row.count("\\| ") == 5  # six cells, pipes inside escaped
    assert "<script>" not in text


# ----------------------------------------------------------------------------- detect


def test_detect_command_single_and_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import subprocess

    values = [1.0] * 30 + [1.2] * 30
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch.jobs.cli.main", "detect"],
        input=json.dumps({"values": values, "lower_is_better": True}),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    [cp] = out["change_points"]
    assert cp["index"] == 30 and cp["direction"] == "regression"

    from kernelwatch.jobs.cli.main import main

    batch = {"series": [{"id": "a", "values": values}, {"id": 7, "values": [1.0] * 20}]}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(batch)))
    buf = io.StringIO()
    monkeypatch.setattr("sys.stdout", buf)
    assert main(["detect", "--batch"]) == 0
    res = json.loads(buf.getvalue())["results"]
    assert [r["id"] for r in res] == ["a", 7]
    assert res[0]["change_points"][0]["direction"] == "regression"
    assert res[1]["change_points"] == []


@pytest.mark.parametrize(
    ("stdin", "args"),
    [
        ("{not json", []),
        ('{"values": [1, "x"]}', []),
        ('{"values": [1, 2], "lower_is_beter": true}', []),
        ('{"values": [1, 2, 3]}', ["--batch"]),
    ],
)
def test_detect_command_rejects_bad_input_with_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, args: list[str]
) -> None:
    import io

    from kernelwatch.jobs.cli.main import main

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["detect", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("kernelwatch detect: ")


@pytest.mark.parametrize(("stdin", "said"), [("", "stdin is empty"), ("{not", "stdin is not JSON")])
def test_detect_says_what_stdin_should_hold(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, said: str
) -> None:
    # `kernelwatch detect < /dev/null` said only "Expecting value: line 1 column 1
    # (char 0)" (an audit, 2026-12-05)
    import io

    from kernelwatch.jobs.cli.main import main

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["detect"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernelwatch detect: {said}") and '{"values": [...]' in err
