"""``service``: the libraries of the field through the whole service on a bare GPU host.

Issue 26: on the offline H200 host, in one call, what a GPU host of the fleet runs:

1. the carried ``.deb/`` unpacked into ``/opt/kwdeb`` (``debs.py``: bubblewrap, the
   Redis server), the service's wheels (``.svc/``, with the ``redis`` client) into
   ``/opt/kwsvc-site``, and ``kernelwatch`` linked into the interpreter's site-packages
   (``host.site_namespace``) so the sandboxed suite imports it;
2. the sandbox probed (``sandbox_probe.py``): bubblewrap starts, and inside the box
   kernelwatch and torch import, CUDA sees the GPU through the bound device nodes, NVML
   reads the clocks; NVML's GPU list beside nvidia-smi's;
3. ``redis-server`` on 127.0.0.1 (the broker; ``--broker filesystem`` for the embedded
   one) and a SQLite database, ``kernelwatch db upgrade``, then
   ``kernelwatch worker --per-gpu`` with ``KW_SANDBOX=bwrap`` (``--sandbox none`` for
   the old unconfined path), ``KW_OFFLINE=1`` and ``KW_REPO_CONFIGS`` naming the
   service-side files of repositories that carry none;
4. runs planned with ``kernelwatch run ... --wait --json``, one command per library,
   all submitted at once (the worker takes them in order), each bounded by the call's
   deadline:

   - ``sdpa``: PyTorch SDPA's backends as the reference row: one throwaway repository
     per backend whose ``.kernelwatch.toml`` names ``kernelwatch.kernels.adapters.sdpa_<b>``
     (recipe ``pythonpath``: torch is the worker's own), suite ``prefill``;
   - ``liger``: Liger-Kernel's 8 replayed commits (``.src/liger.bundle``, made by
     ``prepare-liger``), ``--range`` first..last ``--paired`` (each commit interleaved
     with the one before) with ``docs/liger-kernel.kernelwatch.toml``
     (as ``liger`` does, now sandboxed: RMSNorm, LayerNorm and GeGLU run on the GPU);
   - ``flashinfer``: ``run flashinfer-python --version ==0.5.3 --version ==0.6.0
     --find-links .whl`` (the decode suite; 0.6.0 against 0.5.3). The worker installs
     a version with ``pip --no-deps``: FlashInfer's companions (``apache-tvm-ffi``,
     ``nvidia-cudnn-frontend``) go into the interpreter's site-packages first;

   - ``fa2``, ``fa3``: FlashAttention's carried snapshots (``.src/fa2-*``, ``.src/fa3-*``
     from ``prepare-fa2``/``prepare-fa3``) replayed into one linear history with
     CUTLASS's ``include/`` in place of the submodule (``fa_replay.py``), the documented
     recipe without ``submodules`` as the service-side config, ``--range FIRST..LAST
     --paired``: each commit built (trimmed profile, the worker's compiler cache) and
     paired against the one before;

5. the worker and Redis stopped, the database dumped: ``service.json`` holds every run
   (status, verdict, per-case median, ratio, interval, error, build log tail, GPU
   seconds; an unpaired run's median case breakdown, ``case_costs``, which the table
   prints under the run's line) and ``service-records.jsonl`` every record; each run's
   records, without the dump's ``run`` key, also go gzipped into the logs' archive,
   ``logs/service/dataset/<library>-run<id>.jsonl.gz``, which ``dataset-runs.toml`` indexes as
   ``[[run]]`` rows for ``docs/data/h200-dataset.toml`` (card, date, command): copy the
   folder to ``docs/data/service-h200-<date>/`` and paste the rows.

``--cpu`` runs the same path here: the real bubblewrap sandbox, Redis and SQLite, the
runs on the CPU queue (SDPA's math backend; the other backends and FlashInfer record
skips or errors that say why).

    python -m benchmarks.gpu --deadline-s 560 service
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import gzip
import json
import os
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.gpu import debs, fa_replay, fleet, host, liger, liger_table
from benchmarks.gpu.suite_aa import breakdown_text, median_breakdown

NAME = "service"
HELP = "sandboxed per-GPU worker, Redis, SQLite: Liger, SDPA, FlashInfer, FA2/3 via kernelwatch run"
WORK = Path("/tmp/kwsvc")
LIBRARIES = ("sdpa", "liger", "flashinfer", "fa2", "fa3", "cutlass-dsl")
# CUTLASS's CuTe DSL example as ``prepare-cutlass-dsl`` writes it (``.dsl/examples``), or
# a copy beside the other sources: the 56 MiB wheel does not fit beside the service's
# carry, so it is installed into site-packages by an earlier call on the same warm
# machine (``cutlass-dsl --into-site``) and only the example travels with this one
DSL_EXAMPLES = ("cutedsl", ".dsl/examples")
SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")
CLI = liger.CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--library", action="append", choices=LIBRARIES,
                   help="libraries to run, in this order (default: every one carried)")  # fmt: skip
    p.add_argument("--sandbox", choices=("bwrap", "none"), default="bwrap")
    p.add_argument("--broker", choices=("redis", "filesystem"), default="redis")
    p.add_argument("--src", type=Path, default=host.SOURCES, help="liger bundle folder (.src/)")
    p.add_argument("--work", type=Path, default=WORK, help=f"scratch folder (default {WORK})")
    p.add_argument("--sdpa-backend", action="append", choices=SDPA_BACKENDS,
                   help="SDPA backends (default: flash, cudnn, efficient; CPU: math)")  # fmt: skip
    p.add_argument("--sdpa-suite", default="prefill", help="the SDPA rows' suite")
    p.add_argument("--flashinfer", default="0.5.3,0.6.0", help="versions, oldest first")
    p.add_argument("--flashinfer-suite", default="decode")
    for kind in fa_replay.KINDS:
        what = f"{kind.upper()} snapshots to replay, oldest first (default: all)"
        p.add_argument(f"--{kind}", action="append", metavar="SHA", help=what)
    p.add_argument("--fa-suite", action="append", help="FA runs' suites (default: the recipe's)")
    p.add_argument("--liger-limit", type=int, default=None, help="only the first N commits")
    p.add_argument("--liger-from", type=int, default=1, metavar="K",
                   help="start at the K-th commit (1-based), the first run's baseline: "
                   "a later call takes up where a deadline cut an earlier one")  # fmt: skip
    p.add_argument("--dsl-tile", action="append", metavar="MxN[/AxB]",
                   help="CuTe DSL tiles (and clusters), one commit each, paired in order; "
                   "'default' leaves the tile to the adapter (default 64x64 then "
                   "128x256)")  # fmt: skip
    p.add_argument("--dsl-suite", default="gemm", help="the CuTe DSL runs' suite")
    p.add_argument("--case", default=None, help="only cases matching (run --case)")
    p.add_argument("--budget", type=float, default=None, help="sampling s per case (0.5; CPU 0.2)")
    p.add_argument("--reserve-s", type=float, default=50.0, help="kept for stop, dump, table")
    p.add_argument("--suite-timeout-s", type=int, default=None,
                   help="the worker's KW_SUITE_TIMEOUT_S (300; CPU 600): FlashInfer 0.6.0's "
                   "decode suite ran 152 of 204 cases in 300 s on an H100")  # fmt: skip


# ----------------------------------------------------------------------------- plans


def sdpa_repo(work: Path, backend: str, suite: str) -> Path:
    """A throwaway repository whose only file names SDPA's ``backend`` as the library."""
    from kernelwatch.jobs.library.mirror import git

    repo = work / f"sdpa-{backend}"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    (repo / ".kernelwatch.toml").write_text(
        "# PyTorch SDPA as a reference row (benchmarks/gpu/service.py): torch is the\n"
        "# worker's own, nothing to build; the adapter pins one backend.\n"
        f'[library]\nname = "torch-sdpa-{backend}"\n'
        f'module = "kernelwatch.kernels.adapters.sdpa_{backend}"\n\n'
        '[install]\nrecipe = "pythonpath"\npythonpath = [""]\n\n'
        f'[suites]\nnames = ["{suite}"]\n'
    )
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    ident = ["-c", "user.name=kernelwatch", "-c", "user.email=service@kernelwatch.invalid"]
    git(*ident, "commit", "-q", "-m", f"torch SDPA, {backend} backend", cwd=repo)
    return repo


