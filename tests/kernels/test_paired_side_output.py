"""What a kernel writes in paired mode stays out of the sides' protocol.

A side answers the coordinator in JSON lines on its stdout; the kernel under test runs
in the same process. A correct softmax with a ``print`` read as a verdict error
("runner exit code 1", a JSONDecodeError in ``Side.receive``), and a kernel printing
100 MB as the same crash where the unpaired runner says "log over the 64 MB cap". The
side now keeps the protocol on a private copy of its stdout and sends fd 1 to stderr:
these tests run real side processes (``bench-paired`` between two library trees, and
the worker's ``run_suite`` for the log cap) with kernels that write to stdout from
Python and at the file-descriptor level, that flood it, and that crash.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kernelwatch.kernels.paired import Side, SideDied
from kernelwatch.kernels.paired_suite import main as bench_paired
from kernelwatch.worker.sandbox import Sandbox, clean_env
from kernelwatch.worker.suite_process import SuiteRequest, run_suite
from tests.helpers import MATMUL_GOOD

# the right matmul, saying so on stdout at every call: Python's print, the file
# descriptor itself (as a C extension's printf does), and both without a newline
CHATTY = {
    "print": MATMUL_GOOD
    + (
        "\n\ndef matmul(a, b, out, _right=matmul):\n"
        "    print('matmul called', tuple(a.shape), end='')\n"
        "    _right(a, b, out)\n"
    ),
    "fd1": MATMUL_GOOD
    + (
        "\nimport os\n\n\ndef matmul(a, b, out, _right=matmul):\n"
        "    os.write(1, b'{\"ok\": true} not a reply\\nnor this')\n"
        "    _right(a, b, out)\n"
    ),
    # reads its stdin, as a tool started without stdin= would: the side's commands
    # came on that stdin and were swallowed; now it reads /dev/null
    "stdin": MATMUL_GOOD
    + (
        "\nimport sys\n\n\ndef matmul(a, b, out, _right=matmul):\n"
        "    print('matmul read', len(sys.stdin.read()), 'bytes', file=sys.stderr)\n"
        "    _right(a, b, out)\n"
    ),
}

# 100 MB on fd 1 at the first call, the reproduction of the report
FLOOD = MATMUL_GOOD + (
    "\nimport os\n\n\ndef matmul(a, b, out, _right=matmul):\n"
    "    line = b'x' * 1023 + b'\\n'\n"
    "    for _ in range(100 * 1024):\n"
    "        os.write(1, line)\n"
    "    _right(a, b, out)\n"
)

SEGFAULT = """
import ctypes


def matmul(a, b, out):
    ctypes.string_at(0)  # the process dies mid-case
