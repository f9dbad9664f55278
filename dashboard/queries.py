"""The dashboard's reads: SQLAlchemy ``select()`` queries that return pandas DataFrames.

Pure data access, no Streamlit: pages call these through the cached wrappers in
``cached.py``, and ``benchmarks/dashboard.py`` times them directly. Every query
names its columns and stays on an indexed access path; the heavy columns
(``results.samples``, ``results.record``) are read only for one or two runs at
a time, and only the parts of the record a view shows.

Nothing here writes; triage writes live in ``kernelwatch.db.triage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import Engine, Executable, func, inspect, select, type_coerce
from sqlalchemy import case as sql_case
from sqlalchemy.orm import Session, aliased

from kernelwatch.db.bisect import Bisection, BisectionStep
from kernelwatch.db.fleet import WorkerHeartbeat
from kernelwatch.db.models import (
    Case,
    Commit,
    Regression,
    RegressionEvidence,
    Repository,
    Result,
    Run,
)
from kernelwatch.db.run_options import RunOptions, run_subject
from kernelwatch.db.selftest import CardSelftest
from kernelwatch.db.store import public_source
from kernelwatch.db.triage import TriageEvent
from kernelwatch.db.types import INT_MAX, JSONType
from kernelwatch.jobs.judging import run_spread
from kernelwatch.jobs.judging.compose import authority_of, source_word
from kernelwatch.jobs.judging.history import CHANGEPOINT
from kernelwatch.jobs.judging.verdicts import answer_for, plumbing_only, verdict_label
from kernelwatch.kernels.verdict import CaseVerdict

# Run list and selectors show at most this many runs; older ones are reached by id.
RUN_LIMIT = 200
# Cases offered in the trend and roofline selectors come from this many recent runs.
RECENT_RUNS_FOR_CASES = 50
HEARTBEAT_TABLES = ("worker_heartbeats",)

TIME_COLUMNS = ("created", "started", "finished", "committed_at", "last_activity")
FLOAT_COLUMNS = (
    "median_s",
    "ci_low_s",
    "ci_high_s",
    "tflops",
    "gbps",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "flops",
    "bytes",
    "pct_of_peak",
)


def _frame(engine: Engine, query: Executable, columns: Sequence[str] | None = None) -> pd.DataFrame:
    with engine.connect() as conn:
        result = conn.execute(query)
        names = list(columns or result.keys())
        rows = [tuple(r) for r in result]
    df = pd.DataFrame.from_records(rows, columns=names)
    for col in TIME_COLUMNS:
        if col in df.columns:
            # SQLite hands back naive datetimes (stored as UTC); PostgreSQL aware ones.
            df[col] = pd.to_datetime(df[col], utc=True)
    for col in df.columns:
        if col in FLOAT_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
        elif (
            (col == "id" or col.endswith("_id"))
            and df[col].dtype.kind in "fO"
            and (col != "case_id")
        ):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df


# --------------------------------------------------------------------------- schema


def schema_state(engine: Engine) -> dict[str, bool]:
    """Which parts of the schema exist: ``core`` (migration 0001), ``triage`` (0002)."""
    names = set(inspect(engine).get_table_names())
    return {
        "core": {"runs", "results", "regressions", "cases"} <= names,
        "triage": "triage_events" in names,
        "heartbeats": any(t in names for t in HEARTBEAT_TABLES),
    }


# --------------------------------------------------------------------------- lookups


def repositories(engine: Engine) -> pd.DataFrame:
    """Repositories by name, each with how many runs it has and its newest run's id."""
    q = (
        select(
            Repository.id,
            Repository.name,
            Repository.source,
            Repository.default_branch,
            func.count(Run.id).label("runs"),
            func.max(Run.id).label("last_run"),
        )
        .outerjoin(Run, Run.repository_id == Repository.id)
        .group_by(Repository.id, Repository.name, Repository.source, Repository.default_branch)
        .order_by(Repository.name)
    )
    df = _frame(engine, q)
    df["source"] = [public_source(str(s)) for s in df["source"]]  # a URL's token stays home
    return df


