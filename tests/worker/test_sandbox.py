"""Code under test cannot reach the service: the attacks of issue 14, reproduced.

Each test runs a fake suite runner (a module written into the run's work
directory, speaking the runner's protocol: a case marker on stderr, a record
per case in ``--out``) through ``run_suite``, the path a real run takes, inside
the real bubblewrap sandbox.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from kernelwatch.kernels.record import ResultRecord
from kernelwatch.worker import venvs
from kernelwatch.worker.process import LogSink, tree_memory_bytes
from kernelwatch.worker.sandbox import Sandbox, SandboxUnavailable, clean_env
from kernelwatch.worker.suite_process import SuiteRequest, run_suite

SECRET = "whsec-" + uuid.uuid4().hex

FAKE_RUNNER = r"""
import argparse, json, os, socket, subprocess, sys, time
from kernelwatch.kernels.record import ResultRecord
from kernelwatch.kernels.runner import CASE_MARKER

p = argparse.ArgumentParser()
p.add_argument("--out"); p.add_argument("--library"); p.add_argument("--suite", action="append")
p.add_argument("--impl"); p.add_argument("--backend")
p.add_argument("--skip-case", action="append", default=[])
p.add_argument("--case-file")
p.add_argument("--act", action="append", default=[])  # case=action[:arg]
args = p.parse_args()
acts = dict(a.split("=", 1) for a in args.act)


