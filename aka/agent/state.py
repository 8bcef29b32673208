"""The graph's state and the options a run was started with.

The state holds only JSON-able data (records are stored as their ``model_dump``), because LangGraph
checkpoints it to SQLite after every node and ``aka optimize --resume`` rebuilds the run from it.
Heavy objects (scorer, proposer, retriever) live in ``AgentRuntime``, never in the state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AgentState", "RunOptions"]


class RunOptions(BaseModel):
    """How a run was asked for: saved in the run directory so ``--resume`` rebuilds it.

    Secrets (API keys) are never stored here; a resumed run takes them from the settings again.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str
    problem_path: str
    out_dir: str
    model: str | None = Field(default=None, description="litellm model; None = SearchProposer.")
    api_base: str | None = None
    dsl: Literal["triton", "cuda"] = "triton"
    from_kernel: str | None = Field(default=None, description="Start from this candidate file.")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    use_kb: bool = True
    agent: dict[str, Any] = Field(default_factory=dict, description="AgentConfig values used.")

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return Path(self.out_dir)


class AgentState(TypedDict, total=False):
    """The graph's state (all values JSON-able)."""

    run_id: str
    round: int
    mode: str
    performance_measured: bool
    op_family: str | None
    op_family_inferred: bool
    signature: dict[str, Any] | None
    hardware: dict[str, Any]
    kb: list[dict[str, Any]]
    records: list[dict[str, Any]]
    pending: list[dict[str, Any]]
    round_ids: list[str]
    round_results: dict[str, dict[str, Any]]
    incumbent_id: str | None
    incumbent_source: str | None
    incumbent_result: dict[str, Any] | None
    incumbent_profile: dict[str, Any] | None
    profiles: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    dropouts: list[dict[str, Any]]
    rounds: list[dict[str, Any]]
    conversation: list[dict[str, str]]
    forbidden_families: list[str]
    stall: int
    last_promotion_round: int
    usage: dict[str, Any]
    limits: dict[str, Any]
    stop_reason: str | None
    exhausted: bool
    notes: list[str]
    final_holdout: dict[str, Any] | None
    started_at: str
    finished_at: str | None
    run_dir: str
