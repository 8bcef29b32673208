"""Stages 3-4 in the parent, after the seeds pass: the guard probes and the engagement gate.

For one shape row of a candidate worker whose outputs passed stage 3 on every seed: the same
inputs twice (``nondeterministic``); new values at the old
addresses (``stale_output`` when the old answer came back, else ``wrong_output``); then stage 4
(``fallback``, ``not_engaged``; ``aka.bench.engagement``). The parent holds every reference
output; the comparisons use the scorer's tolerance policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aka.bench.correctness import CheckOutcome, Tolerance
from aka.bench.engagement import EngagementOutcome, judge_engagement
from aka.bench.result import Verdict

if TYPE_CHECKING:
    from aka.bench.pipeline import Scorer
    from aka.bench.run_state import _Reference, _Run

__all__ = ["judge_guards"]


def _load(workdir: Path, probes: dict[str, Any], key: str) -> dict[str, Any] | None:
    from aka.bench.run_state import _load_tensors

    info = probes.get("files", {}).get(key)
    if info is None:
        return None
    try:
        return _load_tensors(workdir / info["file"])
    except Exception:  # noqa: BLE001 - an unreadable probe output is missing evidence
        return None


def _as_reference(out: dict[str, Any]) -> dict[str, Any]:
    return {"structure": out["structure"], "tensors": out["tensors"], "extra": out["extra"]}


def judge_guards(
    scorer: Scorer,
    run: _Run,
    ref: _Reference,
    workdir: Path,
    row: dict[str, Any],
    override: Tolerance | None,
) -> tuple[CheckOutcome | None, EngagementOutcome | None]:
    """Judge one shape's probes and engagement; return a failing outcome (or None) and stage 4's.

    Args:
        scorer: The scorer (its comparison rules).
        run: The evaluation in progress.
        ref: Reference outputs (by shape and seed).
        workdir: The candidate worker's directory (probe outputs).
        row: The worker's row for the shape.
        override: The problem's tolerance override.
    """
    sid = row["shape_id"]
    probes = row.get("probes")
    if probes is None:
        return None, None
    reduction_len = int(ref.rows[sid].get("reduction_len", 0))

    def compare(cand: dict[str, Any], against: dict[str, Any]) -> CheckOutcome:
        # the problem's tolerance policy, shared with stage 3
        return scorer.compare_with(run, cand, against, override, reduction_len)

    first, again = _load(workdir, probes, "first"), _load(workdir, probes, "again")
    moved, ghost = _load(workdir, probes, "moved"), _load(workdir, probes, "ghost")
    ghost_real = _load(workdir, probes, "ghost_real")
    if probes.get("errors", {}).get("repeat"):
        return CheckOutcome(
            Verdict.RUNTIME_ERROR,
            f"a repeated call failed: {probes['errors']['repeat']}",
        ), None
    if first is not None:
        seed0 = int(probes["files"]["first"]["seed"])
        right = compare(first, ref.outputs[(sid, seed0)])
        if not right.ok:
            # Fresh inputs, and yet wrong: an answer kept from an earlier call (an address or
            # call-order cache) when it matches another seed's reference, otherwise just wrong.
            others = [k for k in ref.outputs if k[0] == sid and k[1] != seed0]
            stale = any(compare(first, ref.outputs[k]).ok for k in others)
            return CheckOutcome(
                Verdict.STALE_OUTPUT if stale else Verdict.WRONG_OUTPUT,
                "a further call on fresh inputs "
                + ("returned the answer of an earlier call's inputs" if stale else right.message),
            ), None
    if first is not None and again is not None:
        same = compare(again, _as_reference(first))
        if not same.ok:
            return CheckOutcome(
                Verdict.NONDETERMINISTIC,
                f"the same inputs twice gave different outputs: {same.message}",
            ), None
    if moved is not None and first is not None:
        seed = int(probes["files"]["moved"]["seed"])
        right = compare(moved, ref.outputs[(sid, seed)])
        if not right.ok:
            stale = compare(moved, _as_reference(first)).ok
            verdict = Verdict.STALE_OUTPUT if stale else Verdict.WRONG_OUTPUT
            why = (
                "returned the earlier call's output: a cache keyed on addresses or call order"
                if stale
                else right.message
            )
            return CheckOutcome(
                verdict, f"new input values at the addresses of earlier ones: {why}"
            ), None
    ghost_same = None
    if ghost is not None and ghost_real is not None:
        ghost_same = compare(ghost, _as_reference(ghost_real)).ok
    engagement = judge_engagement(
        row.get("trace"),
        probes.get("profile"),
        ghost_same=ghost_same,
        engagement_min=run.problem.engagement_min,
    )
    if engagement.verdict is not None:
        return CheckOutcome(engagement.verdict, engagement.message), engagement
    return None, engagement
