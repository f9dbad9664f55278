"""Library specs: strict parsing of name==version / wheel paths, stable keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.libspec import (
    CommitSpec,
    VersionSpec,
    normalize_name,
    parse_commit_spec,
    parse_index,
    parse_version_spec,
)


@pytest.mark.parametrize(
    ("text", "name", "version"),
    [
        ("flashinfer-python==0.5.3", "flashinfer-python", "0.5.3"),
        ("  FlashInfer_Python==0.6.0  ", "flashinfer-python", "0.6.0"),
        ("flash_attn==2.8.3", "flash-attn", "2.8.3"),
        ("torch==2.11.0+cu130", "torch", "2.11.0+cu130"),
        ("triton==3.6.0rc1", "triton", "3.6.0rc1"),
        ("pkg==1!2.0.post1.dev3", "pkg", "1!2.0.post1.dev3"),
    ],
)
def test_exact_pins_parse_to_normalized_specs(text: str, name: str, version: str) -> None:
    spec = parse_version_spec(text)
    assert (spec.name, spec.version, spec.wheel) == (name, version, None)
    assert spec.key == f"{name}=={version}" == spec.requirement
    assert spec.kind == "version"


@pytest.mark.parametrize(
    "text",
    [
        "flashinfer-python>=0.5",
        "flashinfer-python~=0.5.3",
        "flashinfer-python==0.5.*",
        "flashinfer-python[jit]==0.5.3",
        "flashinfer-python==0.5.3; python_version>'3.8'",
        "flashinfer-python @ https://example.com/f.whl",
        "--index-url=https://evil.example/ x==1",
        "-e .",
        "x==1 y==2",
        "",
        "just-a-name",
        "../../etc/passwd",
    ],
)
def test_anything_but_a_plain_pin_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_version_spec(text)


def test_wheel_paths_give_name_and_version_from_the_file_name(tmp_path: Path) -> None:
    whl = tmp_path / "flashinfer_python-0.5.3-cp39-abi3-manylinux_2_28_x86_64.whl"
    whl.write_bytes(b"PK")
    spec = parse_version_spec(str(whl))
    assert (spec.name, spec.version) == ("flashinfer-python", "0.5.3")
    assert spec.wheel == whl.resolve() and spec.requirement == str(whl.resolve())
    assert spec.key == "flashinfer-python==0.5.3"  # same series as the index version
    with pytest.raises(ConfigError, match="not found"):
        parse_version_spec(str(tmp_path / "missing-1.0-py3-none-any.whl"))
    with pytest.raises(ConfigError, match="wheel file name"):
        parse_version_spec(str(tmp_path / "notawheel.whl"))


def test_commit_specs_need_a_sha_and_a_source() -> None:
    spec = parse_commit_spec("https://github.com/Dao-AILab/flash-attention", "c75d019d")
    assert isinstance(spec, CommitSpec) and spec.kind == "commit"
    assert spec.key == "https://github.com/Dao-AILab/flash-attention@c75d019d"
    for bad in ("main", "HEAD~1", "--upload-pack=x", "c75d019dzz"):
        with pytest.raises(ConfigError):
            parse_commit_spec("repo", bad)
    with pytest.raises(ConfigError):
        parse_commit_spec("--upload-pack=x", "c75d019d")


def test_keys_are_stable_and_distinguish_versions() -> None:
    a, b = (
        parse_version_spec("flashinfer-python==0.5.3"),
        parse_version_spec("flashinfer_python==0.5.3"),
    )
    assert a == b and hash(a) == hash(b)
    assert a.key != parse_version_spec("flashinfer-python==0.6.0").key
    assert normalize_name("Flash.Attn__3") == "flash-attn-3"
    assert isinstance(a, VersionSpec)


def test_index_and_wheelhouse_are_validated(tmp_path: Path) -> None:
    assert parse_index("https://pypi.org/simple", None) == ("https://pypi.org/simple", None)
    assert parse_index(None, str(tmp_path)) == (None, str(tmp_path))
    with pytest.raises(ConfigError):
        parse_index("ftp://x", None)
    with pytest.raises(ConfigError):
        parse_index(None, str(tmp_path / "nope"))
    with pytest.raises(ConfigError):
        parse_index(None, "--trusted-host")
