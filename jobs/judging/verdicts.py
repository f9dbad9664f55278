"""What a commit's runs mean for a merge: the answer composed per case, per GPU class.

A commit's answer is not its newest run's (design.md, "A commit's answer"). Per GPU
class, each case's verdict comes from its most authoritative measurement at that
commit (``compose.py``: push/PR gate run > manual ``--gate`` > manual run; newest
within a kind; bisection steps and their confirmation re-measures never take part),
so a run that measured a subset only adds or refreshes the cases it measured. From
those cases this module makes what a gate needs:

- per GPU class, a state (``pending | success | failure | neutral | error``; ``neutral``:
  a case stayed inconclusive, see ``KW_INCONCLUSIVE_POLICY``), a one-line description,
  the runs the answer came from and the runs still measuring;
- for the whole commit, ``pass | fail | neutral | error | pending | none``
  (``kernels.verdict.commit_answer``; ``kernelwatch gate`` maps these to exit codes);
- the cases that moved (``kernels.verdict.MOVED``) with ratio, interval, both medians
  and the run each came from.

``gate``, ``show``, the dashboard, the PR comment (``github/reporter.py``) and
``/api/v1/verdicts`` all read this composition (:func:`runs_of_commit` then
:func:`commit_verdict`). The class verdict is the rule's aggregation of the composed
case verdicts (``kernels.verdict.class_verdict_of``) with this process's
``KW_INCONCLUSIVE_POLICY`` and ``KW_CPU_TIMING_GATES``. A class whose newest gate run
could not build or errored, with nothing measured at that authority since, is an
``error``; a class whose runs compared nothing although they had a baseline is an
``error`` too (the baseline could not be built or measured), not a pass. Rendering
(terminal table, PR comment) lives in :mod:`kernelwatch.jobs.github.render`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from kernelwatch.db.github import RunLink
from kernelwatch.db.models import FINAL_STATES, Case, Commit, Repository, Result, Run
from kernelwatch.jobs.judging.compose import (
    Measured,
    authority,
    baseline_word,
    pick,
    source_label,
)
from kernelwatch.kernels.record import (
    Price,
    accuracy_of,
    launch_notes,
    paired_section,
    price_of,
    telemetry_counts,
)
from kernelwatch.kernels.units import TIMES, interval_text, ratio_text
from kernelwatch.kernels.verdict import (
    COMPARED,
    MOVED,
    ORDER,
    PASS_STATUS,
    SKIP_STATUS,
    CaseVerdict,
    CommitAnswer,
    RunVerdict,
    class_verdict_of,
    commit_answer,
    cpu_word,
)
from kernelwatch.kernels.verdict import plumbing_only as _plumbing_only

FINAL_STATUS_STATES = ("success", "failure", "neutral", "error")
# A class verdict as a commit status state (GitHub's words).
STATE_OF: dict[RunVerdict, str] = {
    RunVerdict.PASS: "success",
    RunVerdict.FAIL: "failure",
    RunVerdict.NEUTRAL: "neutral",
    RunVerdict.ERROR: "error",
}
_VERDICT_OF_STATE = {state: verdict for verdict, state in STATE_OF.items()}
NEW = "new"  # a case measured with nothing to compare with (a count key, not a verdict)
IN_FLIGHT = ("queued", "running")


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
    run_id: int | None = None  # the run this case's answer came from
    source: str = ""  # that run in words: ``push run 12``, ``manual run 14``
    # what a less_accurate (or broken) case lost (``kernels.record.accuracy_of``):
    # the check's words and the largest error growth; "" and None where none
    accuracy: str = ""
    accuracy_growth: float | None = None


@dataclass(frozen=True)
class ClassVerdict:
    """The state of one GPU class for one commit, as a commit status shows it.

    run_id: the run that speaks for the class (the most authoritative, newest run whose
    cases were used); runs: every run whose cases were used; in_flight: runs of the
    commit on this class still queued, running or waiting for their baseline (``gate
    --wait`` waits for them; a re-run of the same kind does not reset a measured class
    to pending, a run of higher authority does).
    """

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
    runs: tuple[int, ...] = ()
    in_flight: tuple[int, ...] = ()
    # what a pull request's own .kernelwatch.toml tried to loosen and was ignored
    ignored_config: tuple[str, ...] = ()
    # GPU timings made without NVML telemetry / all GPU timings (report.telemetry_counts)
    telemetry_off: int = 0
    telemetry_timed: int = 0
    # the cases' coverage and GPU seconds (issue 25: a pull request's price): paired
    # cases decided, unpaired ones measured (``Price``)
    price: Price = field(default_factory=Price)
    # whether CPU timings gated where the speaking run was judged (None: not recorded):
    # the labels of moved cases follow it (``verdict_label``)
    cpu_timings_gate: bool | None = None
    # what the baseline commit is to a reader (``compose.baseline_word``): merge-base,
    # parent or baseline
    baseline_word: str = "baseline"
    # cases whose host launch changed enough to report, never judged (``record.launch_notes``)
    launch_notes: tuple[str, ...] = ()

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
        """``none`` (no runs), ``pending``, ``fail``, ``error``, ``neutral`` or ``pass``: the
        rule's commit aggregation (``kernels.verdict.commit_answer``) over the classes."""
        answer: CommitAnswer = commit_answer(_VERDICT_OF_STATE.get(c.state) for c in self.classes)
        return answer.value

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Runs of this commit still measuring (or waiting for a baseline), every class."""
        return tuple(sorted({i for c in self.classes for i in c.in_flight}))


# --------------------------------------------------------------------------- one run


def class_verdict(session: Session, run: Run) -> ClassVerdict:
    """The commit-status view of one run alone (its own cases, its own state)."""
    return _compose(session, run.device_class, [run])


def _pending(run: Run, in_flight: Sequence[Run]) -> ClassVerdict:
    if run.status == "queued":
        what = "queued"
    elif run.status == "running":
        what = f"measuring on {run.worker}" if run.worker else "measuring"
    elif run.options.confirmation is not None:
        what = f"measured; confirming its regressions in run {run.options.confirmation}"
    else:
        what = f"measured; waiting for baseline {(run.baseline_sha or '')[:7]}"
        if run.options.baseline_remeasure is not None:  # its measurements were of another
            what += f", measured again in this environment (run {run.options.baseline_remeasure})"
    return _make(run, "pending", what, in_flight=in_flight)


def _unmeasured(run: Run, in_flight: Sequence[Run]) -> ClassVerdict:
    """A finished run without measurements speaking for its class."""
    if run.status == "cancelled":
        return _make(run, "error", "run was cancelled", in_flight=in_flight)
    if run.status in ("failed", "error"):
        what = "build or install failed" if run.status == "failed" else "run failed"
        return _make(run, "error", f"{what}: {_first_line(run.error)}", in_flight=in_flight)
    if run.verdict == RunVerdict.ERROR:
        return _make(run, "error", "no cases measured", in_flight=in_flight)
    skipped = sum(1 for r in run.results if r.status == SKIP_STATUS)
    if skipped:  # the library has cases and none applies on this class (FA3 on an A100)
        what = f"no cases measured: {skipped} skipped, none applies on {run.device_class}"
        return _make(run, "success", what, in_flight=in_flight)
    # the suites selected nothing at all (a --case or [suites] filter that matches no
    # case, a change that made a suite list nothing): that answer is never green
    what = "no cases measured: the suites selected none"
    return _make(run, "neutral", what, verdict=RunVerdict.NEUTRAL, in_flight=in_flight)


def _make(
    run: Run,
    state: str,
    description: str,
    counts: dict[str, int] | None = None,
    moved: tuple[MovedCase, ...] = (),
    *,
    verdict: str | None = None,
    runs: Sequence[Run] = (),
    in_flight: Sequence[Run] = (),
    telemetry: dict[str, int] | None = None,
    price: Price | None = None,
    cpu_timings_gate: bool | None = None,
    launch: Sequence[str] = (),
) -> ClassVerdict:
    tele = telemetry or {}
    return ClassVerdict(
        device_class=run.device_class,
        state=state,
        description=description,
        run_id=run.id,
        run_status=run.status,
        run_verdict=verdict if verdict is not None else run.verdict,
        baseline_sha=run.baseline_sha,
        baseline_run_id=run.baseline_run_id,
        confidence=run.options.confidence,
        counts=counts or {},
        moved=moved,
        paired=run.options.paired,
        runs=tuple(r.id for r in runs) or (run.id,),
        in_flight=tuple(r.id for r in in_flight),
        ignored_config=tuple(run.options.config.loosened) if run.options.config else (),
        telemetry_off=tele.get("off", 0),
        telemetry_timed=tele.get("off", 0) + tele.get("live", 0),
        price=price or Price(),
        cpu_timings_gate=cpu_timings_gate,
        baseline_word=baseline_word(run.trigger),
        launch_notes=tuple(launch),
    )


# --------------------------------------------------------------------------- composition


def _finished(run: Run) -> bool:
    """Finished with an answer: a final state, and judged when it succeeded."""
    return run.status in FINAL_STATES and not (run.status == "succeeded" and run.verdict is None)


def _compose(session: Session, device_class: str, runs: Sequence[Run]) -> ClassVerdict:
    """One GPU class of a commit: its cases, each from its most authoritative measurement."""
    from kernelwatch.db.config import get_settings

    runs = sorted(runs, key=lambda r: r.id)
    done = [r for r in runs if _finished(r)]
    waiting = [r for r in runs if not _finished(r)]
    top = max((authority(r) for r in done), default=None)
    if waiting and (top is None or max(authority(r) for r in waiting) > top):
        # nothing measured yet, or a run of higher authority is measuring (a push run after
        # manual ones): its answer is the one to wait for
        best = max(waiting, key=lambda r: (authority(r), r.id))
        return _pending(best, waiting)
    assert top is not None
    newest_top = max((r for r in done if authority(r) == top), key=lambda r: r.id)
    judged = {r.id: r for r in done if r.status == "succeeded"}
    rows = (
        session.execute(
            select(Result, Case)
            .join(Case, Result.case_id == Case.id)
            # a skip counts only when it carries a verdict: a case the run's GPU budget
            # left unmeasured is undecided (inconclusive), one a library lacks is nothing
            .where(
                Result.run_id.in_(list(judged)),
                or_(Result.status != SKIP_STATUS, Result.verdict.is_not(None)),
            )
        ).all()
        if judged
        else []
    )
    chosen = pick(
        Measured(
            result.case_id,
            authority(judged[result.run_id]),
            result.run_id,
            result.verdict is not None,
            (result, case),
        )
        for result, case in rows
    )
    if (
        not chosen
        or newest_top.id not in judged
        and not any(authority(judged[m.run_id]) == top for m in chosen.values())
    ):
        # nothing measured, or the newest gate-level run failed with nothing since
        return _unmeasured(newest_top, waiting)
    picked = [m.item for m in chosen.values()]
    sources = sorted({m.run_id for m in chosen.values()})
    used = [judged[i] for i in sources]
    speaker = max(used, key=lambda r: (authority(r), r.id))
    # the judging worker's settings, as the speaking run recorded them; this process's
    # own only for a run judged before they were recorded
    settings = get_settings()
    judged_with = speaker.options.judged_with
    policy = judged_with.inconclusive_policy if judged_with else settings.inconclusive_policy
    gates_cpu = judged_with.cpu_timings_gate if judged_with else settings.cpu_timing_gates
    verdict = class_verdict_of(
        device_class, [r.verdict for r, _ in picked], policy, cpu_timings_gate=gates_cpu
    )
    counts: dict[str, int] = {}
    for result, _ in picked:
        key = result.verdict or (NEW if result.status == PASS_STATUS else result.status)
        counts[key] = counts.get(key, 0) + 1
    moved = _moved(session, judged, picked)
    compared = sum(n for k, n in counts.items() if k in COMPARED)
    shown = {
        cpu_word(k, short=True) if _plumbing_only(device_class, k, cpu_timings_gate=gates_cpu)
        else k: n
        for k, n in counts.items()
    }  # fmt: skip
    state = STATE_OF[verdict]
    description = summarize(shown)
    if verdict == RunVerdict.PASS:
        # runs that had a baseline commit to compare with and found no measurement of it
        unpaired_with_base = [
            r for r in used if r.baseline_sha and not r.options.paired and r.baseline_run_id is None
        ]
        if unpaired_with_base and (compared == 0 or len(unpaired_with_base) == len(used)):
            last = unpaired_with_base[-1]
            state = "error"
            verdict = RunVerdict.ERROR
            description = (
                f"nothing compared: baseline {(last.baseline_sha or '')[:12]} has no good "
                f"measurement in this class and environment{_remeasured(session, last)}"
            )
        elif compared == 0 and not any(r.baseline_sha for r in used):
            # the first commit of a range (measured as the others' baseline), a first run:
            # not "first measurement", the series may have many before it
            n = len(picked)
            cases = f"{n} case{'' if n == 1 else 's'}"
            description = f"{cases} measured, not compared: no baseline commit"
    if shown != counts:
        description += " (CPU timings: plumbing only)"
    if len(used) > 1:
        description += f" (cases from runs {', '.join(str(r.id) for r in used)})"
    return _make(
        speaker,
        state,
        description,
        counts,
        moved,
        verdict=verdict.value,
        runs=used,
        in_flight=waiting,
        telemetry=telemetry_counts(result.record for result, _ in picked),
        price=price_of(result.record for result, _ in picked),
        cpu_timings_gate=gates_cpu,
        launch=launch_notes(result.record for result, _ in picked),
    )


def _remeasured(session: Session, run: Run) -> str:
    """``" (measured again in run 12: error)"``: what became of the re-measure of a stale
    baseline that ``run`` asked for (``baseline_remeasure.py``), or nothing."""
    again = run.options.baseline_remeasure
    other = session.get(Run, again) if again is not None else None
    return "" if other is None else f" (measured again in run {other.id}: {other.status})"


_ORDER = (*ORDER, NEW)
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
    session: Session, runs: dict[int, Run], picked: Sequence[tuple[Result, Case]]
) -> tuple[MovedCase, ...]:
    rows = [(r, c) for r, c in picked if r.verdict in MOVED]
    base_ids = [r.baseline_result_id for r, _ in rows if r.baseline_result_id is not None]
    base_medians: dict[int, float | None] = (
        dict(
            session.execute(select(Result.id, Result.median_s).where(Result.id.in_(base_ids))).all()
        )
        if base_ids
        else {}
    )
    older = _older_baselines(session, runs, rows)
    rank: dict[str, int] = {v.value: i for i, v in enumerate(MOVED)}
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
            baseline_median_s=(
                base_medians.get(result.baseline_result_id)
                if result.baseline_result_id is not None
                else older.get((result.run_id, result.case_id))
            )
            or _paired_baseline_median(result),
            median_s=result.median_s,
            error=(result.error or "").strip(),  # whole: the gate wraps it, never cuts it
            run_id=result.run_id,
            source=source_label(runs[result.run_id]),
            accuracy=loss.detail,
            accuracy_growth=loss.growth,
        )
        for result, case, loss in ((r, c, accuracy_of(r.record)) for r, c in rows)
    )


def _older_baselines(
    session: Session, runs: dict[int, Run], rows: Sequence[tuple[Result, Case]]
) -> dict[tuple[int, str], float | None]:
    """Baseline medians of results judged before per-case baselines were recorded."""
    wanted = {
        (runs[r.run_id].baseline_run_id, r.case_id)
        for r, _ in rows
        if r.baseline_result_id is None and runs[r.run_id].baseline_run_id is not None
    }
    if not wanted:
        return {}
    found = session.execute(
        select(Result.run_id, Result.case_id, Result.median_s).where(
            Result.run_id.in_({b for b, _ in wanted}), Result.case_id.in_({c for _, c in wanted})
        )
    ).all()
    by_base: dict[tuple[int | None, str], float | None] = {(b, c): m for b, c, m in found}
    return {
        (r.run_id, r.case_id): by_base.get((runs[r.run_id].baseline_run_id, r.case_id))
        for r, _ in rows
    }


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
    """The commit's answer from ``runs`` (its runs, as :func:`runs_of_commit` gives them):
    per GPU class, composed case by case."""
    by_class: dict[str, list[Run]] = {}
    for run in runs:
        if run.options.bisection_id is not None:
            continue
        by_class.setdefault(run.device_class, []).append(run)
    classes = []
    for dc in sorted(by_class):
        mine = by_class[dc]
        # runs measured only as someone's baseline step back where the class has runs that
        # judge the commit against its own baseline
        judging = [r for r in mine if r.baseline_sha or r.options.baseline_run_id]
        classes.append(_compose(session, dc, judging or mine))
    return CommitVerdict(repository=repository, sha=sha, classes=tuple(classes))


def answer_for(session: Session, run: Run) -> ClassVerdict | None:
    """The composed answer of ``run``'s commit on ``run``'s GPU class (``show`` and the
    run page say it beside the run): None for a released version without a commit."""
    if run.commit is None:
        return None
    runs = runs_of_commit(session, [run.repository_id], run.commit.sha)
    verdict = commit_verdict(session, run.repository.name, run.commit.sha, runs)
    return next((c for c in verdict.classes if c.device_class == run.device_class), None)


class AmbiguousSha(ValueError):
    """A sha prefix that names more than one commit of the repository."""


def full_sha(session: Session, repository_ids: Sequence[int], sha: str) -> str:
    """The one commit ``sha`` names (a full sha, or a prefix of 7+ characters); the
    prefix itself where no commit has it; ``AmbiguousSha`` where several do. Without it,
    ``ccccccc`` answered with the runs of two commits at once: one's queued run made the
    other's failure ``pending``."""
    if len(sha) >= 40:
        return sha
    found = session.scalars(
        select(Commit.sha)
        .join(Run, Run.commit_id == Commit.id)
        .where(Run.repository_id.in_(repository_ids), Commit.sha.startswith(sha))
        .distinct()
        .limit(4)
    ).all()
    if len(found) > 1:
        shown = ", ".join(f[:12] for f in sorted(found)[:3])
        raise AmbiguousSha(f"sha {sha} is ambiguous: it begins {shown}{', ...' * (len(found) > 3)}"
                           "; give more of it")  # fmt: skip
    return found[0] if found else sha


