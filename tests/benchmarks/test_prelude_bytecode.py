"""``prelude`` compiles the bytecode a host's install lacks (``_compile_site``).

On an H100 (2026-12-07, docs/measurement.md §33) a new side process spent 3.3 s of its
first LayerNorm set-up compiling torch's lazily imported modules from source, in every
generation of processes: the host's install held no ``.pyc`` for them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from benchmarks.gpu import host, prelude


def test_the_missing_bytecode_is_compiled_once_and_a_read_only_install_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    for name in ("kwlazy", "kwfrozen"):
        (site / name / "sub").mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
        (site / name / "sub" / "deep.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(site))
    # a read-only install (root writes through mode bits, so the answer is the test's)
    real_access = prelude.os.access
    monkeypatch.setattr(
        prelude.os, "access", lambda p, m: "kwfrozen" not in str(p) and real_access(p, m)
    )
    monkeypatch.setattr(prelude, "COMPILED", ("kwlazy", "kwfrozen", "kw_not_installed"))
    monkeypatch.setattr(prelude, "MARKERS", tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    ctx = host.Context(out=tmp_path, logs=logs, deadline=time.monotonic() + 120, cpu=False)
    code = prelude._compile_site(ctx)
    assert code["kwlazy"]["rc"] == 0 and code["kwlazy"]["writable"]
    tag = sys.implementation.cache_tag
    assert (site / "kwlazy" / "sub" / "__pycache__" / f"deep.{tag}.pyc").is_file()
    assert code["kwfrozen"] == {"folder": str(site / "kwfrozen"), "writable": False}
    assert not (site / "kwfrozen" / "sub" / "__pycache__").exists()
    assert "kw_not_installed" not in code
    # once a host: a second prelude on the warm machine compiles nothing again
    again = prelude._compile_site(ctx)
    assert again["kwlazy"] == {"folder": str(site / "kwlazy"), "writable": True, "seconds": 0.0}
    assert [s.name for s in ctx.steps] == ["compile-kwlazy"]
    line = prelude._bytecode_line(code)
    assert line.startswith("bytecode compiled (PYTHONDONTWRITEBYTECODE")
    assert "kwlazy " in line and "kwfrozen read-only" in line
