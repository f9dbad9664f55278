"""The GPU benchmark driver (``python -m benchmarks.gpu``) in its CPU mode.

One chained call, as a device call would make it (prelude + gputests + paired +
suite-aa), on the CPU with tiny sizes: every sub-command writes its JSON, the
logs travel as one archive, the tables come last. The numbers prove the
plumbing only; what is checked is what a reader of the JSON relies on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gpu import cli, gputests, suite_aa
from kernelwatch.kernels.verdict import BLOCKING

ROOT = Path(__file__).resolve().parents[2]


def _driver(out: Path, *argv: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--cpu", "--out", str(out), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def chained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("gpu-driver")
    t0 = time.monotonic()
    done = _driver(
        out,
        "--deadline-s", "300",
        "prelude",
        "+", "gputests", "--file", "tests/kernels/test_gpu_kernels.py",
        "+", "paired", "--trials", "2", "--condition", "+2%", "--condition", "A/A",
        "+", "host-gap", "--burners", "1", "--rounds", "1", "--budget-s", "0.1",
        "+", "suite-aa", "--suite", "gemm", "--", "--budget", "0.2", "--retries", "0",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout, time.monotonic() - t0


def _doc(out: Path, name: str) -> dict[str, Any]:
    doc = json.loads((out / f"{name}.json").read_text())
    assert doc["command"] == name and doc["status"] == "ok", doc.get("error")
    assert doc["cpu"] is True and doc["machine"]["device"] == "cpu"
    return doc


def test_every_sub_command_writes_its_json_and_the_logs_travel_as_one_file(
    chained: tuple[Path, str, float],
) -> None:
    out, stdout, wall = chained
    files = sorted(p.name for p in out.iterdir())
    # a device call returns at most 8 files: one JSON per sub-command and one archive
    assert all(p.is_file() for p in out.iterdir())
    assert files == [
        "gputests.json", "host-gap.json", "logs.tgz", "paired.json", "prelude.json",
        "suite-aa.json",
    ]  # fmt: skip
    with tarfile.open(out / "logs.tgz") as tar:
        names = tar.getnames()
    assert "logs/gputests/gputests.xml" in names
    assert any(n.startswith("logs/suite-aa/gemm-torch-pass1.jsonl") for n in names)
    # the short tables come last, in the order of the chain
    tail = stdout[stdout.index("== prelude") :]
    assert tail.index("== gputests") < tail.index("== paired") < tail.index("== host-gap")
    assert tail.index("== host-gap") < tail.index("== suite-aa")
    assert tail.rstrip().splitlines()[-1].startswith("5 sub-command(s) in")
    assert sum(_doc(out, n)["seconds"] for n in ("prelude", "paired", "suite-aa")) < wall


def test_a_second_invocation_into_the_same_folder_keeps_the_firsts_files(
    tmp_path: Path,
) -> None:
    """One device command that runs the driver twice (a prelude, then ``service``) lost the
    first's ``logs.tgz`` to the second on the H200 (2026-12-04): each now names its own."""
    for _ in range(2):
        assert _driver(tmp_path, "prelude", timeout=120).returncode == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["logs-run2.tgz", "logs.tgz", "prelude-run2.json", "prelude.json"]
    assert _doc(tmp_path, "prelude")["result"] != {}
    assert json.loads((tmp_path / "prelude-run2.json").read_text())["command"] == "prelude"
    for archive in ("logs.tgz", "logs-run2.tgz"):
        with tarfile.open(tmp_path / archive) as tar:
            assert any(n.startswith("logs/prelude") for n in tar.getnames()), archive


def test_prelude_records_the_machine_and_that_there_is_no_gpu(
    chained: tuple[Path, str, float],
) -> None:
    res = _doc(chained[0], "prelude")["result"]
    assert res["kernelwatch"]["how"] == "installed" and res["kernelwatch_imports"] is True
    assert "error" in res["nvidia_smi"]  # no driver here; on the H200 one row per GPU
    assert set(res["carried"]) == {".whl", ".svc", ".src"}