def runs_of_commit(session: Session, repository_ids: Sequence[int], sha: str) -> list[Run]:
    """Runs that may speak for ``sha`` (a full sha or a unique prefix of 7+ characters):
    every run of it but cancelled ones, bisection steps (``RunOptions.bisection_id``:
    a step measures a commit against someone else's good build, never its gate answer)
    and the follow-up runs a judgement asked for (``RunOptions.follow_up``).
    Which of them answers for which case is :func:`commit_verdict`'s composition."""
    q = (
        select(Run)
        .join(Commit, Run.commit_id == Commit.id)
        .where(Run.repository_id.in_(repository_ids), Run.status != "cancelled")
    )
    q = q.where(Commit.sha == sha) if len(sha) >= 40 else q.where(Commit.sha.startswith(sha))
    return [
        r
        for r in session.scalars(q.order_by(Run.id))
        if r.options.bisection_id is None and not r.options.follow_up
    ]


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


def plumbing_only(device_class: str, verdict: str, gates: bool | None = None) -> bool:
    """Whether a case's verdict is a CPU timing (``kernels.verdict.plumbing_only``).

    ``gates``: the judging worker's ``KW_CPU_TIMING_GATES`` as the run recorded it
    (``RunOptions.judged_with``), so a label agrees with the verdict it sits beside; None
    (a run judged before that was recorded): this process's setting."""
    gate = _cpu_timings_gate() if gates is None else gates
    return _plumbing_only(device_class, verdict, cpu_timings_gate=gate)