def dsl_examples(src: Path) -> Path | None:
    """The carried CuTe DSL example folder (``cutedsl_examples/`` and ``kw-source.json``)."""
    for folder in (src / DSL_EXAMPLES[0], host.ROOT / DSL_EXAMPLES[1]):
        if (folder / "kw-source.json").is_file():
            return folder
    return None


def dsl_repo(work: Path, examples: Path, tiles: list[str], suite: str) -> tuple[Path, list[str]]:
    """A repository of CUTLASS's CuTe DSL GEMM whose commits differ in the recipe's tile only.

    The tile is the tested code's choice (``CUTLASS_DSL_TILE``, an ``[install] env``
    line), so a paired range over these commits compares the configurations, each
    side with its own commit's recipe.
    """
    from kernelwatch.jobs.library.mirror import git

    repo = work / "cutlass-dsl"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(examples, repo)
    git("init", "-q", "-b", "main", cwd=repo)
    ident = ["-c", "user.name=kernelwatch", "-c", "user.email=service@kernelwatch.invalid"]
    shas = []
    for tile in tiles:
        # a TOML basic string is a JSON string for these: quotes and newlines escaped
        variables = ", ".join(f"{k} = {json.dumps(v)}" for k, v in dsl_tile_env(tile).items())
        (repo / ".kernelwatch.toml").write_text(
            "# CUTLASS's CuTe DSL Hopper dense GEMM (benchmarks/gpu/service.py): the DSL is\n"
            "# the worker's, the example this checkout; the tile is this commit's choice.\n"
            '[library]\nname = "cutlass-dsl"\n'
            'module = "kernelwatch.kernels.adapters.cutlass_dsl"\n\n'
            '[install]\nrecipe = "pythonpath"\npythonpath = [""]\n'
            f"env = {{ {variables} }}\n\n"
            f'[suites]\nnames = ["{suite}"]\n'
        )
        git("add", "-A", cwd=repo)
        git(*ident, "commit", "-q", "-m", f"CuTe DSL GEMM, tile {tile}", cwd=repo)
        shas.append(git("rev-parse", "HEAD", cwd=repo).strip())
    return repo, shas


