"""The scorer's outcome types: ``Verdict``, ``Failure``, per-shape rows and ``EvalResult``.

Owns the result contract every caller reads (CLI, agent, service). ``Verdict`` values are fixed:
later changes may add values, never rename one. A candidate's failure is data here, never an
exception (STYLE E3).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.spec import ComputeUnit, Phase, Split

__all__ = [
    "Bound",
    "Engagement",
    "EvalResult",
    "Failure",
    "LatencyStats",
    "Manifest",
    "ScreenFinding",
    "ShapeResult",
    "Verdict",
]

Bound = Literal["memory", "compute", "latency"]


class Verdict(StrEnum):
    """What the scorer concluded about a candidate (or one shape of it)."""

    ACCEPTED = "accepted"
    SCREEN_REJECTED = "screen_rejected"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    OOM = "oom"
    BAD_STRUCTURE = "bad_structure"
    WRONG_OUTPUT = "wrong_output"
    NON_FINITE = "non_finite"
    MUTATED_INPUT = "mutated_input"
    TIMING_MISMATCH = "timing_mismatch"
    TAMPERED = "tampered"
    NOT_RUN = "not_run"
    #: The candidate's own kernels did not do the work: none ran on the forward path over the real
    #: inputs and outputs, or a "ghost" run with them replaced by no-ops gave the same output.
    NOT_ENGAGED = "not_engaged"
    #: Library kernels (aten, cuBLAS, Inductor...) took more than the problem allows of the work.
    FALLBACK = "fallback"
    #: An output shares memory with an input, a weight or a buffer the harness owns.
    ALIASED_OUTPUT = "aliased_output"
    #: The same inputs twice gave outputs that differ beyond the tolerance.
    NONDETERMINISTIC = "nondeterministic"
    #: New input values at the addresses of earlier ones gave the earlier output (a cache).
    STALE_OUTPUT = "stale_output"
    #: Faster than the roofline allows, in two independent workers.
    IMPLAUSIBLE = "implausible"
    #: A cold process (fresh seeds, empty compiler caches) did not reproduce the result.
    NOT_REPRODUCED = "not_reproduced"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScreenFinding(_Model):
    """One static-screen finding."""

    rule: str = Field(description="Stable rule id, e.g. 'torch-compute-in-forward'.")
    line: int | None = Field(default=None, description="1-based line in the candidate file.")
    message: str


class Failure(_Model):
    """Why a candidate (or a shape) was not accepted."""

    kind: Verdict
    message: str
    log_tail: str = Field(default="", description="Last lines of the worker's output.")
    findings: list[ScreenFinding] = Field(default_factory=list)


class LatencyStats(_Model):
    """Robust statistics of timed samples, microseconds."""

    median: float
    iqr: float
    n: int = Field(description="Number of samples.")


class ShapeResult(_Model):
    """One shape's row: verdict, time, baselines and position against the roofline."""

    shape_id: str
    split: Split
    phase: Phase | None = None
    weight: float = 1.0
    verdict: Verdict
    failure: Failure | None = None
    latency_us: LatencyStats | None = None
    device_window_us: LatencyStats | None = None
    baselines_us: dict[str, LatencyStats] = Field(default_factory=dict)
    t_sol_us: float | None = None
    bound: Bound | None = None
    bytes: float | None = Field(
        default=None, description="Unique bytes read + written that T_sol prices (roofline)."
    )
    flops: float | None = Field(default=None, description="FLOPs that T_sol prices, all units.")
    compute_unit: ComputeUnit | None = Field(
        default=None, description="The unit whose FLOP time dominates (its peak prices compute)."
    )
    sol_fraction: float | None = Field(default=None, description="S = T_sol / T, capped at 1.")
    speedup_vs: dict[str, float] = Field(default_factory=dict, description="baseline / T.")
    flags: list[str] = Field(default_factory=list)
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    fallback_ratio: float | None = Field(
        default=None,
        description="Share of the work outside the candidate's own kernels (stage 4): device time "
        "on a GPU, bytes touched by aten compute ops in the CPU interpreter.",
    )


class Engagement(_Model):
    """Stage 4's evidence over all shapes: whose code did the work."""

    method: Literal["profiler", "interpreter-bytes"]
    engagement_min: float = Field(description="The problem's minimum own share of the work.")
    fallback_ratio: float = Field(description="The worst shape's share of library work.")
    own_kernels: list[str] = Field(default_factory=list, description="Candidate kernels seen.")
    library: dict[str, float] = Field(
        default_factory=dict,
        description="Top library kernels (us, profiler) or aten ops (bytes, interpreter).",
    )


class Manifest(_Model):
    """How the result was produced: enough to reproduce or distrust it."""

    source_sha256: str
    problem_sha256: str
    problem_name: str
    device: str | None = None
    device_key: str | None = None
    driver: str | None = None
    clocks: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=list)
    weights_mode: Literal["loaded", "seeded", "none"] | None = None
    mode: Literal["gpu", "cpu_interpreter"]
    sandbox: dict[str, Any] = Field(default_factory=dict)
    ceilings: dict[str, Any] = Field(default_factory=dict)
    raw_samples_us: dict[str, dict[str, list[float]]] = Field(default_factory=dict)
    created_at: str


class EvalResult(_Model):
    """The scorer's full answer about one candidate on one problem."""

    verdict: Verdict
    failure: Failure | None = None
    performance_measured: bool = Field(description="False on the CPU: nothing was timed.")
    notes: list[str] = Field(default_factory=list)
    shapes: list[ShapeResult] = Field(default_factory=list)
    skipped_shapes: list[str] = Field(default_factory=list)
    score: float | None = Field(default=None, description="Geometric mean of S; 0 if rejected.")
    fallback_ratio: float | None = Field(
        default=None, description="Worst shape's share of work outside the candidate's kernels."
    )
    engagement: Engagement | None = None
    manifest: Manifest

    @property
    def accepted(self) -> bool:
        """Return whether the verdict is ``accepted``."""
        return self.verdict is Verdict.ACCEPTED
