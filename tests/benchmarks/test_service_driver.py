"""``python -m benchmarks.gpu service``: carried .deb files, Redis, SQLite and a sandboxed
per-GPU worker running `kernelwatch run` plans, checked on the CPU (issue 26).

The end-to-end test runs the sub-command as the device call does, here: the real
bubblewrap sandbox, a Redis server of its own (port 6390) and SQLite, the SDPA reference
row through the worker's queue. The GPU call itself is the lead's (docs/gpu-next-session.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from benchmarks.gpu import debs, host, service
from kernelwatch.jobs.planning.importer import read_records

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "data" / "bench-h200-2026-11-29.jsonl"  # H200 records, one a line


def test_a_wrapper_runs_the_carried_program_with_the_systems_libraries_first(
    tmp_path: Path,
) -> None:
    real = tmp_path / "usr" / "bin" / "prog"
    real.parent.mkdir(parents=True)
    real.write_text('#!/bin/sh\necho "$LD_LIBRARY_PATH|$*"\n')
    real.chmod(0o755)
    script = tmp_path / "prog"
    script.write_text(debs.wrapper(real, [tmp_path / "lib"]))
    script.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/sys/libs"}
    out = subprocess.run([str(script), "a b", "c"], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == f"/sys/libs:{tmp_path / 'lib'}|a b c"
    env.pop("LD_LIBRARY_PATH")
    out = subprocess.run([str(script)], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == f"{tmp_path / 'lib'}|"


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="no dpkg-deb to build a .deb")
def test_carried_debs_unpack_into_the_prefix_and_go_first_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: fakewrap\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t.invalid>\n"
        "Description: a stand-in bwrap\n"
    )
    (pkg / "usr" / "bin").mkdir(parents=True)
    (pkg / "usr" / "bin" / "bwrap").write_text("#!/bin/sh\necho 'bubblewrap 9.9'\n")
    (pkg / "usr" / "bin" / "bwrap").chmod(0o755)
    carried = tmp_path / "deb"
    carried.mkdir()
    subprocess.run(["dpkg-deb", "-b", str(pkg), str(carried / "fakewrap_1.0_all.deb")],
                   check=True, capture_output=True)  # fmt: skip
    monkeypatch.setenv("PATH", os.environ["PATH"])
    ctx = host.Context(out=tmp_path, logs=tmp_path, deadline=1e12, cpu=True)
    prefix = tmp_path / "prefix"
    got = debs.install(ctx, carried, prefix)
    assert got["debs"] == ["fakewrap_1.0_all.deb"] and "failed" not in got
    assert got["programs"]["bwrap"] == str(prefix / "bin" / "bwrap")
    assert os.environ["PATH"].split(os.pathsep)[0] == str(prefix / "bin")
    assert got["versions"]["bwrap"] == "bubblewrap 9.9"
    assert not (Path("/usr/bin/fakewrap").exists())  # never unpacked into /


def test_the_flashinfer_plan_is_a_version_run_from_the_carried_wheelhouse() -> None:
    argv = service.flashinfer_argv("py", ["0.5.3", "0.6.0"], "decode", Path("/w/.whl"))
    assert argv[:5] == ["py", "-m", "kernelwatch.jobs.cli.main", "run", "flashinfer-python"]
    assert argv[5:9] == ["--version", "flashinfer-python==0.5.3",
                         "--version", "flashinfer-python==0.6.0"]  # fmt: skip
    assert argv[-6:] == ["--find-links", "/w/.whl", "--impl", "flashinfer", "--suite", "decode"]


def test_a_later_call_resumes_liger_at_the_pair_a_deadline_cut() -> None:
    commits = [{"replayed": f"c{i}"} for i in range(1, 9)]
    # the first call ran pairs 1->2 .. 3->4 (--liger-limit 4); the second starts at 4,
    # the baseline of the pair 4->5, so no pair runs twice and none is skipped
    first = service.liger_window(commits, 1, 4)
    later = service.liger_window(commits, 4)
    assert [c["replayed"] for c in first] == ["c1", "c2", "c3", "c4"]
    assert [c["replayed"] for c in later] == ["c4", "c5", "c6", "c7", "c8"]
    assert [c["replayed"] for c in service.liger_window(commits, 2, 3)] == ["c2", "c3"]
    with pytest.raises(ValueError, match="counts from 1"):
        service.liger_window(commits, 0)


def test_an_sdpa_row_is_a_repository_whose_config_names_the_backend(tmp_path: Path) -> None:
    from kernelwatch.jobs.library import repoconfig

    repo = service.sdpa_repo(tmp_path, "cudnn", "prefill")
    config = repoconfig.parse((repo / ".kernelwatch.toml").read_text())
    assert config.library.module == "kernelwatch.kernels.adapters.sdpa_cudnn"
    assert config.install.recipe == "pythonpath" and tuple(config.suites.names) == ("prefill",)
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert log.stdout.strip() == "torch SDPA, cudnn backend"


def test_the_dataset_rows_index_each_run_with_its_card_date_and_command() -> None:
    planned = [{"library": "liger", "dumped": [
        {"id": 7, "repository": "Liger-Kernel", "commit": "b" * 40, "baseline": "a" * 40,
         "device_class": "h200", "started": "2026-12-03T10:11:12.5", "status": "succeeded",
         "verdict": "pass"}]}]  # fmt: skip
    records = [{"run": 7, "device": {"uuid": "GPU-1234"}}, {"run": 8, "device": {}}]
    command = """python -m benchmarks.gpu service --case 'decode*page_size=16,x"y'"""
    text = service.dataset_rows(records, planned, command)
    (row,) = tomllib.loads(text.replace("<date>", "2026-12-03"))["run"]
    assert row["card"] == "GPU-1234" and row["parent"] == "a" * 40
    assert row["command"] == command  # its quotes kept, a glob as the shell took it
    assert str(row["measured"]).startswith("2026-12-03 10:11:12")
    assert row["file"] == "service-h200-2026-12-03/liger-run7.jsonl.gz"


def test_each_run_with_records_is_written_as_the_import_reads_it(tmp_path: Path) -> None:
    planned = [{"library": "flashinfer", "dumped": [
        {"id": 3, "repository": "flashinfer", "commit": "0.6.0", "device_class": "h200",
         "started": "2026-12-05T19:09:57", "status": "succeeded", "verdict": "fail"},
        {"id": 4, "repository": "flashinfer", "commit": "0.6.1", "device_class": "h200",
         "started": None, "status": "failed", "verdict": "error"}]}]  # fmt: skip
    record = json.loads(RECORD.read_text().splitlines()[0])
    records = [{**record, "run": 3}, {**record, "case_id": "other", "run": 3}]
    folder = tmp_path / "dataset"
    assert service.write_dataset_files(records, planned, folder) == ["flashinfer-run3.jsonl.gz"]
    read = read_records(folder / "flashinfer-run3.jsonl.gz")  # what `kernelwatch import` reads
    assert [r.case_id for r in read] == [record["case_id"], "other"]
    first = (folder / "flashinfer-run3.jsonl.gz").read_bytes()
    service.write_dataset_files(records, planned, folder)
    assert (folder / "flashinfer-run3.jsonl.gz").read_bytes() == first  # no timestamp inside
    rows = tomllib.loads(service.dataset_rows(records, planned, "c").replace("<date>", "d"))
    assert [r["file"] for r in rows["run"]] == ["service-h200-d/flashinfer-run3.jsonl.gz"]


@pytest.mark.slow
@pytest.mark.crowd
@pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("redis-server") is None,
    reason="needs bubblewrap and a Redis server here",
)
def test_the_device_command_runs_sdpa_through_a_sandboxed_worker_on_the_cpu(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "benchmarks.gpu", "--cpu", "--out", str(out), "--deadline-s",
            "300", "service", "--library", "sdpa", "--work", str(tmp_path / "w")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KW_")}
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "service.json").read_text())
    assert doc["status"] == "ok", doc.get("error")
    result = doc["result"]
    assert result["settings"]["KW_SANDBOX"] == "bwrap"
    assert result["settings"]["KW_BROKER_URL"].startswith("redis://127.0.0.1:")
    inside = result["probe"]["sandbox"]["inside"]
    assert result["probe"]["sandbox"]["check"] == "ok" and inside["uid"] != 0
    assert inside["kernelwatch"].endswith("kernels/__init__.py") and inside["cuda"] is False
    (plan,) = result["plans"]
    (run,) = plan["dumped"]
    assert plan["library"] == "sdpa-math" and run["status"] == "succeeded"
    assert {c["status"] for c in run["cases"]} <= {"pass", "skip"}
    assert any(c["status"] == "pass" for c in run["cases"])
    records = [json.loads(x) for x in (out / "service-records.jsonl").read_text().splitlines()]
    assert records and all(r["run"] == run["id"] for r in records)
    assert all(r["telemetry"] is None for r in records)  # CPU timings: no GPU telemetry
    assert "sandbox probe: ok" in done.stdout and "sdpa-math: rc 0" in done.stdout
    # through the sandboxed worker too, each case that ran says where its seconds went
    ran = [r for r in records if r["status"] != "skip"]
    assert ran and all(r["cost"]["wall_s"] > 0 for r in ran)
    assert run["case_costs"]["cases"] == len(ran)
    assert "     median a case: wall " in done.stdout
    # the run's records travel in the logs' archive as the dataset commits them
    name = f"logs/service/dataset/sdpa-math-run{run['id']}.jsonl.gz"
    assert result["dataset_files"] == [name.rsplit("/", 1)[1]]
    with tarfile.open(out / "logs.tgz") as tar:
        tar.extract(name, tmp_path / "back", filter="data")
    back = read_records(tmp_path / "back" / name)
    assert [r.case_id for r in back] == [r["case_id"] for r in records]


def test_a_run_cut_by_the_deadline_leaves_its_suite_logs_tail(tmp_path: Path) -> None:
    """FlashInfer 0.5.3 in the sandbox (H200, 2026-12-04): 287 s, no case, no log back."""
    data = tmp_path / "data"
    suite = data / "work" / "run-1" / "suite"
    suite.mkdir(parents=True)
    (suite / "runner-0.log").write_text("x" * 1000 + "\ncompiling batch_decode\n")
    (data / "work" / "run-2").mkdir()  # queued: no suite folder yet
    planted = data / "work" / "run-3" / "suite"
    planted.mkdir(parents=True)
    (planted / "runner-0.log").symlink_to(tmp_path / "host-secret")  # the code's swap
    (tmp_path / "host-secret").write_text("token\n")
    found = service.live_suite_logs(data, tmp_path / "live", limit=100)
    assert found == {
        "run-1-runner-0.log": "compiling batch_decode",
        "run-3-runner-0.log": "(empty or unreadable)",
    }
    assert "token" not in (tmp_path / "live" / "run-3-runner-0.log").read_text()
    kept = (tmp_path / "live" / "run-1-runner-0.log").read_bytes()
    assert len(kept) == 100 and kept.endswith(b"compiling batch_decode\n")
    lines = service.table({"live_logs": found})
    assert "still running at the end: run-1-runner-0.log: compiling batch_decode" in lines
    assert service.live_suite_logs(tmp_path / "nothing", tmp_path / "live2") == {}


def test_an_unpaired_runs_line_is_followed_by_where_its_case_seconds_went() -> None:
    """The H100's FlashInfer 0.6.0 run: 152 cases, 300 s, 62 s of timings. Each record's
    ``cost`` (``runner.run_case``) says where the rest went; the table prints its medians."""
    from kernelwatch.kernels.runner import CHECK_PARTS

    def rec(run: int, status: str, wall: float, call: float, timing: float = 0.0) -> dict:
        cost = dict.fromkeys(CHECK_PARTS, 0.01) | {"check_call_s": call, "wall_s": wall}
        return {
            "run": run,
            "status": status,
            "cost": cost | ({"timing_s": timing} if timing else {}),
        }

    records = [
        rec(4, "pass", 2.0, 1.2, 0.3),
        rec(4, "pass", 1.8, 1.0, 0.4),
        rec(4, "fail", 1.5, 1.4),  # wrong: never timed, its timing counts as 0
        rec(4, "skip", 0.01, 0.0),  # not run: left out
        {"run": 4, "status": "error"},  # the worker's crash record: nothing to count
        rec(5, "pass", 9.0, 8.0, 0.5),  # another run's
        {"run": 6, "status": "pass", "paired": {"verdict": "unchanged", "gpu_s": 3.0}},
    ]
    costs = service.case_costs(records, 4)
    assert costs["cases"] == 3 and costs["wall_s"] == pytest.approx(5.3)
    median = costs["median"]
    assert list(median) == ["wall_s", *CHECK_PARTS, "timing_s"]
    assert median["wall_s"] == 1.8 and median["check_call_s"] == 1.2
    assert median["timing_s"] == pytest.approx(0.3) and median["check_load_s"] == 0.01
    assert service.case_costs(records, 6) == {}  # paired: its own price, no runner cost
    run = {"id": 4, "commit": "version:flashinfer-python==0.6.0", "status": "succeeded",
           "verdict": "pass", "cases": [{"status": "pass"}], "case_costs": costs}  # fmt: skip
    lines = service.table({"plans": [{"library": "flashinfer", "rc": 0, "dumped": [run]}]})
    at = next(i for i, x in enumerate(lines) if x.startswith("  #4 flashinfer-python==0.6.0"))
    assert lines[at + 1] == (
        "     median a case: wall 1.80 s; check_load 0.01  check_inputs 0.01  check_call 1.20  "
        "check_reference 0.01  check_compare 0.01  timing 0.30 (3 cases, 5 s in all)"
    )
    del run["case_costs"]  # a paired run, or records older than cost: no such line
    assert not any(
        "median a case" in x for x in service.table({"plans": [{"library": "x", "dumped": [run]}]})
    )
    # every environment the run used, from the whole stored log (the dump's summary)
    run["environments"] = [
        {"commit": "c224b361a9ca", "seconds": 120.0, "profile": "trimmed"},
        {"commit": "2b90c90e929b", "seconds": None, "profile": "trimmed"},
    ]
    lines = service.table({"plans": [{"library": "fa3", "rc": 0, "dumped": [run]}]})
    said = "c224b361a9ca built in 120 s, 2b90c90e929b cached (trimmed profile)"
    assert f"     environments: {said}" in lines


def test_run_arguments_parse() -> None:
    p = argparse.ArgumentParser()
    service.add_arguments(p)
    args = p.parse_args(["--library", "liger", "--library", "sdpa", "--sandbox", "none"])
    assert args.library == ["liger", "sdpa"] and args.sandbox == "none"


def test_the_suite_timeout_is_the_calls_to_set(tmp_path: Path) -> None:
    """FlashInfer 0.6.0's decode suite ran 152 of its 204 cases in the default 300 s on
    an H100 (docs/measurement.md section 21): a call may give the worker's suites more."""
    p = argparse.ArgumentParser()
    service.add_arguments(p)
    default = service.service_env(tmp_path, p.parse_args([]), "", {}, cpu=False)
    assert default["KW_SUITE_TIMEOUT_S"] == "300"
    longer = p.parse_args(["--library", "flashinfer", "--suite-timeout-s", "540"])
    assert service.service_env(tmp_path, longer, "", {}, cpu=False)["KW_SUITE_TIMEOUT_S"] == "540"
    assert (
        service.service_env(tmp_path, p.parse_args([]), "", {}, cpu=True)["KW_SUITE_TIMEOUT_S"]
        == "600"
    )


