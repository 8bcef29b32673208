"""The agent's data contracts: proposals, history records, decisions, dropouts, budgets.

Every type here is a pydantic model that round-trips through JSON, because the graph's state is
checkpointed to SQLite after every node and a run must resume from it (``aka optimize --resume``).
Proposers, the profile, the decide rule, the report writer and the graph all speak these types.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BudgetLimits",
    "BudgetUsage",
    "CandidateRecord",
    "Decision",
    "DropoutEvent",
    "KBSnippet",
    "ProfileReport",
    "Proposal",
    "ProposalBatch",
    "ProposalContext",
    "Proposer",
    "RoundPoint",
    "RunRecord",
    "ShapeSummary",
    "TokenUsage",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenUsage(_Model):
    """What one LLM call (or a batch of them) consumed."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            calls=self.calls + other.calls,
        )

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class Proposal(_Model):
    """One candidate file a proposer produced (or failed to produce).

    A malformed LLM reply is a ``Proposal`` with ``source=None`` and ``error`` set: it is recorded
    in the history as a failure, never raised.
    """

    source: str | None = Field(description="The candidate file's text; None when none was parsed.")
    family: str = Field(
        description="Technique family / kernel design, e.g. 'rms_norm_rowwise' or 'split-k'. "
        "Dropout forbids the families tried before it."
    )
    origin: str = Field(description="'search:<kernel_id>', 'llm:<model>', 'from:<path>'.")
    params: dict[str, Any] = Field(default_factory=dict, description="Tuning values used.")
    rationale: str = Field(default="", description="Why the proposer expects it to be faster.")
    error: str | None = Field(default=None, description="Why no usable source came out.")
    prompt: str | None = Field(default=None, description="The prompt text (LLM; an artifact).")
    reply: str | None = Field(default=None, description="The raw reply (LLM; an artifact).")


class ProposalBatch(_Model):
    """A proposer's answer for one round."""

    proposals: list[Proposal]
    usage: TokenUsage = Field(default_factory=TokenUsage)
    messages: list[dict[str, str]] = Field(
        default_factory=list,
        description="Conversation turns to append (role/content); the graph owns the conversation.",
    )
    notes: list[str] = Field(default_factory=list, description="E.g. the inferred op family.")


class ShapeSummary(_Model):
    """One shape of an evaluated candidate, as the history and prompts show it."""

    shape_id: str
    verdict: str
    latency_us: float | None = None
    sol_fraction: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    bound: str | None = None
    max_abs_err: float | None = None


class CandidateRecord(_Model):
    """One evaluated candidate in the run's history."""

    id: str = Field(description="'c<round>_<n>' (or 'baseline', 'from').")
    round: int
    origin: str
    family: str
    params: dict[str, Any] = Field(default_factory=dict)
    source_sha256: str | None = None
    source_path: str | None = Field(default=None, description="Artifact path in the run dir.")
    verdict: str = Field(description="The scorer's verdict, or 'proposal_failed'.")
    score: float | None = Field(default=None, description="Geomean SOL over tune shapes (GPU).")
    speedup_eager: float | None = Field(default=None, description="Geomean speedup vs eager.")
    speedup_compile: float | None = None
    shapes: list[ShapeSummary] = Field(default_factory=list)
    message: str = Field(default="", description="Failure message (first lines) or a note.")
    lesson: str | None = Field(
        default=None,
        description="A correctness lesson worth keeping (wrong output, bad structure...). "
        "Dropout never masks records with a lesson.",
    )
    masked: bool = Field(default=False, description="Hidden from proposers by a dropout.")
    gpu_s: float = 0.0
    worker: int | None = Field(
        default=None, description="The evaluation slot that scored it (None: never scored)."
    )
    gpu: str | None = Field(
        default=None,
        description="The GPU its scorer workers were pinned to: their CUDA_VISIBLE_DEVICES entry "
        "(an ordinal or a UUID); None on the CPU interpreter or when never scored.",
    )

    @property
    def correct(self) -> bool:
        """Whether the scorer accepted it."""
        return self.verdict == "accepted"


class Decision(_Model):
    """The outcome of one decide step."""

    round: int
    candidate_id: str | None = Field(description="The round's best correct candidate, if any.")
    incumbent_id: str | None = Field(description="The incumbent before the decision.")
    promoted: bool
    reason: str
    ratio: float | None = Field(
        default=None, description="Median paired ratio incumbent/candidate (> 1: faster)."
    )
    noise: float | None = Field(default=None, description="Relative noise the ratio must clear.")
    pairs: list[dict[str, Any]] = Field(default_factory=list, description="Raw paired timings.")


class DropoutEvent(_Model):
    """One optimization dropout."""

    round: int
    masked_ids: list[str]
    kept_ids: list[str]
    forbidden_families: list[str]
    cleared_messages: int
    seed: int


