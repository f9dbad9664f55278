"""Response models of the REST API (the OpenAPI document is generated from them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class WebhookResponse(BaseModel):
    status: str = Field(
        description="pong | planned | ignored | duplicate | awaiting_approval | "
        "config_error | error | invalid"
    )
    detail: str = ""
    runs: list[int] = Field(default_factory=list, description="ids of the runs planned")


class ErrorResponse(BaseModel):
    detail: str


class Health(BaseModel):
    status: str
    database: str
    version: str


class RunBrief(BaseModel):
    id: int
    repository: str
    commit: str | None
    status: str
    verdict: str | None
    trigger: str
    device_class: str
    baseline: str | None
    baseline_run: int | None
    created: str | None
    finished: str | None


class CaseResult(BaseModel):
    case_id: str
    kernel: str
    backend: str
    params: dict[str, Any]
    status: str
    verdict: str | None
    median_s: float | None
    ratio: float | None
    ratio_ci: list[float | None] | None
    tflops: float | None
    gbps: float | None
    error: str


class RunDetail(BaseModel):
    id: int
    repository: str
    commit: str | None
    message: str
    baseline: str | None
    status: str
    verdict: str | None
    worker: str | None
    device_class: str
    error: str
    started: str | None
    finished: str | None
    cases: list[CaseResult]


class RunList(BaseModel):
    runs: list[RunBrief]
    total: int


class MovedCaseOut(BaseModel):
    kernel: str
    backend: str
    label: str
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    baseline_median_s: float | None
    median_s: float | None
    error: str
    run_id: int | None = Field(None, description="the run this case's answer came from")
    source: str = Field("", description="that run in words: push run 12, manual run 14")


class ClassVerdictOut(BaseModel):
    device_class: str
    state: str = Field(description="pending | success | failure | error (commit status)")
    description: str
    run_id: int
    baseline_sha: str | None
    baseline_run_id: int | None
    target_url: str
    counts: dict[str, int]
    moved: list[MovedCaseOut]
    runs: list[int] = Field(
        default_factory=list, description="the runs whose cases make this class's answer"
    )
    in_flight: list[int] = Field(
        default_factory=list, description="runs of the commit on this class still measuring"
    )


class VerdictOut(BaseModel):
    repository: str
    sha: str
    verdict: str = Field(description="pass | fail | error | pending | none")
    classes: list[ClassVerdictOut]