def _cpu_timings_gate() -> bool:
    from kernelwatch.db.config import get_settings

    return get_settings().cpu_timing_gates


def verdict_label(device_class: str, verdict: str, gates: bool | None = None) -> str:
    """The verdict word as tables print it: ``slower on CPU (plumbing only)`` for a CPU
    regression that did not gate (``gates``: as in :func:`plumbing_only`), the word
    itself elsewhere."""
    if not plumbing_only(device_class, verdict, gates):
        return verdict
    return cpu_word(verdict)


# The verdicts a case row reads by what its check lost, where its record says (a
# ``less_accurate`` softmax shown as "0.002x (-99.8 %)" read as a big speed-up: its
# timing says nothing about that verdict).
BY_ACCURACY: frozenset[str] = frozenset({CaseVerdict.LESS_ACCURATE, CaseVerdict.BROKEN})


def reads_accuracy(verdict: str | None, accuracy: str | None) -> bool:
    """Whether a case row with ``verdict`` says what moved by its accuracy (``accuracy``:
    the record's detail, ``kernels.record.accuracy_of``) rather than its time."""
    return bool(accuracy) and verdict in BY_ACCURACY


def moved_text(
    verdict: str | None,
    ratio: object,
    low: object = None,
    high: object = None,
    accuracy: str | None = "",
    *,
    percent: bool = True,
) -> str:
    """What moved in one case's row, the one text for it (``show``, the run reports,
    ``run --wait``, the demo): the time ratio with its interval (``kernels/units.py``),
    or, for a row that reads by accuracy, the accuracy detail first and the time after
    it, named ("error grew beyond 1.25x: rel_l2 0.000377 vs 0.000287 (1.32x); time
    0.998× [...]"). "" where neither is known."""
    timing = ratio_text(ratio, low, high, percent=percent) if _float(ratio) is not None else ""
    if not reads_accuracy(verdict, accuracy):
        return timing
    return f"{accuracy}; time {timing}" if timing else str(accuracy)


