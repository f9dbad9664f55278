"""What a commit's runs mean for a merge: one state per GPU class, and the cases that moved.

The per-case and per-run verdicts come from :mod:`kernelwatch.jobs.judging.analysis`; this
module turns the runs of one commit into what a gate needs:

- per GPU class, a state (``pending | success | failure | neutral | error``; ``neutral``:
  a case stayed inconclusive, see ``KW_INCONCLUSIVE_POLICY``) and a one-line description;
- for the whole commit, ``pass | fail | neutral | error | pending | none``
  (``kernelwatch gate`` maps these to exit codes);
- the cases that moved (``kernels.verdict.MOVED``: regression, less_accurate, broken,
  error, inconclusive, improvement) with ratio, interval and both medians.

A run that passed without a baseline it was supposed to have (the baseline could not
be built or measured) is an ``error``, not a pass: nothing was compared. Rendering
(terminal table, PR comment) lives in :mod:`kernelwatch.jobs.github.render`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from kernelwatch.db.github import RunLink
from kernelwatch.db.models import FINAL_STATES, Case, Commit, Repository, Result, Run
from kernelwatch.kernels.record import paired_section, telemetry_counts
from kernelwatch.kernels.verdict import COMPARED, MOVED, ORDER, TIMING, CaseVerdict, RunVerdict

FINAL_STATUS_STATES = ("success", "failure", "neutral", "error")


@dataclass(frozen=True)
class MovedCase:
    kernel: str
    backend: str
    label: str
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    baseline_median_s: float | None
    median_s: float | None
    error: str = ""


@dataclass(frozen=True)
class ClassVerdict:
    """The state of one GPU class for one commit, as a commit status shows it."""

    device_class: str
    state: str  # pending | success | failure | neutral | error
    description: str
    run_id: int
    run_status: str
    run_verdict: str | None
    baseline_sha: str | None = None
    baseline_run_id: int | None = None
    confidence: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    moved: tuple[MovedCase, ...] = ()
    paired: bool = False  # baseline and candidate interleaved in this one run
    # GPU timings made without NVML telemetry / all GPU timings (report.telemetry_counts)
    telemetry_off: int = 0
    telemetry_timed: int = 0

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATUS_STATES

    @property
    def dashboard_path(self) -> str:
        """The dashboard view that explains this state (design: exact deep links)."""
        if self.baseline_run_id is not None:
            return f"/?page=compare&a={self.baseline_run_id}&b={self.run_id}"
        return f"/?page=run&run={self.run_id}"


@dataclass(frozen=True)
class CommitVerdict:
    repository: str
    sha: str
    classes: tuple[ClassVerdict, ...]

    @property
    def overall(self) -> str:
        """``none`` (no runs), ``pending``, ``fail``, ``error``, ``neutral`` or ``pass``.

        A regression or broken case anywhere is ``fail`` even if another class errored:
        a definite finding is the more useful answer. Pending wins over both, because
        a class still measuring may change the answer. ``neutral`` (a case stayed
        inconclusive) only where nothing worse happened.
        """
        if not self.classes:
            return "none"
        states = {c.state for c in self.classes}
        if "pending" in states:
            return "pending"
        if "failure" in states:
            return RunVerdict.FAIL
        if "error" in states:
            return RunVerdict.ERROR
        if "neutral" in states:
            return RunVerdict.NEUTRAL
        return RunVerdict.PASS


def class_verdict(session: Session, run: Run) -> ClassVerdict:
    """The commit-status view of one run."""
    if run.status == "queued":
        return _make(run, "pending", "queued")
    if run.status == "running":
        return _make(run, "pending", f"measuring on {run.worker}" if run.worker else "measuring")
    if run.status not in FINAL_STATES:
        return _make(run, "pending", run.status)
    if run.status == "cancelled":
        return _make(run, "error", "run was cancelled")
    if run.status in ("failed", "error"):
        what = "build or install failed" if run.status == "failed" else "run failed"
        return _make(run, "error", f"{what}: {_first_line(run.error)}")
    if run.verdict is None:
        return _make(
            run, "pending", f"measured; waiting for baseline {(run.baseline_sha or '')[:7]}"
        )
    results = session.execute(
        select(Result, Case).join(Case, Result.case_id == Case.id).where(Result.run_id == run.id)
    ).all()
    counts: dict[str, int] = {}
    for result, _ in results:
        key = result.verdict or ("new" if result.status == "pass" else result.status)
        counts[key] = counts.get(key, 0) + 1
    moved = _moved(session, run, results)
    telemetry = telemetry_counts(result.record for result, _ in results)
    compared = sum(v for k, v in counts.items() if k in COMPARED)
    # a CPU run's timing words say where they were measured ("1 slower on CPU")
    shown = {_CPU_WORDS.get(k, k) if plumbing_only(run.device_class, k) else k: n
             for k, n in counts.items()}  # fmt: skip
    if run.verdict == RunVerdict.FAIL:
        state, description = "failure", summarize(shown)
    elif run.verdict == RunVerdict.ERROR:
        state, description = "error", summarize(shown)
    elif run.verdict == RunVerdict.NEUTRAL:
        state, description = "neutral", f"neutral: {summarize(shown)}"
    elif run.baseline_sha and run.baseline_run_id is None and not run.options.paired:
        state = "error"
        description = f"nothing compared: baseline {run.baseline_sha[:12]} has no good measurement"
    elif not run.baseline_sha and compared == 0:
        state = "success"
        description = f"first measurement: {len(results)} cases, nothing to compare with"
    else:
        state, description = "success", summarize(shown)
    if shown != counts:
        description += " (CPU timings: plumbing only)"
    made = _make(run, state, description, counts, moved)
    return replace(made, telemetry_off=telemetry["off"],
                   telemetry_timed=telemetry["off"] + telemetry["live"])  # fmt: skip


def _make(
    run: Run,
    state: str,
    description: str,
    counts: dict[str, int] | None = None,
    moved: tuple[MovedCase, ...] = (),
) -> ClassVerdict:
    return ClassVerdict(
        device_class=run.device_class,
        state=state,
        description=description,
        run_id=run.id,
        run_status=run.status,
        run_verdict=run.verdict,
        baseline_sha=run.baseline_sha,
        baseline_run_id=run.baseline_run_id,
        confidence=run.options.confidence,
        counts=counts or {},
        moved=moved,
        paired=run.options.paired,
    )


_ORDER = (*ORDER, "new")
_CPU_WORDS = {
    CaseVerdict.REGRESSION.value: "slower on CPU",
    CaseVerdict.IMPROVEMENT.value: "faster on CPU",
    CaseVerdict.INCONCLUSIVE.value: "inconclusive on CPU",
}
_PLURAL = (CaseVerdict.REGRESSION, CaseVerdict.IMPROVEMENT, CaseVerdict.ERROR)


def summarize(counts: dict[str, int]) -> str:
    """``2 regressions, 1 broken, 10 unchanged`` in a fixed order."""
    parts = []
    for key in (*_ORDER, *sorted(set(counts) - set(_ORDER))):
        n = counts.get(key, 0)
        if n:
            noun = key + ("s" if key in _PLURAL and n > 1 else "")
            parts.append(f"{n} {noun}")
    return ", ".join(parts) if parts else "no cases measured"


def _moved(
    session: Session, run: Run, results: Sequence[tuple[Result, Case]]
) -> tuple[MovedCase, ...]:
    base_medians: dict[str, float | None] = {}
    if run.baseline_run_id is not None:
        base_medians = dict(
            session.execute(
                select(Result.case_id, Result.median_s).where(Result.run_id == run.baseline_run_id)
            ).all()
        )
    rank: dict[str, int] = {v.value: i for i, v in enumerate(MOVED)}
    rows = [(r, c) for r, c in results if r.verdict in MOVED]
    rows.sort(
        key=lambda rc: (
            rank[rc[0].verdict or ""],
            -(abs((rc[0].ratio or 1) - 1)),
            rc[1].kernel,
            rc[1].label,
        )
    )
    return tuple(
        MovedCase(
            kernel=case.kernel,
            backend=case.backend,
            label=case.label,
            verdict=result.verdict or "",
            ratio=result.ratio,
            ci_low=result.ratio_ci_low,
            ci_high=result.ratio_ci_high,
            baseline_median_s=base_medians.get(result.case_id) or _paired_baseline_median(result),
            median_s=result.median_s,
            error=(result.error or "").strip(),  # whole: the gate wraps it, never cuts it
        )
        for result, case in rows
    )


def _paired_baseline_median(result: Result) -> float | None:
    """The baseline's time of a paired case (measured in the same run, not stored apart)."""
    paired = paired_section(result.record)
    return _float(paired.baseline_median) if paired is not None else None


