"""Optimization dropout: the loop's escape from a stall.

After ``patience`` rounds without a promotion the graph drops the accumulated conversation, hides a
seeded random share of the history from the proposers, and forbids the technique families that
stalled, so the next proposal has to come from somewhere else. The baseline, the incumbent and every
record that carries a correctness lesson are never masked: forgetting them would repeat mistakes
rather than escape a rut. Pure functions; the graph stores the results in its state.
"""

from __future__ import annotations

import random

from aka.agent.records import CandidateRecord, DropoutEvent

__all__ = ["apply_dropout", "protected", "stalled_families"]

_ANCHORS = {"baseline", "from"}


def protected(record: CandidateRecord, incumbent_id: str | None) -> bool:
    """Return whether ``record`` may never be masked (anchor, incumbent, or a lesson)."""
    return record.id in _ANCHORS or record.id == incumbent_id or record.lesson is not None


def stalled_families(
    records: list[CandidateRecord], since_round: int, incumbent: CandidateRecord | None
) -> list[str]:
    """Return the families tried since ``since_round`` plus the incumbent's, in first-seen order.

    These are what the loop was circling when it stalled; the next proposal must avoid them.
    """
    families: list[str] = []
    if incumbent is not None and incumbent.family not in ("baseline", "from"):
        families.append(incumbent.family)
    for rec in records:
        if rec.round >= since_round and rec.family not in families and rec.id not in _ANCHORS:
            families.append(rec.family)
    return families


def apply_dropout(
    records: list[CandidateRecord],
    *,
    incumbent_id: str | None,
    round_: int,
    fraction: float,
    seed: int,
    forbidden: list[str],
    cleared_messages: int,
) -> tuple[list[CandidateRecord], DropoutEvent]:
    """Mask a seeded random ``fraction`` of the maskable, still-visible history records.

    The choice depends only on ``seed``, ``round_`` and the record ids, so a resumed run masks the
    same records as the original would have.

    Args:
        records: The whole history (masked records stay masked).
        incumbent_id: Never masked.
        round_: The round the dropout happens after (part of the seed).
        fraction: Share of the maskable records to hide (rounded half up; at least one when any).
        seed: The run's seed.
        forbidden: Families the next proposal must avoid (recorded in the event).
        cleared_messages: How many conversation turns were dropped (recorded in the event).

    Returns:
        The updated records and the event describing exactly what was masked and kept.
    """
    maskable = [r.id for r in records if not r.masked and not protected(r, incumbent_id)]
    count = 0
    if maskable and fraction > 0:
        count = min(len(maskable), max(1, int(len(maskable) * fraction + 0.5)))
    rng = random.Random(f"{seed}:dropout:{round_}")
    chosen = set(rng.sample(sorted(maskable), count)) if count else set()
    updated = [r.model_copy(update={"masked": True}) if r.id in chosen else r for r in records]
    event = DropoutEvent(
        round=round_,
        masked_ids=[r.id for r in records if r.id in chosen],
        kept_ids=[r.id for r in updated if not r.masked],
        forbidden_families=list(forbidden),
        cleared_messages=cleared_messages,
        seed=seed,
    )
    return updated, event
