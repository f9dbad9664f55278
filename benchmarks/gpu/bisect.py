"""``bisect``: name the commit of a real regression on the GPU, the way the service does.

FlashAttention-3 (``hopper/``) between 16c7f0f6 and 3e87e421 has 76 first-parent
commits and 6 distinct builds of ``hopper`` and ``csrc/cutlass`` (the service's
``[install] inputs``; ``bisect_driver.commits_that_build_differently`` lists them on a
machine with the repository: 16c7f0f6, 3effce82, 59df2f9b, bc0e4ac0, d2340513,
3e87e421, the defaults of ``--commit``). This sub-command bisects them on one GPU with
the service's own parts, only the database and broker left out:

1. **builds ahead**: every distinct build is compiled before the search starts, side
   by side on the host's CPU cores (``libraries.build_all``: kernelwatch's environment
   cache, the trimmed profile of ``docs/flash-attention.kernelwatch.toml``, offline,
   from the ``.src/`` tarballs of ``prepare-fa3``), as the fleet's build workers do
   while the GPU is busy; each build's wall seconds are recorded;
2. **search**: ``jobs/planning/bisect.next_action`` (the service's pure search, with
   its establish, search, confirm and residual phases) says which commit to measure
   against which build; each step is one ``kernelwatch.kernels.paired_suite`` run (the
   service's paired mode, ``--case`` the bisection's case pattern) and is judged by
   ``bisect.judge``, the rule the service's driver applies to stored results; a
   commit whose build failed is a skip;
3. **result**: design.md's bisection JSON (culprit sha, parent, ratio, interval,
   verdict; steps; ``gpu_seconds``: the step runs' wall seconds, process start-up
   included), each step's records, and the builds.

The default case pattern is the GQA-8 chunked-prefill case that kernelwatch found
slower at 3e87e421 (``docs/results-h200.md``): Llama-3-70B on 8 GPUs, 1024 new tokens
after 4096 cached ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu import host, libraries

NAME = "bisect"
HELP = "FA3 bisection on one GPU: distinct builds ahead, the service's search, paired steps"
FA3_DISTINCT = ("16c7f0f6", "3effce82", "59df2f9b", "bc0e4ac0", "d2340513", "3e87e421")
DEFAULT_CASE = "prefill *model=llama3-70b*"
IMPL = "kernelwatch.kernels.adapters.fa3"
LIB = {"name": "flash-attn-3", "source": libraries.FA3_REPO, "profile": "trimmed"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--commit",
        action="append",
        metavar="SHA",
        help="the commit list, good first, bad last (default: FA3's 6 distinct builds of "
        "16c7f0f6..3e87e421)",
    )
    p.add_argument("--case", default=DEFAULT_CASE, help="case pattern (kernels/casepattern.py)")
    p.add_argument("--pairs", type=int, default=8, help="process pairs per step")
    p.add_argument("--min-effect", type=float, default=0.01)
    p.add_argument("--build-timeout", type=float, default=300.0, help="seconds a build")
    p.add_argument("--at-once", type=int, default=6, help="builds side by side")
    p.add_argument("--step-timeout", type=float, default=150.0, help="seconds a step")
    p.add_argument("--budget-s", type=float, default=400.0, help="GPU seconds of steps")
    p.add_argument(
        "--prior",
        type=Path,
        default=None,
        help="bisect.json of an earlier call: its steps are kept and the search resumes "
        "after them (the service resumes from its database the same way); only the "
        "builds the next three steps can need are built",
    )
    p.add_argument("--retries", type=int, default=2, help="re-measures of an inconclusive step")


def _cases(records: list[dict[str, Any]]) -> list[Any]:
    from kernelwatch.jobs.planning.bisect import CaseResult
    from kernelwatch.kernels.casepattern import names_of

    out = []
    for r in records:
        paired = r.get("paired") or {}
        names = names_of(str(r.get("kernel", "")), r.get("params") or {}, str(r.get("case_id")))
        verdict, ratio = paired.get("verdict"), paired.get("ratio")
        out.append(CaseResult(names, str(r.get("status")), verdict, ratio))
    return out


def _step_row(records: list[dict[str, Any]], worst: int | None) -> dict[str, Any]:
    """The step's case (the worst blocking one, else the first): ratio and interval."""
    if not records:
        return {}
    r = records[worst if worst is not None else 0]
    paired = r.get("paired") or {}
    return {
        "case_id": r.get("case_id"),
        "ratio": paired.get("ratio"),
        "interval": [paired.get("ci_low"), paired.get("ci_high")],
        "case_verdict": paired.get("verdict"),
        "baseline_median_s": paired.get("baseline_median"),
        "candidate_median_s": paired.get("candidate_median"),
        "group_ratios": paired.get("group_ratios"),
        "group_pairs": paired.get("group_pairs"),
    }