def latest_per_class(runs: Iterable[Run]) -> list[Run]:
    """The newest run of each device class, classes sorted by name."""
    best: dict[str, Run] = {}
    for run in runs:
        if run.status == "cancelled" and run.device_class in best:
            continue
        current = best.get(run.device_class)
        if current is None or run.id > current.id or current.status == "cancelled":
            best[run.device_class] = run
    return [best[k] for k in sorted(best)]


def commit_verdict(
    session: Session, repository: str, sha: str, runs: Iterable[Run]
) -> CommitVerdict:
    return CommitVerdict(
        repository=repository,
        sha=sha,
        classes=tuple(class_verdict(session, r) for r in latest_per_class(runs)),
    )


def runs_of_commit(session: Session, repository_ids: Sequence[int], sha: str) -> list[Run]:
    """Runs that judge ``sha`` (a full sha or a unique prefix of 7+ characters).

    Runs that compare with a baseline are preferred per class over runs that were
    measured only to serve as someone's baseline.
    """
    q = (
        select(Run)
        .join(Commit, Run.commit_id == Commit.id)
        .where(Run.repository_id.in_(repository_ids), Run.status != "cancelled")
    )
    q = q.where(Commit.sha == sha) if len(sha) >= 40 else q.where(Commit.sha.startswith(sha))
    # a bisection's step runs measure a commit against someone else's good build: never
    # the commit's gate result (``RunOptions.bisection_id``)
    found = [r for r in session.scalars(q.order_by(Run.id)) if r.options.bisection_id is None]
    runs = _deciding(found)
    compared = {r.device_class for r in runs if r.baseline_sha}
    return [r for r in runs if r.baseline_sha or r.device_class not in compared]


