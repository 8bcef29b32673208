"""The results of ``aka bench run`` over a suite: per entrant, operator and shape, and the scores.

Owns the pydantic models of a suite run (written as ``results.json``, read by the reports) and the
scoring of ARCHITECTURE.md §4 stage 6 at suite level:

- per shape ``S = min(1, T_sol / T)``; a shape the entrant failed scores 0;
- per operator the geometric mean of its shapes' S (an operator the entrant failed scores 0);
- per suite ``Σ w_op · S_op`` over all operators (missing or failed ones count 0);
- the same per phase (each operator's shapes of that phase; weights renormalised over the
  operators that have shapes of that phase) and per split (``tune``, ``holdout``);
- the conditional correctness ``P(correct on holdout | correct on tune)`` over operators.

An *entrant* is what gets scored: ``candidate`` (the user's kernels) or a baseline (``eager``,
``torch_compile``, ``library``), all priced against the same ``T_sol`` in the same run. Without a
GPU nothing is timed: S is ``None`` and only correctness is reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "EntrantOp",
    "EntrantSummary",
    "OperatorInfo",
    "ShapeScore",
    "SuiteRun",
    "geomean",
    "summarize",
]

Split = Literal["tune", "holdout", "smoke"]
Status = Literal["ok", "failed", "not_run", "missing"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShapeScore(_Model):
    """One entrant at one shape."""

    shape_id: str
    split: Split
    phase: str | None = None
    t_sol_us: float | None = Field(default=None, description="Speed-of-light time on the device.")
    bound: str | None = Field(default=None, description="memory, compute or latency.")
    flops: float | None = None
    bytes: float | None = None
    compute_unit: str | None = Field(
        default=None, description="The unit whose FLOPs take longest at peak (tc_bf16...)."
    )
    latency_us: float | None = Field(default=None, description="Median time; None: not timed.")
    s: float | None = Field(default=None, description="min(1, T_sol / T); None: not timed.")
    correct: bool | None = Field(default=None, description="None: correctness not checked.")
    verdict: str = Field(description="accepted, or why not.")
    message: str | None = None

    @property
    def s_or_zero(self) -> float | None:
        """S for scoring: failures count 0, shapes not timed ``None``."""
        if self.correct is False or self.verdict not in ("accepted", "not_measured"):
            return 0.0
        return self.s


class EntrantOp(_Model):
    """One entrant on one operator."""

    entrant: str = Field(description="candidate, eager, torch_compile or library.")
    op: str
    status: Status
    verdict: str
    message: str | None = None
    source_hash: str | None = Field(default=None, description="The candidate's sha256.")
    fallback_ratio: float | None = None
    cached: bool = Field(default=False, description="Read from the run cache, not re-measured.")
    shapes: list[ShapeScore] = Field(default_factory=list)

    def shape_scores(self, split: str, phase: str | None = None) -> list[float | None]:
        """S (failures 0) of this entrant's shapes in ``split`` (and ``phase``)."""
        return [
            s.s_or_zero
            for s in self.shapes
            if s.split == split and (phase is None or s.phase == phase)
        ]

    def score(self, split: str = "tune", phase: str | None = None) -> float | None:
        """Geometric mean of S over the split's shapes; 0 if the entrant failed the operator.

        ``None`` when nothing was timed (CPU) or the operator has no such shapes.
        """
        values = self.shape_scores(split, phase)
        if not values:
            return None
        if self.status in ("failed", "missing"):
            return 0.0
        if any(v is None for v in values):
            return None
        return geomean([float(v) for v in values if v is not None])

    def correct_on(self, split: str) -> bool | None:
        """Whether every shape of ``split`` was correct; ``None`` if none was checked."""
        flags = [s.correct for s in self.shapes if s.split == split]
        if not flags or self.status == "not_run":
            return None
        if self.status in ("failed", "missing") and not any(f is not None for f in flags):
            return False
        return all(f is True for f in flags)


class OperatorInfo(_Model):
    """An operator of the suite as the run saw it."""

    name: str
    weight: float
    phase: str
    shapes: dict[str, int] = Field(default_factory=dict, description="Shapes run per split.")


class EntrantSummary(_Model):
    """One entrant's suite-level numbers."""

    entrant: str
    suite_score: float | None = Field(description="Σ w·S_op over tune shapes; None: not timed.")
    phase_scores: dict[str, float | None] = Field(default_factory=dict)
    holdout_score: float | None = None
    ops_ok: int = 0
    ops_failed: int = 0
    ops_not_run: int = 0
    p_holdout_given_tune: float | None = Field(
        default=None,
        description="Of operators correct on every tune shape, the share correct "
        "on every holdout shape; None without holdout shapes.",
    )