# ``--dsl-tile default``: a recipe that names no tile, so the adapter picks one per shape
# (``cutlass_dsl.tile_config``: 128x256, or the thin tile the H100 measured best)
DEFAULT_TILE = "default"


def dsl_tile_env(spec: str) -> dict[str, str]:
    """``MxN`` or ``MxN/AxB`` (tile, cluster) as the adapter's recipe variables, checked by
    the adapter's own parser before they reach a recipe; ``default`` names none. The
    H100's sweeps (2026-12-05, 2026-12-06) found the best thin tile per shape, so a
    commit may name its cluster too, or leave both to the adapter."""
    # imported here: the driver's parser builds before kernelwatch is importable
    from kernelwatch.kernels.adapters.cutlass_dsl import CLUSTER_ENV, TILE_ENV, tile_config

    if spec == DEFAULT_TILE:
        return {}
    tile, slash, cluster = spec.partition("/")
    env = {TILE_ENV: tile, **({CLUSTER_ENV: cluster} if cluster else {})}
    try:
        if slash and not cluster:
            raise ValueError("a cluster after the slash")
        tile_config(64, 64, env)  # ValueError for a tile or cluster it would refuse
    except ValueError as exc:
        raise ValueError(f"--dsl-tile {spec!r}: MxN or MxN/AxB, e.g. 64x64/1x2 ({exc})") from exc
    return env


def _commits(shas: list[str]) -> list[str]:
    """``run``'s commit selection: each commit paired with the one before, or one commit."""
    if len(shas) > 1:
        return ["--range", f"{shas[0]}..{shas[-1]}", "--paired"]
    return ["--commit", shas[0]]


def common_args(args: argparse.Namespace, cpu: bool, wait_s: float) -> list[str]:
    budget = args.budget if args.budget is not None else (0.2 if cpu else 0.5)
    out = ["--wait", "--json", "--timeout", f"{wait_s:.0f}", "--budget", str(budget)]
    return out + (["--case", args.case] if args.case else [])


def flashinfer_argv(python: str, versions: list[str], suite: str, wheels: Path) -> list[str]:
    """``kernelwatch run`` of FlashInfer's released versions from the carried wheelhouse."""
    argv = [python, *CLI, "run", "flashinfer-python"]
    for v in versions:
        argv += ["--version", f"flashinfer-python=={v}"]
    return argv + ["--find-links", str(wheels), "--impl", "flashinfer", "--suite", suite]


def liger_window(
    commits: list[dict[str, Any]], start: int = 1, limit: int | None = None
) -> list[dict[str, Any]]:
    """The replayed commits a call runs: the first ``limit`` of them, from the
    ``start``-th (1-based) on. A paired range's first commit is only its first run's
    baseline, so ``start`` K picks up at the pair K -> K+1: a later call resumes where a
    deadline cut an earlier one without measuring a pair twice."""
    if start < 1:
        raise ValueError(f"--liger-from counts from 1, got {start}")
    return commits[: limit or None][start - 1 :]


def companions(ctx: host.Context) -> str:
    """FlashInfer's companion wheels into this interpreter's site-packages (the worker's
    version install is ``--no-deps``, and the suite sees only its own site-packages)."""
    import sysconfig

    wheels = [sorted(glob.glob(str(host.WHEELS / c)))[:1] for c in host.FLASHINFER_COMPANIONS]
    found = sum(wheels, [])
    if not found:
        return "no companion wheels carried"
    target = Path(sysconfig.get_path("purelib"))
    step = host.pip_target(ctx, "install-flashinfer-companions", found, target)
    return f"{len(found)} into {target}" if step.ok else f"failed: {' '.join(step.tail)}"


