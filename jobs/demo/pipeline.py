"""``kernelwatch demo``: the whole pipeline on a throwaway kernel library.

Creates a git repository of a tiny Triton library (``tinykern``, copied from
kernelwatch's own kernels) with four commits: a baseline, a harmless change, a
commit that makes RMSNorm several times slower (a smaller column tile), and one
that makes softmax wrong (exp2 without the log2(e) factor). Every commit goes
through the real path: planner → broker → a real Celery worker process → git
mirror and worktree → pip-installed environment → suite runner subprocess →
database → analysis. The report names the slow and the broken commit.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Run
from kernelwatch.jobs.judging.report import run_summary
from kernelwatch.jobs.library.mirror import git
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.plan import RunRequest, plan

KERNEL_FILES = ("softmax.py", "rmsnorm.py", "matmul.py", "attention.py")


@dataclass(frozen=True)
class DemoCommit:
    sha: str
    message: str
    role: str  # baseline | harmless | slow | broken


def _template(name: str) -> str:
    return resources.files("kernelwatch.jobs.demo.library").joinpath(name).read_text()


def _kernel_source(name: str) -> str:
    return resources.files("kernelwatch.kernels.triton_kernels").joinpath(name).read_text()


def _commit(repo: Path, message: str) -> str:
    git("add", "-A", cwd=repo)
    git(
        "-c",
        "user.name=kernelwatch demo",
        "-c",
        "user.email=demo@kernelwatch.invalid",
        "commit",
        "-q",
        "-m",
        message,
        cwd=repo,
    )
    return git("rev-parse", "HEAD", cwd=repo).strip()


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        raise RuntimeError(f"demo edit failed: {old!r} not in {path.name}")
    path.write_text(text.replace(old, new, 1))


def demo_repository_dir(settings: Settings, workdir: Path | None = None) -> Path:
    """Where the demo's library lives: one place per data dir, so every demo is the same
    source and so the same repository row (a fresh temp dir per demo made
    ``tinykern-7847``-style duplicates, issue 18)."""
    return (workdir or settings.data_dir / "demo") / "tinykern"


def create_demo_repository(dest: Path) -> list[DemoCommit]:
    """The tinykern repository with its four commits, oldest first (made anew each time)."""
    if (dest / ".git").exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=dest)
    pkg = dest / "tinykern"
    pkg.mkdir(exist_ok=True)
    for name in KERNEL_FILES:
        (pkg / name).write_text(_kernel_source(name))
    (pkg / "__init__.py").write_text(_template("package_init.py.tmpl"))
    (dest / "pyproject.toml").write_text(_template("pyproject.toml.tmpl"))
    (dest / ".kernelwatch.toml").write_text(_template("kernelwatch.toml.tmpl"))
    (dest / "README.md").write_text("# tinykern\n\nA tiny Triton kernel library.\n")
    commits = [
        DemoCommit(
            _commit(dest, "Add softmax, RMSNorm, matmul and attention kernels"),
            "Add softmax, RMSNorm, matmul and attention kernels",
            "baseline",
        )
    ]

    with open(dest / "README.md", "a") as fh:
        fh.write("\nEvery kernel takes its inputs, then `out`, which it fills completely.\n")
    msg = "Document the calling convention"
    commits.append(DemoCommit(_commit(dest, msg), msg, "harmless"))

    _edit(
        pkg / "rmsnorm.py",
        "min(triton.next_power_of_2(cols), 1024)",
        "min(triton.next_power_of_2(cols), 128)",
    )
    msg = "rmsnorm: smaller column tile to reduce register pressure"
    commits.append(DemoCommit(_commit(dest, msg), msg, "slow"))

    _edit(pkg / "softmax.py", "e = tl.exp(x)", "e = tl.exp2(x)")
    msg = "softmax: use exp2, it is cheaper on the SFU"
    commits.append(DemoCommit(_commit(dest, msg), msg, "broken"))
    return commits


def wait_for_runs(
    factory: sessionmaker[Session],
    run_ids: list[int],
    timeout_s: float,
    on_poll: Callable[[Sequence[Run]], None] | None = None,
) -> bool:
    """Poll until every run is final and judged; False on timeout.

    ``on_poll`` sees the runs at every poll (the command line's progress lines).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with factory() as session:
            runs = session.scalars(select(Run).where(Run.id.in_(run_ids))).all()
            if on_poll is not None:
                on_poll(runs)
            if all(r.status in FINAL_STATES and r.verdict is not None for r in runs):
                return True
        time.sleep(0.5)
    return False


def run_demo(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    workdir: Path | None = None,
    timeout_s: float = 900,
    on_poll: Callable[[Sequence[Run]], None] | None = None,
) -> dict[str, Any]:
    """Create the library, measure all four commits through a real worker, report.

    The worker is the caller's to start (``kernelwatch demo`` starts one unless told
    ``--no-worker``): only the command line starts processes.
    """
    started = time.monotonic()
    repo_dir = demo_repository_dir(settings, workdir)
    commits = create_demo_repository(repo_dir)
    app = make_celery(settings)
    planned = plan(
        factory,
        settings,
        app,
        RunRequest(
            source=str(repo_dir),
            commits=[c.sha for c in commits],
            trigger="demo",
            measure_baseline=False,
        ),
    )
    finished = wait_for_runs(factory, [p.id for p in planned], timeout_s, on_poll=on_poll)
    return _report(
        factory,
        settings,
        commits,
        [p.id for p in planned],
        finished,
        time.monotonic() - started,
        repo_dir,
    )


def _report(
    factory: sessionmaker[Session],
    settings: Settings,
    commits: list[DemoCommit],
    run_ids: list[int],
    finished: bool,
    elapsed: float,
    repo_dir: Path,
) -> dict[str, Any]:
    by_sha = {c.sha: c for c in commits}
    entries = []
    with factory() as session:
        for run in session.scalars(select(Run).where(Run.id.in_(run_ids)).order_by(Run.id)):
            s = run_summary(session, run, all_cases=False)
            entries.append(
                {
                    "sha": s["commit"],
                    "message": by_sha[s["commit"]].message,
                    "role": by_sha[s["commit"]].role,
                    "run": s["id"],
                    "status": s["status"],
                    "verdict": s["verdict"],
                    "moved": [
                        {
                            "kernel": c["kernel"],
                            "case_id": c["case_id"],
                            "verdict": c["verdict"],
                            "ratio": c["ratio"],
                            "error": c["error"],
                        }
                        for c in s["cases"]
                    ],
                }
            )
    slow = [e["sha"] for e in entries if any(m["verdict"] == "regression" for m in e["moved"])]
    broken = [e["sha"] for e in entries if any(m["verdict"] == "broken" for m in e["moved"])]
    return {
        "repository": str(repo_dir),
        "finished": finished,
        "seconds": round(elapsed, 1),
        "database": settings.resolved_database_url.split("@")[-1],
        "commits": entries,
        "slow_commits": slow,
        "broken_commits": broken,
        "dashboard": "kernelwatch dashboard"
        + (f"  (with KW_DATA_DIR={settings.data_dir})" if os.environ.get("KW_DATA_DIR") else ""),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"kernelwatch demo: {len(report['commits'])} commits of {report['repository']}"
        f" measured in {report['seconds']} s",
        "",
    ]
    for e in report["commits"]:
        lines.append(f"  {e['sha'][:10]}  {e['verdict'] or '-':<5}  {e['message']}")
        for m in e["moved"]:
            how = (
                f"{m['ratio']:.2f}x slower"
                if m["verdict"] == "regression" and m["ratio"]
                else (m["error"][:70] if m["error"] else "")
            )
            lines.append(f"      {m['verdict']:<11} {m['kernel']:<10} {how}")
    lines.append("")
    for label, key in (("slow commit", "slow_commits"), ("broken commit", "broken_commits")):
        shas = report[key]
        lines.append(f"{label}: {', '.join(s[:10] for s in shas) if shas else 'none found'}")
    if not report["finished"]:
        lines.append("WARNING: not every run finished in time")
    lines.append(f"\nOpen the dashboard on this data:  {report['dashboard']}")
    return "\n".join(lines)


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, default=str)
