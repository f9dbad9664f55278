"""The scripted first hour of a new user (issue 18, "Done when"), on this machine as it is.

From a clean data dir: a library of one's own with an unchanged, a slow and a wrong
commit; ``kernelwatch run --range --wait`` with a real worker; every dashboard page
opened in headless Chromium (one screenshot per page under the test's tmp dir, checked
non-blank from its pixels); ``kernelwatch gate`` per commit. The CPU rules of issue 18
must make it hold on a loaded 2-core machine: threads pinned, CPU timings plumbing only,
so the unchanged commit passes, the slow one passes labelled "plumbing only", and the
wrong one fails. ``KW_CPU_TIMING_GATES`` is left unset, as a new user has it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import run_cli
from tests.dashboard import browser
from tests.helpers import PYPROJECT, git, make_repo

pytestmark = [
    pytest.mark.slow,
    # the "loaded 2-core machine" is the rest of the suite's worker processes,
    # not a second test process drawing pages beside it (make test: serial part)
    pytest.mark.serial,
    pytest.mark.skipif(browser.CHROMIUM is None, reason="chromium not installed"),
]

GOOD = "from kernelwatch.kernels.triton_kernels import softmax, rmsnorm  # noqa: F401\n"
SLOW = (
    "from kernelwatch.kernels.triton_kernels import rmsnorm  # noqa: F401\n"
    "from kernelwatch.kernels.triton_kernels import softmax as _fast\n\n\n"
    "def softmax(x, out):\n"
    "    for _ in range(6):  # the same answer, six times the work\n"
    "        _fast(x, out)\n"
)
WRONG = GOOD.replace("softmax, ", "") + (
    "from kernelwatch.kernels.triton_kernels import softmax as _good\n\n\n"
    "def softmax(x, out):\n"
    "    _good(x, out)\n"
    "    out[:, -1] = 0.5  # wrong last column\n"
)
# What a new user writes: the defaults (1 % minimum effect), two kernels of the suite.
CONFIG = """
[library]
name = "mykern"
module = "mykern"
[suites]
names = ["basic"]
kernels = ["softmax", "rmsnorm"]
"""


def _library(src: Path) -> dict[str, str]:
    files = {
        "mykern/__init__.py": GOOD,
        ".kernelwatch.toml": CONFIG,
        "pyproject.toml": PYPROJECT.format(name="mykern"),
        "README.md": "# mykern\n",
    }
    shas = {"base": make_repo(src, files, "Add kernels")}
    shas["unchanged"] = make_repo(src, {"README.md": "# mykern\n\nDocs.\n"}, "Document it")
    shas["slow"] = make_repo(src, {"mykern/__init__.py": SLOW}, "Softmax: more passes")
    shas["wrong"] = make_repo(src, {"mykern/__init__.py": WRONG}, "Softmax: fused tail")
    assert git(src, "rev-parse", "HEAD") == shas["wrong"]
    return shas


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_dashboard(env: dict[str, str], log: IO[bytes]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch.jobs.cli.main", "dashboard", "--port", str(port)],
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc, base
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    proc.wait(timeout=60)
    pytest.fail("dashboard did not start (see dashboard.log)")


def test_a_new_users_first_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KW_CPU_TIMING_GATES", raising=False)  # as a new user has it
    data = tmp_path / "kwdata"
    env = {"KW_DATA_DIR": str(data)}
    src = tmp_path / "mykern"
    shas = _library(src)
    started = time.monotonic()

    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "kernelwatch.jobs.cli.main", "worker", "--queues", "cpu",
             "--loglevel", "WARNING"],
            env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            proc = run_cli(
                "run", str(src), "--range", f"{shas['base']}..{shas['wrong']}", "--wait",
                "--json", "--timeout", "1200", env=env, timeout=1500,
            )  # fmt: skip
        finally:
            worker.terminate()
            worker.wait(timeout=120)
    measured_s = time.monotonic() - started
    out = json.loads(proc.stdout)
    by_sha = {r["commit"]: r for r in out["runs"]}
    assert {by_sha[shas[k]]["status"] for k in shas} == {"succeeded"}, out
    # the wrong commit fails the run (exit 1); --json printed no progress lines
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "cases measured" not in proc.stderr

    # the gate, per commit: no false regression, the slowdown labelled, the wrong one failed
    gates = {k: run_cli("gate", "--repo", "mykern", "--sha", shas[k], env=env, timeout=300)
             for k in ("unchanged", "slow", "wrong")}  # fmt: skip
    for k, g in gates.items():
        print(f"--- gate {k} (exit {g.returncode})\n{g.stdout}")
    assert gates["unchanged"].returncode == 0, gates["unchanged"].stdout
    assert "regression" not in gates["unchanged"].stdout
    assert gates["slow"].returncode == 0, gates["slow"].stdout
    # six times the work reads slower; on a machine loaded by another suite a side's
    # blocks can spread over whole factors and leave it inconclusive (seen once:
    # 3.381x [0.303, 37.755]); either way it is slower by its point estimate, labelled
    # plumbing only, and the gate above passed
    slow_rows = [ln for ln in gates["slow"].stdout.splitlines() if "softmax" in ln]
    assert slow_rows, gates["slow"].stdout
    for row in slow_rows:
        assert re.search(r"(slower|inconclusive) on CPU \(plumbing only\)", row), row
        ratio = re.search(r"(\d+(?:\.\d+)?)\u00d7", row)
        assert ratio is not None and float(ratio.group(1)) > 1.0, row
    assert gates["wrong"].returncode == 1, gates["wrong"].stdout
    assert "broken" in gates["wrong"].stdout and "softmax" in gates["wrong"].stdout

    # every dashboard page, one visit each, a screenshot each, none blank
    wrong_run = by_sha[shas["wrong"]]["id"]
    base_run = by_sha[shas["slow"]]["id"]
    pages = {  # the query, and the heading that says the page was drawn
        "runs": ("page=runs", "Runs"),
        "run": (f"page=run&run={wrong_run}", f"Run #{wrong_run}"),
        "trend": ("page=trend", "Trends"),
        "regressions": ("page=regressions&state=any", "Regressions"),
        "compare": (f"page=compare&a={base_run}&b={wrong_run}", "Compare"),
        "fleet": ("page=fleet", "Fleet"),
        "roofline": (f"page=roofline&run={wrong_run}", "Roofline"),
    }
    with (tmp_path / "dashboard.log").open("wb") as log:
        dashboard, url = _serve_dashboard(env, log)
        try:
            # each page read until drawn (its heading there, the script run over), for
            # at most 120 s: the cold server's first script run (its imports) once took
            # more than 10 s on the loaded 2-core machine
            shots = {
                name: browser.settled_page(
                    f"{url}/?{query}", tmp_path / f"page-{name}.png",
                    tmp_path / f"profile-{name}", [heading],
                )
                for name, (query, heading) in pages.items()
            }  # fmt: skip
        finally:
            dashboard.terminate()
            dashboard.wait(timeout=60)
    stddev = {name: sd for name, (_, sd, _) in shots.items()}
    blank = {k: round(v, 1) for k, v in stddev.items() if v <= browser.MIN_STDDEV}
    assert not blank, f"blank pages (grey stddev): {blank}"
    undrawn = [n for n, (dom, _, _) in shots.items() if pages[n][1] not in dom]
    assert not undrawn, f"pages without their heading: {undrawn}"
    failed = [n for n, (dom, _, _) in shots.items() if 'data-testid="stException"' in dom]
    assert not failed, f"pages that raised: {failed}"
    print(f"new-user session: measured in {measured_s:.0f} s; page stddev {stddev}")