def plans(
    ctx: host.Context, args: argparse.Namespace, python: str, work: Path, wait_s: float
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(one ``kernelwatch run`` per library or SDPA backend, KW_REPO_CONFIGS entries)."""
    wanted = args.library or [lib for lib in LIBRARIES if carried(lib, args.src)]
    common = common_args(args, ctx.cpu, wait_s)
    out: list[dict[str, Any]] = []
    configs: dict[str, str] = {}
    for lib in wanted:
        if lib == "sdpa":
            default = ["math"] if ctx.cpu else ["flash", "cudnn", "efficient"]
            backends = args.sdpa_backend or default
            for b in backends:
                repo = sdpa_repo(work, b, args.sdpa_suite)
                argv = [python, *CLI, "run", str(repo), "--commit", "HEAD", *common]
                out.append({"library": f"sdpa-{b}", "argv": argv, "repo": str(repo)})
        elif lib == "liger":
            manifest = liger.load_manifest(args.src)
            commits = liger_window(manifest["commits"], args.liger_from, args.liger_limit)
            repo = liger.unbundle(ctx, args.src, manifest, work / "Liger-Kernel")
            configs[str(repo)] = str(liger.CONFIG)
            shas = [c["replayed"] for c in commits]
            how = argparse.Namespace(budget=args.budget, kernel=None, case=args.case)
            argv = liger.run_argv(python, repo, shas, how, wait_s, ctx.cpu, paired=True)
            out.append({"library": "liger", "argv": argv, "repo": str(repo), "commits": commits})
        elif lib == "flashinfer":
            versions = [v.strip() for v in args.flashinfer.split(",") if v.strip()]
            note = "CPU: no companions (FlashInfer needs a GPU)" if ctx.cpu else companions(ctx)
            argv = flashinfer_argv(python, versions, args.flashinfer_suite, host.WHEELS)
            out.append({"library": "flashinfer", "argv": argv + common, "companions": note})
        elif lib in fa_replay.KINDS:
            out.append(fa_plan(lib, args, python, work, common, configs))
        elif lib == "cutlass-dsl":
            examples = dsl_examples(args.src)
            if examples is None:
                continue  # carried() said so; the JSON lists what ran
            tiles = args.dsl_tile or ["64x64", "128x256"]
            repo, shas = dsl_repo(work, examples, tiles, args.dsl_suite)
            argv = [python, *CLI, "run", str(repo), *_commits(shas)]
            if host.importable("cutlass.cute"):
                dsl = "importable"
            else:  # every case skips, saying so
                dsl = "NOT importable: run cutlass-dsl --into-site first on this warm machine"
            commits = [
                {"tile": t, "ref": f"tile {t}", "upstream": c, "replayed": c}
                for t, c in zip(tiles, shas, strict=True)
            ]
            out.append(
                {"library": lib, "argv": argv + common, "repo": str(repo), "commits": commits,
                 "dsl": dsl}
            )  # fmt: skip
    return out, configs


def fa_plan(lib: str, args: argparse.Namespace, python: str, work: Path, common: list[str],
            configs: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """FA2 or FA3's carried snapshots replayed (``fa_replay``), each commit paired against
    the one before: ``kernelwatch run REPO --range FIRST..LAST --paired``."""
    commits = fa_replay.ordered(args.src, lib, getattr(args, lib))
    repo = work / f"flash-attention-{lib}"
    replayed = fa_replay.replay(args.src, lib, commits, repo)
    config = fa_replay.service_config(lib, work / f"{lib}.kernelwatch.toml")
    configs[str(repo)] = str(config)
    shas = [r.replayed for r in replayed]
    argv = [python, *CLI, "run", str(repo), *_commits(shas)]
    for suite in args.fa_suite or []:
        argv += ["--suite", suite]
    return {"library": lib, "argv": argv + common, "repo": str(repo),
            "commits": [r.as_dict() for r in replayed]}  # fmt: skip


def carried(lib: str, src: Path) -> bool:
    if lib == "liger":
        return (src / "liger-commits.json").is_file()
    if lib == "flashinfer":
        return bool(glob.glob(str(host.WHEELS / "flashinfer_python-*.whl")))
    if lib in fa_replay.KINDS:
        return bool(fa_replay.carried(src, lib))
    if lib == "cutlass-dsl":
        return dsl_examples(src) is not None
    return True  # SDPA is torch's


# ----------------------------------------------------------------------------- services


def start_redis(ctx: host.Context, work: Path) -> tuple[subprocess.Popen[bytes] | None, int, str]:
    """A Redis server of this call on 127.0.0.1 (no persistence): the process, its port
    and what it is; or None, 0 and why not.

    The port is a free one, and a PING counts only when the server that answers is
    this process (``INFO``'s ``process_id``). On a fixed port, a Redis left behind by a
    killed call answered in place of the new one, which had failed to bind: the run
    went to the stale server and waited there, queued, until its timeout (2026-12-03).
    """
    exe = shutil.which("redis-server")
    if exe is None:
        return None, 0, "no redis-server (carry .deb/ or use --broker filesystem)"
    folder = work / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    port = host.free_port()
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(folder), "--protected-mode", "yes"]  # fmt: skip
    with open(ctx.logs / "redis.log", "w", encoding="utf-8") as log:  # the child keeps its own
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if proc.poll() is not None:
            return None, 0, f"redis-server exited (rc {proc.returncode}): see logs/redis.log"
        answered = redis_pid(port)
        if answered == proc.pid:
            return proc, port, f"{exe} on 127.0.0.1:{port}"
        if answered is not None:
            proc.kill()
            proc.wait()
            return None, 0, f"127.0.0.1:{port} is another Redis's (pid {answered})"
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    return None, 0, "redis-server did not answer in 20 s"


def redis_pid(port: int) -> int | None:
    """The ``process_id`` of the Redis answering on 127.0.0.1:``port``, if one does."""
    with (
        contextlib.suppress(OSError, ValueError),
        socket.create_connection(("127.0.0.1", port), 1) as conn,
    ):
        conn.sendall(b"INFO server\r\n")
        head, _, body = conn.recv(65536).partition(b"\r\n")
        if not head.startswith(b"$"):  # an error (NOAUTH...) or not Redis at all
            return None
        while len(body) < int(head[1:]):
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        for line in body.decode(errors="replace").splitlines():
            if line.startswith("process_id:"):
                return int(line.split(":", 1)[1])
    return None


# seconds of a call a suite cannot have: the worker's start, the library's install, the
# run's end, the dump and the table after it (2026-12-05, an H100: 40 s to the worker,
# 555 s in all)
SUITE_SETUP_S = 120.0


def suite_timeout_s(args: argparse.Namespace, cpu: bool, cap_s: float | None) -> int:
    """The worker's ``KW_SUITE_TIMEOUT_S``: the call's ``--suite-timeout-s`` (300; CPU
    600), cut to ``cap_s``, what the call's deadline leaves a suite.

    A suite the call's deadline kills stores nothing: FlashInfer 0.6.0's decode suite,
    given 540 s in a 585 s call on an H100 (2026-12-05), started 140 cases and recorded
    none. One the worker's own timeout ends keeps the records of the cases it finished.
    """
    want = args.suite_timeout_s or (600 if cpu else 300)
    if cap_s is None:
        return int(want)
    return int(max(30.0, min(want, cap_s)))


def service_env(
    work: Path,
    args: argparse.Namespace,
    broker: str,
    configs: dict[str, str],
    cpu: bool,
    cap_s: float | None = None,
) -> dict[str, str]:
    """The service's settings for this call: ``liger``'s, with Redis, SQLite, more configs;
    the suite timeout cut to ``cap_s`` (:func:`suite_timeout_s`)."""
    env = liger.service_env(Path(), work / "data", cpu, args.sandbox)
    env |= {
        "KW_DATABASE_URL": f"sqlite:///{work / 'kernelwatch.db'}",
        "KW_BROKER_URL": broker,  # "": the embedded filesystem transport
        "KW_REPO_CONFIGS": json.dumps(configs),
        "KW_SUITE_TIMEOUT_S": str(suite_timeout_s(args, cpu, cap_s)),
        "KW_CASE_TIMEOUT_S": "180" if cpu else "120",
    }
    # the worker, its suites and what they start keep NVLink multicast off
    return env | fleet.NVLS_OFF


def probe(ctx: host.Context, python: str, env: dict[str, str], work: Path) -> dict[str, Any]:
    argv = [python, "-m", "benchmarks.gpu.sandbox_probe", "--scratch", str(work / "probe")]
    step = ctx.run("sandbox-probe", argv, 200, reserve=60, env=env)
    text = Path(step.log).read_text(errors="replace")
    lines = [x for x in text.splitlines() if x.startswith("{")]
    if not lines:
        return {"error": f"rc {step.rc}: {' '.join(step.tail)}"}
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


# longest wait for one ``kernelwatch run`` to plan its runs before the next is started
PLAN_WAIT_S = 120.0


def run_count(database_url: str) -> int:
    """Runs in the service's SQLite database; -1 where it cannot be read (yet)."""
    path = database_url.removeprefix("sqlite:///")
    try:
        uri = f"file:{path}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as con:
            return int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.Error:
        return -1


def wait_planned(
    proc: subprocess.Popen[bytes],
    database_url: str,
    before: int,
    limit_s: float,
    settle_s: float = 2.0,
) -> float:
    """Wait until ``proc`` has planned its runs: the database holds more runs than
    ``before`` and their number has not moved for ``settle_s``; or ``proc`` ended, or
    ``limit_s`` passed; at once where the database could not be read (``before`` < 0).
    Seconds waited.

    The worker takes runs in the order they were planned. On the H200 (2026-12-04) a
    one-second gap was not enough: ``run flashinfer-python --version ...`` planned after
    the Liger history submitted a second later, whose seven runs then held the worker
    for the rest of the call."""
    began = time.monotonic()
    if before < 0:  # no database to read: nothing to wait for
        return 0.0
    seen, since = before, began
    while time.monotonic() - began < limit_s and proc.poll() is None:
        now_count = run_count(database_url)
        if now_count != seen:
            seen, since = now_count, time.monotonic()
        elif seen > before and time.monotonic() - since >= settle_s:
            break
        time.sleep(0.2)
    return time.monotonic() - began


def submit(ctx: host.Context, planned: list[dict[str, Any]], env: dict[str, str]) -> None:
    """Every plan's ``kernelwatch run``, each started once the one before has planned its
    runs (``wait_planned``), so the worker takes them in this order; all waited for until
    the deadline."""
    procs = []
    url = env.get("KW_DATABASE_URL", "")
    for i, plan in enumerate(planned):
        log = ctx.logs / f"run-{i}-{plan['library']}.log"
        plan["log"] = str(log)
        fh = open(log, "w", encoding="utf-8")  # noqa: SIM115
        before = run_count(url)
        proc = subprocess.Popen(plan["argv"], stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **env}, cwd=host.ROOT)  # fmt: skip
        procs.append((plan, proc, fh, time.monotonic()))
        if i + 1 < len(planned):
            limit = min(PLAN_WAIT_S, max(1.0, ctx.left() - 60))
            plan["plan_wait_s"] = round(wait_planned(proc, url, before, limit), 1)
    for plan, proc, fh, t0 in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(1.0, ctx.left() - 30))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            plan["timed_out"] = True
        fh.close()
        plan["rc"], plan["seconds"] = proc.returncode, round(time.monotonic() - t0, 1)
        plan["runs"] = liger.runs_json(Path(plan["log"]))
        if not plan["runs"]:
            plan["tail"] = host.tail(Path(plan["log"]), 5)


