"""What one evaluation holds in the parent: the reference's outputs and the run's accumulated rows.

Owns ``_Reference`` (reference outputs and per-shape facts from a reference worker) and ``_Run``
(everything one evaluation accumulates on its way to an ``EvalResult``), and the reading of worker
output files. Shared by the pipeline, the performance judge, the guards' judge and the suite's
baselines; it runs no worker itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aka.bench.engagement import EngagementOutcome
from aka.bench.result import ShapeResult
from aka.core import SandboxError
from aka.spec import ProblemSpec, ShapeCase

__all__ = [
    "_Reference",
    "_Run",
    "_default_fp8_scales",
    "_load_tensors",
    "_output_bytes",
    "candidate_file_limit_mb",
]


@dataclass
class _Reference:
    """Reference outputs and facts for a set of shapes, held by the parent."""

    outputs: dict[tuple[str, int], dict[str, Any]]
    rows: dict[str, dict[str, Any]]
    versions: dict[str, str]
    device: dict[str, Any] | None


@dataclass
class _Run:
    """Everything one evaluation accumulates on its way to an ``EvalResult``."""

    problem: ProblemSpec
    source: str
    shapes: list[ShapeCase]
    skipped: list[str]
    mode: Literal["gpu", "cpu_interpreter"]
    notes: list[str] = field(default_factory=list)
    rows: dict[str, ShapeResult] = field(default_factory=dict)
    sandbox: dict[str, Any] = field(default_factory=dict)
    weights_mode: Any = None
    device: dict[str, Any] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    engagement: dict[str, EngagementOutcome] = field(default_factory=dict)


def _load_tensors(path: Path) -> dict[str, Any]:
    import torch

    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or not {"structure", "tensors"} <= set(data):
        raise SandboxError(f"worker output {path.name} is malformed")
    data.setdefault("extra", {})
    return dict(data)


def _output_bytes(ref: _Reference, shape_id: str, seed: int) -> int:
    tensors = ref.outputs[(shape_id, seed)]["tensors"].values()
    return int(sum(t.numel() * t.element_size() for t in tensors))


def candidate_file_limit_mb(configured_mb: int, ref: _Reference, run: _Run) -> int:
    """The candidate worker's RLIMIT_FSIZE, in MB.

    The configured limit, or room for twice the largest output the reference produced for the
    run's shapes (a candidate writes the same tensors), whichever is larger.
    """
    wanted = {s.id for s in run.shapes}
    largest = max(
        (_output_bytes(ref, sid, seed) for sid, seed in ref.outputs if sid in wanted), default=0
    )
    return max(configured_mb, math.ceil(2 * largest / 2**20) + 64)


def _default_fp8_scales(reference: dict[str, Any]) -> dict[str, str]:
    """A 2-tuple (fp8 values, float scales) pairs up by default."""
    keys, tensors = reference["structure"]["keys"], reference["tensors"]
    if (
        len(keys) == 2
        and "float8" in str(tensors[keys[0]].dtype)
        and tensors[keys[1]].is_floating_point()
    ):
        return {keys[0]: keys[1]}
    return {}
