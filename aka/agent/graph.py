"""The optimization loop as a LangGraph state machine (ARCHITECTURE §5).

```
setup → propose → evaluate → profile → decide ─┬─→ propose            (improving)
                                               ├─→ dropout → propose  (stalled)
                                               └─→ finalize           (target SOL, budget, no ideas)
```

The nodes live in ``aka.agent.nodes`` and the runtime in ``aka.agent.runtime``; this module wires
them, times each node into the run's wall-time budget, routes after decide, and compiles the graph
with a checkpointer (SQLite in runs) so a killed run resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aka.agent.budget import limits_from_config
from aka.agent.nodes import (
    node_decide,
    node_dropout,
    node_evaluate,
    node_finalize,
    node_profile,
    node_propose,
    node_setup,
    stop_reason_for,
)
from aka.agent.records import BudgetUsage
from aka.agent.runtime import AgentRuntime, ScorerLike, compact_ceilings, now, write_artifact
from aka.agent.state import AgentState

__all__ = [
    "NODES",
    "AgentRuntime",
    "ScorerLike",
    "build_graph",
    "compact_ceilings",
    "initial_state",
    "route_after_decide",
    "write_artifact",
]

NODES = ("setup", "propose", "evaluate", "profile", "decide", "dropout", "finalize")


def _timed(
    node: Callable[[AgentRuntime, AgentState], dict[str, Any]], rt: AgentRuntime
) -> Callable[[AgentState], dict[str, Any]]:
    """Wrap a node: add its elapsed time to the run's wall-time usage."""

    def run(state: AgentState) -> dict[str, Any]:
        start = time.monotonic()
        update = node(rt, state)
        usage = BudgetUsage.model_validate(update.get("usage") or state.get("usage") or {})
        usage.wall_s += time.monotonic() - start
        update["usage"] = usage.model_dump(mode="json")
        return update

    run.__name__ = node.__name__
    return run


def route_after_decide(rt: AgentRuntime, state: AgentState) -> str:
    """Finalize on a stop reason; dropout after ``patience`` stalled rounds; else propose."""
    if stop_reason_for(rt, state):
        return "finalize"
    agent = rt.settings.agent
    if agent.dropout and state.get("stall", 0) >= agent.patience:
        return "dropout"
    return "propose"


def build_graph(rt: AgentRuntime, checkpointer: Any = None) -> Any:
    """Compile the graph for ``rt`` (with ``checkpointer``, e.g. a ``SqliteSaver``)."""
    from langgraph.graph import END, START, StateGraph

    graph: Any = StateGraph(AgentState)  # Any: the overloads of add_node reject closures
    graph.add_node("setup", _timed(node_setup, rt))
    graph.add_node("propose", _timed(node_propose, rt))
    graph.add_node("evaluate", _timed(node_evaluate, rt))
    graph.add_node("profile", _timed(node_profile, rt))
    graph.add_node("decide", _timed(node_decide, rt))
    graph.add_node("dropout", _timed(node_dropout, rt))
    graph.add_node("finalize", _timed(node_finalize, rt))
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "propose")
    graph.add_edge("propose", "evaluate")
    graph.add_edge("evaluate", "profile")
    graph.add_edge("profile", "decide")
    graph.add_conditional_edges(
        "decide",
        lambda s: route_after_decide(rt, s),
        {"propose": "propose", "dropout": "dropout", "finalize": "finalize"},
    )
    graph.add_edge("dropout", "propose")
    graph.add_edge("finalize", END)
    return graph.compile(checkpointer=checkpointer)


def initial_state(rt: AgentRuntime) -> AgentState:
    """The state a new run starts from."""
    return AgentState(
        run_id=rt.options.run_id,
        round=0,
        records=[],
        decisions=[],
        dropouts=[],
        rounds=[],
        profiles=[],
        conversation=[],
        forbidden_families=[],
        stall=0,
        last_promotion_round=0,
        usage=BudgetUsage().model_dump(mode="json"),
        limits=limits_from_config(rt.settings.agent).model_dump(mode="json"),
        stop_reason=None,
        exhausted=False,
        notes=[],
        started_at=now(),
        run_dir=str(rt.run_dir),
        incumbent_id=None,
        incumbent_source=None,
    )