def busiest_repository(repos: pd.DataFrame) -> int | None:
    """The repository a page opens on when none is asked for: the one with the most runs
    (the newest run breaks a tie), not the first by name (issue 27: a tiny repository
    named ``a...`` hid the one being measured)."""
    if repos.empty:
        return None
    ranked = repos.assign(last=repos["last_run"].fillna(-1)).sort_values(
        ["runs", "last"], ascending=False
    )
    return int(ranked["id"].iloc[0])


def device_classes(engine: Engine, repository_id: int | None = None) -> list[str]:
    q = select(Run.device_class).distinct()
    if repository_id is not None:
        q = q.where(Run.repository_id == repository_id)
    with engine.connect() as conn:
        return sorted(str(v) for v in conn.scalars(q))


def resolve_run(engine: Engine, ref: str, device_class: str | None = None) -> int | None:
    """A run id from ``ref``: a run id, or a commit sha (prefix) → a run of that commit.

    Of a commit's runs, a succeeded one on ``device_class`` is preferred, then any
    succeeded one; a bisection step (which measured only what its search follows) only
    when nothing else measured the commit; then the newest.
    """
    ref = ref.strip()
    if not ref:
        return None
    with engine.connect() as conn:
        if ref.isascii() and ref.isdigit() and int(ref) <= INT_MAX:  # not "²", not 10**25
            found = conn.scalar(select(Run.id).where(Run.id == int(ref)))
            if found is not None:
                return int(found)
        if len(ref) >= 4 and all(c in "0123456789abcdefABCDEF" for c in ref):
            step = type_coerce(Run.options, JSONType)["bisection_id"].as_integer()
            # a bisection step measured only what its search follows: any other run first
            order: list[Any] = [
                sql_case((Run.status == "succeeded", 0), else_=1),
                sql_case((step.is_(None), 0), else_=1),
            ]
            if device_class:
                order.insert(0, sql_case((Run.device_class == device_class, 0), else_=1))
            q = (
                select(Run.id)
                .join(Commit, Run.commit_id == Commit.id)
                .where(Commit.sha.startswith(ref.lower(), autoescape=True))
                .order_by(*order, Run.id.desc())
                .limit(1)
            )
            found = conn.scalar(q)
            return int(found) if found is not None else None
    return None


# --------------------------------------------------------------------------- runs

RUN_COLUMNS = (
    Run.id,
    Run.status,
    Run.verdict,
    Run.repository_id,
    Repository.name.label("repository"),
    Commit.sha,
    Commit.sequence,
    Commit.message,
    Run.version_spec,
    Run.device_class,
    Run.queue,
    Run.worker,
    Run.trigger,
    Run.attempts,
    Run.baseline_sha,
    Run.baseline_run_id,
    Run.created,
    Run.started,
    Run.finished,
)