def _measure(
    ctx: host.Context,
    args: argparse.Namespace,
    n: int,
    base: dict[str, Any],
    cand: dict[str, Any],
    env: dict[str, str],
) -> tuple[list[dict[str, Any]], float, int | None]:
    out = ctx.logs / f"step{n}_{cand['commit'][:8]}_vs_{base['commit'][:8]}.jsonl"
    argv = [sys.executable, "-m", "kernelwatch.kernels.paired_suite", "--suite", "prefill"]
    argv += ["--impl", IMPL, "--backend", "fa3", "--size", "smoke" if ctx.cpu else "quick"]
    argv += ["--case", args.case, "--pairs", str(args.pairs), "--min-effect", str(args.min_effect)]
    argv += ["--retries", str(args.retries)]
    argv += ["--baseline-path", os.pathsep.join(base["pythonpath"])]
    argv += ["--candidate-path", os.pathsep.join(cand["pythonpath"])]
    argv += ["--library", json.dumps({**LIB, "commit": cand["commit"]})]
    argv += ["--baseline-library", json.dumps({**LIB, "commit": base["commit"]})]
    argv += ["--out", str(out)]
    step = ctx.run(f"step{n}", argv, args.step_timeout, reserve=10, env=env, watch=out)
    return host.read_jsonl(out), step.seconds, step.rc


def prior_steps(
    prior: Path | None, commits: list[str]
) -> tuple[list[Any], list[dict[str, Any]], float]:
    """The steps, rows and GPU seconds of an earlier call's ``bisect.json`` over the same
    commits (full or abbreviated shas), or none."""
    from kernelwatch.jobs.planning.bisect import Outcome, Purpose, Step

    if prior is None:
        return [], [], 0.0
    doc = json.loads(prior.read_text())
    done = doc.get("result", doc)

    def index(sha: str) -> int:
        return next(i for i, c in enumerate(commits) if c.startswith(sha) or sha.startswith(c))

    steps, rows = [], []
    for r in done.get("step_rows", []):
        if not r.get("outcome"):
            continue  # a step that did not run
        steps.append(
            Step(index(r["sha"]), index(r["against"]), Purpose(r["purpose"]), Outcome(r["outcome"]))
        )
        rows.append({**r, "prior": True})
    return steps, rows, sum(float(r.get("seconds") or 0.0) for r in rows)


def needed_builds(last: int, prior: list[Any] | None) -> list[int]:
    """Which commits (indices up to ``last``) to build: all without prior steps; else
    those they measured and those the next three steps may measure (``bisect.upcoming``)."""
    from kernelwatch.jobs.planning.bisect import upcoming

    if not prior:
        return list(range(last + 1))
    used = {i for s in prior for i in (s.index, s.against)}
    used |= set(upcoming(last, prior, establish=True, depth=3))
    return sorted(used)


