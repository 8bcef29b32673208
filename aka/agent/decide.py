"""The promotion rule: a candidate replaces the incumbent only when it is measurably faster.

"Measurably" means: correct on every tune shape, and the median paired ratio from an interleaved
re-measurement (incumbent and candidate in two fresh workers, ABAB under the parent's control) beats
1 by more than the noise those same pairs show, and by more than a configured floor. One lucky
sample cannot promote a kernel, and neither can a shared machine's drift, because both sides of each
pair ran back to back.
"""

from __future__ import annotations

from typing import Any, Protocol

from aka.agent.records import CandidateRecord, Decision

__all__ = ["Comparison", "best_of_round", "decide"]


class Comparison(Protocol):
    """What decide needs from ``aka.bench.PairedComparison``."""

    measured: bool
    ratio: float | None
    noise: float | None
    notes: list[str]


def best_of_round(records: list[CandidateRecord]) -> CandidateRecord | None:
    """Return the round's best correct candidate: highest score, else the first correct one."""
    correct = [r for r in records if r.correct]
    if not correct:
        return None
    scored = [r for r in correct if r.score is not None]
    if scored:
        return max(scored, key=lambda r: (r.score or 0.0, r.speedup_eager or 0.0))
    return correct[0]


def decide(
    round_: int,
    candidate: CandidateRecord | None,
    incumbent: CandidateRecord | None,
    comparison: Comparison | None,
    *,
    noise_floor: float,
    pairs: list[dict[str, Any]] | None = None,
) -> Decision:
    """Apply the promotion rule.

    Args:
        round_: The round being decided.
        candidate: The round's best correct candidate (None: nothing correct this round).
        incumbent: The current incumbent (None: no correct kernel yet).
        comparison: The paired re-measurement of incumbent (A) vs candidate (B); None when no
            re-measurement ran (no incumbent, or nothing to compare).
        noise_floor: The smallest relative gain that may promote, whatever the pairs say.
        pairs: Raw pair data to keep in the record.

    Returns:
        The decision, with its reason in words.
    """
    base: dict[str, Any] = {
        "round": round_,
        "candidate_id": candidate.id if candidate else None,
        "incumbent_id": incumbent.id if incumbent else None,
        "pairs": pairs or [],
    }
    if candidate is None:
        return Decision(**base, promoted=False, reason="no correct candidate this round")
    if incumbent is None:
        return Decision(**base, promoted=True, reason="first correct kernel")
    if comparison is None or not comparison.measured or comparison.ratio is None:
        why = "; ".join(comparison.notes) if comparison is not None and comparison.notes else ""
        reason = "performance was not measured, so the incumbent stays"
        reason += f" ({why})" if why else ""
        return Decision(**base, promoted=False, reason=reason)
    noise = max(comparison.noise or 0.0, noise_floor)
    ratio = comparison.ratio
    promoted = ratio > 1.0 + noise
    verdict = "beats" if promoted else "does not beat"
    reason = (
        f"median paired ratio {ratio:.3f} {verdict} 1 + noise {noise:.3f} "
        f"(incumbent {incumbent.id} vs {candidate.id})"
    )
    return Decision(**base, promoted=promoted, reason=reason, ratio=ratio, noise=noise)