class SuiteRun(_Model):
    """Everything ``aka bench run`` measured, with provenance."""

    suite: str
    date: str
    device: dict[str, object] = Field(default_factory=dict)
    ceilings: dict[str, object] | None = Field(
        default=None,
        description="The ceilings T_sol was priced on: bandwidth_bytes_per_s, rates_flops_per_s "
        "{unit: FLOP/s}, launch_floor_us, source (measured or datasheet).",
    )
    versions: dict[str, str] = Field(default_factory=dict)
    performance_measured: bool
    splits: list[str] = Field(default_factory=list, description="Splits run: tune, holdout, smoke.")
    holdout_seed_hash: str | None = Field(
        default=None, description="sha256 prefix of the holdout seed (the seed stays private)."
    )
    max_shapes: int | None = None
    notes: list[str] = Field(default_factory=list)
    operators: list[OperatorInfo]
    entrants: list[str]
    results: list[EntrantOp] = Field(default_factory=list)
    summary: list[EntrantSummary] = Field(default_factory=list)

    def result(self, entrant: str, op: str) -> EntrantOp | None:
        """The entrant's result on ``op``, if any."""
        return next((r for r in self.results if r.entrant == entrant and r.op == op), None)


def geomean(values: Iterable[float]) -> float:
    """Geometric mean; 0 if any value is 0 (an operator with a failed shape scores 0)."""
    items = list(values)
    if not items:
        raise ValueError("geomean of no values")
    if any(v <= 0 for v in items):
        return 0.0
    return math.exp(sum(math.log(v) for v in items) / len(items))


def _uncovered(run: SuiteRun, entrant: str, split: str) -> bool:
    """Whether an operator the entrant ran on tune shapes has no ``split`` shape measured.

    A run that timed the holdout split for some operators only (a budget cap) has no holdout
    suite score: the missing operators were not failed, just not measured.
    """
    for op in run.operators:
        result = run.result(entrant, op.name)
        if result is None or result.status != "ok":
            continue
        if result.shape_scores("tune") and not result.shape_scores(split):
            return True
    return False


def _weighted(run: SuiteRun, entrant: str, split: str, phase: str | None) -> float | None:
    if not run.performance_measured:
        return None  # nothing was timed: a failure's 0 must not pass for a score
    if split != "tune" and phase is None and _uncovered(run, entrant, split):
        return None  # a sum over some of the operators would pass for a (tiny) suite score
    total, weight_sum, timed = 0.0, 0.0, False
    for op in run.operators:
        result = run.result(entrant, op.name)
        if result is None:
            if phase is None:
                weight_sum += op.weight  # a missing operator counts 0 in the suite score
            continue
        if not result.shape_scores(split, phase):
            continue
        weight_sum += op.weight
        score = result.score(split, phase)
        if score is None:
            continue
        timed = True
        total += op.weight * score
    if not timed or weight_sum <= 0:
        return None
    return total / weight_sum if phase is not None else total


def summarize(run: SuiteRun) -> list[EntrantSummary]:
    """Suite, per-phase and holdout scores and the conditional correctness of every entrant.

    The suite score is ``Σ w·S_op`` with the suite's weights (summing to 1 over all its
    operators), so operators not run or failed pull it down; a phase score renormalises the
    weights over the operators that have shapes of that phase. Every score is ``None`` when
    the run measured no performance (a failure's 0 is then no score); operators without a
    result count as not run.
    """
    phases = sorted({s.phase for r in run.results for s in r.shapes if s.phase})
    out = []
    for entrant in run.entrants:
        results = [r for r in run.results if r.entrant == entrant]
        absent = sum(run.result(entrant, op.name) is None for op in run.operators)
        on_tune = [r for r in results if r.correct_on("tune") is True]
        with_holdout = [r for r in on_tune if r.correct_on("holdout") is not None]
        out.append(
            EntrantSummary(
                entrant=entrant,
                suite_score=_weighted(run, entrant, "tune", None),
                phase_scores={p: _weighted(run, entrant, "tune", p) for p in phases},
                holdout_score=_weighted(run, entrant, "holdout", None),
                ops_ok=sum(r.status == "ok" for r in results),
                ops_failed=sum(r.status == "failed" for r in results),
                ops_not_run=absent + sum(r.status in ("not_run", "missing") for r in results),
                p_holdout_given_tune=(
                    sum(r.correct_on("holdout") is True for r in with_holdout) / len(with_holdout)
                    if with_holdout
                    else None
                ),
            )
        )
    return out
