"""Rooflines of a suite's shapes: counted costs with the problem's overrides, priced on ceilings.

Owns ``aka bench roofline``'s engine and the pricing the suite runner shares with it: a shape's
costs are the reference's counted FLOPs and bytes (``aka.hardware.count_costs``, run in a
sandboxed worker) with the problem's ``roofline:`` overrides applied; shapes whose overrides state
FLOPs, bytes read and bytes written need no counting at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aka.core import ProgressCallback

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.hardware import DeviceCeilings, TSol
    from aka.spec import ProblemSpec
    from aka.spec.problem import ShapeCase

__all__ = ["ceilings_json", "price_shape", "shape_rooflines"]


def price_shape(
    problem: ProblemSpec, shape: ShapeCase, costs: dict[str, Any] | None, ceilings: DeviceCeilings
) -> tuple[TSol, str | None]:
    """T_sol of one shape (counted costs, or none, with the problem's overrides) on ``ceilings``.

    Returns:
        T_sol and its terms, and the compute unit whose FLOPs take longest at peak (None: no
        FLOPs).
    """
    from aka.bench.performance import dominant_unit, shape_costs
    from aka.hardware import t_sol

    priced = shape_costs(problem, shape, costs)
    unit = dominant_unit(priced, ceilings)
    return t_sol(priced, ceilings), unit.value if unit else None


def _fully_overridden(problem: ProblemSpec, shape: ShapeCase) -> bool:
    """Whether the overrides state FLOPs, bytes read and bytes written: no counting needed."""
    fields = set()
    for o in problem.roofline_overrides_for(shape.id):
        fields |= {
            f for f in ("flops_by_unit", "bytes_read", "bytes_written") if getattr(o, f) is not None
        }
    return len(fields) == 3


def shape_rooflines(
    scorer: Scorer,
    problem: ProblemSpec,
    shapes: list[ShapeCase],
    ceilings: DeviceCeilings,
    progress: ProgressCallback | None = None,
) -> list[dict[str, Any]]:
    """Per shape: FLOPs (per unit), bytes read and written, T_sol and its bound on ``ceilings``.

    Costs are counted by running the reference in a worker (on this machine's device) for the
    shapes whose overrides do not state all three quantities.

    Raises:
        BaselineError: The reference failed while being counted.
    """
    from aka.bench.performance import shape_costs
    from aka.hardware import t_sol

    need = [s for s in shapes if not _fully_overridden(problem, s)]
    counted: dict[str, Any] = {}
    if need:
        task = scorer._task("reference", problem, need) | {"count_costs": True, "costs_only": True}
        what = f"counting the reference of '{problem.name}'"
        with scorer.trusted_worker(task, what, progress, len(need)) as (result, _):
            counted = {r["shape_id"]: r["costs"] for r in result["shapes"]}
    rows = []
    for s in shapes:
        costs = shape_costs(problem, s, counted.get(s.id))
        sol = t_sol(costs, ceilings)
        rows.append(
            {
                "shape_id": s.id,
                "split": s.split.value,
                "flops": costs.flops_total,
                "flops_by_unit": {str(u.value): f for u, f in costs.flops_by_unit.items()},
                "bytes_read": costs.bytes_read,
                "bytes_written": costs.bytes_written,
                "t_sol_s": sol.t_sol_s,
                "bound": sol.bound,
                "counted": s.id in counted,
            }
        )
    return rows


def ceilings_json(ceilings: DeviceCeilings) -> dict[str, object]:
    """The ceilings a run was priced on, as the reports read them."""
    return {
        "source": ceilings.source,
        "bandwidth_bytes_per_s": ceilings.bandwidth_bytes_per_s,
        "rates_flops_per_s": {str(k.value): v for k, v in ceilings.rates_flops_per_s.items()},
        "launch_floor_us": ceilings.launch_floor_us,
    }
