"""``prepare-cutlass-dsl`` and ``cutlass-dsl`` without a GPU.

The prepare step runs on a tiny CUTLASS-shaped git repository made here (a
release tag, the example file, the license); the device sub-command runs in its
CPU mode end to end on what that step wrote: the wheel is not installed there,
the GPU tests skip, the CuTe DSL side records skips that say why. The wheel
install itself is checked with a stand-in wheel of the same layout (the real
one is CPython 3.12 only), and the table with a result shaped like a GPU run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gpu import cli, cutlass_dsl, cutlass_dsl_table, host
from benchmarks.gpu import prepare_cutlass_dsl as prep
from kernelwatch.kernels.adapters import cutlass_dsl_env as env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "# the example\nclass HopperWgmmaGemmKernel:\n    pass\n"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def cutlass_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "cutlass"
    (repo / "examples/python/CuTeDSL/hopper").mkdir(parents=True)
    (repo / env.UPSTREAM).write_text(EXAMPLE)
    (repo / "LICENSE.txt").write_text("BSD-3-Clause\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "v4.3.5")
    _git(repo, "tag", "v4.3.5")
    (repo / env.UPSTREAM).unlink()
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "gone")
    _git(repo, "tag", "v9.9.9")
    return repo


def _ctx(tmp_path: Path, cpu: bool = True) -> host.Context:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return host.Context(out=tmp_path, logs=logs, deadline=time.monotonic() + 300, cpu=cpu)


def test_prepare_copies_the_example_at_the_tag_with_its_record(
    cutlass_repo: Path, tmp_path: Path
) -> None:
    dest = tmp_path / ".dsl"
    args = cli.parser().parse_args(
        ["prepare-cutlass-dsl", "--cutlass-repo", str(cutlass_repo), "--dest", str(dest)]
    )
    assert args.ref == "v4.3.5" and not args.download_wheel
    result, table = prep.run(_ctx(tmp_path), args)
    copied = dest / "examples" / env.PACKAGE / env.DENSE_GEMM
    assert copied.read_text() == EXAMPLE
    assert (dest / "examples" / env.PACKAGE / "LICENSE.txt").is_file()
    record = json.loads((dest / "examples" / env.SOURCE_FILE).read_text())
    assert record["ref"] == "v4.3.5" and record["dsl_version"] == "4.3.5"
    assert len(record["commit"]) == 40 and record == result["source"]
    assert env.example_file({env.EXAMPLES_ENV: str(dest / "examples")}, []) == copied
    assert result["wheels"] == [] and any("no nvidia-cutlass-dsl wheel" in t for t in table)
    assert result["carry_bytes"] < 10_000 and "of a call's 64 MiB" in table[-1]


def test_prepare_refuses_a_tag_without_the_example_and_a_wheel_of_another_release(
    cutlass_repo: Path, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="has no examples/python/CuTeDSL/hopper/dense_gemm.py"):
        prep.copy_example(cutlass_repo, "v9.9.9", tmp_path)
    dest = tmp_path / "d"
    dest.mkdir()
    assert prep.wheel_problem(dest, "4.3.5") is None
    (dest / "nvidia_cutlass_dsl-4.4.0-cp312-cp312-manylinux_2_28_x86_64.whl").touch()
    assert "not nvidia-cutlass-dsl 4.3.5" in (prep.wheel_problem(dest, "4.3.5") or "")
    (dest / "nvidia_cutlass_dsl-4.3.5-cp312-cp312-manylinux_2_28_x86_64.whl").touch()
    assert "keep one" in (prep.wheel_problem(dest, "4.3.5") or "")


def test_the_download_line_asks_for_the_gpu_hosts_wheel_alone(tmp_path: Path) -> None:
    argv = prep.download_argv("4.3.5", tmp_path)
    assert argv[-1] == "nvidia-cutlass-dsl==4.3.5" and "--no-deps" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12" and "--only-binary=:all:" in argv
    assert "manylinux_2_28_x86_64" in argv and argv[argv.index("-d") + 1] == str(tmp_path)


def _fake_wheel(folder: Path, version: str) -> Path:
    """A wheel laid out like nvidia-cutlass-dsl's: its packages under python_packages/."""
    wheel = folder / f"nvidia_cutlass_dsl-{version}-py3-none-any.whl"
    info = f"nvidia_cutlass_dsl-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("nvidia_cutlass_dsl/python_packages/cutlass/__init__.py", "")
        z.writestr("nvidia_cutlass_dsl/python_packages/cutlass/cute/__init__.py", "")
        z.writestr("nvidia_cutlass_dsl.pth", "nvidia_cutlass_dsl/python_packages\n")
        z.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: {version}\n",
        )
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    return wheel


