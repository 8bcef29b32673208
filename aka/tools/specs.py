"""The three tools, defined once: names, descriptions, argument models and how each one runs.

Every adapter (OpenAI schema, LangChain, MCP) reads ``TOOLS`` and runs a call through
``dispatch``, so their names, parameter schemas and behaviour cannot drift apart. An argument
model's ``model_json_schema()`` is the tool's parameters schema. Owns the LLM-facing interface
only: checking a problem, running a candidate or searching is the service's work, reached through
``AkaClient``; this module must not re-check what the service checks (for example that exactly
one of ``operator`` and ``problem`` is given).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aka.core import AkaError, ServiceError
from aka.tools.client import AkaClient, EventCallback, JsonObject

__all__ = [
    "TOOLS",
    "EvaluateInput",
    "KBSearchInput",
    "OptimizeInput",
    "ToolSpec",
    "dispatch",
    "error_result",
    "tool_spec",
]

_Input = TypeVar("_Input", bound=BaseModel)


class _ToolInput(BaseModel):
    # a model's made-up argument is an error it can correct, not something to drop silently
    model_config = ConfigDict(extra="forbid")


class _ProblemInput(_ToolInput):
    operator: str | None = Field(
        default=None,
        description="A built-in operator to work on, e.g. `rms_norm` (give this or `problem`).",
    )
    problem: str | None = Field(
        default=None,
        description="Instead of `operator`: the full text of a problem file, by default a "
        "KernelBench .py (class Model, get_inputs, get_init_inputs). Needs a token with the "
        "`custom-code` scope.",
    )
    problem_format: Literal["kernelbench", "op.yaml"] = Field(
        default="kernelbench",
        description="The format of `problem`: `kernelbench`, or `op.yaml` with inline `code` "
        "and `cases`.",
    )


class OptimizeInput(_ProblemInput):
    """Arguments of the aka_optimize tool."""

    shapes: list[str] | None = Field(
        default=None,
        description="Shape ids of `operator` to optimize for (its small smoke shapes always "
        "stay); omit for all.",
    )
    max_iters: int = Field(default=3, ge=1, le=100, description="Propose-evaluate rounds.")
    model: str | None = Field(
        default=None, description="The LLM that writes kernels (a litellm name); omit for the "
        "server's.",
    )  # fmt: skip
    dsl: Literal["triton", "cuda"] = Field(default="triton", description="The kernel language.")


class EvaluateInput(_ProblemInput):
    """Arguments of the aka_evaluate tool."""

    candidate: str = Field(
        min_length=1,
        description="The candidate kernel file's full text: a `class ModelNew(torch.nn.Module)` "
        "with the reference's constructor and forward signatures, computing in its own Triton or "
        "CUDA kernels.",
    )


class KBSearchInput(_ToolInput):
    """Arguments of the aka_kb_search tool."""

    query: str = Field(
        min_length=1,
        max_length=2000,
        description="What to look for, in words: a symptom ('rmsnorm at 40% of bandwidth'), a "
        "technique or an operator.",
    )
    k: int = Field(default=5, ge=1, le=50, description="How many hits.")
    op_family: str | None = Field(
        default=None, description="Only documents about this operator family, e.g. `norm`."
    )
    arch: str | None = Field(
        default=None, description="Only documents for this GPU architecture, e.g. `sm_90`."
    )


@dataclass(frozen=True)
class ToolSpec(Generic[_Input]):
    """One tool: its name, what it tells a model, its argument model and how it runs.

    Attributes:
        name: The tool name every adapter uses.
        description: What the tool does and what it returns, written for a model.
        input_model: The pydantic model of its arguments (the parameters schema).
        run: Calls the service with validated arguments (and, for a tool that waits for a job,
            a callback of the job's events, or None); returns a JSON object.
    """

    name: str
    description: str
    input_model: type[_Input]
    run: Callable[[AkaClient, _Input, EventCallback | None], JsonObject]

    def parameters(self) -> JsonObject:
        """The JSON schema (draft 2020-12) of the tool's arguments."""
        return self.input_model.model_json_schema()


def _optimize(client: AkaClient, args: OptimizeInput, on_event: EventCallback | None) -> JsonObject:
    return client.optimize(
        operator=args.operator, problem=args.problem, shapes=args.shapes,
        max_iters=args.max_iters, model=args.model, dsl=args.dsl,
        problem_format=args.problem_format, on_event=on_event,
    )  # fmt: skip


def _evaluate(client: AkaClient, args: EvaluateInput, on_event: EventCallback | None) -> JsonObject:
    return client.evaluate(
        args.candidate, operator=args.operator, problem=args.problem,
        problem_format=args.problem_format, on_event=on_event,
    )  # fmt: skip


def _kb_search(client: AkaClient, args: KBSearchInput, _: EventCallback | None) -> JsonObject:
    hits = client.kb_search(args.query, k=args.k, op_family=args.op_family, arch=args.arch)
    return {"query": args.query, "hits": hits}


TOOLS: tuple[ToolSpec[Any], ...] = (
    ToolSpec(
        name="aka_optimize",
        description="Optimize a GPU operator: aka's agent writes kernels, scores each one in a "
        "sandbox (correctness on every shape, then timing against PyTorch) and keeps the fastest "
        "correct one. Takes minutes. Returns the job (status, result with speedup and "
        "speed-of-light fraction, error) and `kernel`, the winning kernel file, when there is one.",
        input_model=OptimizeInput,
        run=_optimize,
    ),
    ToolSpec(
        name="aka_evaluate",
        description="Score one candidate kernel against an operator in aka's sandboxed harness, "
        "which kernels cannot fool. Returns the evaluation job; its `result` holds the verdict "
        "(accepted or why not), the score and each shape's verdict and speed-of-light fraction.",
        input_model=EvaluateInput,
        run=_evaluate,
    ),
    ToolSpec(
        name="aka_kb_search",
        description="Search aka's knowledge base of GPU-kernel techniques, pitfalls, symptoms "
        "and hardware facts. Returns the best hits (id, kind, title, score, text).",
        input_model=KBSearchInput,
        run=_kb_search,
    ),
)


def tool_spec(name: str) -> ToolSpec[Any]:
    """The tool named ``name``.

    Raises:
        ServiceError: ``tools.unknown_tool``: no tool has that name.
    """
    for spec in TOOLS:
        if spec.name == name:
            return spec
    known = ", ".join(spec.name for spec in TOOLS)
    raise ServiceError(f"no tool named {name!r}; the tools are {known}", code="tools.unknown_tool")


def dispatch(
    client: AkaClient,
    name: str,
    arguments: Mapping[str, Any] | str,
    on_event: EventCallback | None = None,
) -> JsonObject:
    """Run one tool call by name: validate its arguments, then call the service.

    Args:
        client: The service to call.
        name: The tool's name, e.g. ``aka_evaluate``.
        arguments: Its arguments, as a mapping or as the JSON text a model sends.
        on_event: For a tool that waits for a job: called with each of its events (progress).

    Returns:
        The tool's result, a JSON object (``aka_kb_search``: ``{query, hits}``).

    Raises:
        ServiceError: ``tools.unknown_tool`` or ``tools.invalid_arguments`` (the message names
            the fields), or the service's own error (refused, unreachable, job timed out).
    """
    spec = tool_spec(name)
    try:
        raw = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
        args = spec.input_model.model_validate(raw)
    except (ValueError, ValidationError) as err:  # json's and pydantic's errors
        raise ServiceError(
            f"invalid arguments for {name}: {_explain(err)}; see the tool's parameters schema",
            code="tools.invalid_arguments",
        ) from err
    return spec.run(client, args, on_event)


def error_result(err: AkaError) -> JsonObject:
    """A refused tool call as a result a model can read and act on: ``{"error": {...}}``."""
    status = err.status if isinstance(err, ServiceError) else None
    return {"error": {"code": err.code, "message": err.message, "status": status}}


def _explain(err: Exception) -> str:
    if not isinstance(err, ValidationError):
        return str(err)
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
    return "; ".join(parts)
