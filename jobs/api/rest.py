"""Read-only REST API: health, metrics, runs with their cases, each case's stored result
record, verdicts of a commit.

Every ``/api/v1`` route needs the read token where ``jobs/api/auth.py`` says so;
``/healthz`` never does, ``/metrics`` only with ``KW_METRICS_AUTH``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import func, select, text

from kernelwatch.db.models import Case, Commit, Result, Run
from kernelwatch.db.types import INT_MAX
from kernelwatch.jobs.api.auth import require_metrics, require_read
from kernelwatch.jobs.api.context import ApiContext, context
from kernelwatch.jobs.api.schemas import (
    VERDICT_EXAMPLE,
    ErrorResponse,
    Health,
    ResultList,
    ResultOut,
    RunBrief,
    RunDetail,
    RunList,
    VerdictOut,
)
from kernelwatch.jobs.cli.gate_remote import SHA_PATTERN
from kernelwatch.jobs.github.render import answer_view
from kernelwatch.jobs.judging.gate_answer import AmbiguousSha, gate_answer
from kernelwatch.jobs.judging.report import ratio_ci, run_summary
from kernelwatch.jobs.judging.verdicts import repository_ids

router = APIRouter()
# /api/v1/*: the read token (jobs/api/auth.py); 401 is documented on each route
reads = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(require_read)],
    responses={401: {"model": ErrorResponse, "description": "no token, or not this server's"}},
)

Ctx = Annotated[ApiContext, Depends(context)]
# db.models.RUN_STATES, spelt out for the OpenAPI enum
RunState = Literal["queued", "running", "succeeded", "failed", "error", "cancelled"]


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
def healthz(ctx: Ctx) -> Any:
    try:
        with ctx.factory() as session:
            session.execute(text("SELECT 1"))
        db = "ok"
    except Exception as exc:  # reported, not raised: a probe wants an answer
        db = f"error: {type(exc).__name__}"
    body = Health(status="ok" if db == "ok" else "degraded", database=db, version=_version())
    if db != "ok":
        return Response(body.model_dump_json(), status_code=503, media_type="application/json")
    return body


@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(require_metrics)],
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def metrics(ctx: Ctx) -> Response:
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _brief(run: Run) -> RunBrief:
    return RunBrief(
        id=run.id,
        repository=run.repository.name,
        commit=run.commit.sha if run.commit else None,
        status=run.status,
        verdict=run.verdict,
        trigger=run.trigger,
        device_class=run.device_class,
        baseline=run.baseline_sha,
        baseline_run=run.baseline_run_id,
        created=run.created.isoformat() if run.created else None,
        finished=run.finished.isoformat() if run.finished else None,
    )


@reads.get("/runs", response_model=RunList)
def list_runs(
    ctx: Ctx,
    repo: Annotated[str | None, Query(max_length=255)] = None,
    sha: Annotated[str | None, Query(pattern=SHA_PATTERN)] = None,
    status: RunState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=INT_MAX)] = 0,
) -> RunList:
    with ctx.factory() as session:
        q = select(Run)
        if repo is not None:
            q = q.where(Run.repository_id.in_(repository_ids(session, repo)))
        if sha is not None:
            q = q.join(Commit, Run.commit_id == Commit.id).where(Commit.sha.startswith(sha))
        if status is not None:
            q = q.where(Run.status == status)
        total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
        runs = session.scalars(q.order_by(Run.id.desc()).limit(limit).offset(offset)).all()
        return RunList(runs=[_brief(r) for r in runs], total=total)


@reads.get("/runs/{run_id}", response_model=RunDetail, responses={404: {"model": ErrorResponse}})
def get_run(ctx: Ctx, run_id: int) -> RunDetail:
    if not 0 < run_id <= INT_MAX:
        raise HTTPException(404, f"no run {run_id}")
    with ctx.factory() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id}")
        summary = run_summary(session, run)
    summary["error"] = summary["error"] or ""
    for case in summary["cases"]:
        case["error"] = case["error"] or ""
    return RunDetail.model_validate(summary)


@reads.get(
    "/runs/{run_id}/results",
    response_model=ResultList,
    responses={404: {"model": ErrorResponse}},
    summary="A run's stored results, each with its whole record",
)
def list_results(
    ctx: Ctx,
    run_id: int,
    kernel: Annotated[str | None, Query(max_length=255)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT_MAX)] = 0,
) -> ResultList:
    """What ``show`` summarizes, in full: each case's record with its samples, its
    correctness errors, the device and environment it ran on and, in paired mode, both
    sides' comparison (a kernel's error text and log tail among them: the read token
    guards this as every ``/api/v1`` route)."""
    if not 0 < run_id <= INT_MAX:
        raise HTTPException(404, f"no run {run_id}")
    with ctx.factory() as session:
        if session.get(Run, run_id) is None:
            raise HTTPException(404, f"no run {run_id}")
        q = select(Result, Case).join(Case, Result.case_id == Case.id)
        q = q.where(Result.run_id == run_id)
        if kernel is not None:
            q = q.where(Case.kernel == kernel)
        total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
        rows = session.execute(q.order_by(Result.id).limit(limit).offset(offset)).all()
        results = [
            ResultOut(
                case_id=result.case_id,
                kernel=case.kernel,
                status=result.status,
                verdict=result.verdict,
                ratio=result.ratio,
                ratio_ci=ratio_ci(result),
                median_s=result.median_s,
                baseline_result=result.baseline_result_id,
                record=dict(result.record or {}),
            )
            for result, case in rows
        ]
    return ResultList(run_id=run_id, results=results, total=total)


@reads.get(
    "/verdicts",
    response_model=VerdictOut,
    responses={
        200: {"content": {"application/json": {"example": VERDICT_EXAMPLE}}},
        404: {"model": ErrorResponse, "description": "no repository of that name (yet)"},
        409: {"model": ErrorResponse, "description": "the sha prefix names several commits"},
    },
    summary="The merge gate's answer for one commit",
)
def get_verdict(
    ctx: Ctx,
    repo: Annotated[
        str, Query(min_length=1, max_length=255, description="owner/name, a name or a source")
    ],
    sha: Annotated[str, Query(pattern=SHA_PATTERN, description="a full sha or 7+ hex digits")],
) -> VerdictOut:
    """What ``kernelwatch gate`` answers (``gate --api`` and the GitHub Action read this):
    ``pending`` while a run of the sha is queued or running, then its verdict, with the
    exit code the gate gives it, the table it prints and the PR comment's markdown."""
    with ctx.factory() as session:
        if not repository_ids(session, repo):
            raise HTTPException(404, f"no repository {repo!r}")
        try:
            answer = gate_answer(session, repo, sha)
        except AmbiguousSha as exc:
            raise HTTPException(409, str(exc)) from None
    return VerdictOut.model_validate(answer_view(answer, ctx.settings.dashboard_url))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelwatch")
    except PackageNotFoundError:
        return "0+unknown"


__all__ = ["reads", "router"]