def test_the_carried_wheel_installs_offline_and_its_packages_import(
    cutlass_repo: Path, tmp_path: Path
) -> None:
    dest = tmp_path / ".dsl"
    prep.copy_example(cutlass_repo, "v4.3.5", dest)
    _fake_wheel(dest, "4.3.5")
    paths, info = cutlass_dsl.install(_ctx(tmp_path, cpu=False), dest, site=tmp_path / "site")
    assert info["version"] == "4.3.5" and info["notes"] == [] and info["install_s"] >= 0
    target = tmp_path / "site" / "dsl-4.3.5"
    assert paths == [
        str(target),
        str(target / "nvidia_cutlass_dsl/python_packages"),
        str(dest / "examples"),
    ]
    assert host.importable("cutlass.cute", os.pathsep.join(paths))
    assert not host.importable("cutlass.cute", str(target))  # --target skips the .pth


def test_the_lzma_repacked_wheel_keeps_its_files_and_modes_and_still_installs(
    cutlass_repo: Path, tmp_path: Path
) -> None:
    dest = tmp_path / ".dsl"
    prep.copy_example(cutlass_repo, "v4.3.5", dest)
    wheel = _fake_wheel(dest, "4.3.5")
    library = "nvidia_cutlass_dsl/lib/libstandin.so"
    with zipfile.ZipFile(wheel, "a", compression=zipfile.ZIP_DEFLATED) as z:
        member = zipfile.ZipInfo(library, (2026, 1, 7, 3, 17, 0))
        member.external_attr = 0o100755 << 16  # an executable, as the DSL's MLIR library is
        z.writestr(member, b"\x7fELF" + bytes(range(256)) * 4000, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(wheel) as z:
        published = {i.filename: (z.read(i), i.external_attr) for i in z.infolist()}
    size = wheel.stat().st_size
    before, after = prep.repack_lzma(wheel)
    assert before == size and after == wheel.stat().st_size
    with zipfile.ZipFile(wheel) as z:
        assert {i.filename: (z.read(i), i.external_attr) for i in z.infolist()} == published
        assert {i.compress_type for i in z.infolist() if i.file_size} == {zipfile.ZIP_LZMA}
    assert prep.repack_lzma(wheel) == (after, after)  # already repacked: left alone
    paths, info = cutlass_dsl.install(_ctx(tmp_path, cpu=False), dest, site=tmp_path / "site")
    installed = tmp_path / "site" / "dsl-4.3.5" / library
    assert info["version"] == "4.3.5" and installed.read_bytes() == published[library][0]
    assert os.access(installed, os.X_OK)
    assert host.importable("cutlass.cute", os.pathsep.join(paths))


def test_cpu_mode_runs_every_step_and_says_why_the_dsl_did_not(
    cutlass_repo: Path, tmp_path: Path
) -> None:
    dest = tmp_path / ".dsl"
    prep.copy_example(cutlass_repo, "v4.3.5", dest)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "benchmarks.gpu", "--cpu", "--out", str(out), "cutlass-dsl"]
    argv += ["--budget", "0.02", "--dsl-dir", str(dest)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "cutlass-dsl.json").read_text())
    assert doc["status"] == "ok", doc.get("error")
    res = doc["result"]
    assert "CPU mode" in res["install"]["wheel"] and res["install"]["example"]["ref"] == "v4.3.5"
    assert res["tests"]["counts"].get("skipped", 0) >= 6 and "failed" not in res["tests"]["counts"]
    cute, blas = res["bench"]["cutlass-dsl"]["rows"], res["bench"]["torch-gemm"]["rows"]
    assert cute and {r["status"] for r in cute} == {"skip"}
    assert all("needs a CUDA device" in r["error"] for r in cute)
    assert {r["status"] for r in blas} == {"pass"} and len(blas) == len(cute)
    assert [r["ratio"] for r in res["compare"]] == [None] * len(cute)
    assert res["probe"]["skipped"].startswith("needs a CUDA GPU")
    assert (
        "== cutlass-dsl" in done.stdout
        and "CuTe DSL: the CuTe DSL needs a CUDA device" in done.stdout
    )


