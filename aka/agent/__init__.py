"""aka.agent: the LangGraph optimization loop, its proposers, profile feedback and dropout.

Never talks HTTP to clients (that is ``aka.service``); calls the scorer (``aka.bench``) and the
knowledge base (``aka.kb``). litellm, langgraph and jinja2 load only when a run needs them.
"""

from aka.agent.adapt import AdaptError, InPlaceMismatchError, adapt_kernel, map_arguments
from aka.agent.decide import best_of_round, decide
from aka.agent.dropout import apply_dropout
from aka.agent.graph import AgentRuntime, build_graph
from aka.agent.llm import LLMProposer
from aka.agent.parallel import EvalSlot
from aka.agent.profile import diagnose
from aka.agent.records import (
    BudgetLimits,
    BudgetUsage,
    CandidateRecord,
    Decision,
    DropoutEvent,
    KBSnippet,
    ProfileReport,
    Proposal,
    ProposalBatch,
    ProposalContext,
    Proposer,
    RoundPoint,
    RunRecord,
    ShapeSummary,
    TokenUsage,
)
from aka.agent.report import render_html, render_markdown, write_run_dir
from aka.agent.runner import RunOutcome, find_run, plan_run, resume_run, run_optimize
from aka.agent.search import SearchProposer, infer_op_family
from aka.agent.state import AgentState, RunOptions

__all__ = [
    "AdaptError",
    "AgentRuntime",
    "AgentState",
    "BudgetLimits",
    "BudgetUsage",
    "CandidateRecord",
    "Decision",
    "DropoutEvent",
    "EvalSlot",
    "InPlaceMismatchError",
    "KBSnippet",
    "LLMProposer",
    "ProfileReport",
    "Proposal",
    "ProposalBatch",
    "ProposalContext",
    "Proposer",
    "RoundPoint",
    "RunOptions",
    "RunOutcome",
    "RunRecord",
    "SearchProposer",
    "ShapeSummary",
    "TokenUsage",
    "adapt_kernel",
    "apply_dropout",
    "best_of_round",
    "build_graph",
    "decide",
    "diagnose",
    "find_run",
    "infer_op_family",
    "map_arguments",
    "plan_run",
    "render_html",
    "render_markdown",
    "resume_run",
    "run_optimize",
    "write_run_dir",
]