def test_the_suite_timeout_ends_before_the_calls_deadline(tmp_path: Path) -> None:
    """A suite the call's deadline kills stores nothing (an H100, 2026-12-05: 540 s asked
    in a 585 s call, 140 cases started, none recorded): the worker's timeout is cut to
    what the deadline leaves, and never below 30 s."""
    p = argparse.ArgumentParser()
    service.add_arguments(p)
    args = p.parse_args(["--library", "flashinfer", "--suite-timeout-s", "540"])
    env = service.service_env(tmp_path, args, "", {}, cpu=False, cap_s=412.7)
    assert env["KW_SUITE_TIMEOUT_S"] == "412"
    assert service.suite_timeout_s(args, False, 1000.0) == 540
    assert service.suite_timeout_s(args, False, 5.0) == 30
    assert service.suite_timeout_s(p.parse_args([]), True, 250.0) == 250


def test_cute_dsl_commits_differ_in_the_recipes_tile_only(tmp_path: Path) -> None:
    """Two tile configurations are two commits; a paired range compares them."""
    from kernelwatch.jobs.library.mirror import git
    from kernelwatch.jobs.library.repoconfig import parse
    from kernelwatch.kernels.adapters import cutlass_dsl

    examples = tmp_path / "src" / service.DSL_EXAMPLES[0]
    (examples / "cutedsl_examples" / "hopper").mkdir(parents=True)
    (examples / "cutedsl_examples" / "hopper" / "dense_gemm.py").write_text("# the example\n")
    (examples / "kw-source.json").write_text('{"ref": "v4.3.5"}')
    assert service.dsl_examples(tmp_path / "src") == examples
    assert service.carried("cutlass-dsl", tmp_path / "src")
    tiles = ["64x64", "128x256", "64x64/1x2", service.DEFAULT_TILE]
    repo, shas = service.dsl_repo(tmp_path / "work", examples, tiles, "gemm")
    assert len(shas) == 4
    changed = git("diff", "--name-only", shas[0], shas[1], cwd=repo).split()
    assert changed == [".kernelwatch.toml"]
    wanted = [
        {cutlass_dsl.TILE_ENV: "64x64"},
        {cutlass_dsl.TILE_ENV: "128x256"},
        {cutlass_dsl.TILE_ENV: "64x64", cutlass_dsl.CLUSTER_ENV: "1x2"},
        {},  # ``default``: the adapter picks the tile per shape
    ]
    for sha, env in zip(shas, wanted, strict=True):
        cfg = parse(git("show", f"{sha}:.kernelwatch.toml", cwd=repo))
        assert cfg.install is not None and cfg.library is not None
        assert cfg.install.env == env
        assert cfg.library.module == "kernelwatch.kernels.adapters.cutlass_dsl"
    assert (repo / "cutedsl_examples" / "hopper" / "dense_gemm.py").is_file()
    assert service._commits(shas) == ["--range", f"{shas[0]}..{shas[3]}", "--paired"]
    for bad in ("64x64/1x2/2", '64x64" }\n[evil]', "x64", "64x64/"):
        with pytest.raises(ValueError, match="MxN or MxN/AxB"):
            service.dsl_tile_env(bad)
    assert service._commits(shas[:1]) == ["--commit", shas[0]]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs a Redis server here")