def case_costs(records: list[dict[str, Any]], run_id: int) -> dict[str, Any]:
    """Where an unpaired run's case seconds went, from its records (``ResultRecord.cost``):
    ``{"cases": n, "wall_s": their sum, "median": {part: median s}}`` over the cases that
    ran (not skips), wall first, then the check's parts and the timing; empty where no
    record of the run carries one (a paired run, records older than the field).

    On the H100, FlashInfer 0.6.0's decode suite ran 152 cases in 300 s whose timings
    summed to 62 s: the run's GPU seconds alone could not say where the rest went."""
    from kernelwatch.kernels.runner import CHECK_PARTS

    costs = [
        r["cost"]
        for r in records
        if r.get("run") == run_id
        and r.get("status") != "skip"
        and isinstance((r.get("cost") or {}).get("wall_s"), int | float)
    ]
    if not costs:
        return {}
    keys = ("wall_s", *CHECK_PARTS, "timing_s")
    total = sum(float(c["wall_s"]) for c in costs)
    return {"cases": len(costs), "wall_s": round(total, 1), "median": median_breakdown(costs, keys)}


Dumped = tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]  # plan, run, records


def _dumped_with_records(records: list[dict[str, Any]],
                         planned: list[dict[str, Any]]) -> Iterator[Dumped]:  # fmt: skip
    """Each dumped run that has records, with its plan and its records (the dump's order)."""
    by_run: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_run.setdefault(int(r["run"]), []).append(r)
    for plan in planned:
        for run in plan.get("dumped", []):
            if by_run.get(int(run["id"])):
                yield plan, run, by_run[int(run["id"])]