"""


def _lib(root: Path, name: str, code: str) -> str:
    tree = root / name
    (tree / "outlib").mkdir(parents=True)
    (tree / "outlib" / "__init__.py").write_text(code)
    return str(tree)


def _argv(tmp_path: Path, baseline: str, candidate: str, out: Path) -> list[str]:
    root = tmp_path / "trees"
    return [
        "--baseline-path", _lib(root, "baseline", baseline),
        "--candidate-path", _lib(root, "candidate", candidate),
        "--suite", "basic", "--impl", "outlib", "--kernel", "matmul",
        # CPU times between two processes on a shared machine differ by up to 1.5x for
        # identical code (test_paired_accuracy.py): what is under test is that the case
        # is judged at all, not its timing verdict
        "--min-effect", "4.0", "--budget", "0.3", "--retries", "0",
        "--case-timeout", "120", "--out", str(out),
    ]  # fmt: skip


def _paired(tmp_path: Path, baseline: str, candidate: str) -> dict[str, Any]:
    out = tmp_path / "paired.jsonl"
    assert bench_paired(_argv(tmp_path, baseline, candidate, out)) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert isinstance(record, dict)
    return record


@pytest.mark.parametrize("how", sorted(CHATTY))
def test_a_kernel_writing_to_stdout_is_judged_as_usual(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], how: str
) -> None:
    record = _paired(tmp_path, CHATTY[how], CHATTY[how])  # A/A: the same chatty kernel
    paired = record["paired"]
    assert record["status"] == "pass", record["error"]
    assert paired["verdict"] in ("unchanged", "inconclusive"), paired
    assert paired["accuracy_verdict"] == "unchanged"
    assert record["timing"] is not None and paired["ratio"] > 0
    # what the kernel wrote is not lost: it is in the sides' log (stderr)
    said = {"print": "matmul called (96, 96)", "fd1": "not a reply",
            "stdin": "matmul read 0 bytes"}[how]  # fmt: skip
    assert said in capfd.readouterr().err


def test_the_coordinator_lists_its_cases_beside_the_case_file(tmp_path: Path) -> None:
    """Paired mode's plan, as the runner's (``runner.note_plan``): what the worker names
    as not reached when the suite timeout ends a paired run."""
    out, noted = tmp_path / "paired.jsonl", tmp_path / "current-case"
    argv = [*_argv(tmp_path, MATMUL_GOOD, MATMUL_GOOD, out), "--case-file", str(noted)]
    assert bench_paired(argv) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    plan = [json.loads(line) for line in Path(f"{noted}.plan").read_text().splitlines()]
    assert [(r["case_id"], r["kernel"], r["params"]) for r in plan] == [
        (r["case_id"], r["kernel"], r["params"]) for r in records
    ]


def test_a_segfaulting_candidate_names_the_candidate_and_the_signal(tmp_path: Path) -> None:
    record = _paired(tmp_path, MATMUL_GOOD, SEGFAULT)
    assert record["status"] == "error" and record["paired"]["verdict"] == "error"
    error = record["error"] or ""
    assert "candidate" in error and "SIGSEGV" in error, error
    assert "side B died" not in error


def test_a_hung_candidate_times_out_in_the_runners_words(tmp_path: Path) -> None:
    hang = "import time\n\ndef matmul(a, b, out):\n    time.sleep(600)\n"
    out = tmp_path / "paired.jsonl"
    argv = _argv(tmp_path, MATMUL_GOOD, hang, out)
    argv[argv.index("--case-timeout") + 1] = "5"
    assert bench_paired(argv) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    error = record["error"] or ""
    assert record["status"] == "error" and "candidate" in error, error
    assert "timed out after 5s" in error and "killed" in error, error


def test_a_line_that_is_not_a_reply_is_quoted_not_a_decode_traceback(tmp_path: Path) -> None:
    # a side whose "interpreter" answers with a kernel's chatter instead of the protocol
    chatty = tmp_path / "chatty-python"
    chatty.write_text("#!/bin/sh\necho 'softmax called with a 4096 x 4096 input'\nexec sleep 60\n")
    chatty.chmod(0o755)
    side = Side("B", python=str(chatty))
    try:
        with pytest.raises(SideDied) as caught:
            side.ask({"cmd": "hello"}, timeout_s=30)
    finally:
        side.close(grace_s=1.0)
    text = str(caught.value)
    assert "candidate" in text and "softmax called with a 4096 x 4096 input" in text, text
    assert "JSONDecodeError" not in text
    assert not side.alive()  # out of step with its protocol: killed, to be replaced


def test_a_flood_on_a_sides_stdout_ends_at_the_log_cap(tmp_path: Path) -> None:
    # the worker's path: the coordinator under the capped log (worker/process.py), whose
    # pump kills the tree at the cap and blames the case that was printing
    cap = 8 * 10**6
    workdir = tmp_path / "run" / "suite"
    workdir.mkdir(parents=True)
    out = workdir / "ignored.jsonl"
    argv = _argv(tmp_path, MATMUL_GOOD, FLOOD, out)
    extra = argv[: argv.index("--out")]
    for flag in ("--suite", "--impl"):  # the request names these itself
        i = extra.index(flag)
        del extra[i : i + 2]
    box = Sandbox.from_env({"KW_SANDBOX": "none"})
    req = SuiteRequest(
        python=sys.executable,
        pythonpath=(),
        env=clean_env(),
        workdir=workdir,
        suites=["basic"],
        impl="outlib",
        backend="outlib",
        library={"name": "outlib"},
        case_timeout_s=120,
        suite_timeout_s=240,
        extra_args=extra,
        module="kernelwatch.kernels.paired_suite",
        sandbox=Sandbox(**{**box.__dict__, "log_cap_bytes": cap}),
    )
    t0 = time.monotonic()
    outcome = run_suite(req)
    took = time.monotonic() - t0
    (record,) = outcome.records
    assert record.status == "error" and record.kernel == "matmul"
    assert f"log over the {cap / 1e6:g} MB cap" in (record.error or ""), record.error
    assert "exit code 1" not in (record.error or "")
    assert took < 120  # killed at the cap, not at a case or suite timeout
    log = workdir / "runner-0.log"
    assert cap <= log.stat().st_size < cap + 300_000