def search(
    ctx: host.Context,
    args: argparse.Namespace,
    builds: list[dict[str, Any]],
    prior: tuple[list[Any], list[dict[str, Any]], float] = ([], [], 0.0),
) -> dict[str, Any]:
    """The service's search over ``builds`` (good first), one paired run a step, after
    the ``prior`` steps, rows and GPU seconds (``prior_steps``) of an earlier call."""
    from kernelwatch.jobs.planning.bisect import (
        Done,
        Limits,
        Measure,
        Outcome,
        Step,
        judge,
        next_action,
    )

    env = libraries._profile_env("trimmed")  # the adapter skips what the build left out
    steps, rows, spent = list(prior[0]), list(prior[1]), prior[2]
    last = len(builds) - 1
    while True:
        action = next_action(last, steps, Limits(spent, args.budget_s), establish=True)
        if isinstance(action, Done):
            break
        assert isinstance(action, Measure)
        cand, base = builds[action.index], builds[action.against]
        row: dict[str, Any] = {
            "sha": cand["commit"],
            "against": base["commit"],
            "purpose": action.purpose.value,
        }
        if not (cand.get("pythonpath") and base.get("pythonpath")):
            outcome, word, seconds, extra = Outcome.SKIP, "failed", 0.0, {}
        elif ctx.left() < args.step_timeout * 0.5:
            row["stopped"] = "no time left in the call"
            rows.append(row)
            action = Done("not_found", reason=f"the call's time ran out ({ctx.left():.0f} s left)")
            break
        else:
            records, seconds, rc = _measure(ctx, args, len(rows), base, cand, env)
            outcome, word, worst = judge(_cases(records), args.case)
            if rc != 0 and outcome != Outcome.BAD:
                outcome, word = Outcome.SKIP, f"error (rc {rc})"
            extra = _step_row(records, worst)
        spent += seconds
        steps.append(Step(action.index, action.against, action.purpose, outcome))
        skipped = outcome == Outcome.SKIP
        rows.append({**row, "verdict": word, "outcome": outcome.value, "skipped": skipped,
                     "seconds": round(seconds, 1), **extra})  # fmt: skip
    culprit = None
    if action.culprits:
        c = action.culprits[0]
        confirm = [r for r in rows if r["purpose"] == "confirm" and r["sha"] == builds[c]["commit"]]
        last_row = confirm[-1] if confirm else {}
        culprit = {
            "sha": builds[c]["commit"],
            "parent": builds[c - 1]["commit"],
            "ratio": last_row.get("ratio"),
            "interval": last_row.get("interval"),
            "verdict": last_row.get("case_verdict"),
        }
    return {
        "culprit": culprit,
        "culprits": [builds[c]["commit"] for c in action.culprits],
        "status": action.status,
        "reason": action.reason,
        "steps": [
            {"sha": r["sha"], "verdict": r.get("verdict"), "skipped": r.get("skipped")}
            for r in rows
        ],  # fmt: skip
        "gpu_seconds": round(spent, 1),
        "step_rows": rows,
    }


def run(ctx: host.Context, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    commits = list(args.commit or FA3_DISTINCT)
    result: dict[str, Any] = {"commits": commits, "case": args.case, "pairs": args.pairs}
    result["service_wheels"] = host.service_wheels(ctx)
    prior = prior_steps(args.prior, commits)  # read once: the builds and the search need it
    wanted = needed_builds(len(commits) - 1, prior[0])
    result["built"] = [commits[i] for i in wanted]
    units, errors = libraries.unpack_all([commits[i] for i in wanted], "fa3")
    t0 = time.monotonic()
    built = libraries.build_all(
        ctx, units, libraries.RECIPE, args.build_timeout, 120.0, "build", args.at_once
    )
    result["builds_wall_s"] = round(time.monotonic() - t0, 1)
    by_commit = {b["commit"]: b for b in [*built, *errors]}
    builds = []
    for c in commits:  # in the list's order, a failed or missing build kept as such
        found = [b for full, b in by_commit.items() if full.startswith(c)]
        builds.append(found[0] if found else {"commit": c, "error": "not built in this call"})
    result["builds"] = [
        {k: b.get(k) for k in ("commit", "rc", "build_s", "cached", "error", "timed_out")}
        for b in builds
    ]
    result.update(search(ctx, args, builds, prior))
    return result, table(result)


def table(r: dict[str, Any]) -> list[str]:
    lines = [f"builds: {len(r.get('builds', []))} side by side in {r.get('builds_wall_s')} s"]
    for b in r.get("builds", []):
        lines.append(f"  {str(b.get('commit'))[:8]} rc {b.get('rc')} {b.get('build_s')} s "
                     f"{(b.get('error') or '')[:80]}")  # fmt: skip
    lines.append(f"search: {r.get('status')} {r.get('reason') or ''}")
    for s in r.get("step_rows", []):
        lines.append(
            f"  {s['purpose']:<9} {s['sha'][:8]} vs {s['against'][:8]}: {s.get('verdict')} "
            f"ratio {s.get('ratio')} {s.get('interval')} {s.get('seconds')} s"
        )
    lines.append(f"culprit: {json.dumps(r.get('culprit'))}  gpu_seconds {r.get('gpu_seconds')}")
    return lines


__all__ = ["FA3_DISTINCT", "search"]