def dataset_file(library: str, run_id: int) -> str:
    """A run's record file in the dataset: gzipped, as every GPU call copies the tree."""
    return f"{library}-run{run_id}.jsonl.gz"


def write_dataset_files(records: list[dict[str, Any]], planned: list[dict[str, Any]],
                        folder: Path) -> list[str]:  # fmt: skip
    """Each dumped run's records into ``folder`` as ``kernelwatch import`` reads them:
    one file a run, the dump's ``run`` key dropped (not a record field), gzipped with no
    timestamp in the header (the same records make the same bytes)."""
    written = []
    for plan, run, recs in _dumped_with_records(records, planned):
        lines = "".join(json.dumps({k: v for k, v in r.items() if k != "run"}) + "\n" for r in recs)
        folder.mkdir(parents=True, exist_ok=True)
        name = dataset_file(plan["library"], int(run["id"]))
        (folder / name).write_bytes(gzip.compress(lines.encode(), mtime=0))
        written.append(name)
    return written


def dataset_rows(records: list[dict[str, Any]], planned: list[dict[str, Any]],
                 command: str) -> str:  # fmt: skip
    """``[[run]]`` rows for ``docs/data/h200-dataset.toml``, one per run with records."""
    lines = []
    for plan, run, recs in _dumped_with_records(records, planned):
        cards = sorted({str((r.get("device") or {}).get("uuid")) for r in recs} - {"None"})
        lines += [
            "[[run]]",
            f'file = "service-h200-<date>/{dataset_file(plan["library"], int(run["id"]))}"',
            f'repo = "{run["repository"]}"',
            f'commit = "{run["commit"]}"',
        ]
        if run.get("baseline"):
            lines.append(f'parent = "{run["baseline"]}"')
        lines += [
            f'device_class = "{run["device_class"]}"',
            f'card = "{cards[0] if cards else "unknown"}"',
            f"measured = {str(run.get('started') or '')[:19]}Z",
            f"command = {json.dumps(command)}",  # a TOML basic string, quotes escaped
            f'note = "{plan["library"]} through a sandboxed worker: {run["status"]}, '
            f'verdict {run["verdict"]}"',
            "",
        ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the call


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    result: dict[str, Any] = {"device": host.machine().get("device"), "sandbox": args.sandbox}
    result["debs"] = debs.install(ctx)
    result["service_wheels"] = host.service_wheels(ctx)
    result["namespace"] = host.site_namespace()
    python, how = liger.sandbox_python()
    result["python"] = {"path": python, "how": how}
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    redis_proc, broker = None, ""
    if args.broker == "redis":
        redis_proc, port, why = start_redis(ctx, work)
        result["redis"] = why
        if redis_proc is not None:
            broker = f"redis://127.0.0.1:{port}/0"
    worker = None
    try:
        wait_s = max(30.0, ctx.left() - args.reserve_s - 40)
        planned, configs = plans(ctx, args, python, work, wait_s)
        cap_s = ctx.left() - args.reserve_s - SUITE_SETUP_S
        env = service_env(work, args, broker, configs, ctx.cpu, cap_s)
        result["settings"] = env
        result["probe"] = probe(ctx, python, env, work)
        upgrade = ctx.run("db-upgrade", [python, *CLI, "db", "upgrade"], 60, env=env)
        if not upgrade.ok:
            result["error"] = f"db upgrade failed: {' '.join(upgrade.tail)}"
            return result, table(result)
        log = open(ctx.logs / "worker.log", "w", encoding="utf-8")  # noqa: SIM115
        worker = subprocess.Popen([python, *CLI, "worker", "--per-gpu", "--loglevel", "INFO"],
                                  stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **env}, cwd=host.ROOT)  # fmt: skip
        submit(ctx, planned, env)
        result["live_logs"] = live_suite_logs(Path(env["KW_DATA_DIR"]), ctx.logs / "live")
        result["worker_stop"] = liger.stop(worker)
        log.close()
        ids = [str(r["id"]) for p in planned for r in p.get("runs", [])]
        out, records = ctx.logs / "service-db.json", ctx.out / "service-records.jsonl"
        dump = [python, "-m", "benchmarks.gpu.liger_dump", "--out", str(out)]
        ctx.run("dump", [*dump, "--records", str(records), *ids], 60, reserve=3, env=env)
        with contextlib.suppress(OSError, ValueError):
            dumped = {r["id"]: r for r in json.loads(out.read_text())["runs"]}
            for p in planned:
                p["dumped"] = [dumped[r["id"]] for r in p.get("runs", []) if r["id"] in dumped]
        recs = host.read_jsonl(records)
        for p in planned:
            for r in p.get("dumped", []):
                r["case_costs"] = case_costs(recs, int(r["id"]))
        # as a shell would take it back: a --case glob quoted, not expanded
        command = "python -m benchmarks.gpu " + shlex.join(sys.argv[1:])
        (ctx.logs / "dataset-runs.toml").write_text(dataset_rows(recs, planned, command))
        # in the logs' archive: a device call brings back at most 8 files from $OUT
        result["dataset_files"] = write_dataset_files(recs, planned, ctx.logs / "dataset")
        for p in planned:
            if p["library"] == "liger" and p.get("dumped"):
                merged = liger.merged(p["commits"], p["dumped"])
                head = {"run_rc": p.get("rc"), "run_s": p.get("seconds"),
                        "recipe": liger.recipe_of(liger.CONFIG),
                        "config": str(liger.CONFIG.relative_to(host.ROOT))}  # fmt: skip
                head |= {"commits": p["commits"], "runs": merged}
                whole = liger_table.table({**result, **head})
                p["table"] = whole[1:]  # its first line repeats what the run line says
        result["plans"] = planned
    finally:
        if worker is not None and worker.poll() is None:
            result["worker_stop"] = liger.stop(worker)
        if redis_proc is not None:
            redis_proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                redis_proc.wait(timeout=10)
    return result, table(result)


