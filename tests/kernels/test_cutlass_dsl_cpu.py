"""The CuTe DSL adapter without a GPU: registered, its skips say why, its caches hold.

The DSL itself needs an sm_90 GPU (``tests/kernels/test_gpu_cutlass_dsl.py``);
here a stand-in for the DSL's modules checks what the adapter does around it:
one ``cute.compile`` per configuration, one cute view per tensor, the compile
log. Where the example comes from and whether it matches the wheel is plain
file and version logic, checked on folders made here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelwatch.kernels import runner
from kernelwatch.kernels.adapters import ADAPTERS, Unavailable
from kernelwatch.kernels.adapters import cutlass_dsl as cd
from kernelwatch.kernels.adapters import cutlass_dsl_env as env
from kernelwatch.kernels.plugins import resolve_impl


def test_the_adapter_is_registered_with_every_gemm_kernel() -> None:
    info = ADAPTERS["cutlass-dsl"]
    assert info.module == "kernelwatch.kernels.adapters.cutlass_dsl"
    assert info.library == "nvidia-cutlass-dsl" and "gemm" in info.kernels
    assert resolve_impl("cutlass-dsl") == info.module


def test_a_cpu_bench_of_the_gemm_suite_is_all_skips_with_reasons(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    argv = ["--suite", "gemm", "--impl", "cutlass-dsl", "--size", "smoke", "--device", "cpu"]
    assert runner.main([*argv, "--budget", "0.02", "--out", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs and {r["status"] for r in recs} == {"skip"}
    why = {r["kernel"]: r["error"] for r in recs}
    assert "needs a CUDA device" in why["gemm"]
    assert "no scale epilogue" in why["gemm_fp8_rowwise"] == why["gemm_fp8_tensorwise"]
    assert "grouped GEMM" in why["gemm_grouped"]


def test_without_the_dsl_the_reason_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cutlass", None)  # import cutlass -> ImportError
    env.load.cache_clear()
    try:
        with pytest.raises(Unavailable, match="nvidia-cutlass-dsl is not installed here"):
            env.load()
    finally:
        env.load.cache_clear()


def _example(root: Path, *, package: bool = True, ref: str | None = None) -> Path:
    path = root / (env.PACKAGE if package else "") / env.DENSE_GEMM
    path.parent.mkdir(parents=True)
    path.write_text(f"class {env.KERNEL_CLASS}:\n    pass\n")
    if ref is not None:
        record = {"commit": "ab" * 20, "ref": ref, "dsl_version": env.tag_version(ref)}
        (root / env.SOURCE_FILE).write_text(json.dumps(record))
    return path


def test_the_example_is_found_by_setting_or_on_the_path(tmp_path: Path) -> None:
    prepared = _example(tmp_path / "dsl", ref="v4.3.5")
    assert env.example_file({env.EXAMPLES_ENV: str(tmp_path / "dsl")}, []) == prepared
    assert env.example_file({}, ["", str(tmp_path / "dsl")]) == prepared
    assert env.example_file({}, [str(tmp_path)]) is None
    checkout = _example(tmp_path / "cutlass" / "examples/python/CuTeDSL", package=False)
    assert env.example_file({env.EXAMPLES_ENV: str(checkout.parents[1])}, []) == checkout
    with pytest.raises(Unavailable, match="holds neither"):
        env.example_file({env.EXAMPLES_ENV: str(tmp_path / "nowhere")}, [str(tmp_path / "dsl")])
    src = env.example_source(prepared)
    assert src["ref"] == "v4.3.5" and src["path"] == str(prepared)
    assert env.example_source(checkout) == {"path": str(checkout)}


def test_an_example_of_another_release_is_refused() -> None:
    assert env.tag_version("v4.3.5") == "4.3.5" and env.tag_version("4faf1a15") is None
    assert env.version_mismatch("v4.3.5", "4.3.5") is None
    assert env.version_mismatch("4faf1a15", "4.3.5") is None  # a plain commit: the user's call
    assert env.version_mismatch("v4.3.5", None) is None
    why = env.version_mismatch("v4.4.0", "4.3.5")
    assert why is not None and "prepare the example at v4.3.5" in why


def test_tiles_follow_the_shape_unless_overridden() -> None:
    assert cd.tile_config(64, 4096, {}) == cd.TileConfig((64, 64), (1, 1))
    assert cd.tile_config(4096, 4096, {}, k=14336).label == "128x256/1x1"
    # thin GEMMs, Llama-3-8B's projections at 64 tokens: the tile the H100 measured best
    thin = {  # (n, k): the tile
        (4096, 4096): "64x64/1x1",  # o
        (6144, 4096): "64x128/1x1",  # qkv
        (28672, 4096): "64x256/1x1",  # gate_up
        (4096, 14336): "64x64/1x2",  # down: the long k pays for a cluster
    }
    for (n, k), label in thin.items():
        assert cd.tile_config(64, n, {}, k=k, card="h100").label == label, (n, k)
        assert cd.tile_config(16, n, {}, k=k, card="h100").label == label  # any m of one M tile
        # the H200 differs in qkv's band only: 64x128 read 1.063 against 64x64 there
        h200 = "64x64/1x1" if (n, k) == (6144, 4096) else label
        assert cd.tile_config(64, n, {}, k=k, card="h200").label == h200, (n, k)
    # a card with no measurements of its own takes the H100's; so does a CPU process
    assert cd.tile_config(64, 6144, {}, k=4096, card="b200").label == "64x128/1x1"
    # without a card named, this process's device: the CPU class where CUDA is absent
    here = cd.current_card()
    assert here == ("cpu" if not torch.cuda.is_available() else here)
    assert here != "cpu" or cd.tile_config(64, 6144, {}, k=4096).label == "64x128/1x1"
    assert cd.tile_config(64, 6144, {}, k=4096).label == (
        "64x64/1x1" if here == "h200" else "64x128/1x1"
    )
    # a recipe's tile is that tile on every card
    assert cd.tile_config(64, 6144, {cd.TILE_ENV: "64x128"}, k=4096, card="h200").label == (
        "64x128/1x1"
    )
    over = {cd.TILE_ENV: "128x128", cd.CLUSTER_ENV: "2x1"}
    assert cd.tile_config(64, 64, over).label == "128x128/2x1"
    # a recipe's tile means that configuration: its cluster is 1x1 unless named too
    named = {cd.TILE_ENV: "64x64"}
    assert cd.tile_config(64, 4096, named, k=14336).label == "64x64/1x1"
    # a cluster alone keeps the shape's tile
    assert cd.tile_config(64, 6144, {cd.CLUSTER_ENV: "1x2"}, k=4096).label == "64x128/1x2"
    with pytest.raises(ValueError, match="128x256"):
        cd.tile_config(64, 64, {cd.TILE_ENV: "big"})


def test_what_the_example_cannot_take_is_said_before_any_launch() -> None:
    bf = torch.bfloat16

    def why(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> str:
        return cd.unsupported(a, w, out) or ""

    a, w, out = (
        torch.zeros(64, 128, dtype=bf),
        torch.zeros(96, 128, dtype=bf),
        torch.zeros(64, 96, dtype=bf),
    )
    assert cd.unsupported(a, w, out) is None
    assert "16 bytes" in why(torch.zeros(64, 60, dtype=bf), torch.zeros(96, 60, dtype=bf), out)
    assert "row-major" in why(a, torch.zeros(128, 96, dtype=bf).t(), out)
    assert "must match" in why(a, w.half(), out)
    assert "not C = A·Wᵀ" in why(a, w, torch.zeros(96, 64, dtype=bf))
    assert "A in torch.float32" in why(a.float(), w.float(), out)
    assert "W in torch.int8" in why(a.to(torch.float8_e4m3fn), w.to(torch.int8), out)
    f8 = torch.float8_e4m3fn
    assert cd.unsupported(a.to(f8), w.to(torch.float8_e5m2), out) is None  # 8-bit kinds may mix


class _FakeCute:
    """Stands in for ``cutlass.cute``: counts compiles, returns a callable that computes A·Wᵀ."""

    def __init__(self) -> None:
        self.compiles = 0

    def compile(self, kernel: Any, *args: Any) -> Any:
        self.compiles += 1
        kernel.compiled_with = args

        def launch(a: Any, w: Any, c: Any, stream: Any) -> None:
            c.t[:, :, 0] = a.t[:, :, 0] @ w.t[:, :, 0].t()

        return launch


class _FakeView:
    def __init__(self, t: torch.Tensor, assumed_align: int) -> None:
        self.t, self.dynamic, self.element_type = t, False, None

    def mark_layout_dynamic(self, leading_dim: int) -> _FakeView:
        assert leading_dim == 1 and self.t.stride(1) == 1  # the example's contiguous mode
        self.dynamic = True
        return self


def _fake_dsl() -> tuple[env.Dsl, _FakeCute]:
    cute = _FakeCute()

    class Kernel:
        def __init__(self, acc: Any, tile: tuple[int, int], cluster: tuple[int, int]) -> None:
            self.acc, self.tile, self.cluster = acc, tile, cluster

    cutlass = SimpleNamespace(Float32="f32", Float8E4M3FN="e4m3")
    example = SimpleNamespace(**{env.KERNEL_CLASS: Kernel})
    driver = SimpleNamespace(CUstream=lambda handle: handle)
    dsl = env.Dsl(cutlass, cute, driver, _FakeView, example, "4.3.5", {})  # type: ignore[arg-type]
    return dsl, cute


def test_one_compile_per_configuration_and_one_view_per_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "compiles.jsonl"
    monkeypatch.setenv(cd.COMPILE_LOG_ENV, str(log))
    monkeypatch.setattr(cd, "_COMPILED", {})
    monkeypatch.setattr(cd, "_LOG", [])
    dsl, cute = _fake_dsl()
    cfg = cd.TileConfig((128, 256))
    cache: dict[Any, Any] = {}
    for m in (64, 64, 192):  # two shapes, one configuration
        a, w = torch.randn(m, 32), torch.randn(48, 32)
        out = torch.zeros(m, 48)
        views = [cd._view(dsl, t, cache) for t in (a, w, out)]
        assert all(
            v.dynamic and v.t.shape == (*t.shape, 1)
            for v, t in zip(views, (a, w, out), strict=True)
        )
        assert cd._view(dsl, a, cache) is views[0]  # made once per tensor
        cd._compiled(dsl, cfg, (a, w, out), views, stream=0)(*views, 0)
        torch.testing.assert_close(out, a @ w.t())  # the views alias the tensors
    assert cute.compiles == 1 and len(cache) == 9
    cd._compiled(dsl, cd.TileConfig((128, 128)), (a, w, out), views, stream=0)
    assert cute.compiles == 2
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert entries == cd.compile_log() and len(entries) == 2
    assert entries[0]["tile"] == [128, 256] and entries[0]["dtypes"] == ["Float32"] * 3
    assert entries[0]["kernel"] == env.KERNEL_CLASS and entries[0]["seconds"] >= 0


def test_fp8_views_travel_as_bytes_and_carry_their_element_type() -> None:
    dsl, _ = _fake_dsl()
    a8 = torch.randn(16, 32).to(torch.float8_e4m3fn)
    view = cd._view(dsl, a8, {})
    assert view.t.dtype == torch.uint8 and view.element_type == "e4m3"


def test_a_recipe_may_choose_the_tile_and_the_service_names_stay_its_own() -> None:
    """Two tiles are compared as two commits whose recipes differ in the tile line."""
    from kernelwatch.jobs.errors import ConfigError
    from kernelwatch.jobs.library.repoconfig import parse

    text = f'[install]\nrecipe = "pythonpath"\nenv = {{ {cd.TILE_ENV} = "128x128" }}\n'
    cfg = parse(text)
    assert cfg.install is not None
    assert cd.tile_config(64, 4096, cfg.install.env).label == "128x128/1x1"
    with pytest.raises(ConfigError, match=cd.COMPILE_LOG_ENV):
        parse(f'[install]\nrecipe = "pythonpath"\nenv = {{ {cd.COMPILE_LOG_ENV} = "x" }}\n')
