"""The REST API's request and response bodies (pydantic; the OpenAPI schema is built from them).

Owns the wire format only: field names, limits, examples. Must not run or load anything.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "Budget",
    "ErrorBody",
    "EvaluationRequest",
    "JobList",
    "JobRequest",
    "JobView",
    "KBHit",
    "KBSearchResult",
    "ProblemSource",
]

JobKind = Literal["optimize", "evaluate"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemSource(_Body):
    """A problem sent inline: the text of one file (needs the ``custom-code`` scope)."""

    format: Literal["op.yaml", "kernelbench"] = Field(
        description="op.yaml with inline `reference: {code}`, `inputs: {code}` and `shapes: "
        "{cases}`, or a KernelBench .py (class Model, get_inputs, get_init_inputs)."
    )
    source: str = Field(min_length=1, description="The file's text.")


class Budget(_Body):
    """Limits of one optimization job."""

    max_iters: int = Field(default=3, ge=1, le=100, description="Propose-evaluate rounds.")


class _ProblemChoice(_Body):
    """Exactly one of a suite operator or an inline problem."""

    operator: str | None = Field(
        default=None,
        description="An operator of a built-in suite, e.g. `rms_norm` (see `suite`).",
        examples=["rms_norm"],
    )
    suite: str = Field(default="atrex30", description="The suite `operator` comes from.")
    problem: ProblemSource | None = Field(default=None, description="An inline problem instead.")
    shapes: list[str] | None = Field(
        default=None,
        description="Shape ids of the operator to keep (its smoke shapes always stay); "
        "None keeps all. Only with `operator`.",
    )

    @model_validator(mode="after")
    def _one_problem(self) -> _ProblemChoice:
        if (self.operator is None) == (self.problem is None):
            raise ValueError("give exactly one of `operator` (a suite operator) and `problem`")
        if self.shapes is not None and self.operator is None:
            raise ValueError("`shapes` selects shapes of a suite `operator`; an inline problem "
                             "lists its own shapes")  # fmt: skip
        return self


class JobRequest(_ProblemChoice):
    """POST /v1/jobs: optimize an operator."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"operator": "rms_norm", "shapes": ["0", "1"], "budget": {"max_iters": 3}},
                {
                    "problem": {"format": "kernelbench", "source": "import torch\n..."},
                    "dsl": "triton",
                    "model": "openai/gpt-4.1",
                },
            ]
        },
    )

    dsl: Literal["triton", "cuda"] = "triton"
    budget: Budget = Field(default_factory=Budget)
    model: str | None = Field(
        default=None, description="LLM (litellm name); None = the server's, or the offline search."
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"


class EvaluationRequest(_ProblemChoice):
    """POST /v1/evaluations: score one candidate kernel against a problem."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"operator": "rms_norm", "candidate": "import torch\nimport triton\n..."}]
        },
    )

    candidate: str = Field(min_length=1, description="The candidate file: class ModelNew.")
    device: Literal["auto", "cpu", "cuda"] = "auto"


class JobView(BaseModel):
    """A job as the API shows it."""

    id: str
    kind: JobKind
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    attempts: int = 0
    cancel_requested: bool = False
    error: str | None = None
    result: dict[str, Any] | None = Field(
        default=None, description="Summary once finished (speedup, SOL fraction, verdict...)."
    )
    links: dict[str, str] = Field(default_factory=dict)


class JobList(BaseModel):
    """GET /v1/jobs."""

    jobs: list[JobView]


class KBHit(BaseModel):
    """One knowledge-base search hit."""

    id: str
    kind: str
    title: str
    score: float
    text: str


class KBSearchResult(BaseModel):
    """GET /v1/kb/search."""

    query: str
    hits: list[KBHit]


class ErrorBody(BaseModel):
    """Every error response: a stable code and a message saying what to do."""

    code: str = Field(examples=["spec.invalid"])
    message: str
