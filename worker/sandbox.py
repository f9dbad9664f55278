"""The environment the code under test runs in: no secrets, only what it needs.

The library under test is untrusted code. Its build and its kernels run with an
environment built from an allow-list, so ``KW_GITHUB_TOKEN``, database URLs and
anything else the worker holds never reach it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ALLOWED = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "TRITON_INTERPRET",
    "TRITON_CACHE_DIR",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "NVCC_THREADS",
    "CC",
    "CXX",
    "CCACHE_DIR",
    "PIP_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_CONSTRAINT",
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "DATABASE_URL", "BROKER_URL")


def clean_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Allow-listed variables of ``base`` (default: os.environ) plus ``extra``.

    ``extra`` comes from the repository's install recipe; names that look like
    secrets are dropped from it too.
    """
    base = os.environ if base is None else base
    env = {k: base[k] for k in ALLOWED if k in base}
    for key, value in (extra or {}).items():
        if key.startswith("KW_") or any(m in key.upper() for m in SECRET_MARKERS):
            continue
        env[key] = value
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
