"""A workflow step that ``uses:`` this repository's Action, run as GitHub's runner would.

GitHub-hosted runners are the one piece a test cannot reach, so this does their part for
a composite action, no more: the step's ``with:`` evaluated in the workflow's contexts
(``github``, ``vars``, ``secrets``), each input's default from ``action.yml``, every
composite step's ``env`` evaluated with ``inputs``, its ``run`` written to a file and
started as ``bash --noprofile --norc -eo pipefail FILE`` (what ``shell: bash`` means on a
runner) with ``GITHUB_ACTION_PATH``, ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` set,
and the action's outputs read back. Expressions are the subset the files use (context
lookups, ``||``, string literals); anything else raises, so a new construct in
``action.yml`` cannot pass untested.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
LOOKUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")
LITERAL = re.compile(r"^'((?:[^']|'')*)'$")


def _lookup(path: str, contexts: Mapping[str, Any]) -> Any:
    node: Any = contexts
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def evaluate(expression: str, contexts: Mapping[str, Any]) -> Any:
    """One ``${{ }}`` body: ``a.b.c``, ``'text'`` or ``x || y`` (first truthy, as GitHub)."""
    options = [part.strip() for part in expression.split("||")]
    value: Any = None
    for option in options:
        if literal := LITERAL.match(option):
            value = literal.group(1).replace("''", "'")
        elif LOOKUP.match(option):
            value = _lookup(option, contexts)
        else:
            raise ValueError(f"expression not supported by this runner: {option!r}")
        if value:
            return value
    return value


def interpolate(text: Any, contexts: Mapping[str, Any]) -> str:
    """A string with every ``${{ }}`` replaced (GitHub turns null into '')."""
    if not isinstance(text, str):
        return "" if text is None else str(text).lower() if isinstance(text, bool) else str(text)

    def one(m: re.Match[str]) -> str:
        value = evaluate(m.group(1), contexts)
        return "" if value is None else str(value)

    return EXPR.sub(one, text)


@dataclass
class StepResult:
    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""


def uses_step(workflow: Path, action_name: str) -> dict[str, Any]:
    """The one step of ``workflow`` whose ``uses:`` names ``<owner>/<action_name>@<ref>``."""
    doc = yaml.safe_load(workflow.read_text())
    steps = [s for job in doc["jobs"].values() for s in job.get("steps", [])]
    mine = [s for s in steps if re.match(rf"^[\w.-]+/{action_name}@[\w./-]+$", s.get("uses", ""))]
    if len(mine) != 1:
        raise AssertionError(f"{workflow}: {len(mine)} steps use {action_name}")
    return mine[0]


def run_step(
    step: Mapping[str, Any],
    action_dir: Path,
    contexts: Mapping[str, Any],
    work: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600,
    start_only: bool = False,
) -> StepResult | subprocess.Popen[str]:
    """Run the composite action of ``action_dir`` for ``step``; ``start_only``: the Popen of
    its (single) script step, to be waited for by the caller with :func:`finish`."""
    action = yaml.safe_load((action_dir / "action.yml").read_text())
    assert action["runs"]["using"] == "composite", action["runs"]
    given = {k: interpolate(v, contexts) for k, v in (step.get("with") or {}).items()}
    inputs: dict[str, str] = {}
    for name, spec in action.get("inputs", {}).items():
        if name in given:
            inputs[name] = given[name]
        elif "default" in spec:
            inputs[name] = interpolate(spec["default"], contexts)
        elif spec.get("required"):
            raise AssertionError(f"required input {name!r} not given")
        else:
            inputs[name] = ""
    unknown = set(given) - set(action.get("inputs", {}))
    assert not unknown, f"inputs the action does not declare: {unknown}"
    scoped = {**contexts, "inputs": inputs}
    [composite] = action["runs"]["steps"]  # one script step (more would need chaining)
    assert composite.get("shell") == "bash", composite
    work.mkdir(parents=True, exist_ok=True)
    script = work / "step.sh"
    script.write_text(composite["run"])  # run: is not interpolated beyond ${{ }}, as here
    assert "${{" not in composite["run"], "action.yml splices an expression into run:"
    outputs, summary = work / "github_output", work / "step_summary.md"
    outputs.write_text("")
    step_env = {
        **(env if env is not None else os.environ),
        **{k: interpolate(v, scoped) for k, v in (composite.get("env") or {}).items()},
        "GITHUB_ACTION_PATH": str(action_dir),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_ACTIONS": "true",
    }
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=work,
        env=step_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if start_only:
        return proc
    return finish(proc, action, composite, work, timeout_s)


def finish(
    proc: subprocess.Popen[str],
    action: Mapping[str, Any] | Path,
    composite: Mapping[str, Any] | None,
    work: Path,
    timeout_s: float = 600,
) -> StepResult:
    """Wait for the step and read its outputs as the action declares them."""
    if isinstance(action, Path):
        action = yaml.safe_load((action / "action.yml").read_text())
        composite = action["runs"]["steps"][0]
    assert composite is not None
    stdout, stderr = proc.communicate(timeout=timeout_s)
    raw: dict[str, str] = {}
    for line in (work / "github_output").read_text().splitlines():
        key, _, value = line.partition("=")
        raw[key] = value
    step_id = composite.get("id", "")
    scoped = {"steps": {step_id: {"outputs": raw}}}
    outputs = {k: interpolate(v["value"], scoped) for k, v in action.get("outputs", {}).items()}
    summary_path = work / "step_summary.md"
    summary = summary_path.read_text() if summary_path.exists() else ""
    return StepResult(proc.returncode, stdout, stderr, outputs, summary)


__all__ = ["StepResult", "evaluate", "finish", "interpolate", "run_step", "uses_step"]
