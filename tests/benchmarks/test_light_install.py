"""The GPU driver's light install must be importable where the sandbox looks.

On the H200 (2026-12-02) the prelude's ``.pth`` made ``kernelwatch`` importable from
``/tmp/kw``; ``site_namespace`` took that for "importable already" and made no links,
and inside bubblewrap, whose ``/tmp`` is empty, every suite failed to import the
harness. ``_clean_import_ok(..., outside=...)`` now refuses an import that depends on
the given folder. A real interpreter (a throwaway venv) imports through a real ``.pth``.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from benchmarks.gpu import host


@pytest.fixture
def venv_python(tmp_path: Path) -> Path:
    """A bare venv of the interpreter that runs the tests (no kernelwatch installed)."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    return tmp_path / "venv" / "bin" / "python"


def _site(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(subprocess.run([python, "-c", code], capture_output=True, text=True,
                               check=True).stdout.strip())  # fmt: skip


def test_an_import_through_a_folder_the_box_hides_does_not_count(
    venv_python: Path, tmp_path: Path
) -> None:
    assert not host._clean_import_ok(str(venv_python))  # nothing installed yet
    namespace = tmp_path / "kw"
    (namespace / "kernelwatch").mkdir(parents=True)
    (namespace / "kernelwatch" / "kernels").symlink_to(host.ROOT / "kernels")
    (_site(venv_python) / "kernelwatch-light.pth").write_text(f"{namespace}\n")
    assert host._clean_import_ok(str(venv_python))
    assert not host._clean_import_ok(str(venv_python), outside=namespace)


def test_links_in_site_packages_count(venv_python: Path, tmp_path: Path) -> None:
    namespace = tmp_path / "kw"
    (namespace / "kernelwatch").mkdir(parents=True)
    (namespace / "kernelwatch" / "kernels").symlink_to(host.ROOT / "kernels")
    site = _site(venv_python)
    (site / "kernelwatch-light.pth").write_text(f"{namespace}\n")
    (site / "kernelwatch").mkdir()
    (site / "kernelwatch" / "kernels").symlink_to(host.ROOT / "kernels")
    # site-packages comes before the .pth's entries: the box finds these links
    assert host._clean_import_ok(str(venv_python), outside=namespace)
    assert sysconfig.get_path("purelib") != str(site)  # the test's own env is untouched