def moved_cells(case: MovedCase) -> tuple[str, str]:
    """A moved case's ratio and interval cells in a table (the gate's, the PR
    comment's): the time ratio and its interval, or for a row that reads by accuracy
    the error's growth (``error 1.32×``) and no time interval; the accuracy detail
    itself goes with the case (``moved_note``)."""
    if not reads_accuracy(case.verdict, case.accuracy):
        return ratio_text(case.ratio), interval_text(case.ci_low, case.ci_high)
    growth = case.accuracy_growth
    return (f"error {growth:.2f}{TIMES}" if growth is not None else "error grew"), "–"


def moved_note(case: MovedCase) -> str:
    """What a table says beside a moved case: its accuracy detail where the row reads by
    accuracy, then its error (a broken case's message)."""
    said = [case.accuracy] if reads_accuracy(case.verdict, case.accuracy) else []
    return "; ".join([*said, *([case.error] if case.error else [])])


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
    "BY_ACCURACY",
    "AmbiguousSha",
    "ClassVerdict",
    "CommitVerdict",
    "answer_for",
    "MovedCase",
    "STATE_OF",
    "class_verdict",
    "commit_verdict",
    "full_sha",
    "latest_per_class",
    "moved_cells",
    "moved_note",
    "moved_text",
    "plumbing_only",
    "reads_accuracy",
    "repository_ids",
    "runs_of_commit",
    "summarize",
    "verdict_label",
]
