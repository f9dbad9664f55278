"""The ``liger`` implementation module: registered, calling Liger's API, skipping with reasons.

A stand-in ``liger_kernel`` package (written into ``tmp_path``) has Liger's module and
class names, its ``Function.apply`` calling convention and its allocated outputs, in
plain torch: what the adapter calls and what the suites check is exercised without
Liger installed. The real Liger-Kernel, from the fetched mirror, runs in a subprocess
under Triton's interpreter when the mirror is on this machine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelwatch.kernels.adapters import ADAPTERS, liger
from kernelwatch.kernels.catalog import unknown_kernels
from kernelwatch.kernels.plugins import resolve_impl
from kernelwatch.kernels.runner import run_case
from kernelwatch.kernels.suite import load_suite
from kernelwatch.kernels.timing import TimerConfig
from tests import fake_liger as fake_liger_pkg

MIRROR = Path(os.environ.get("KW_LIGER_MIRROR", "/work/.mirror/linkedin+Liger-Kernel/repo"))
CPU = torch.device("cpu")
FAST = TimerConfig(budget_s=0.05, min_samples=3, min_time_s=0.0)


def _forget_liger() -> None:
    for mod in [m for m in sys.modules if m == "liger_kernel" or m.startswith("liger_kernel.")]:
        del sys.modules[mod]


@pytest.fixture(autouse=True)
def _no_liger_left() -> Iterator[None]:
    """Each test imports its own stand-in: none stays cached for the next."""
    _forget_liger()
    yield
    _forget_liger()


@pytest.fixture
def fake_liger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = fake_liger_pkg.write(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    return root


def _cases(suite: str, kernel: str):  # type: ignore[no-untyped-def]
    return [c for c in load_suite(suite, "smoke", CPU) if c.kernel == kernel]


SUITE_OF = {"softmax": "basic", "rmsnorm": "basic", "layernorm": "layers",
            "swiglu": "layers", "geglu": "layers"}  # fmt: skip


def test_liger_is_a_registered_adapter_for_five_kernels_of_two_suites() -> None:
    info = ADAPTERS["liger"]
    assert resolve_impl("liger") == "kernelwatch.kernels.adapters.liger" == info.module
    assert info.library == "liger-kernel"
    assert set(info.kernels) == set(liger.KERNELS) == set(SUITE_OF)
    assert all(callable(getattr(liger, k)) for k in info.kernels)
    assert unknown_kernels(["basic", "layers"], info.kernels) == ""


@pytest.mark.parametrize("kernel", sorted(SUITE_OF))
def test_each_kernel_calls_liger_and_its_allocated_output_is_what_is_checked(
    kernel: str, fake_liger: Path
) -> None:
    (spec,) = _cases(SUITE_OF[kernel], kernel)
    record = run_case(spec, SUITE_OF[kernel], "cid", "liger", liger.__name__, CPU, FAST)
    assert record.status == "pass", record.error
    assert record.correctness is not None and record.correctness.passed


def test_without_liger_every_kernel_is_a_skip_that_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # import fails: not installed
    (spec,) = _cases("basic", "softmax")
    record = run_case(spec, "basic", "cid", "liger", liger.__name__, CPU, FAST)
    assert record.status == "skip"
    assert "liger-kernel has no liger_kernel.ops.softmax here" in str(record.error)


def test_an_import_error_inside_liger_is_the_librarys_error_not_a_skip(fake_liger: Path) -> None:
    (fake_liger / "liger_kernel" / "ops" / "softmax.py").write_text("import not_a_dependency\n")
    (spec,) = _cases("basic", "softmax")
    record = run_case(spec, "basic", "cid", "liger", liger.__name__, CPU, FAST)
    assert record.status == "error"
    assert "No module named 'not_a_dependency'" in str(record.error)


def _raising(root: Path, op: str, cls: str, raise_line: str, prelude: str = "") -> None:
    """Make the stand-in's ``op`` raise: ``raise_line`` as the body of its forward."""
    (root / "liger_kernel" / "ops" / f"{op}.py").write_text(
        f"import torch\n{prelude}"
        f"class {cls}(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *args):\n"
        f"        {raise_line}\n"
    )


def test_a_kernel_the_cpu_interpreter_cannot_run_is_a_skip_naming_the_interpreter(
    fake_liger: Path,
) -> None:
    why = "'float' object has no attribute 'to'"
    interp = "class InterpreterError(Exception):\n    pass\n"
    _raising(
        fake_liger, "rms_norm", "LigerRMSNormFunction", f"raise InterpreterError({why!r})", interp
    )
    (spec,) = _cases("basic", "rmsnorm")
    record = run_case(spec, "basic", "cid", "liger", liger.__name__, CPU, FAST)
    assert record.status == "skip"
    assert "does not run under Triton's CPU interpreter (TRITON_INTERPRET=1)" in str(record.error)
    assert why in str(record.error)


def test_any_other_exception_of_a_kernel_stays_an_error(fake_liger: Path) -> None:
    why = "module 'torch.distributed' has no attribute 'tensor'"
    _raising(fake_liger, "swiglu", "LigerSiLUMulFunction", f"raise AttributeError({why!r})")
    (spec,) = _cases("layers", "swiglu")
    record = run_case(spec, "layers", "cid", "liger", liger.__name__, CPU, FAST)
    assert record.status == "error"
    assert why in str(record.error)


def _upstream_src(sha: str, dest: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(MIRROR), "archive", sha, "src"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


@pytest.mark.skipif(
    shutil.which("git") is None or not (MIRROR / "objects").is_dir(),
    reason=f"no Liger-Kernel mirror at {MIRROR}",
)
def test_real_liger_on_the_cpu_runs_softmax_and_swiglu_and_says_what_it_cannot(
    tmp_path: Path,
) -> None:
    src = _upstream_src("7d54ff88", tmp_path)
    out = tmp_path / "r.jsonl"
    argv = [sys.executable, "-m", "kernelwatch.kernels.runner", "--suite", "basic"]
    argv += ["--suite", "layers", "--impl", "liger", "--device", "cpu", "--budget", "0.1"]
    argv += [a for k in liger.KERNELS for a in ("--kernel", k)] + ["--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(src), "TRITON_INTERPRET": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = {r["kernel"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert got["softmax"]["status"] == "pass" and got["swiglu"]["status"] == "pass"
    for kernel in ("rmsnorm", "layernorm", "geglu"):
        assert got[kernel]["status"] == "skip", got[kernel]
        assert "Triton's CPU interpreter" in got[kernel]["error"]