# bytes of a live suite log kept: its end says where the time went; a flooding kernel's
# log must not fill the call's output
LIVE_LOG_BYTES = 256_000


def live_suite_logs(data_dir: Path, dest: Path, limit: int = LIVE_LOG_BYTES) -> dict[str, str]:
    """The suite logs of runs still measuring when the call's wait ends, kept in ``dest``.

    A run the deadline cuts has no record, and the worker removes its work folder when it
    stops. On the H200 (2026-12-04) FlashInfer 0.5.3's decode suite ran 287 s in the
    sandbox with no case finished, and nothing the call brought back said where the
    time went. Each log's tail (``limit`` bytes) travels in ``logs.tgz``; the result maps
    each to its last line.
    """
    # the worker's reader: the code under test writes that folder, and a log it swapped
    # for a link to a host file or a FIFO is read as nothing (imported here: the driver
    # starts on a host where kernelwatch is not yet importable)
    from kernelwatch.worker.process import read_tail

    found: dict[str, str] = {}
    for log in sorted(data_dir.glob("work/run-*/suite/runner-*.log")):
        name = "-".join(log.relative_to(data_dir / "work").parts).replace("-suite-", "-")
        tail = read_tail(log, limit)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(tail, encoding="utf-8")
        lines = tail.strip().splitlines()
        found[name] = lines[-1][:300] if lines else "(empty or unreadable)"
    return found


