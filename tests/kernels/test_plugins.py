"""Suites and adapters from other distributions, found through entry points."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from kernelwatch.kernels import plugins, runner, suite

PLUGIN = """
import torch
from kernelwatch.kernels.suite import CaseSpec
from kernelwatch.kernels.suites.common import invoke, randn


def build(size, device):
    n = 33 if size == "smoke" else 4096

    def make(g, dev):
        x = randn((n,), g, dev, torch.float16)
        return {"x": x, "out": torch.empty_like(x)}

    def ref(i, dt):
        return i["x"].to(dt) * 2

    return [CaseSpec("double", {"n": n}, make, invoke, ref, torch.float16, flops=n, bytes=4 * n)]


def double(case):
    return torch.mul(case["x"], 2, out=case["out"])
"""


def _distribution(root: Path, name: str, entry_points: str) -> None:
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    (root / "kwplug.py").write_text(PLUGIN)
    _distribution(
        root,
        "kwplug",
        "[kernelwatch.suites]\n"
        "plug-double = kwplug:build\n"
        "basic = kwplug:build\n"  # may not replace a built-in suite
        "broken = not a target\n"
        "\n[kernelwatch.adapters]\n"
        "plug = kwplug\n",
    )
    monkeypatch.syspath_prepend(str(root))
    yield root
    sys.modules.pop("kwplug", None)


def test_plugin_suites_are_listed_but_cannot_shadow_builtins(plugin_path: Path) -> None:
    names = suite.suite_names()
    assert "plug-double" in names and "broken" not in names
    assert {"prefill", "decode", "gemm", "basic"} <= set(names)
    assert suite.all_suites()["basic"] == "kernelwatch.kernels.suites.basic:build"
    cases = suite.load_suite("plug-double", "smoke", torch.device("cpu"))
    assert [c.kernel for c in cases] == ["double"] and cases[0].params == {"n": 33}


def test_plugin_adapters_resolve_by_short_name(plugin_path: Path) -> None:
    assert plugins.resolve_impl("plug") == "kwplug"
    assert plugins.resolve_impl("sdpa-math") == "kernelwatch.kernels.adapters.sdpa_math"
    assert plugins.resolve_impl("some.module") == "some.module"


def test_a_plugin_suite_runs_through_the_runner(
    plugin_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "r.jsonl"
    argv = ["--suite", "plug-double", "--impl", "kwplug", "--device", "cpu", "--out", str(out)]
    assert runner.main([*argv, "--budget", "0.02"]) == 0
    [rec] = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["status"] == "pass" and rec["suite"] == "plug-double"
    assert rec["correctness"]["errors"]["rel_l2"] == 0.0


def test_without_plugins_only_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "plug-double" not in suite.suite_names()
    assert plugins.discovered(plugins.SUITE_GROUP).keys().isdisjoint({"plug-double"})
