"""An unpaired run's would-be regression is measured again before the job ends.

design.md: a run-level ``fail`` needs the blocking case confirmed by an independent
re-measure. A real Celery worker runs a library's commits unpaired (as pushes are), with
CPU timings gating. A softmax that is slow only in the first runner process (a slow
process, not a slow commit) read a regression on its one comparison and failed the run;
now its re-measure in a fresh process reads it unchanged and the case is
``inconclusive``. A softmax that is slow in every process stays a confirmed regression.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwatch.jobs.judging.report import format_run, run_summary
from kernelwatch.kernels.record import remeasure_of
from kernelwatch.kernels.verdict import NOTE_UNCONFIRMED
from tests.helpers import library_files, make_repo
from tests.jobs.cli.test_pipeline import Env, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.crowd]

FAST = "from kernelwatch.kernels.triton_kernels import softmax, rmsnorm, matmul, attention\n"
# softmax 6 times over: slow in the first runner process only (the re-measure is the
# runner started with --case=IDS), or in every process
SLOW = """
import sys
from kernelwatch.kernels.triton_kernels import rmsnorm, matmul, attention
from kernelwatch.kernels.triton_kernels import softmax as _softmax
SLOW = {when}

def softmax(*args, **kwargs):
    out = _softmax(*args, **kwargs)
    if SLOW:
        for _ in range(5):
            out = _softmax(*args, **kwargs)
    return out
"""
FIRST_PROCESS_ONLY = SLOW.format(when='not any(a.startswith("--case=") for a in sys.argv)')
EVERY_PROCESS = SLOW.format(when="True")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from worker_env(tmp_path_factory, "remeasure", cpu_timing_gates=True)


def _history(env: Env, root: Path, slow: str) -> tuple[int, int]:
    """The baseline commit's run, then the slow commit's (its parent is the baseline)."""
    src = root / "lib"
    base = make_repo(src, library_files("remlib", FAST))
    head = make_repo(src, {"remlib/__init__.py": slow}, "softmax changed")
    args = {"bench_args": ["--kernel", "softmax"]}
    (first,) = env.wait(env.plan(str(src), [base], **args))
    assert first.status == "succeeded", first.error
    (second,) = env.wait(env.plan(str(src), [head], **args))
    assert second.status == "succeeded", second.error
    assert second.baseline_sha == base
    return first.id, second.id


def test_a_slow_process_is_not_a_slow_commit(env: Env, tmp_path: Path) -> None:
    _, run_id = _history(env, tmp_path, FIRST_PROCESS_ONLY)
    (run,) = env.wait([run_id])
    softmax = env.results(run_id)["softmax"]
    again = remeasure_of(softmax.record)
    assert again is not None and again.status == "pass" and again.timing is not None
    assert softmax.verdict == "inconclusive", (softmax.ratio, softmax.record.get("remeasure"))
    assert softmax.ratio is not None and softmax.ratio > 2  # the first comparison's reading
    assert run.verdict == "neutral"  # was fail: one slow process blocked the commit
    with env.factory() as s:
        shown = format_run(run_summary(s, s.get(type(run), run_id)))
    assert NOTE_UNCONFIRMED in shown


def test_a_slow_commit_stays_a_confirmed_regression(env: Env, tmp_path: Path) -> None:
    _, run_id = _history(env, tmp_path, EVERY_PROCESS)
    (run,) = env.wait([run_id])
    softmax = env.results(run_id)["softmax"]
    again = remeasure_of(softmax.record)
    assert again is not None and again.status == "pass"
    assert softmax.verdict == "regression" and run.verdict == "fail"