def spy(worker_pid):
    found = {"env": sorted(k for k in os.environ if k.startswith("KW_")), "environ": []}
    for pid in [worker_pid] + [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                found["environ"].append((pid, fh.read().decode(errors="replace")))
        except OSError as exc:
            found["environ"].append((pid, type(exc).__name__))
    for port in (6379, 5432):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            found[f"port{port}"] = "connected"
        except OSError as exc:
            found[f"port{port}"] = type(exc).__name__
    print("SPY " + json.dumps(found), flush=True)


for cid in ("c1", "c2", "c3"):
    if cid in args.skip_case:
        continue
    print(f"{CASE_MARKER} {cid} k {{}}", file=sys.stderr, flush=True)
    act, _, arg = acts.get(cid, "pass").partition(":")
    if act == "flood":
        line = (b"x" * 1023 + b"\n") * 1024
        for _ in range(int(arg)):
            sys.stdout.buffer.write(line)
        sys.stdout.flush()
    elif act == "oom":
        hog = []
        for _ in range(int(arg)):
            hog.append(b"\1" * (32 << 20))
            time.sleep(0.01)
    elif act == "setsid":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", arg],
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    elif act == "spy":
        spy(arg)
    elif act == "mapshared":  # arg MB of MAP_SHARED anonymous memory, touched
        import mmap
        shared = mmap.mmap(-1, int(arg) << 20, flags=mmap.MAP_SHARED)
        for off in range(0, len(shared), 4096):
            shared[off] = 1
            if off % (32 << 20) == 0:
                time.sleep(0.01)
        time.sleep(30)
    elif act == "memfd":  # arg MB written to a memfd, never mapped
        fd = os.memfd_create("kw-flood")
        for _ in range(int(arg)):
            os.write(fd, b"\1" * (1 << 20))
        time.sleep(30)
    elif act == "devshm":  # arg MB written to /dev/shm, kept
        try:
            with open("/dev/shm/kw-flood", "wb") as fh:
                for _ in range(int(arg)):
                    fh.write(b"\1" * (1 << 20))
                    fh.flush()
        except OSError as exc:
            print(f"DEVSHM {type(exc).__name__} {exc.errno}", flush=True)
        time.sleep(30)
    elif act == "sysv":  # arg MB of SysV shared memory: attached, filled, detached
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        size = int(arg) << 20
        sid = libc.shmget(0, ctypes.c_size_t(size), 0o1600)  # IPC_PRIVATE, IPC_CREAT|0600
        addr = libc.shmat(sid, None, 0)
        ctypes.memset(addr, 1, size)
        libc.shmdt(ctypes.c_void_p(addr))
        with open("/proc/sysvipc/shm") as fh:
            print("SYSV " + json.dumps(len(fh.read().splitlines()) - 1), flush=True)
    elif act == "fork":  # arg N[:tag]: N children that sleep (named tag)
        n, _, tag = arg.partition(":")
        made = 0
        try:
            for made in range(int(n)):
                os.posix_spawn("/bin/sleep", [tag or "sleep", "60"], {})
        except OSError as exc:
            print(f"FORK refused after {made}: {exc}", flush=True)
        time.sleep(30)
    elif act == "inodes":  # arg thousands of empty files in the work directory
        os.mkdir("many")
        for i in range(int(arg) * 1000):
            open(f"many/{i}", "w").close()
        time.sleep(30)
    elif act == "disk":  # arg MB written to the work directory, in 8 MB files
        for i in range(int(arg) // 8):
            with open(f"flood-{i}", "wb") as fh:
                fh.write(b"\1" * (8 << 20))
        time.sleep(30)
    elif act == "swaplog":  # arg: what the worker's log of this pass should point at
        for name in os.listdir("."):
            if name.startswith("runner-") and name.endswith(".log"):
                os.unlink(name)
                os.symlink(arg, name)
    elif act == "fifo":  # the worker's log of this pass and the records file become FIFOs
        for name in os.listdir("."):
            if name.startswith("runner-") and name.endswith(".log"):
                os.unlink(name)
                os.mkfifo(name)
        os.mkfifo("planted.fifo")
    elif act == "jit":  # a JIT library's first use: build into $HOME/.cache unless built
        built = os.path.join(os.environ["HOME"], ".cache", "fakejit", "op.so")
        print("JIT " + ("hit" if os.path.exists(built) else "miss"), flush=True)
        print("TRITON " + os.environ["TRITON_CACHE_DIR"], flush=True)
        os.makedirs(os.path.dirname(built), exist_ok=True)
        open(built, "w").write(str(os.getpid()))
        os.makedirs(os.environ["TRITON_CACHE_DIR"], exist_ok=True)
        open(os.path.join(os.environ["TRITON_CACHE_DIR"], "k.cubin"), "w").close()
    elif act == "read":  # arg: paths separated by "|"; prints what each gave
        seen = {}
        for path in arg.split("|"):
            try:
                seen[path] = open(path).read() if os.path.isfile(path) else sorted(os.listdir(path))
            except OSError as exc:
                seen[path] = type(exc).__name__
        print("READ " + json.dumps(seen), flush=True)
    rec = ResultRecord.for_case("fake", cid, "k", "b", {})
    rec.status = "pass"
    rec.error = ""
    with open(args.out, "a") as fh:
        fh.write(rec.to_json() + "\n")
"""


def _request(tmp_path: Path, acts: list[str], box: Sandbox) -> SuiteRequest:
    workdir = tmp_path / "run" / "suite"
    workdir.mkdir(parents=True)
    (workdir / "fake_runner.py").write_text(FAKE_RUNNER)
    return SuiteRequest(
        python=sys.executable,
        pythonpath=(),
        env=clean_env(),
        workdir=workdir,
        suites=["fake"],
        impl=None,
        backend="b",
        library={"name": "fake"},
        case_timeout_s=60,
        suite_timeout_s=120,
        extra_args=[a for act in acts for a in ("--act", act)],
        module="fake_runner",
        sandbox=box,
    )


def _box(**kw: int) -> Sandbox:
    box = Sandbox.from_env({"KW_SANDBOX": "bwrap"})
    box.check()
    fields = {**box.__dict__, **kw}
    return Sandbox(**fields)


def _by_case(records: list[ResultRecord]) -> dict[str, ResultRecord]:
    return {r.case_id: r for r in records}


def test_the_suite_sees_no_secret_and_no_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KW_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("KW_DATABASE_URL", f"postgresql://u:{SECRET}@127.0.0.1/test")
    outcome = run_suite(_request(tmp_path, [f"c2=spy:{os.getpid()}"], _box()))
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    spy = json.loads(outcome.log.split("SPY ", 1)[1].splitlines()[0])
    assert spy["env"] == []
    assert SECRET not in outcome.log
    # the worker's pid does not exist in the sandbox's PID namespace; bwrap's init
    # (pid 1) is another user's process, so its environ cannot be read either
    worker = dict(spy["environ"])[str(os.getpid())]
    assert worker in ("FileNotFoundError", "PermissionError") or SECRET not in worker
    assert all(SECRET not in text for _, text in spy["environ"])
    assert spy["port6379"] != "connected" and spy["port5432"] != "connected"


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_an_environments_jit_builds_outlive_its_run_and_no_other_sees_them(
    tmp_path: Path, mode: str
) -> None:
    """FlashInfer in the sandbox on the H200 (2026-12-04): a fresh $HOME per run, so every
    run compiled every module again (no case in 287 s). The environment's own JIT cache
    is its runs' ``$HOME/.cache``; a run of other code, or one without it, starts cold."""
    box = _box() if mode == "bwrap" else Sandbox.from_env({"KW_SANDBOX": "none"})
    cache, other = tmp_path / "venvs" / "jit" / "lib-1", tmp_path / "venvs" / "jit" / "lib-2"
    cache.mkdir(parents=True)
    other.mkdir(parents=True)

    def jit(run: str, jit_cache: Path | None) -> str:
        req = _request(tmp_path / run, ["c1=jit"], box)
        req.jit_cache = jit_cache
        outcome = run_suite(req)
        assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
        return outcome.log.split("JIT ", 1)[1].split()[0]

    assert jit("first", cache) == "miss"
    assert jit("second", cache) == "hit"  # the same environment: built once
    assert (cache / "fakejit" / "op.so").is_file() and (cache / "triton" / "k.cubin").is_file()
    assert jit("other", other) == "miss"  # another environment's cache is not this one
    assert jit("fresh", None) == "miss"  # a paired run's fresh home
    assert sorted(p.name for p in (tmp_path / "venvs" / "jit").iterdir()) == ["lib-1", "lib-2"]


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_a_paired_run_starts_from_a_copy_of_the_baselines_builds_and_never_writes_them(
    tmp_path: Path, mode: str
) -> None:
    """A paired run's sides share one box, so the baseline's kept JIT cache is copied into
    the run's home, never bound: the run loads the builds (no compile) and whatever the
    code in the box writes there stays in the run. What is not a plain file or directory
    in the kept cache (a FIFO a run left) is not copied, and the copy does not block."""
    box = _box() if mode == "bwrap" else Sandbox.from_env({"KW_SANDBOX": "none"})
    kept = tmp_path / "venvs" / "jit" / "base-1"
    (kept / "fakejit").mkdir(parents=True)
    (kept / "fakejit" / "op.so").write_text("built by the baseline's own run")
    (kept / "triton").mkdir()
    (kept / "triton" / "k.cubin").write_text("cubin")
    os.mkfifo(kept / "fakejit" / "left.fifo")
    (kept / "fakejit" / "link").symlink_to("/etc/hostname")
    before = {p: p.lstat().st_mtime_ns for p in kept.rglob("*")}
    assert venvs.kept_jit_builds(tmp_path / "venvs", "base-1") == kept
    assert venvs.kept_jit_builds(tmp_path / "venvs", "never-ran") is None

    req = _request(tmp_path / "paired", ["c1=jit"], box)
    req.jit_seed = kept
    outcome = run_suite(req)
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    assert outcome.log.split("JIT ", 1)[1].split()[0] == "hit"  # built once, elsewhere
    # at the path an unpaired run of the baseline has it: $HOME/.cache, Triton's inside
    triton = outcome.log.split("TRITON ", 1)[1].split()[0]
    assert triton == "/tmp/home/.cache/triton" or mode == "none"
    assert triton.endswith("/.cache/triton")
    assert not (tmp_path / "paired" / "run" / "jit-seed").exists()  # the run's copy, gone
    # the run wrote its op (and Triton its cubin) into its copy; the kept cache is as it was
    assert (kept / "fakejit" / "op.so").read_text() == "built by the baseline's own run"
    assert {p: p.lstat().st_mtime_ns for p in kept.rglob("*")} == before
    # the copy: files with their times, the link as a link, no FIFO
    copy = tmp_path / "copy"
    venvs.copy_jit_seed(kept, copy)
    assert (copy / "fakejit" / "op.so").stat().st_mtime_ns == before[kept / "fakejit" / "op.so"]
    assert os.readlink(copy / "fakejit" / "link") == "/etc/hostname"
    assert not (copy / "fakejit" / "left.fifo").exists()


def test_a_setsid_child_does_not_outlive_the_run(tmp_path: Path) -> None:
    tag = f"kw-orphan-{uuid.uuid4().hex}"
    outcome = run_suite(_request(tmp_path, [f"c1=setsid:{tag}"], _box()))
    assert [r.status for r in outcome.records] == ["pass"] * 3, outcome.aborted
    left = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in cmdline:
            left.append(pid)
    assert left == []


@pytest.mark.parametrize(
    ("flood_mib", "cap"),
    [
        # 200 MB of stdout: killed at the cap, c1 and c3 measured as usual
        (200, 8 * 10**6),
        # 20 kB past the cap: all of it fits the pipe, so c2 may write its record and
        # c3 may start before the kill lands; c2 is still the flood's error
        (8, 8 * 2**20 - 20_000),
    ],
)
def test_a_log_flood_ends_as_one_error_with_a_capped_log(
    tmp_path: Path, flood_mib: int, cap: int
) -> None:
    outcome = run_suite(_request(tmp_path, [f"c2=flood:{flood_mib}"], _box(log_cap_bytes=cap)))
    cases = _by_case(outcome.records)
    assert {c: r.status for c, r in cases.items()} == {"c1": "pass", "c2": "error", "c3": "pass"}
    assert f"log over the {cap / 1e6:g} MB cap" in (cases["c2"].error or "")
    assert not outcome.aborted
    log = tmp_path / "run" / "suite" / "runner-0.log"
    assert cap < log.stat().st_size < cap + 300_000
    assert f"log capped at {cap / 1e6:g} MB" in log.read_text(errors="replace")
    assert len(outcome.log) <= 200_000


def test_an_allocation_over_the_memory_limit_reads_out_of_memory(tmp_path: Path) -> None:
    limit = 300 * 10**6
    # c3 allocates up to 1.6 GB in 32 MB steps; the watchdog stops it near 0.3 GB
    outcome = run_suite(_request(tmp_path, ["c3=oom:50"], _box(memory_bytes=limit)))
    cases = _by_case(outcome.records)
    assert cases["c1"].status == "pass" and cases["c2"].status == "pass"
    assert cases["c3"].status == "error"
    assert "out of memory (limit 0.3 GB)" in (cases["c3"].error or "")
    assert "SIGKILL" not in (cases["c3"].error or "")


def test_without_bubblewrap_the_default_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelwatch.worker import sandbox

    sandbox._probe.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        with pytest.raises(SandboxUnavailable, match="KW_SANDBOX=none"):
            Sandbox.from_env({}).check()
        Sandbox.from_env({"KW_SANDBOX": "none"}).check()  # the explicit opt-out
    finally:
        sandbox._probe.cache_clear()


def test_log_sink_finds_markers_across_chunks_and_past_the_cap(tmp_path: Path) -> None:
    read, write = os.pipe()
    seen: list[str] = []
    with os.fdopen(read, "rb") as pipe:
        sink = LogSink(pipe, tmp_path / "log", 1000, b"MARK ", seen.append)
        with os.fdopen(write, "wb") as out:
            out.write(b"noise MARK not-at-line-start\n" + b"y" * 5000 + b"\nMARK one\n")
            out.flush()
            out.write(b"MA")
            out.flush()
            out.write(b"RK two\nend")
        assert sink.join(10)
    assert seen == ["MARK one", "MARK two"]
    assert sink.capped and sink.written == 1000
    assert sink.before_cap is None  # both markers began past the cap
    assert (tmp_path / "log").read_bytes().endswith(b"MARK two\nend")


def test_log_sink_stops_a_flood_at_once_and_names_the_line_before_the_cap(
    tmp_path: Path,
) -> None:
    """The pump calls ``on_cap`` before it reads past the chunk that crossed the cap,
    and names the last marker that began before the cap, not one read with it."""
    read, write = os.pipe()
    capped_after: list[int] = []
    with os.fdopen(read, "rb") as pipe:
        sink = LogSink(
            pipe,
            tmp_path / "log",
            1000,
            b"MARK ",
            lambda _line: None,
            on_cap=lambda: capped_after.append(sink.dropped),
        )
        with os.fdopen(write, "wb") as out:
            out.write(b"MARK a\n" + b"y" * 900 + b"\nMARK b\n" + b"z" * 2000 + b"\nMARK c\n")
        assert sink.join(10)
    assert sink.before_cap == "MARK b"
    assert len(capped_after) == 1 and capped_after[0] > 0  # once, at the first dropped byte


def test_tree_memory_counts_the_children(tmp_path: Path) -> None:
    import subprocess

    code = "import subprocess, sys, time\n" + (
        "x = b'1' * (64 << 20)\n"
        "subprocess.Popen([sys.executable, '-c', \"y = b'1' * (64 << 20); import time; "
        'time.sleep(30)"])\n'
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        import time

        deadline = time.monotonic() + 20
        while tree_memory_bytes(proc.pid) < 128 << 20:
            assert time.monotonic() < deadline, tree_memory_bytes(proc.pid)
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
