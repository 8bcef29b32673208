"""Budgets the graph enforces: iterations, wall time, tokens, dollars, GPU seconds, target SOL.

The decide router asks ``stop_reason`` after every round; prompts never carry budgets.
"""

from __future__ import annotations

from aka.agent.records import BudgetLimits, BudgetUsage
from aka.core.config import AgentConfig

__all__ = ["limits_from_config", "stop_reason"]


def limits_from_config(config: AgentConfig) -> BudgetLimits:
    """Return the run's limits from the agent settings."""
    return BudgetLimits(
        max_iters=config.max_iters,
        wall_time_s=config.wall_time_s,
        max_tokens=config.max_tokens,
        max_cost_usd=config.max_cost_usd,
        max_gpu_s=config.max_gpu_s,
        target_sol=config.target_sol,
    )


def stop_reason(
    limits: BudgetLimits, usage: BudgetUsage, incumbent_sol: float | None
) -> str | None:
    """Return why the run must stop now, or None to go on.

    The target SOL is checked first: reaching the goal is the best reason to stop.
    """
    target = limits.target_sol
    if target is not None and incumbent_sol is not None and incumbent_sol >= target:
        return "target_sol"
    if usage.iters >= limits.max_iters:
        return "max_iters"
    if limits.wall_time_s is not None and usage.wall_s >= limits.wall_time_s:
        return "wall_time"
    if limits.max_tokens is not None and usage.tokens.total_tokens >= limits.max_tokens:
        return "tokens"
    if limits.max_cost_usd is not None and usage.tokens.cost_usd >= limits.max_cost_usd:
        return "cost"
    if limits.max_gpu_s is not None and usage.gpu_s >= limits.max_gpu_s:
        return "gpu_time"
    return None
