"""One resolved configuration per run, made at planning (issue 23 item 9, issue 24 item 6).

The planner reads each commit's ``.kernelwatch.toml`` once, stores the decisions on the
run (``Run.suites`` is what is measured, also with one run per pushed commit), and a bad
file is refused before anything is queued. A pull request is judged by its base
branch's rules: its own file may only tighten them, and what it loosens is noted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.migrate import upgrade
from kernelwatch.db.models import Commit, Run
from kernelwatch.db.outbox import PendingSend
from kernelwatch.db.session import make_engine
from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.github.render import render_comment
from kernelwatch.jobs.judging.analysis import run_thresholds
from kernelwatch.jobs.judging.verdicts import ClassVerdict, CommitVerdict
from kernelwatch.jobs.library import repoconfig
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.plan import RunRequest, plan
from kernelwatch.jobs.planning.resolve import tightened
from tests.conftest import run_cli
from tests.helpers import make_repo

BASE_TOML = """
[library]
name = "kern"
module = "kern"
[install]
recipe = "pythonpath"
[suites]
names = ["basic"]
[thresholds]
regression = 0.02
[thresholds.suites]
basic = 0.03
"""
# a fork PR's file: a threshold nothing could cross, a confidence no interval reaches,
# and only the kernel it does not touch
LOOSE_TOML = """
[library]
name = "kern"
module = "kern"
[install]
recipe = "pythonpath"
[suites]
names = ["basic"]
kernels = ["matmul"]
[thresholds]
regression = 9.0
confidence = 0.999999
[thresholds.suites]
basic = 5.0
"""
TIGHT_TOML = """
[library]
name = "kern"
module = "kern"
[install]
recipe = "pythonpath"
[suites]
names = ["basic", "noop"]
[thresholds]
regression = 0.005
confidence = 0.95
"""


def test_a_pull_request_may_only_tighten_its_base_branchs_rules() -> None:
    base = repoconfig.parse(BASE_TOML)
    loose = tightened(base, repoconfig.parse(LOOSE_TOML), 0.01, 0.99)
    assert loose.regression == 0.02 and loose.confidence is None  # the base's (and default)
    assert loose.kernels is None  # every kernel, as on the base branch
    assert loose.thresholds is not None
    assert loose.thresholds.for_case("basic", "softmax", "") == 0.03
    text = "\n".join(loose.loosened)
    for key in ("thresholds.regression = 9", "thresholds.confidence = 0.999999",
                "thresholds.suites.basic = 5", "suites.kernels keeps only matmul"):  # fmt: skip
        assert key in text, text
    tight = tightened(base, repoconfig.parse(TIGHT_TOML), 0.01, 0.99)
    assert tight.loosened == ()
    assert tight.regression == 0.005 and tight.confidence == 0.95
    assert tight.suites == ("basic", "noop")  # more cases: fine
    assert tight.thresholds is not None
    assert tight.thresholds.for_case("basic", "softmax", "") == 0.005  # min(0.03, 0.005)


def _env(tmp_path: Path) -> tuple[Settings, sessionmaker[Session]]:
    settings = Settings(data_dir=tmp_path / "kw", database_url=f"sqlite:///{tmp_path / 'kw.db'}")
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url)
    return settings, sessionmaker(
        bind=make_engine(settings.resolved_database_url), expire_on_commit=False
    )


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = repoconfig.parse

    def counting(text: str | None, name: str = repoconfig.FILE) -> Any:
        calls.append(name)
        return real(text, name)

    monkeypatch.setattr(repoconfig, "parse", counting)
    return calls


def test_each_pushed_commit_is_resolved_once_and_stores_what_it_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, factory = _env(tmp_path)
    src = tmp_path / "lib"
    toml = BASE_TOML.replace('names = ["basic"]', 'names = ["noop"]')
    c1 = make_repo(src, {"kern/__init__.py": "", ".kernelwatch.toml": toml}, "c1: noop")
    c2 = make_repo(src, {".kernelwatch.toml": BASE_TOML}, "c2: basic")
    c3 = make_repo(src, {"README.md": "x\n"}, "c3: docs")
    calls = _count_parses(monkeypatch)
    # push_mode = "each": every pushed commit against its parent (c1 measured as c2's)
    req = RunRequest(source=str(src), commits=[c2, c3], baseline=None, trigger="push")
    planned = plan(factory, settings, make_celery(settings), req)
    assert len(calls) == 3  # c2, c3 and the baseline run's c1: once each (main: 1 + 3 later)
    with factory() as s:
        rows = s.execute(select(Commit.sha, Run.suites, Run.options).join(Run.commit)).all()
    by_sha = {sha: (suites, options) for sha, suites, options in rows}
    assert by_sha[c1][0] == ["noop"] and by_sha[c2][0] == ["basic"] and by_sha[c3][0] == ["basic"]
    for sha in (c1, c2, c3):
        note = by_sha[sha][1].config
        assert note is not None and note.resolved and note.suites == by_sha[sha][0]
        assert note.install is not None and note.install["recipe"] == "pythonpath"
    assert by_sha[c2][1].regression_threshold == 0.02  # the file's thresholds, at planning
    assert len(planned) == 3


def test_a_bad_file_is_refused_before_anything_is_queued(tmp_path: Path) -> None:
    settings, factory = _env(tmp_path)
    src = tmp_path / "lib"
    good = make_repo(src, {"kern/__init__.py": "", ".kernelwatch.toml": BASE_TOML}, "good")
    bad = make_repo(src, {".kernelwatch.toml": "[suite]\nnames = ['basic']\n"}, "bad")
    app = make_celery(settings)
    with pytest.raises(ConfigError, match=r"unknown table \[suite\]; did you mean \[suites\]"):
        plan(factory, settings, app, RunRequest(source=str(src), commits=[bad]))
    with factory() as s:
        assert s.scalar(select(func.count()).select_from(PendingSend)) == 0
        assert s.scalars(select(Run).where(Run.status == "queued")).all() == []
    # a webhook's plan records the bad commit's run as an error and plans the others
    fixed = make_repo(src, {".kernelwatch.toml": BASE_TOML}, "fixed")
    req = RunRequest(
        source=str(src), commits=[good, bad, fixed], trigger="push", config_errors="record"
    )
    plan(factory, settings, app, req)
    with factory() as s:
        states = dict(s.execute(select(Commit.sha, Run.status).join(Run.commit)).all())
        error = s.scalars(select(Run.error).join(Run.commit).where(Commit.sha == bad)).one()
    assert states[bad] == "error" and states[good] == states[fixed] == "queued"
    assert "unknown table [suite]" in error


def test_a_pull_request_is_judged_by_its_merge_bases_file(tmp_path: Path) -> None:
    settings, factory = _env(tmp_path)
    src = tmp_path / "lib"
    base = make_repo(src, {"kern/__init__.py": "", ".kernelwatch.toml": BASE_TOML}, "base")
    head = make_repo(src, {".kernelwatch.toml": LOOSE_TOML}, "pr: loosen everything")
    req = RunRequest(
        source=str(src),
        commits=[head],
        baseline=base,
        trigger="pull_request",
        measure_baseline=False,
        base_rules=True,
        options={"paired": True},
    )
    (planned,) = plan(factory, settings, make_celery(settings), req)
    with factory() as s:
        run = s.get(Run, planned.id)
        assert run is not None
        thresholds = run_thresholds(run, settings)
        note = run.options.config
        assert run.options.confidence is None  # the service's, not 0.999999
        assert thresholds.for_case("basic", "softmax", "rows=4096") == 0.03
        assert thresholds.default == 0.02
        assert note is not None and note.kernels is None  # every kernel: nothing dropped
        assert note.baseline_install is not None  # the merge-base builds as it says
        loosened = list(note.loosened)
    assert len(loosened) == 4, loosened
    # the PR comment says what was ignored
    cv = ClassVerdict("h200", "success", "10 unchanged", planned.id, "succeeded", "pass",
                      ignored_config=tuple(loosened))  # fmt: skip
    comment = render_comment(CommitVerdict("o/kern", head, (cv,)), dashboard_url="http://kw")
    assert "Ignored from this pull request's `.kernelwatch.toml`" in comment
    assert "thresholds.regression = 9 is looser than the base branch's 0.02" in comment


@pytest.mark.slow
def test_run_refuses_a_bad_file_with_exit_2_and_queues_nothing(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    make_repo(src, {"kern/__init__.py": "", ".kernelwatch.toml": "[suite]\nx = 1\n"})
    proc = run_cli("run", str(src), "--commit", "HEAD", timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]  # main d9ce479: 0, queued
    assert "unknown table [suite]" in proc.stderr
    db = tmp_path / "kwdata" / "kernelwatch.db"
    if db.exists():
        with sessionmaker(bind=make_engine(f"sqlite:///{db}"))() as s:
            assert s.scalars(select(Run).where(Run.status == "queued")).all() == []


def test_a_pull_requests_gpu_budget_is_its_base_branchs() -> None:
    base = repoconfig.parse(BASE_TOML + "[gate]\ngpu_budget = 600\n")
    assert base.gate.gpu_budget == 600
    pr = repoconfig.parse(BASE_TOML + "[gate]\ngpu_budget = 5\n")
    rules = tightened(base, pr, 0.01, 0.99)
    # a tiny budget would turn the cases it cannot afford into neutral: ignored, noted
    assert rules.gpu_budget == 600
    assert any("gate.gpu_budget = 5" in note for note in rules.loosened), rules.loosened
    with pytest.raises(ConfigError, match="gpu_budget"):
        repoconfig.parse(BASE_TOML + "[gate]\ngpu_budget = -1\n")


def test_the_worker_hands_the_budget_to_the_paired_coordinator() -> None:
    from kernelwatch.db.run_options import ConfigNote
    from kernelwatch.worker.executor import paired_passthrough

    note = ConfigNote(gpu_budget_s=600.0, resolved=True)
    args = ["--kernel", "softmax", "--profile", "x", "--budget", "0.5"]
    assert paired_passthrough(args, note) == [
        "--kernel", "softmax", "--budget", "0.5", "--gpu-budget", "600",
    ]  # fmt: skip
    # the run's own budget (kernelwatch run --gpu-budget) wins over the file's
    own = [*args, "--gpu-budget", "120"]
    assert paired_passthrough(own, note)[-2:] == ["--gpu-budget", "120"]
    assert "--gpu-budget" not in paired_passthrough(args, ConfigNote(resolved=True))


def test_run_gives_a_paired_run_its_gpu_budget_and_refuses_one_elsewhere(
    tmp_path: Path,
) -> None:
    src = tmp_path / "lib"
    make_repo(src, {"kern/__init__.py": "", ".kernelwatch.toml": BASE_TOML})
    proc = run_cli("run", str(src), "--commit", "HEAD", "--gpu-budget", "60", timeout=300)
    assert proc.returncode == 2 and "--gpu-budget bounds a paired run" in proc.stderr
    proc = run_cli("run", str(src), "--commit", "HEAD", "--paired", "--gpu-budget", "60",
                   "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    db = tmp_path / "kwdata" / "kernelwatch.db"
    with sessionmaker(bind=make_engine(f"sqlite:///{db}"))() as s:
        (run,) = s.scalars(select(Run)).all()
        assert run.options.bench_args[-2:] == ["--gpu-budget", "60.0"]


@pytest.mark.parametrize(
    ("bench_args", "kernels"),
    [
        (["--case", "*dtype=bfloat16*"], ["softmax"]),  # narrows within the file's kernels
        (["--kernel", "matmul"], None),  # picks its own: the file's pick steps aside
        ([], ["softmax"]),
    ],
)
def test_a_runs_case_pattern_narrows_within_the_files_kernels(
    tmp_path: Path, bench_args: list[str], kernels: list[str] | None
) -> None:
    """``run --case '*dtype=bfloat16*'`` on Liger-Kernel's history (H200, 2026-12-02)
    measured the basic suite's attention and matmul cases too, which Liger's adapter
    lacks: two ``error`` records per commit and every run's verdict ``error``."""
    settings, factory = _env(tmp_path)
    toml = BASE_TOML.replace('names = ["basic"]', 'names = ["basic"]\nkernels = ["softmax"]')
    head = make_repo(tmp_path / "lib", {"kern/__init__.py": "", ".kernelwatch.toml": toml}, "c")
    req = RunRequest(
        source=str(tmp_path / "lib"),
        commits=[head],
        measure_baseline=False,
        options={"bench_args": bench_args},
    )
    (planned,) = plan(factory, settings, make_celery(settings), req)
    with factory() as s:
        run = s.get(Run, planned.id)
        assert run is not None and run.options.config is not None
        assert run.options.config.kernels == kernels
