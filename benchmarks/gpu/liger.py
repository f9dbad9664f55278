"""``liger``: Liger-Kernel's history measured by the service itself, with ``kernelwatch run``.

Issue 15, part 4: a third-party Triton kernel library through the whole service on
an offline GPU host, in one call:

1. the service's wheels (``.svc/``) into ``/opt/kwsvc-site`` (``host.service_wheels``, as
   ``fleet`` does), and an interpreter that imports ``kernelwatch.kernels`` with the
   clean environment the suite process gets (the light install's ``.pth``, else a venv
   over this interpreter, as ``fleet_host.sh`` does);
2. the replayed Liger-Kernel history cloned from the carried bundle
   (``.src/liger.bundle``, made by ``prepare-liger``; ``liger-commits.json`` maps each
   replayed commit to its upstream sha) into ``/tmp/kwliger/Liger-Kernel``;
3. a fresh data dir (SQLite, filesystem broker), ``kernelwatch db upgrade`` and one
   ``kernelwatch worker`` on this machine's queue, with
   ``KW_REPO_CONFIGS`` naming ``docs/liger-kernel.kernelwatch.toml`` for that source
   (Liger carries no ``.kernelwatch.toml``), ``KW_OFFLINE=1`` (pip without an index:
   the host has no network) and ``KW_SANDBOX=bwrap`` (``--sandbox``): the GPU image has
   no bubblewrap, so it comes from the carried ``.deb/`` (``debs.py``, unpacked into
   ``/opt/kwdeb``) and ``kernelwatch`` is linked into site-packages for the box
   (``host.site_namespace``); ``--sandbox none`` is the old unconfined path (clean
   environment only: a library's own history on a throwaway host, never pull requests);
4. ``kernelwatch run REPO --range FIRST..LAST --wait --json --budget B``: the first
   commit measured as the baseline, every later one against the one before, through
   planner, broker, worker, offline pip install, suite subprocess, database, analysis;
5. the worker stopped (SIGTERM, then SIGKILL of what is left of the processes it
   started), then the database dumped (``liger_dump.py``): ``liger.json`` holds every
   run (upstream sha, subject, status, verdict, per-case median, ratio, interval,
   error) and ``logs/liger/liger-records.jsonl`` every record with its raw samples.

The table (``liger_table.py``) shows each run, each case's median per commit with its
verdict mark, and what moved. ``--cpu`` runs the same path on the CPU (smoke sizes,
Triton's interpreter: Liger's softmax and SwiGLU run there, its RMSNorm, LayerNorm and
GeGLU are recorded as skips that say so).

    python -m benchmarks.gpu --deadline-s 480 liger
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu import debs, host, liger_replay, liger_table

NAME = "liger"
HELP = "Liger-Kernel commits through `kernelwatch run`: carried bundle, offline pip, verdicts"
WORK = Path("/tmp/kwliger")
CONFIG = host.ROOT / "docs" / "liger-kernel.kernelwatch.toml"
VENV = Path("/tmp/kwpy")
CLI = ["-m", "kernelwatch.jobs.cli.main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--src", type=Path, default=host.SOURCES, help="bundle folder (.src/)")
    p.add_argument("--work", type=Path, default=WORK, help=f"scratch folder (default {WORK})")
    p.add_argument("--limit", type=int, default=None, help="only the first N commits")
    p.add_argument("--kernel", action="append", help="only these kernels (run --kernel)")
    p.add_argument("--case", default=None, help="only cases matching (run --case)")
    p.add_argument("--budget", type=float, default=None, help="sampling s per case (0.5; CPU 0.2)")
    p.add_argument(
        "--reserve-s", type=float, default=45.0, help="seconds kept for stop, dump and table"
    )
    p.add_argument(
        "--sandbox", choices=("bwrap", "none"), default="bwrap", help="KW_SANDBOX of the worker"
    )


def recipe_of(config: Path) -> str:
    """The install recipe the service-side file names (read by the service's own reader)."""
    from kernelwatch.jobs.library import repoconfig

    return repoconfig.parse(config.read_text(), name=str(config)).install.recipe


def load_manifest(src: Path) -> dict[str, Any]:
    path = src / liger_replay.MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: make it with `prepare-liger` and carry .src")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def unbundle(ctx: host.Context, src: Path, manifest: dict[str, Any], dest: Path) -> Path:
    """The carried bundle cloned at ``dest``, checked against the manifest."""
    bundle = src / str(manifest["bundle"])
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    if digest != manifest["bundle_sha256"]:
        raise RuntimeError(f"{bundle} is not the bundle liger-commits.json describes")
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    step = ctx.run("unbundle", ["git", "clone", "-q", "-b", "main", str(bundle), str(dest)], 60)
    if not step.ok:
        raise RuntimeError(f"git clone of {bundle} failed: {' '.join(step.tail)}")
    for c in manifest["commits"]:
        trailers = liger_replay._git(dest, "log", "-1", "--format=%B", c["replayed"]).decode()
        if f"{manifest['trailer']}: {c['upstream']}" not in trailers:
            raise RuntimeError(f"replayed {c['replayed'][:8]} does not name {c['upstream'][:8]}")
    return dest


def sandbox_python() -> tuple[str, str]:
    """(interpreter, how): one whose clean-environment runs import kernelwatch.kernels.

    Where the light install could not write its ``.pth`` (a read-only site-packages),
    a venv over this interpreter's site-packages and the namespace, as fleet_host.sh.
    """
    if host._clean_import_ok(sys.executable):
        return sys.executable, "this interpreter (installed or the light install's .pth)"
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    python = str(VENV / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    own = sysconfig.get_path("purelib")
    Path(purelib, "kernelwatch-liger.pth").write_text(
        f"import site; site.addsitedir({own!r})\n{host.NAMESPACE}\n"
    )
    if not host._clean_import_ok(python):
        raise RuntimeError("no interpreter here imports kernelwatch.kernels without PYTHONPATH")
    return python, f"a venv at {VENV} over {own}"


def service_env(repo: Path, data: Path, cpu: bool, sandbox: str = "none") -> dict[str, str]:
    """The service's settings for this call (every one a KW_* variable, design.md)."""
    return {
        "KW_DATA_DIR": str(data),
        "KW_DATABASE_URL": "",  # the embedded defaults: SQLite and the filesystem broker
        "KW_BROKER_URL": "",
        "KW_REPO_CONFIGS": json.dumps({str(repo): str(CONFIG)}),
        "KW_OFFLINE": "1",
        "KW_SANDBOX": sandbox,
        "KW_CPU_TIMING_GATES": "0",
        "KW_SUITE_TIMEOUT_S": "600" if cpu else "240",
        "KW_CASE_TIMEOUT_S": "180" if cpu else "90",
        "KW_INSTALL_TIMEOUT_S": "300",
        "KW_HEARTBEAT_S": "5",
        "PYTHONUNBUFFERED": "1",
    }


def _children(root: int) -> list[int]:
    """``root`` and every process below it (read from /proc): what the worker started."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[-1].split()[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [p for p, pp in parents.items() if pp == pid]
    return found


def stop(worker: subprocess.Popen[bytes], grace_s: float = 15.0) -> str:
    """SIGTERM to the worker, then SIGKILL to each process of its tree still there."""
    if worker.poll() is not None:
        return f"had exited (rc {worker.returncode})"
    tree = _children(worker.pid)
    worker.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(timeout=grace_s)
    killed = []
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    if worker.poll() is None:
        worker.wait(timeout=10)
    return f"stopped (SIGTERM; SIGKILL to {len(killed)} left)" if killed else "stopped (SIGTERM)"


def runs_json(log: Path) -> list[dict[str, Any]]:
    """The ``{"runs": [...]}`` line ``kernelwatch run --json`` printed (warnings aside)."""
    with contextlib.suppress(OSError):
        for line in reversed(log.read_text(errors="replace").splitlines()):
            if line.startswith('{"runs"'):
                doc = json.loads(line)
                return list(doc.get("runs") or [])
    return []


def run_argv(
    python: str,
    repo: Path,
    shas: list[str],
    args: argparse.Namespace,
    wait_s: float,
    cpu: bool,
    *,
    paired: bool = False,
) -> list[str]:
    """``kernelwatch run`` over the replayed commits, first as the baseline.

    ``paired``: each commit measured interleaved with the one before in one run (the
    merge gate's protocol); otherwise the history's way, one run per commit judged
    against the stored run before it. On the H200 (2026-12-02) the history's way
    called Liger's softmax 32768x1000 +3.4 % [1.030, 1.037] at a commit that changed
    neither its source nor ``ops/utils.py``: an interval from one run's samples
    does not hold the process-to-process spread that pairing measures.
    """
    argv = [python, *CLI, "run", str(repo)]
    if len(shas) > 1:
        argv += ["--range", f"{shas[0]}..{shas[-1]}"] + (["--paired"] if paired else [])
    else:
        argv += ["--commit", shas[0]]
    argv += ["--wait", "--json", "--timeout", f"{wait_s:.0f}"]
    budget = args.budget if args.budget is not None else (0.2 if cpu else 0.5)
    argv += ["--budget", str(budget)]
    for k in args.kernel or []:
        argv += ["--kernel", k]
    if args.case:
        argv += ["--case", args.case]
    return argv


Rows = list[dict[str, Any]]


def merged(manifest_commits: Rows, dumped: Rows) -> Rows:
    """The dumped runs in commit order, each with its upstream sha and subject."""
    by_sha = {str(r.get("commit")): r for r in dumped}
    out = []
    for c in manifest_commits:
        r = by_sha.get(c["replayed"], {"status": "not planned", "cases": []})
        out.append({**r, "upstream": c["upstream"], "replayed": c["replayed"],
                    "subject": c["subject"], "date": c["date"],
                    "changed_ops": c["changed_ops"], "folded": c["folded"]})  # fmt: skip
    return out


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    manifest = load_manifest(args.src)
    commits = manifest["commits"][: args.limit] if args.limit else manifest["commits"]
    result: dict[str, Any] = {"upstream": manifest["upstream"], "commits": commits}
    result["device"] = host.machine().get("device")
    result["service_wheels"] = host.service_wheels(ctx)  # pydantic etc., before the reader
    if args.sandbox == "bwrap":  # bubblewrap from the carried .deb/, kernelwatch for the box
        result["debs"] = debs.install(ctx)
        result["namespace"] = host.site_namespace()
    result["config"] = str(CONFIG.relative_to(host.ROOT))
    result["recipe"] = recipe_of(CONFIG)
    python, how = sandbox_python()
    result["python"] = {"path": python, "how": how}
    work = args.work.resolve()
    repo = unbundle(ctx, args.src, manifest, work / "Liger-Kernel")
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    env = service_env(repo, data, ctx.cpu, args.sandbox)
    result["settings"] = env
    upgrade = ctx.run("db-upgrade", [python, *CLI, "db", "upgrade"], 60, env=env)
    if not upgrade.ok:
        result["error"] = f"db upgrade failed: {' '.join(upgrade.tail)}"
        return result, liger_table.table(result)
    log = open(ctx.logs / "worker.log", "w", encoding="utf-8")  # noqa: SIM115
    worker = subprocess.Popen(
        [python, *CLI, "worker", "--loglevel", "INFO"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
        cwd=host.ROOT,
    )
    t0 = time.monotonic()
    try:
        wait_s = max(30.0, ctx.left() - args.reserve_s - 15)
        shas = [c["replayed"] for c in commits]
        argv = run_argv(python, repo, shas, args, wait_s, ctx.cpu)
        step = ctx.run("kernelwatch-run", argv, wait_s + 20, reserve=args.reserve_s - 10, env=env)
        result["run_rc"], result["run_s"] = step.rc, round(time.monotonic() - t0, 1)
        result["planned"] = runs_json(Path(step.log))
    finally:
        result["worker_stop"] = stop(worker)
        log.close()
    out = ctx.logs / "liger-db.json"
    records = ctx.logs / "liger-records.jsonl"
    ids = [str(r["id"]) for r in result["planned"]]
    dump_argv = [python, "-m", "benchmarks.gpu.liger_dump", "--out", str(out)]
    ctx.run("dump", [*dump_argv, "--records", str(records), *ids], 60, reserve=3, env=env)
    with contextlib.suppress(OSError, ValueError):
        dumped = json.loads(out.read_text())["runs"]
        result["runs"] = merged(commits, dumped)
    return result, liger_table.table(result)


__all__ = ["merged", "run_argv", "runs_json", "service_env", "stop", "unbundle"]
