"""``kernelwatch demo``: the whole pipeline on a throwaway kernel library.

Creates a git repository of a tiny Triton library (``tinykern``, copied from
kernelwatch's own kernels) with four commits: a baseline, a harmless change, a
commit that makes RMSNorm several times slower (a smaller column tile), and one
that makes softmax wrong (exp2 without the log2(e) factor). Every commit goes
through the real path: planner → broker → a real Celery worker process → git
mirror and worktree → pip-installed environment → suite runner subprocess →
database → analysis. The report names the slow and the broken commit, with the same
per-run summary ``kernelwatch run --wait`` prints (``jobs/judging/report.py``).

The library lives in ``<data dir>/demo/tinykern-<tag>``, the tag a digest of this
kernelwatch checkout and of the library's files: a second demo of the same checkout
finds the same four commits (and measures them again, as re-runs of one history),
while two checkouts sharing a data directory, or a checkout whose kernels changed,
get a repository, and a series, of their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import FINAL_STATES, Repository, Run
from kernelwatch.jobs.judging.report import moved_lines, run_brief
from kernelwatch.jobs.library.mirror import git
from kernelwatch.jobs.planning.broker import make_celery
from kernelwatch.jobs.planning.plan import RunRequest, plan
from kernelwatch.kernels.verdict import CaseVerdict

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


def demo_tag() -> str:
    """Eight hex digits of this checkout's location and the demo library's files."""
    digest = hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode())
    for name in KERNEL_FILES:
        digest.update(_kernel_source(name).encode())
    for name in ("package_init.py.tmpl", "pyproject.toml.tmpl", "kernelwatch.toml.tmpl"):
        digest.update(_template(name).encode())
    return digest.hexdigest()[:8]


def demo_repository_dir(settings: Settings, workdir: Path | None = None) -> Path:
    """Where the demo's library lives: one place per checkout and library content, so a
    second demo measures the same history again, and no two checkouts (or versions of
    the library) share one repository's series (issue 23)."""
    return (workdir or settings.data_dir / "demo") / f"tinykern-{demo_tag()}"


def _existing(dest: Path) -> list[DemoCommit] | None:
    """The four commits of a demo repository made before at ``dest``, or None."""
    if not (dest / ".git").exists():
        return None
    try:
        log = git("log", "--reverse", "--format=%H %s", "main", cwd=dest).splitlines()
    except subprocess.CalledProcessError:
        return None
    found = [tuple(line.split(" ", 1)) for line in log if " " in line]
    if [m for _, m in found] != [m for m, _ in _MESSAGES]:
        return None
    return [
        DemoCommit(sha, msg, role) for (sha, msg), (_, role) in zip(found, _MESSAGES, strict=True)
    ]


_MESSAGES = (
    ("Add softmax, RMSNorm, matmul and attention kernels", "baseline"),
    ("Document the calling convention", "harmless"),
    ("rmsnorm: smaller column tile to reduce register pressure", "slow"),
    ("softmax: use exp2, it is cheaper on the SFU", CaseVerdict.BROKEN.value),
)


def create_demo_repository(dest: Path) -> list[DemoCommit]:
    """The tinykern repository with its four commits, oldest first; a repository already
    at ``dest`` with those commits is kept (the same history, measured again)."""
    existing = _existing(dest)
    if existing is not None:
        return existing
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
    msg = _MESSAGES[0][0]
    commits = [DemoCommit(_commit(dest, msg), msg, _MESSAGES[0][1])]

    with open(dest / "README.md", "a") as fh:
        fh.write("\nEvery kernel takes its inputs, then `out`, which it fills completely.\n")
    msg = _MESSAGES[1][0]
    commits.append(DemoCommit(_commit(dest, msg), msg, _MESSAGES[1][1]))

    _edit(
        pkg / "rmsnorm.py",
        "min(triton.next_power_of_2(cols), 1024)",
        "min(triton.next_power_of_2(cols), 128)",
    )
    msg = _MESSAGES[2][0]
    commits.append(DemoCommit(_commit(dest, msg), msg, _MESSAGES[2][1]))

    _edit(pkg / "softmax.py", "e = tl.exp(x)", "e = tl.exp2(x)")
    msg = _MESSAGES[3][0]
    commits.append(DemoCommit(_commit(dest, msg), msg, _MESSAGES[3][1]))
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
            brief = run_brief(session, run)
            entries.append(
                {
                    "sha": brief["commit"],
                    "message": by_sha[brief["commit"]].message,
                    "role": by_sha[brief["commit"]].role,
                    "run": brief["id"],
                    "status": brief["status"],
                    "verdict": brief["verdict"],
                    "device_class": brief["device_class"],
                    "cpu_timings_gate": brief["cpu_timings_gate"],
                    "moved": brief["moved"],
                }
            )
    slow = [e["sha"] for e in entries if _has(e, CaseVerdict.REGRESSION)]
    broken = [e["sha"] for e in entries if _has(e, CaseVerdict.BROKEN)]
    with factory() as session:
        name = session.scalar(select(Repository.name).where(Repository.source == str(repo_dir)))
    return {
        "repository": str(repo_dir),
        "name": name,
        "finished": finished,
        "seconds": round(elapsed, 1),
        "database": settings.resolved_database_url.split("@")[-1],
        "commits": entries,
        "slow_commits": slow,
        "broken_commits": broken,
        "dashboard": "kernelwatch dashboard"
        + (f"  (with KW_DATA_DIR={settings.data_dir})" if os.environ.get("KW_DATA_DIR") else ""),
    }


def _has(entry: dict[str, Any], verdict: CaseVerdict) -> bool:
    return any(m["verdict"] == verdict for m in entry["moved"])


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"kernelwatch demo: {len(report['commits'])} commits of {report['repository']}"
        f" measured in {report['seconds']} s",
        "",
    ]
    for e in report["commits"]:
        lines.append(
            f"  {e['sha'][:10]}  run {e['run']:<4} {e['verdict'] or '-':<5}  {e['message']}"
        )
        lines += moved_lines(e["moved"], e.get("device_class", ""), e.get("cpu_timings_gate"))
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