def test_gputests_skip_without_a_gpu_and_are_counted_from_junit(
    chained: tuple[Path, str, float],
) -> None:
    res = _doc(chained[0], "gputests")["result"]
    assert res["rc"] == 0 and not res["timed_out"]
    assert res["counts"].get("skipped", 0) == len(res["cases"]) > 0
    assert all(c["message"].startswith("needs a CUDA GPU") for c in res["cases"])


class _WheelsFirst(Exception):
    """Raised by the fake ``service_wheels``: the set-up stops there, importing nothing."""


def test_gputests_sandbox_puts_the_service_wheels_on_the_path_before_importing_the_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's sandbox module imports SQLAlchemy and pydantic, which a bare GPU
    image has only once the carried wheels are on the path (H100, 2026-12-06: ``No
    module named 'sqlalchemy'`` before any test ran). The order is the fix: with the
    module not yet imported, ``service_wheels`` must run while it still is not."""
    seen: list[bool] = []

    def wheels(ctx: object) -> str:
        seen.append("kernelwatch.worker.sandbox" in sys.modules)
        raise _WheelsFirst

    monkeypatch.delitem(sys.modules, "kernelwatch.worker.sandbox", raising=False)
    monkeypatch.setattr(gputests.host, "service_wheels", wheels)
    with pytest.raises(_WheelsFirst):
        gputests._sandbox_setup(None, "bwrap")  # type: ignore[arg-type]
    assert seen == [False]
    assert "kernelwatch.worker.sandbox" not in sys.modules


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_gputests_run_inside_the_workers_sandbox(tmp_path: Path) -> None:
    """``--sandbox bwrap``: pytest runs confined as a suite does (the worker's own
    ``Sandbox.wrap``), its JUnit XML written to the only folder the box may write and
    carried home in the logs archive."""
    done = _driver(tmp_path, "--deadline-s", "120", "gputests", "--sandbox", "bwrap",
                   "--file", "tests/kernels/test_gpu_kernels.py")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = _doc(tmp_path, "gputests")
    res = doc["result"]
    assert res["sandbox"]["mode"] == "bwrap" and "error" not in res["sandbox"]
    # the sandbox module needs the service's wheels, which a bare GPU image lacks
    assert "service_wheels" in res["sandbox"]
    (pytest_step,) = [s for s in doc["steps"] if s["name"] == "pytest"]
    assert Path(pytest_step["argv"][0]).name == "bwrap" and pytest_step["rc"] == 0
    # every GPU test ran and skipped there: no GPU on this machine
    assert res["counts"] == {"skipped": len(res["cases"])} and len(res["cases"]) >= 5
    assert all(c["message"] == "needs a CUDA GPU" for c in res["cases"])
    with tarfile.open(tmp_path / "logs.tgz") as tar:
        assert "logs/gputests/gputests.xml" in tar.getnames()
    assert "(inside bwrap, uid" in done.stdout


def test_a_step_that_runs_gputests_gets_every_default_and_no_unknown_option() -> None:
    """``cutlass-dsl`` runs ``gputests`` as a step; a Namespace written out by hand there
    lacked ``--sandbox`` once it was added (an AttributeError in CI)."""
    ns = gputests.arguments(file=["tests/kernels/test_gpu_cutlass_dsl.py"], keyword="cutlass")
    assert ns.sandbox == "none" and ns.flashinfer is None and ns.test_timeout == 150
    assert ns.file == ["tests/kernels/test_gpu_cutlass_dsl.py"]
    with pytest.raises(TypeError, match="no option"):
        gputests.arguments(sandbx="bwrap")


def test_paired_reports_each_condition_with_the_injected_size(
    chained: tuple[Path, str, float],
) -> None:
    res = _doc(chained[0], "paired")["result"]
    assert res["benchcases"] == "benchmarks.benchcases"  # what the side processes import
    rows = {r["condition"]: r for r in res["rows"]}
    assert list(rows) == ["+2%", "A/A"]  # measured in the order asked: +2 % set up first
    assert all(r["trials"] == 2 and len(r["ratios"]) == 2 for r in rows.values())
    assert rows["A/A"]["nominal_pct"] == 0.0 and rows["A/A"]["extra"] == {}
    assert rows["+2%"]["extra"] == {"extra_rows": 3} and rows["+2%"]["nominal_pct"] > 2
    # three extra rows of a second matmul per call: slower than nothing extra
    assert rows["+2%"]["mean_ratio"] > rows["A/A"]["mean_ratio"]
    assert all(r["mean_wall_s"] >= r["mean_blocks_s"] > 0 for r in rows.values())


def test_suite_aa_counts_verdicts_and_wall_seconds_per_case(
    chained: tuple[Path, str, float],
) -> None:
    doc = _doc(chained[0], "suite-aa")
    res = doc["result"]
    (suite,) = res["suites"]
    assert suite["suite"] == "gemm" and suite["rc"] == 0 and not suite["timed_out"]
    assert res["size"] == "smoke" and res["bench_args"] == ["--budget", "0.2", "--retries", "0"]
    cases = suite["cases"]
    assert len(cases) == 2 and sum(suite["verdicts"].values()) == 2
    assert {c["kernel"] for c in cases} == {"gemm"}
    # wall per case from when each record appeared: set-up included, within the suite's wall
    assert all(c["wall_s"] > 0 for c in cases)
    assert sum(c["wall_s"] for c in cases) == pytest.approx(suite["cases_wall_s"])
    # the suite's wall is the GPU's time on it, its own pool's start and end included
    assert suite["cases_wall_s"] <= suite["wall_s"]
    assert suite["unrecorded_s"] == pytest.approx(suite["wall_s"] - suite["cases_wall_s"], abs=0.01)
    assert all(c["wall_s"] >= (c["blocks_s"] or 0) for c in cases)
    assert suite["blocked"] == any(c["verdict"] in {str(v) for v in BLOCKING} for c in cases)
    assert res["blocked_passes"] == int(suite["blocked"])
    # each case's price and where it went, from its record (PairedSection.gpu_s / cost)
    assert all(c["cost"]["wall_s"] == pytest.approx(c["wall_s"], abs=0.01) for c in cases)
    assert set(suite["cost_median"]) == set(suite_aa.cost_keys())
    # the check's parts, measured in its side, lie within the check (runner.CHECK_PARTS)
    assert all(0 < c["cost"]["check_reference_s"] <= c["cost"]["check_s"] for c in cases)


def test_host_gap_times_each_case_with_the_guard_off_and_on_idle_and_loaded(
    chained: tuple[Path, str, float],
) -> None:
    res = _doc(chained[0], "host-gap")["result"]
    assert res["burners"] == 1
    (target,) = res["targets"]
    assert target["rc"] == 0 and not target["timed_out"]
    seen = {(row["load"], row["guard"]) for row in target["rows"]}
    assert seen == {(0, False), (0, True), (1, False), (1, True)}
    assert all(row["median_s"] > 0 and row["host_launch_s"] > 0 for row in target["rows"])
    assert "off/on" in chained[1]  # the table printed at the end


def test_a_deadline_already_past_starts_no_trial(tmp_path: Path) -> None:
    done = _driver(tmp_path, "--deadline-s", "1", "paired", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads((tmp_path / "paired.json").read_text())
    assert doc["status"] == "ok" and doc["deadline_s"] == 1.0
    assert doc["result"]["rows"] == [] and doc["seconds"] < 30
    assert "not started, deadline reached" in done.stdout + done.stderr


def test_chains_split_on_plus_and_sub_command_deadlines_are_their_own() -> None:
    assert cli.split_chain(["a", "--x", "+", "b", "+", "+", "c"]) == [["a", "--x"], ["b"], ["c"]]
    p = cli.parser()
    first = p.parse_args(["--deadline-s", "500", "--cpu", "paired", "--deadline-s", "200"])
    assert first.deadline_s == 500 and first.own_deadline_s == 200 and first.cpu
    later = p.parse_args(["suite-aa", "--passes", "3", "--", "--pairs", "8"])
    assert later.own_deadline_s is None and later.bench_args == ["--pairs", "8"]


@pytest.mark.parametrize("name", sorted(cli.commands()))
def test_every_sub_command_explains_itself(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.parser().parse_args([name, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert f"python -m benchmarks.gpu {name}" in text and "--deadline-s S" in text


def test_junit_parsing_names_failures_and_their_messages(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="t.m" name="ok" time="0.5"/>'
        '<testcase classname="t.m" name="bad" time="1.5"><failure message="boom"/></testcase>'
        '<testcase classname="t.m" name="off" time="0"><skipped message="no GPU"/></testcase>'
        "</testsuite></testsuites>"
    )
    res = gputests.parse_junit(xml)
    assert res["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert res["cases"][1] == {"test": "t.m::bad", "outcome": "failed", "seconds": 1.5,
                               "message": "boom"}  # fmt: skip
    assert "error" in gputests.parse_junit(tmp_path / "missing.xml")


def test_the_parser_builds_without_kernelwatch_as_on_a_bare_gpu_host() -> None:
    """On a fresh H200 kernelwatch is not installed: the driver links it (``prelude``,
    ``host.ensure_kernelwatch``) only once it runs, so building its parser must not import
    kernelwatch. A sub-command that imported it at module level stopped every call before
    any sub-command ran (the CuTe DSL table did, 2026-12-02)."""
    script = (
        "import sys\n"
        "sys.modules['kernelwatch'] = None  # not installed, not yet linked\n"
        "from benchmarks.gpu import cli\n"
        "cli.parser().parse_args(['prelude'])\n"
        "print(' '.join(sorted(cli.commands())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"prelude", "suite-aa", "cutlass-dsl", "prepare-cutlass-dsl"} <= set(done.stdout.split())


def test_a_prs_price_counts_one_pool_start_and_keeps_mid_suite_restarts() -> None:
    from benchmarks.gpu.suite_aa import pr_price

    def case(wall: float, start: float = 0.0, status: str = "pass") -> dict[str, object]:
        return {"status": status, "wall_s": wall, "cost": {"process_start_s": start}}

    suites = [
        # the pool comes up in the first case (10 s of its 12); a restart later stays in
        {"cases": [case(12.0, 10.0), case(2.0), case(9.0, 6.0), case(0.2, status="skip")]},
        {"cases": [case(15.0, 14.0), case(3.0)]},
    ]
    price = pr_price(suites)
    assert price is not None
    assert price["mean_s"] == pytest.approx((2 + 2 + 9 + 1 + 3) / 5)
    assert price["pool_start_s"] == pytest.approx(12.0)  # the median of 10 and 14
    assert price["minutes"] == pytest.approx((200 * 17 / 5 + 12) / 60)
    assert pr_price([{"cases": [case(1.0, status="skip")]}]) is None


def test_a_pool_start_is_its_wait_and_its_parts_are_not_counted_again() -> None:
    from benchmarks.gpu.suite_aa import pr_price

    # H200 records carry the wait and where it went (2026-12-02, pass 3's gemm suite:
    # 6.07 s waited, of which 4.89 s process start and 1.40 s CUDA context)
    cost = {"start_wait_s": 6.0, "process_start_s": 4.9, "cuda_context_s": 1.1}
    first = {"status": "pass", "wall_s": 9.0, "cost": cost}
    price = pr_price([{"cases": [first, {"status": "pass", "wall_s": 2.0, "cost": {}}]}])
    assert price is not None
    assert price["pool_start_s"] == pytest.approx(6.0)
    assert price["mean_s"] == pytest.approx((3.0 + 2.0) / 2)


def test_the_carried_dsl_examples_join_the_tests_path_unless_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that carried ``.src`` without ``--with-path`` ran the DSL's 8 GPU tests
    as skips (H100, 2026-12-06): the examples are found where ``service`` finds them."""
    from benchmarks.gpu import host

    monkeypatch.setattr(host, "ROOT", tmp_path)  # no checkout's own .dsl/ in the way
    src = tmp_path / ".src"
    assert gputests.carried_examples(src, []) == []  # nothing carried: nothing added
    examples = src / "cutedsl"
    (examples / "cutedsl_examples" / "hopper").mkdir(parents=True)
    (examples / "kw-source.json").write_text('{"ref": "v4.3.5"}')
    assert gputests.carried_examples(src, []) == [str(examples.resolve())]
    assert gputests.carried_examples(src, [str(examples)]) == []  # already named
