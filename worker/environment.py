"""Making a commit's library importable in an isolated environment.

Recipes (from ``.kernelwatch.toml``, see ``kernelwatch.jobs.repoconfig``):

- ``pip``: ``pip install --no-deps --no-build-isolation --target ENV <checkout>``;
  the environment is that target directory layered on the worker's interpreter
  (torch, triton come from there), so it builds only the library itself.
- ``pythonpath``: import straight from the checkout (pure-Python libraries).
- ``command``: an argv the repository names, run in the checkout (e.g. an
  in-place extension build), then import from the checkout.

Environments are cached per (commit, recipe); a failed install is never cached.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelwatch.jobs.errors import InstallError
from kernelwatch.jobs.repoconfig import InstallRecipe
from kernelwatch.worker.process import run_logged
from kernelwatch.worker.sandbox import clean_env


@dataclass(frozen=True)
class Environment:
    python: str
    pythonpath: tuple[str, ...]
    log: str


def prepare(
    recipe: InstallRecipe, checkout: Path, cache_root: Path, sha: str, timeout_s: float
) -> Environment:
    """Build (or reuse) the environment for ``checkout`` at ``sha``."""
    key = hashlib.sha256(
        json.dumps([sha, recipe.recipe, recipe.command, sorted(recipe.env.items())]).encode()
    ).hexdigest()[:20]
    target = cache_root / key
    timeout = recipe.timeout_s or timeout_s
    if recipe.recipe == "pythonpath":
        return Environment(sys.executable, (str(checkout),), "recipe pythonpath: no install\n")
    if recipe.recipe == "command":
        log = _run_install(list(recipe.command), checkout, recipe.env, timeout)
        return Environment(sys.executable, (str(checkout),), log)
    done = target / ".kernelwatch-ok"
    if done.exists():
        return Environment(sys.executable, (str(target),), f"cached environment {target}\n")
    if target.exists():
        _rmtree(target)  # a half-built environment is rebuilt, not trusted
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--disable-pip-version-check",
        "--no-input",
        "--target",
        str(target),
        str(checkout),
    ]
    log = _run_install(argv, checkout, recipe.env, timeout)
    done.write_text(log[-2000:])
    return Environment(sys.executable, (str(target),), log)


def _run_install(argv: list[str], cwd: Path, env_extra: dict[str, str], timeout: float) -> str:
    env = clean_env(env_extra)
    env["PIP_NO_INPUT"] = "1"
    code, log, timed_out = run_logged(argv, cwd=cwd, env=env, timeout=timeout)
    header = "$ " + " ".join(argv) + "\n"
    if timed_out:
        raise InstallError(f"install timed out after {timeout:.0f}s", header + log)
    if code != 0:
        raise InstallError(f"install failed with exit code {code}", header + log)
    return header + log


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


__all__ = ["Environment", "prepare", "subprocess"]