def _gpu_like_result() -> dict[str, Any]:
    params = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16"}
    cute = {
        "params": params,
        "case": "4096x4096x4096",
        "status": "pass",
        "median_us": 190.0,
        "tflops": 723.0,
    }
    blas = {**cute, "median_us": 174.0, "tflops": 790.0}
    return {
        "install": {
            "notes": [],
            "example": {"ref": "v4.3.5", "commit": "4faf1a15" * 5},
            "version": "4.3.5",
            "target": "/tmp/dsl-4.3.5",
            "wheel_bytes": 58602784,
            "install_s": 6.0,
        },  # fmt: skip
        "imports": True,
        "tests": {"rc": 0, "counts": {"passed": 9}, "cases": []},
        "bench": {
            "cutlass-dsl": {"rc": 0, "timed_out": False},
            "torch-gemm": {"rc": 0, "timed_out": False},
        },
        "compare": cutlass_dsl.compare([cute], [blas]),
        "compiles": [{"tile": [128, 256], "seconds": 2.5}],
        "probe": {
            "kernel_names": {
                "cute_bf16": ["kernel_cutlass_kernel_x"],
                "cublas_bf16": ["nvjet_sm90_tst"],
            },
            "fp8": [
                {
                    "case": "4096x6144x4096",
                    "cute_us": 130.0,
                    "cute_tflops": 1580.0,
                    "cute_rel_l2": 2e-3,
                    "cublas_us": 120.0,
                    "cublas_tflops": 1700.0,
                    "cublas_rel_l2": 2e-3,
                },
                {"case": "8192x8192x8192", "error": "DSLRuntimeError: boom"},
            ],  # fmt: skip
            "sweep": [
                {"case": "64x4096x4096", "label": "64x64/1x1", "us": 20.0, "tflops": 107.0},
                {"case": "64x4096x4096", "label": "64x256/1x1", "error": "ValueError: smem"},
            ],  # fmt: skip
            "errors": {},
        },
    }


def test_the_table_of_a_gpu_run_compares_the_two_libraries() -> None:
    res = _gpu_like_result()
    assert res["compare"][0]["ratio"] == pytest.approx(190 / 174, abs=1e-4)
    text = "\n".join(cutlass_dsl_table.table(res))
    assert "nvidia-cutlass-dsl 4.3.5 in /tmp/dsl-4.3.5 (55.9 MiB wheel" in text
    assert "GPU tests: passed 9" in text and "128x256/1x1 1.092" in text
    assert "fp8 e4m3 unscaled 4096x6144x4096" in text and "DSLRuntimeError: boom" in text
    assert "kernels cute_bf16" in text and "64x256/1x1   ValueError: smem" in text
    assert "compiles in the bench (cold cache): 128x256 2.5 s" in text


def test_the_sub_command_is_registered_with_its_steps() -> None:
    commands = cli.commands()
    assert commands["cutlass-dsl"] is cutlass_dsl and commands["prepare-cutlass-dsl"] is prep
    args = cli.parser().parse_args(["cutlass-dsl", "--skip", "probe", "--no-sweep"])
    assert isinstance(args, argparse.Namespace) and args.skip == ["probe"] and args.no_sweep
    assert args.dsl_dir == ROOT / ".dsl" and args.size is None