# ----------------------------------------------------------------------------- table


def table(result: dict[str, Any]) -> list[str]:
    """The short table: the host's pieces, the sandbox probe, then each run."""
    d = result.get("debs") or {}
    lines = [f"debs: {len(d.get('debs') or [])} unpacked into {d.get('prefix')}; "
             + ", ".join(f"{k} {v}" for k, v in (d.get("versions") or {}).items())]  # fmt: skip
    lines.append(f"redis: {result.get('redis', 'not used')}; sandbox {result.get('sandbox')}")
    probe_doc = result.get("probe") or {}
    box = probe_doc.get("sandbox") or {}
    inside = box.get("inside") or {}
    lines.append(
        f"sandbox probe: {box.get('check', probe_doc.get('error'))}; inside: uid "
        f"{inside.get('uid')} cuda {inside.get('cuda')} device {inside.get('device')} "
        f"nvml {inside.get('nvml')} ({inside.get('nvml_sm_mhz')} MHz) triton "
        f"{inside.get('triton')} (cc {inside.get('cc')})"
        + (f" error {inside['error']}" if inside.get("error") else "")
    )
    g = probe_doc.get("gpus") or {}
    lines.append(f"GPU list: NVML {g.get('nvml')} agrees with nvidia-smi: {g.get('agree')}")
    if result.get("error"):
        lines.append(f"ERROR: {result['error']}")
    for name, last in (result.get("live_logs") or {}).items():
        lines.append(f"still running at the end: {name}: {last}")
    # lazily: the driver starts on a host where prelude has not yet put kernelwatch on the path
    from kernelwatch.db.build_log import EnvironmentBuild, environments_text

    for p in result.get("plans") or []:
        head = f"{p['library']}: rc {p.get('rc')} in {p.get('seconds')} s"
        head += " (timed out)" if p.get("timed_out") else ""
        lines.append(head + (f"; CuTe DSL {p['dsl']}" if p.get("dsl") else ""))
        # a replayed history's runs are named by their upstream commit (FA's tag or sha)
        upstream = {str(c["replayed"]): f"{c.get('ref', c['upstream'][:8])} (upstream)"
                    for c in p.get("commits") or [] if "replayed" in c}  # fmt: skip
        for r in p.get("dumped") or []:
            cases = r.get("cases") or []
            counts: dict[str, int] = {}
            for c in cases:
                counts[c["status"]] = counts.get(c["status"], 0) + 1
            gpu_s = _gpu_seconds(r)
            builds = [EnvironmentBuild(**b) for b in r.get("environments") or []]
            built = liger_table.build_seconds(r.get("build_log_tail", ""))
            tele = r.get("telemetry") or {}
            what = str(r["commit"])
            what = what.removeprefix("version:") if what.startswith("version:") else what[:10]
            what = upstream.get(str(r["commit"]), what)
            lines.append(
                f"  #{r['id']} {what:<28} {r['status']:<9} "
                f"{str(r['verdict']):<8} env {built:<6} GPU {gpu_s} "
                + " ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                + (f"  telemetry off {tele['off']}" if tele.get("off") else "")
            )
            if builds:
                lines.append(f"     environments: {environments_text(builds)}")
            spent = r.get("case_costs")
            if spent:
                parts = dict(spent["median"])
                wall = parts.pop("wall_s")
                lines.append(
                    f"     median a case: wall {wall:.2f} s; {breakdown_text(parts)} "
                    f"({spent['cases']} cases, {spent['wall_s']:.0f} s in all)"
                )
            if r.get("error"):
                lines.append(f"     error: {str(r['error']).splitlines()[-1][:150]}")
            lines += [f"     compiler: {x[:200]}" for x in (r.get("compiler_errors") or [])[:4]]
        if not p.get("dumped"):
            lines.append(f"  no runs: {' | '.join(p.get('tail') or [])[:300]}")
        lines += [f"  {x}" for x in (p.get("table") or [])[:40]]
    return lines


def _gpu_seconds(run: dict[str, Any]) -> str:
    from datetime import datetime

    try:
        s = datetime.fromisoformat(str(run["started"]))
        f = datetime.fromisoformat(str(run["finished"]))
    except (KeyError, TypeError, ValueError):
        return "-"
    return f"{(f - s).total_seconds():.0f} s"


__all__ = [
    "dataset_rows",
    "flashinfer_argv",
    "live_suite_logs",
    "plans",
    "sdpa_repo",
    "service_env",
    "table",
]