class ProfileReport(_Model):
    """The profile node's diagnosis of a candidate (text for the LLM, data for the search)."""

    candidate_id: str
    bound: Literal["memory", "compute", "latency", "unknown"]
    sol_fraction: float | None = None
    distance: dict[str, float] = Field(
        default_factory=dict,
        description="Share of each ceiling reached: {'memory': .., 'compute': .., 'launch': ..}.",
    )
    compiler: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per compiled kernel: name, n_regs, n_spills, shared, num_warps, num_stages.",
    )
    ncu: dict[str, Any] = Field(default_factory=dict, description="Nsight Compute metrics.")
    summary: str = Field(description="A few lines for the prompt.")
    hints: list[str] = Field(default_factory=list, description="Machine-readable hints.")


class KBSnippet(_Model):
    """A retrieved knowledge-base snippet, quoted in prompts with its id."""

    id: str
    title: str
    kind: str
    text: str


class BudgetLimits(_Model):
    """The run's budgets; None means unlimited."""

    max_iters: int
    wall_time_s: float | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_gpu_s: float | None = None
    target_sol: float | None = None


class BudgetUsage(_Model):
    """What the run has used so far."""

    iters: int = 0
    wall_s: float = 0.0
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    gpu_s: float = Field(
        default=0.0, description="GPU-seconds of scoring: summed over GPUs scoring at once."
    )
    candidates: int = 0
    eval_wall_s: float = Field(
        default=0.0, description="Wall seconds the evaluate node spent scoring rounds."
    )


class ProposalContext(_Model):
    """Everything a proposer sees for one round."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    problem_name: str
    problem_path: str
    op_family: str | None
    description: str = ""
    reference_source: str
    forward_signature: str = Field(description="e.g. 'forward(self, x, weight)'.")
    init_signature: str = Field(description="e.g. '__init__(self, eps=1e-06)'.")
    dsl: Literal["triton", "cuda"] = "triton"
    arch: str | None = None
    hardware: dict[str, Any] = Field(
        default_factory=dict, description="Device name, ceilings (TB/s, TFLOP/s), launch floor."
    )
    performance_measured: bool = True
    round: int
    n: int = Field(description="Candidates wanted this round.")
    seed: int = 0
    incumbent: CandidateRecord | None = None
    incumbent_source: str | None = None
    history: list[CandidateRecord] = Field(
        default_factory=list, description="Unmasked records only, oldest first."
    )
    profile: ProfileReport | None = None
    kb: list[KBSnippet] = Field(default_factory=list)
    conversation: list[dict[str, str]] = Field(default_factory=list)
    forbidden_families: list[str] = Field(
        default_factory=list, description="After a dropout: families the next proposal must avoid."
    )
    tried_sources: list[str] = Field(
        default_factory=list, description="sha256 of every source already evaluated."
    )


@runtime_checkable
class Proposer(Protocol):
    """Produces candidate files; the graph evaluates them."""

    name: str

    def propose(self, ctx: ProposalContext) -> ProposalBatch:
        """Return up to ``ctx.n`` proposals; failures are proposals with ``error`` set."""
        ...


class RoundPoint(_Model):
    """The incumbent after one round (the report's chart)."""

    round: int
    best_sol: float | None = None
    best_speedup_eager: float | None = None
    incumbent_id: str | None = None
    promoted: bool = False
    dropout: bool = False


class RunRecord(_Model):
    """Everything ``run.json`` holds: the whole run, enough to audit every decision."""

    run_id: str
    aka_version: str
    problem_name: str
    problem_path: str
    problem_sha256: str
    op_family: str | None = None
    op_family_inferred: bool = False
    proposer: str = Field(description="'search' or 'llm:<model>'.")
    dsl: Literal["triton", "cuda"] = "triton"
    mode: Literal["gpu", "cpu_interpreter"]
    performance_measured: bool
    device: str | None = None
    workers: int = Field(default=1, description="Candidates of a round scored at once.")
    worker_gpus: list[str] = Field(
        default_factory=list,
        description="Each evaluation slot's GPU (CUDA_VISIBLE_DEVICES entries; [] on the CPU).",
    )
    started_at: str
    finished_at: str | None = None
    stop_reason: str = Field(description="'target_sol', 'max_iters', 'wall_time', 'tokens', ...")
    limits: BudgetLimits
    usage: BudgetUsage
    seed: int
    incumbent_id: str | None = None
    candidates: list[CandidateRecord] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    dropouts: list[DropoutEvent] = Field(default_factory=list)
    rounds: list[RoundPoint] = Field(default_factory=list)
    profiles: list[ProfileReport] = Field(default_factory=list)
    final_tune: dict[str, Any] | None = Field(
        default=None, description="The incumbent's EvalResult on tune shapes (JSON)."
    )
    final_holdout: dict[str, Any] | None = Field(
        default=None, description="The incumbent's EvalResult on holdout shapes (JSON)."
    )
    notes: list[str] = Field(default_factory=list)
