"""Stage 6: the score (ARCHITECTURE.md §4): S = T_sol / T per shape, capped at 1, and its flags.

A median below T_sol * (1 - m), with m = max(0.10, 3x the launch floor's relative IQR), is flagged
``suspicious`` (faster than the hardware allows: a measurement or a trick); when a second fresh
worker agrees, the verdict is ``implausible`` and the score 0. The problem's score is the weighted
geometric mean of S over its shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

from aka.bench.result import EvalResult, Failure, ShapeResult, Verdict
from aka.bench.stats import geomean

__all__ = ["confirm_suspicious", "problem_score", "sol_fraction", "suspicious_margin"]


def suspicious_margin(
    floor_median_us: float | None, floor_iqr_us: float | None, min_margin: float = 0.10
) -> float:
    """Return m = max(min_margin, 3 x the launch floor's relative IQR)."""
    if not floor_median_us or floor_iqr_us is None:
        return min_margin
    return max(min_margin, 3.0 * floor_iqr_us / floor_median_us)


def sol_fraction(t_sol_us: float, t_us: float, margin: float) -> tuple[float, list[str]]:
    """Return S = min(1, T_sol / T) and the flags the pair earns."""
    flags = ["suspicious"] if t_us < t_sol_us * (1.0 - margin) else []
    return min(1.0, t_sol_us / t_us), flags


def problem_score(rows: Sequence[ShapeResult]) -> float | None:
    """Weighted geometric mean of S over shapes that have one; 0 if any timed shape failed."""
    timed = [r for r in rows if r.sol_fraction is not None or r.verdict is not Verdict.ACCEPTED]
    if not timed:
        return None
    if any(r.verdict is not Verdict.ACCEPTED for r in timed):
        return 0.0
    return geomean([r.sol_fraction or 0.0 for r in timed], [max(r.weight, 1e-12) for r in timed])


def confirm_suspicious(first: EvalResult, second: EvalResult) -> EvalResult:
    """Give the verdict ``implausible`` to shapes a second fresh worker also found ``suspicious``.

    Args:
        first: The evaluation with suspicious shapes.
        second: The same candidate re-timed on those shapes in another worker.

    Returns:
        ``first`` with those shapes (and the result) ``implausible`` and scored 0 when both
        workers agree; otherwise ``first`` with a note that the second worker did not reproduce it.
    """
    again = {r.shape_id for r in second.shapes if "suspicious" in r.flags}
    checked = sorted(r.shape_id for r in first.shapes if "suspicious" in r.flags)
    if not again:
        note = (
            f"shapes {checked} ran faster than T_sol allows; re-timed in a second worker: "
            "not reproduced"
        )
        return first.model_copy(update={"notes": [*first.notes, note]})
    message = (
        f"shapes {sorted(again)} ran faster than the roofline allows (T < T_sol x (1 - m)) in "
        "two independent workers: a measurement the hardware cannot produce"
    )
    failure = Failure(kind=Verdict.IMPLAUSIBLE, message=message)
    rows = [
        r.model_copy(
            update={
                "flags": [*r.flags, "implausible"],
                "verdict": Verdict.IMPLAUSIBLE,
                "failure": failure,
                "sol_fraction": None,
            }
        )
        if r.shape_id in again and "suspicious" in r.flags
        else r
        for r in first.shapes
    ]
    return first.model_copy(
        update={
            "shapes": rows,
            "verdict": Verdict.IMPLAUSIBLE,
            "failure": failure,
            "score": 0.0,
            "notes": [*first.notes, f"re-timed in a second worker: {message}"],
        }
    )