def test_the_calls_redis_is_its_own_never_a_stray_on_the_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2026-12-03: on a fixed port a Redis left by a killed call answered PING in place of
    # the new one (which could not bind); the run went there and waited, queued, 208 s
    ctx = host.Context(out=tmp_path, logs=tmp_path, deadline=float("inf"), cpu=True)
    proc, port, why = service.start_redis(ctx, tmp_path / "a")
    assert proc is not None, why
    try:
        assert service.redis_pid(port) == proc.pid and why.endswith(f":{port}")
        monkeypatch.setattr(host, "free_port", lambda: port)  # the port already taken
        stray, _, refused = service.start_redis(ctx, tmp_path / "b")
        assert stray is None
        assert refused.startswith("redis-server exited") or f"pid {proc.pid}" in refused
    finally:
        proc.kill()
        proc.wait()
    assert service.redis_pid(host.free_port()) is None


def test_the_next_run_is_started_once_the_one_before_has_planned(tmp_path: Path) -> None:
    # a `kernelwatch run` that takes a while to plan (FlashInfer's version run, H200
    # 2026-12-04) must not let the next submission plan first: the wait ends once its
    # runs are in the database and their number has settled, long before it exits
    db = tmp_path / "kw.db"
    url = f"sqlite:///{db}"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY)")
    assert service.run_count(url) == 0
    planner = (
        "import sqlite3, sys, time\n"
        "time.sleep(1.0)\n"
        "for _ in range(3):\n"
        "    with sqlite3.connect(sys.argv[1]) as con:\n"
        "        con.execute('INSERT INTO runs DEFAULT VALUES')\n"
        "    time.sleep(0.3)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", planner, str(db)])
    try:
        waited = service.wait_planned(proc, url, 0, limit_s=30, settle_s=1.0)
        assert service.run_count(url) == 3
        assert 1.5 < waited < 20 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert service.run_count(missing) == -1
    # no database to read: the next run is started at once, not after limit_s
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert service.wait_planned(idle, missing, -1, limit_s=30) == 0.0
    finally:
        idle.kill()
        idle.wait()
