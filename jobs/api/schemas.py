"""Response models of the REST API (the OpenAPI document is generated from them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
    accuracy: str = Field("", description="what a less_accurate case lost, as its check said")
    accuracy_growth: float | None = None


class EnvironmentOut(BaseModel):
    """One environment a run used: a commit built in ``seconds`` (a released version,
    named by its pin, installed in them), or None: from the cache."""

    commit: str
    seconds: float | None
    profile: str


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
    environments: list[EnvironmentOut] = []
    cases: list[CaseResult]


class ResultOut(BaseModel):
    """One case's stored result: the columns the verdict uses and the whole record
    (design.md's record: correctness, timing with samples, device, environment, the
    paired section, log tail) as the runner or the paired coordinator wrote it."""

    case_id: str
    kernel: str
    status: str
    verdict: str | None
    ratio: float | None
    ratio_ci: list[float | None] | None
    median_s: float | None
    baseline_result: int | None
    record: dict[str, Any]


class ResultList(BaseModel):
    run_id: int
    results: list[ResultOut]
    total: int


class RunList(BaseModel):
    runs: list[RunBrief]
    total: int


class MovedCaseOut(BaseModel):
    kernel: str
    backend: str
    label: str
    verdict: str = Field(
        description="regression | less_accurate | broken | error | inconclusive | improvement"
    )
    ratio: float | None = Field(description="candidate / baseline median time (> 1 slower)")
    ci_low: float | None
    ci_high: float | None
    baseline_median_s: float | None
    median_s: float | None
    error: str
    run_id: int | None = Field(None, description="the run this case's answer came from")
    source: str = Field("", description="that run in words: push run 12, manual run 14")
    accuracy: str = Field(
        "",
        description="what a less_accurate (or broken) case lost against its baseline on the "
        "same inputs, as its check worded it; empty where none (then ratio is what moved)",
    )
    accuracy_growth: float | None = Field(
        None, description="the largest error growth (candidate / baseline error) behind it"
    )


class ClassVerdictOut(BaseModel):
    device_class: str
    state: str = Field(description="pending | success | failure | neutral | error (commit status)")
    description: str
    run_id: int
    baseline_sha: str | None
    baseline_run_id: int | None
    target_url: str = Field(description="the dashboard view that explains this state")
    counts: dict[str, int]
    moved: list[MovedCaseOut]
    runs: list[int] = Field(
        default_factory=list, description="the runs whose cases make this class's answer"
    )
    in_flight: list[int] = Field(
        default_factory=list, description="runs of the commit on this class still measuring"
    )


# One answer as the API gives it (docs/github.md shows the same); kept valid by a test.
VERDICT_EXAMPLE: dict[str, Any] = {
    "repository": "acme/kernels",
    "sha": "c" * 40,
    "verdict": "fail",
    "exit_code": 1,
    "in_flight": [],
    "dashboard_url": "https://kw.example.com/?page=compare&a=41&b=42",
    "classes": [
        {
            "device_class": "h100",
            "state": "failure",
            "description": "1 regression, 9 unchanged",
            "run_id": 42,
            "baseline_sha": "b" * 40,
            "baseline_run_id": 41,
            "target_url": "https://kw.example.com/?page=compare&a=41&b=42",
            "counts": {"regression": 1, "unchanged": 9},
            "moved": [
                {
                    "kernel": "softmax",
                    "backend": "kern",
                    "label": "cols=1024, rows=4096",
                    "verdict": "regression",
                    "ratio": 1.233,
                    "ci_low": 1.201,
                    "ci_high": 1.262,
                    "baseline_median_s": 0.00012,
                    "median_s": 0.000148,
                    "error": "",
                }
            ],
        }
    ],
    "table": "acme/kernels@cccccccccccc: FAIL\n\n  gpu class    state       run  description\n"
    "  h100         failure      42  1 regression, 9 unchanged\n...",
    "markdown": "<!-- kernelwatch:pr-comment -->\n### kernelwatch: ❌ 1 regression\n...",
}


class VerdictOut(BaseModel):
    """The merge gate's answer for one commit, in every GPU class."""

    model_config = ConfigDict(json_schema_extra={"examples": [VERDICT_EXAMPLE]})

    repository: str
    sha: str = Field(description="the full sha the answer is about")
    verdict: str = Field(
        description="pass | fail | neutral | error | pending (a run of this sha is still "
        "queued or running, or waits for its baseline) | none (no runs of this sha yet)"
    )
    exit_code: int = Field(
        description="what `kernelwatch gate` exits with for this answer: 0 pass, 1 fail "
        "(regression, less_accurate, broken), 2 error or no finished answer (pending, "
        "none), 3 neutral (inconclusive)"
    )
    in_flight: list[int] = Field(
        default_factory=list, description="ids of the runs of this sha still queued or running"
    )
    dashboard_url: str = Field(
        description="the dashboard view of the first GPU class (each class has its own)"
    )
    classes: list[ClassVerdictOut]
    table: str = Field(description="the table `kernelwatch gate` prints, as plain text")
    markdown: str = Field(description="the same answer as the PR comment's markdown")