def _deciding(runs: list[Run]) -> list[Run]:
    """The runs allowed to decide the gate, per GPU class (issue 18).

    A manual run (``kernelwatch run`` without ``--gate``) is someone trying something: where
    the class has a push, PR or ``--gate`` run, the manual ones are left out, so a mistyped
    suite cannot turn a PASS into an ERROR. Where only manual runs exist they count, but a
    re-run still in flight does not hide a finished one (a measured commit is not reset to
    pending).
    """
    out: list[Run] = []
    for cls in sorted({r.device_class for r in runs}):
        mine = [r for r in runs if r.device_class == cls]
        gating = [r for r in mine if r.trigger != "manual" or r.options.gate]
        if gating:
            out += gating
            continue
        final = [r for r in mine if r.status in FINAL_STATES and r.status != "cancelled"]
        out += final or mine
    return sorted(out, key=lambda r: r.id)


def repository_ids(session: Session, name: str) -> list[int]:
    """Repositories called ``name``: a watched GitHub name (owner/name), a name or a source."""
    ids = set(
        session.scalars(
            select(Run.repository_id)
            .join(RunLink, RunLink.run_id == Run.id)
            .where(RunLink.full_name == name)
            .distinct()
        )
    )
    ids |= set(
        session.scalars(
            select(Repository.id).where(or_(Repository.name == name, Repository.source == name))
        )
    )
    return sorted(ids)


def plumbing_only(device_class: str, verdict: str) -> bool:
    """Whether a case's verdict is a CPU timing: shown, never with a GPU's authority.

    CPU timings prove the plumbing (design.md); correctness found on the CPU is real.
    Where ``KW_CPU_TIMING_GATES`` makes CPU timings gate, they are reported as any other.
    """
    return device_class == "cpu" and verdict in TIMING and not _cpu_timings_gate()


def _cpu_timings_gate() -> bool:
    from kernelwatch.db.config import get_settings

    return get_settings().cpu_timing_gates


def verdict_label(device_class: str, verdict: str) -> str:
    """The verdict word as tables print it: ``slower on CPU (plumbing only)`` for a CPU
    regression, the word itself elsewhere."""
    if not plumbing_only(device_class, verdict):
        return verdict
    what = {
        CaseVerdict.REGRESSION: "slower",
        CaseVerdict.IMPROVEMENT: "faster",
        CaseVerdict.INCONCLUSIVE: "inconclusive",
        CaseVerdict.UNCHANGED: "unchanged",
    }[CaseVerdict(verdict)]
    return f"{what} on CPU (plumbing only)"


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:200] if lines else ""


def _float(value: object) -> float | None:
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            return None
    return None


__all__ = [
    "ClassVerdict",
    "CommitVerdict",
    "MovedCase",
    "class_verdict",
    "commit_verdict",
    "latest_per_class",
    "plumbing_only",
    "repository_ids",
    "runs_of_commit",
    "summarize",
    "verdict_label",
]
