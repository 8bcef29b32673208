"""The loop's pure rules: promotion, dropout masking, budgets, and ``--budget`` parsing."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from aka.agent.budget import stop_reason
from aka.agent.decide import best_of_round, decide
from aka.agent.dropout import apply_dropout, stalled_families
from aka.agent.records import BudgetLimits, BudgetUsage, CandidateRecord, TokenUsage
from aka.cli.optimize import parse_budget
from aka.core import SpecError


def rec(cid: str, *, round_: int = 1, family: str = "f", verdict: str = "accepted",
        score: float | None = None, lesson: str | None = None) -> CandidateRecord:  # fmt: skip
    return CandidateRecord(
        id=cid, round=round_, origin="t", family=family, verdict=verdict, score=score,
        lesson=lesson,
    )  # fmt: skip


@dataclass
class Cmp:
    measured: bool = True
    ratio: float | None = 1.0
    noise: float | None = 0.0
    notes: list[str] = field(default_factory=list)


def test_best_of_round_prefers_score_then_first_correct() -> None:
    assert best_of_round([rec("a", verdict="wrong_output")]) is None
    best = best_of_round([rec("a", score=0.2), rec("b", score=0.5), rec("c", verdict="crash")])
    assert best is not None and best.id == "b"
    unscored = best_of_round([rec("x", verdict="timeout"), rec("y"), rec("z")])
    assert unscored is not None and unscored.id == "y"


@pytest.mark.parametrize(
    ("ratio", "noise", "floor", "promoted"),
    [
        (1.10, 0.03, 0.01, True),
        (1.02, 0.03, 0.01, False),  # inside the measured noise
        (1.005, 0.0, 0.01, False),  # inside the floor although the pairs were quiet
        (1.011, 0.0, 0.01, True),
        (0.8, 0.01, 0.01, False),
    ],
)
def test_decide_needs_the_ratio_to_clear_noise_and_floor(
    ratio: float, noise: float, floor: float, promoted: bool
) -> None:
    d = decide(3, rec("c"), rec("i"), Cmp(ratio=ratio, noise=noise), noise_floor=floor)
    assert d.promoted is promoted
    assert d.noise == pytest.approx(max(noise, floor))
    assert d.candidate_id == "c" and d.incumbent_id == "i"


def test_decide_without_measurement_or_candidate() -> None:
    assert decide(1, None, rec("i"), None, noise_floor=0.01).promoted is False
    first = decide(1, rec("c"), None, None, noise_floor=0.01)
    assert first.promoted and first.reason == "first correct kernel"
    unmeasured = decide(
        2, rec("c"), rec("i"), Cmp(measured=False, notes=["worker B crashed"]), noise_floor=0.01
    )
    assert not unmeasured.promoted and "worker B crashed" in unmeasured.reason


def test_dropout_masks_a_seeded_half_and_protects_anchors() -> None:
    records = [rec("from", family="from")] + [rec(f"c{i}", round_=i) for i in range(1, 9)]
    records[3] = rec("c3", round_=3, lesson="wrong_output: off by one")
    updated, event = apply_dropout(
        records, incumbent_id="c5", round_=8, fraction=0.5, seed=7, forbidden=["f"],
        cleared_messages=6,
    )  # fmt: skip
    maskable = {"c1", "c2", "c4", "c6", "c7", "c8"}
    assert set(event.masked_ids) <= maskable and len(event.masked_ids) == 3
    assert {r.id for r in updated if r.masked} == set(event.masked_ids)
    assert {"from", "c3", "c5"} <= set(event.kept_ids)
    # deterministic for the same seed and round, different for another seed
    _, again = apply_dropout(records, incumbent_id="c5", round_=8, fraction=0.5, seed=7,
                             forbidden=[], cleared_messages=0)  # fmt: skip
    assert again.masked_ids == event.masked_ids
    others = {
        tuple(
            apply_dropout(
                records,
                incumbent_id="c5",
                round_=8,
                fraction=0.5,
                seed=s,
                forbidden=[],
                cleared_messages=0,
            )[1].masked_ids
        )  # fmt: skip
        for s in range(8)
    }
    assert len(others) > 1
    # a second dropout never re-masks (or unmasks) and masks from what is left
    twice, second = apply_dropout(updated, incumbent_id="c5", round_=9, fraction=1.0, seed=7,
                                  forbidden=[], cleared_messages=0)  # fmt: skip
    assert set(second.masked_ids) == maskable - set(event.masked_ids)
    assert {r.id for r in twice if r.masked} == maskable


def test_stalled_families_are_recent_plus_incumbent() -> None:
    records = [rec("a", round_=1, family="x"), rec("b", round_=3, family="y"),
               rec("c", round_=4, family="z"), rec("d", round_=4, family="y")]  # fmt: skip
    assert stalled_families(records, 3, records[0]) == ["x", "y", "z"]
    assert stalled_families(records, 5, None) == []


def test_stop_reason_order_and_limits() -> None:
    limits = BudgetLimits(max_iters=5, wall_time_s=60, max_tokens=1000, max_cost_usd=1.0,
                          max_gpu_s=30, target_sol=0.8)  # fmt: skip
    assert stop_reason(limits, BudgetUsage(iters=1), 0.5) is None
    assert stop_reason(limits, BudgetUsage(iters=5), 0.9) == "target_sol"
    assert stop_reason(limits, BudgetUsage(iters=5), 0.5) == "max_iters"
    assert stop_reason(limits, BudgetUsage(wall_s=61), None) == "wall_time"
    tokens = TokenUsage(prompt_tokens=600, completion_tokens=400)
    assert stop_reason(limits, BudgetUsage(tokens=tokens), None) == "tokens"
    assert stop_reason(limits, BudgetUsage(tokens=TokenUsage(cost_usd=1.5)), None) == "cost"
    assert stop_reason(limits, BudgetUsage(gpu_s=31), None) == "gpu_time"


def test_parse_budget_forms_and_errors() -> None:
    got = parse_budget(["wall=30m,tokens=200k", "cost=$2.5", "gpu=90", "iters=12"])
    assert got == {"wall_time_s": 1800.0, "max_tokens": 200_000, "max_cost_usd": 2.5,
                   "max_gpu_s": 90.0, "max_iters": 12}  # fmt: skip
    assert parse_budget(["wall=2h"]) == {"wall_time_s": 7200.0}
    with pytest.raises(SpecError, match="KEY=VALUE"):
        parse_budget(["time=3"])
    with pytest.raises(SpecError, match="not a duration"):
        parse_budget(["wall=soon"])
    with pytest.raises(SpecError, match="not a count"):
        parse_budget(["tokens=lots"])


def test_compact_ceilings_keeps_prompt_sized_numbers() -> None:
    from aka.agent.graph import compact_ceilings
    from aka.hardware.ceilings import datasheet_ceilings

    sheet = datasheet_ceilings("NVIDIA H200")
    assert sheet is not None
    dump = sheet.model_dump(mode="json")
    dump["details"] = {"raw": list(range(1000))}
    dump["launch_floor_us"] = 2.876
    compact = compact_ceilings(dump)
    assert compact["source"] == "datasheet"
    assert compact["dram_bandwidth_TB_s"] == pytest.approx(sheet.bandwidth_bytes_per_s / 1e12, 0.01)
    assert compact["launch_floor_us"] == 2.88
    assert "tc_bf16_TFLOP_s" in compact and "details" not in compact