def _with_durations(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        df["wait_s"] = pd.Series(dtype=float)
        df["duration_s"] = pd.Series(dtype=float)
        return df
    df["wait_s"] = (df["started"] - df["created"]).dt.total_seconds()
    df["duration_s"] = (df["finished"] - df["started"]).dt.total_seconds()
    return df


def runs(
    engine: Engine,
    repository_id: int | None = None,
    statuses: Sequence[str] = (),
    device_class: str | None = None,
    limit: int = RUN_LIMIT,
    triggers: Sequence[str] = (),
) -> pd.DataFrame:
    """Newest runs first, with repository, commit and queue/run durations."""
    q = (
        select(*RUN_COLUMNS)
        .join(Repository, Run.repository_id == Repository.id)
        .outerjoin(Commit, Run.commit_id == Commit.id)
        .order_by(Run.id.desc())
        .limit(limit)
    )
    if repository_id is not None:
        q = q.where(Run.repository_id == repository_id)
    if statuses:
        q = q.where(Run.status.in_(list(statuses)))
    if device_class:
        q = q.where(Run.device_class == device_class)
    if triggers:
        q = q.where(Run.trigger.in_(list(triggers)))
    df = _with_durations(_frame(engine, q))
    if len(df):
        notes = _import_options(engine, [int(i) for i in df["id"]])
        df["message"] = [run_subject(notes[i], m) if i in notes else m
                         for i, m in zip(df["id"], df["message"], strict=True)]  # fmt: skip
    df["moved"] = _moved_kernels(engine, [int(i) for i in df["id"]]) if len(df) else []
    return df


def _import_options(engine: Engine, run_ids: list[int]) -> dict[int, RunOptions]:
    """The options of the imported runs among ``run_ids``: only an import has a note
    (``run_subject``), and only its options are read; a worker's run carries its runner's
    log tail there, which the run list does not need."""
    q = select(Run.id, Run.options).where(Run.id.in_(run_ids), Run.trigger == "import")
    with engine.connect() as conn:
        return {int(i): o for i, o in conn.execute(q).all()}


# Case verdicts a run list names ("softmax regression"): what someone opens the run for.
LISTED_MOVES = tuple(
    v.value
    for v in (
        CaseVerdict.REGRESSION,
        CaseVerdict.LESS_ACCURATE,
        CaseVerdict.BROKEN,
        CaseVerdict.IMPROVEMENT,
    )
)


def _moved_kernels(engine: Engine, run_ids: list[int]) -> list[str]:
    """Per run (in ``run_ids`` order), the kernels that moved and how: ``softmax regression``
    (``rmsnorm slower on CPU (plumbing only)`` for a CPU timing)."""
    q = (
        select(Result.run_id, Case.kernel, Result.verdict, Run.device_class)
        .join(Case, Result.case_id == Case.id)
        .join(Run, Run.id == Result.run_id)
        .where(Result.run_id.in_(run_ids), Result.verdict.in_(LISTED_MOVES))
        .distinct()
    )
    moved: dict[int, list[str]] = {}
    with engine.connect() as conn:
        rows = sorted(conn.execute(q).all(), key=lambda r: (r[0], r[1]))
        for run_id, kernel, verdict, device_class in rows:
            moved.setdefault(run_id, []).append(
                f"{kernel} {verdict_label(str(device_class), str(verdict))}"
            )
    return [", ".join(moved.get(i, [])) for i in run_ids]


def run_detail(engine: Engine, run_id: int) -> dict[str, Any] | None:
    """One run with everything the run view shows (build log, error, options)."""
    q = (
        select(
            *RUN_COLUMNS,
            Repository.source,
            Commit.author,
            Commit.committed_at,
            Run.suites,
            Run.options,
            Run.error,
            Run.build_log,
        )
        .join(Repository, Run.repository_id == Repository.id)
        .outerjoin(Commit, Run.commit_id == Commit.id)
        .where(Run.id == run_id)
    )
    df = _with_durations(_frame(engine, q))
    if df.empty:
        return None
    row: dict[str, Any] = df.iloc[0].to_dict()
    row["message"] = run_subject(row["options"], row["message"])
    row["source"] = public_source(str(row["source"]))  # a URL's token stays on the server
    return row


def triggers(engine: Engine) -> list[str]:
    """The triggers runs were started by (push, pull_request, nightly, release, ...)."""
    with engine.connect() as conn:
        return sorted(str(t) for t in conn.scalars(select(Run.trigger).distinct()))


def commit_answer(engine: Engine, run_id: int) -> dict[str, Any] | None:
    """The composed answer of a run's commit on its GPU class (``jobs/judging/verdicts.py``):
    state, description, the runs its cases came from, those still measuring."""
    with Session(engine) as session:
        run = session.get(Run, run_id)
        answer = answer_for(session, run) if run is not None else None
        if answer is None:
            return None
        return {
            "state": answer.state,
            "description": answer.description,
            "run_id": answer.run_id,
            "runs": list(answer.runs),
            "in_flight": list(answer.in_flight),
        }


def run_spreads(engine: Engine, run_id: int) -> dict[str, float]:
    """Each case's run-to-run spread as the analysis allows for it when it judges run
    ``run_id`` unpaired (``jobs/judging/run_spread.py``): the Compare page widens its
    intervals by the same amount, so both give one interval the same word."""
    with Session(engine) as session:
        run = session.get(Run, run_id)
        if run is None:
            return {}
        return run_spread.case_spreads(session, run)


def run_counts(engine: Engine) -> pd.DataFrame:
    """Number of runs per (queue, state)."""
    q = (
        select(Run.queue, Run.status, func.count().label("runs"))
        .group_by(Run.queue, Run.status)
        .order_by(Run.queue, Run.status)
    )
    return _frame(engine, q)


# --------------------------------------------------------------------------- results

RESULT_COLUMNS = (
    Result.id.label("result_id"),
    Result.run_id,
    Result.case_id,
    Case.suite,
    Case.kernel,
    Case.backend,
    Case.params,
    Case.label,
    Result.status,
    Result.verdict,
    Result.median_s,
    Result.ci_low_s,
    Result.ci_high_s,
    Result.n_samples,
    Result.tflops,
    Result.gbps,
    Result.reliable,
    Result.device_name,
    Result.ratio,
    Result.ratio_ci_low,
    Result.ratio_ci_high,
    Result.p_value,
    Result.error,
    Result.log_tail,
)


def run_results(engine: Engine, run_id: int, samples: bool = False) -> pd.DataFrame:
    """Per-case results of one run, with device telemetry (and raw samples if asked)."""
    cols: list[Any] = [*RESULT_COLUMNS, Result.record["device"].label("device")]
    if samples:
        cols.append(Result.samples)
    q = (
        select(*cols)
        .join(Case, Result.case_id == Case.id)
        .where(Result.run_id == run_id)
        .order_by(Case.suite, Case.kernel, Case.label)
    )
    return _frame(engine, q)


def cases_for(engine: Engine, repository_id: int, device_class: str | None = None) -> pd.DataFrame:
    """Cases measured in a repository's recent runs (on one device class if given)."""
    recent = select(Run.id).where(Run.repository_id == repository_id)
    if device_class:
        recent = recent.where(Run.device_class == device_class)
    recent_ids = recent.order_by(Run.id.desc()).limit(RECENT_RUNS_FOR_CASES).subquery()
    measured = select(Result.case_id).where(Result.run_id.in_(select(recent_ids.c.id)))
    q = (
        select(
            Case.id.label("case_id"), Case.suite, Case.kernel, Case.backend, Case.params, Case.label
        )
        .where(Case.id.in_(measured))
        .order_by(Case.suite, Case.kernel, Case.label)
    )
    return _frame(engine, q)


def case_info(engine: Engine, case_id: str) -> dict[str, Any] | None:
    q = select(
        Case.id.label("case_id"), Case.suite, Case.kernel, Case.backend, Case.params, Case.label
    ).where(Case.id == case_id)
    df = _frame(engine, q)
    return None if df.empty else dict(df.iloc[0].to_dict())


def case_repositories(engine: Engine, case_id: str) -> list[int]:
    """Repositories whose runs measured a case (newest run first), for deep links."""
    q = (
        select(Run.repository_id)
        .join(Result, Result.run_id == Run.id)
        .where(Result.case_id == case_id)
        .order_by(Run.id.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        return [int(v) for v in conn.scalars(q)]


def trend(
    engine: Engine, case_ids: Sequence[str], repository_id: int, device_class: str
) -> pd.DataFrame:
    """Results of cases over a repository's commits on one device class, in commit order.

    A commit measured more than once is drawn from its composed answer
    (``jobs/judging/compose.py``): the most authoritative run that measured the case
    (push/PR gate run > manual ``--gate`` > manual run > bisection step), a compared
    measurement before an uncompared one, the newest within a kind; ``run_id`` and
    ``source`` say which run the point came from. ``regression`` is the kind of the
    finding that run made of the case (regression | less_accurate | broken |
    changepoint: evidence of a problem row), if any, and ``regression_ratio`` its ratio.
    """
    if not case_ids:
        return pd.DataFrame()
    options = type_coerce(Run.options, JSONType)
    # each run's findings, by case: the evidence rows of problems (jobs/judging/problems.py)
    found = (
        select(
            RegressionEvidence.run_id,
            Regression.case_id,
            Regression.id.label("regression_id"),
            RegressionEvidence.kind,
            Regression.state,
            RegressionEvidence.ratio,
        )
        .join(Regression, Regression.id == RegressionEvidence.regression_id)
        .where(Regression.case_id.in_(list(case_ids)))
        .subquery()
    )
    q = (
        select(
            Result.run_id,
            Result.case_id,
            Case.label,
            Case.kernel,
            Commit.sha,
            Commit.sequence,
            Commit.message,
            Commit.committed_at,
            Commit.author,
            Result.status,
            Result.verdict,
            Result.median_s,
            Result.ci_low_s,
            Result.ci_high_s,
            Result.tflops,
            Result.gbps,
            Result.record["throughput"]["pct_of_peak"].as_float().label("pct_of_peak"),
            Result.record["correctness"]["errors"]["rel_l2"].as_float().label("rel_l2"),
            Result.reliable,
            Result.ratio,
            Result.error,
            Run.trigger,
            options["gate"].as_boolean().label("gate"),
            options["bisection_id"].as_integer().label("bisection_id"),
            options["baseline_for"].as_integer().label("baseline_for"),
            options["confirms"].as_integer().label("confirms"),
            found.c.regression_id,
            found.c.kind.label("regression"),
            found.c.state.label("regression_state"),
            found.c.ratio.label("regression_ratio"),
        )
        .join(Run, Result.run_id == Run.id)
        .join(Commit, Run.commit_id == Commit.id)
        .join(Case, Result.case_id == Case.id)
        .outerjoin(found, (found.c.run_id == Result.run_id) & (found.c.case_id == Result.case_id))
        .where(
            Result.case_id.in_(list(case_ids)),
            Run.repository_id == repository_id,
            Run.device_class == device_class,
            Run.status != "cancelled",
        )
        # ``sequence`` is the first-parent depth from git (db/store.py:upsert_commit):
        # commits of two branches may share one, so ties go by commit time.
        .order_by(Commit.sequence, Commit.committed_at, Result.run_id)
    )
    df = _frame(engine, q)
    if df.empty:
        return df
    # a bisection step or a follow-up run the judgement asked for (``RunOptions.follow_up``)
    steps = df["bisection_id"].notna() | df["baseline_for"].notna() | df["confirms"].notna()
    kinds = [
        authority_of(str(t), gate=bool(g) if pd.notna(g) else False, bisection=bool(b))
        for t, g, b in zip(df["trigger"], df["gate"], steps, strict=True)
    ]
    df["authority"] = [int(k) for k in kinds]
    df["source"] = [
        source_word(str(t), k, baseline_for=pd.notna(b), confirms=pd.notna(c))
        for t, k, b, c in zip(df["trigger"], kinds, df["baseline_for"], df["confirms"], strict=True)
    ]
    df["judged"] = df["verdict"].notna()
    df["valid"] = df["status"] != "skip"  # a skip is drawn only where nothing measured it
    # one point per (case, commit): the run of the commit's composed answer
    df = df.sort_values(
        ["case_id", "sha", "valid", "authority", "judged", "run_id"], kind="stable"
    ).drop_duplicates(subset=["case_id", "sha"], keep="last")
    df = df.sort_values(["sequence", "committed_at", "run_id"], kind="stable")
    dropped = ["gate", "bisection_id", "baseline_for", "confirms", "judged", "valid"]
    return df.drop(columns=dropped).reset_index(drop=True)


def roofline(engine: Engine, run_id: int) -> pd.DataFrame:
    """Achieved rates and arithmetic intensity of one run's cases, with device ceilings."""
    thr = Result.record["throughput"]
    q = (
        select(
            Result.case_id,
            Case.kernel,
            Case.label,
            Result.status,
            Result.reliable,
            Result.tflops,
            Result.gbps,
            Result.device_name,
            thr["flops"].as_float().label("flops"),
            thr["bytes"].as_float().label("bytes"),
            thr["pct_of_peak"].as_float().label("pct_of_peak"),
            thr["bound_by"].as_string().label("bound_by"),
            Result.record["device"]["peaks"].label("peaks"),
        )
        .join(Case, Result.case_id == Case.id)
        .where(Result.run_id == run_id)
        .order_by(Case.kernel, Case.label)
    )
    df = _frame(engine, q)
    if df.empty:
        return df
    ok = (df["bytes"].fillna(0) > 0) & df["flops"].notna()
    df["intensity"] = (df["flops"] / df["bytes"]).where(ok)
    return df


# --------------------------------------------------------------------------- regressions


def regressions(
    engine: Engine,
    states: Sequence[str] = ("open",),
    repository_id: int | None = None,
    limit: int = 500,
) -> pd.DataFrame:
    """Problem rows, newest first, with case, culprit range, repository and evidence count.

    One row per problem (``jobs/judging/problems.py``): its range ``good..bad`` is where
    every finding agrees the culprit lies; ``evidence`` is how many runs found it.
    """
    base_run = aliased(Run)
    base_commit = aliased(Commit)
    evidence = (
        select(RegressionEvidence.regression_id, func.count().label("evidence"))
        .group_by(RegressionEvidence.regression_id)
        .subquery()
    )
    q = (
        select(
            Regression.id,
            Regression.kind,
            Regression.state,
            Regression.ratio,
            Regression.ratio_ci_low,
            Regression.ratio_ci_high,
            Regression.p_value,
            Regression.detail,
            Regression.created,
            Regression.run_id,
            Regression.case_id,
            func.coalesce(Regression.baseline_run_id, Run.baseline_run_id).label("baseline_run_id"),
            Case.suite,
            Case.kernel,
            Case.backend,
            Case.label,
            Case.params,
            Run.repository_id,
            Repository.name.label("repository"),
            Repository.source.label("source"),
            func.coalesce(Regression.device_class, Run.device_class).label("device_class"),
            Run.options.label("run_options"),
            func.coalesce(Regression.bad_sha, Commit.sha).label("sha"),
            Commit.message,
            func.coalesce(Regression.bad_sequence, Commit.sequence).label("sequence"),
            func.coalesce(Regression.good_sha, base_commit.sha, Run.baseline_sha).label(
                "baseline_sha"
            ),
            func.coalesce(Regression.good_sequence, base_commit.sequence).label(
                "baseline_sequence"
            ),
            func.coalesce(evidence.c.evidence, 0).label("evidence"),
        )
        .join(Run, Regression.run_id == Run.id)
        .join(Repository, Run.repository_id == Repository.id)
        .join(Case, Regression.case_id == Case.id)
        .outerjoin(Commit, Run.commit_id == Commit.id)
        .outerjoin(
            base_run,
            base_run.id == func.coalesce(Regression.baseline_run_id, Run.baseline_run_id),
        )
        .outerjoin(base_commit, base_run.commit_id == base_commit.id)
        .outerjoin(evidence, evidence.c.regression_id == Regression.id)
        .order_by(Regression.created.desc(), Regression.id.desc())
        .limit(limit)
    )
    if states:
        q = q.where(Regression.state.in_(list(states)))
    if repository_id is not None:
        q = q.where(Run.repository_id == repository_id)
    df = _frame(engine, q)
    df["source"] = [public_source(str(s)) for s in df["source"]]  # a URL's token stays home
    df["plumbing_only"] = [
        # a change point is a slowdown in the history: a timing, plumbing only on the CPU
        plumbing_only(str(dc), CaseVerdict.REGRESSION if kind == CHANGEPOINT else str(kind))
        for dc, kind in zip(df["device_class"], df["kind"], strict=True)
    ]
    return df


def regression_evidence(engine: Engine, regression_id: int) -> pd.DataFrame:
    """Every run that found one problem, oldest first: its kind, range, ratio and source."""
    q = (
        select(
            RegressionEvidence.run_id,
            RegressionEvidence.kind,
            RegressionEvidence.source,
            RegressionEvidence.good_sha,
            RegressionEvidence.bad_sha,
            RegressionEvidence.ratio,
            RegressionEvidence.ratio_ci_low,
            RegressionEvidence.ratio_ci_high,
            RegressionEvidence.detail,
            RegressionEvidence.created,
            Run.trigger,
        )
        .join(Run, Run.id == RegressionEvidence.run_id)
        .where(RegressionEvidence.regression_id == regression_id)
        .order_by(RegressionEvidence.id)
    )
    return _frame(engine, q)


def triage_events(engine: Engine, regression_ids: Sequence[int]) -> pd.DataFrame:
    """Audit trail of the given regressions, oldest first."""
    q = (
        select(
            TriageEvent.regression_id,
            TriageEvent.created,
            TriageEvent.who,
            TriageEvent.action,
            TriageEvent.from_state,
            TriageEvent.to_state,
            TriageEvent.note,
        )
        .where(TriageEvent.regression_id.in_(list(regression_ids)))
        .order_by(TriageEvent.created, TriageEvent.id)
    )
    return _frame(engine, q)


# --------------------------------------------------------------------------- fleet


def workers(engine: Engine) -> pd.DataFrame:
    """Workers seen in runs: runs done, last activity, what they run now."""
    running = func.sum(sql_case((Run.status == "running", 1), else_=0))
    q = (
        select(
            Run.worker,
            func.count().label("runs"),
            running.label("running"),
            func.max(Run.started).label("last_started"),
            func.max(Run.finished).label("last_finished"),
            func.min(Run.device_class).label("device_class"),
        )
        .where(Run.worker.is_not(None))
        .group_by(Run.worker)
    )
    df = _frame(engine, q)
    for col in ("last_started", "last_finished"):
        df[col] = pd.to_datetime(df[col], utc=True)
    if df.empty:
        df["last_activity"] = pd.Series(dtype="datetime64[ns, UTC]")
        return df
    df["last_activity"] = df[["last_started", "last_finished"]].max(axis=1)
    return df.sort_values("last_activity", ascending=False).reset_index(drop=True)


def running_runs(engine: Engine) -> pd.DataFrame:
    return runs(engine, statuses=("running",), limit=1000)


def heartbeats(engine: Engine) -> pd.DataFrame | None:
    """Worker heartbeats (kernelwatch.db.fleet), newest first; None before migration 0003."""
    if "worker_heartbeats" not in set(inspect(engine).get_table_names()):
        return None
    hb = WorkerHeartbeat
    q = (
        select(
            hb.name,
            hb.host,
            hb.device_class,
            hb.gpu_name,
            hb.gpu_uuid,
            hb.state,
            hb.current_run_id,
            hb.sm_mhz,
            hb.last_seen,
            hb.started,
            hb.stopped,
        )
        .order_by(hb.last_seen.desc())
        .limit(500)
    )
    with engine.connect() as conn:
        result = conn.execute(q)
        return pd.DataFrame.from_records([tuple(r) for r in result], columns=list(result.keys()))


# --------------------------------------------------------------------------- bisections


def bisections(engine: Engine, limit: int = 200) -> pd.DataFrame:
    """Bisections newest first: range, status, culprit and its effect, device seconds."""
    b = Bisection
    q = (
        select(
            b.id,
            Repository.name.label("repository"),
            b.device_class,
            b.good_sha,
            b.bad_sha,
            b.case_pattern,
            b.status,
            b.reason,
            b.culprit_sha,
            b.culprit_verdict,
            b.culprit_ratio,
            b.culprit_ci_low,
            b.culprit_ci_high,
            b.gpu_seconds,
            b.budget_s,
            b.created,
            b.finished,
            b.commits,
            b.repository_id,
        )
        .join(Repository, Repository.id == b.repository_id)
        .order_by(b.id.desc())
        .limit(limit)
    )
    return _frame(engine, q)


def bisection_step_cases(engine: Engine, bisection_id: int) -> pd.DataFrame:
    """Every case result of a bisection's step runs: the step, the case, its paired ratio
    against the step's reference build, the interval and the verdict (the range's trend)."""
    s = BisectionStep
    q = (
        select(
            s.position,
            s.sha,
            s.against_sha,
            s.purpose,
            s.run_id,
            Result.case_id,
            Result.record["kernel"].as_string().label("kernel"),
            Case.label,
            Result.status,
            Result.verdict,
            Result.ratio,
            Result.ratio_ci_low,
            Result.ratio_ci_high,
        )
        .join(Result, Result.run_id == s.run_id)
        .join(Case, Case.id == Result.case_id)
        .where(s.bisection_id == bisection_id)
        .order_by(s.position, Result.case_id)
    )
    return _frame(engine, q)


def bisections_of(engine: Engine, repository_id: int, run_id: int, sha: str) -> pd.DataFrame:
    """Bisections a regression started (its run is their origin) or that end at its commit."""
    b = Bisection
    q = (
        select(b.id, b.status, b.culprit_sha, b.culprit_verdict, b.culprit_ratio, b.gpu_seconds)
        .where(
            b.repository_id == repository_id,
            (b.origin_run_id == run_id) | (b.bad_sha == sha),
        )
        .order_by(b.id.desc())
    )
    return _frame(engine, q)


def bisection_steps(engine: Engine, bisection_id: int) -> pd.DataFrame:
    """One bisection's steps in order, each with its run and that run's state."""
    s = BisectionStep
    q = (
        select(
            s.position,
            s.purpose,
            s.sha,
            s.against_sha,
            s.outcome,
            s.verdict,
            s.seconds,
            s.run_id,
            Run.status.label("run_status"),
        )
        .outerjoin(Run, Run.id == s.run_id)
        .where(s.bisection_id == bisection_id)
        .order_by(s.position)
    )
    return _frame(engine, q)


# --------------------------------------------------------------------------- self-tests


def selftests(engine: Engine, limit: int = 5000) -> pd.DataFrame | None:
    """The cards' timer self-tests, oldest first (``db/selftest.py``); None before the
    table exists (migration 0007)."""
    if "card_selftests" not in set(inspect(engine).get_table_names()):
        return None
    t = CardSelftest
    q = (
        select(
            t.id,
            t.card,
            t.device_class,
            t.gpu_name,
            t.host,
            t.worker,
            t.cv,
            t.sample_cv,
            t.ratio,
            t.ci_low,
            t.ci_high,
            t.baseline_cv,
            t.flagged,
            t.reason,
            t.error,
            t.created,
        )
        .order_by(t.id.desc())
        .limit(limit)
    )
    df = _frame(engine, q)
    df["created"] = pd.to_datetime(df["created"], utc=True)
    return df.iloc[::-1].reset_index(drop=True)
