"""The profile node's diagnosis: where a candidate sits on the roofline and what holds it back.

``diagnose`` turns the scorer's ``EvalResult`` (times, T_sol, bytes, FLOPs per shape), the
device's ceilings and, when there is one, a ``ProfileData`` (compiler facts, Nsight Compute
metrics) into a ``ProfileReport``: a bottleneck class, the fraction of each ceiling reached, a
short summary for the LLM's prompt and machine-readable hints for the search proposer.

Rules (per timed shape, T = median latency):

- **latency**: T <= ``LATENCY_MULTIPLE`` x the launch floor, or T_sol is the launch floor (the
  work is tiny): launches and their gaps, not bytes or FLOPs, set the time.
- otherwise **memory** when bytes / bandwidth >= FLOPs / peak of the dominant unit, else
  **compute** (the scorer's roofline ``bound`` when bytes or FLOPs are unknown).

The candidate's class is the one whose shapes lose the most score (sum of weight x -ln S), so the
diagnosis points at what costs the geomean most. Pure functions: no GPU, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aka.agent.records import ProfileReport
from aka.bench import EvalResult, KernelFacts, ProfileData, ShapeResult, Verdict

__all__ = ["LATENCY_MULTIPLE", "diagnose"]

BoundClass = Literal["memory", "compute", "latency", "unknown"]

#: A kernel within this multiple of the empty-kernel launch floor is latency-bound.
LATENCY_MULTIPLE = 2.0
_FAR_MEMORY = 0.6  # below this share of peak bandwidth a memory-bound kernel has room left
_NEAR_MEMORY = 0.85
_FAR_COMPUTE = 0.5
_NEAR_COMPUTE = 0.8
_NEAR_SOL = 0.9
_HIGH_REGS = 192  # per thread: 65536 registers / SM leave <= 10 warps resident
_LOW_OCCUPANCY = 0.25
_SMEM_NEAR_LIMIT = 0.9
_MAX_LINES = 12
_MAX_SHAPE_LINES = 4

_ADVICE = {
    "latency_bound": "Latency-bound: fewer launches (fuse), more work per program, or a "
    "persistent grid; bandwidth tricks will not help.",
    "memory_bound_far_from_peak": "Memory-bound far from peak bandwidth: wider vectorised "
    "loads, more bytes in flight per SM (more programs or warps), coalesced strides.",
    "memory_bound_near_peak": "Near peak bandwidth: only moving fewer bytes (fusion, lower "
    "precision, no re-reads) can still help.",
    "compute_bound_far_from_peak": "Compute-bound far from peak: use tensor cores (tl.dot) with "
    "larger tiles, more stages to hide latency, and an fp32 accumulator.",
    "spills": "Register spills: smaller blocks, fewer live values, or more warps.",
    "low_occupancy": "Low occupancy: cut registers or shared memory per program, or launch more "
    "programs.",
    "shared_memory_near_limit": "Shared memory near the limit: fewer stages or smaller tiles.",
}


@dataclass(frozen=True)
class _ShapeView:
    """One timed shape placed on the roofline."""

    row: ShapeResult
    t_us: float
    cls: BoundClass
    memory: float | None
    compute: float | None
    launch: float | None
    sol: float


def diagnose(
    candidate_id: str,
    result: EvalResult,
    data: ProfileData | None,
    ceilings: Mapping[str, Any] | None,
) -> ProfileReport:
    """Diagnose one evaluated candidate.

    Args:
        candidate_id: The candidate's id in the run's history.
        result: Its ``EvalResult`` (on the GPU, with times and T_sol per shape).
        data: Compiler facts and ncu metrics from ``Scorer.profile``, if it ran.
        ceilings: The device ceilings (``DeviceCeilings`` as JSON); None uses the result's
            manifest.

    Returns:
        The report; ``bound="unknown"`` when nothing was timed.
    """
    ceil = dict(ceilings or result.manifest.ceilings or {})
    compiler = [k.model_dump(mode="json") for k in data.kernels] if data else []
    ncu = {m.name: m.model_dump(mode="json", exclude={"name"}) for m in data.ncu} if data else {}
    hints = _compiler_hints(data)
    views = [_place(row, ceil) for row in result.shapes if _timed(row)]
    if not result.performance_measured or not views:
        why = (
            "performance was not measured (CPU interpreter: no timing)"
            if not result.performance_measured
            else f"no shape was timed (verdict {result.verdict.value})"
        )
        hints = ["not_measured", *hints]
        lines = [f"{candidate_id}: bottleneck unknown; {why}.", *_fact_lines(data, hints)]
        return ProfileReport(
            candidate_id=candidate_id,
            bound="unknown",
            sol_fraction=result.score if result.performance_measured else None,
            compiler=compiler,
            ncu=ncu,
            summary="\n".join(lines[:_MAX_LINES]),
            hints=hints,
        )
    bound = _overall(views)
    distance = _distance(views)
    hints = [*_roofline_hints(bound, distance, result.score), *hints, *_ncu_hints(data)]
    lines = [
        _headline(candidate_id, bound, result, views),
        _ceiling_line(distance, ceil, views),
        *_shape_lines(views),
        *_fact_lines(data, hints),
    ]
    return ProfileReport(
        candidate_id=candidate_id,
        bound=bound,
        sol_fraction=result.score,
        distance=distance,
        compiler=compiler,
        ncu=ncu,
        summary="\n".join(lines[:_MAX_LINES]),
        hints=hints,
    )


# ------------------------------------------------------------------------------------ roofline
def _timed(row: ShapeResult) -> bool:
    return (
        row.verdict is Verdict.ACCEPTED
        and row.latency_us is not None
        and row.latency_us.median > 0
        and row.t_sol_us is not None
    )


def _rate(ceil: Mapping[str, Any], unit: str | None) -> float | None:
    rates = ceil.get("rates_flops_per_s") or {}
    value = rates.get(unit) if unit else None
    return float(value) if value else None


def _place(row: ShapeResult, ceil: Mapping[str, Any]) -> _ShapeView:
    """Put one timed shape on the roofline: class and fraction of each ceiling reached."""
    t_us = row.latency_us.median if row.latency_us else math.inf
    t_s = t_us * 1e-6
    bandwidth = float(ceil.get("bandwidth_bytes_per_s") or 0.0) or None
    unit = row.compute_unit.value if row.compute_unit else None
    rate = _rate(ceil, unit)
    floor_us = ceil.get("launch_floor_us")
    memory = row.bytes / t_s / bandwidth if row.bytes and bandwidth else None
    compute = row.flops / t_s / rate if row.flops and rate else None
    launch = float(floor_us) / t_us if floor_us else None
    t_sol = row.t_sol_us or 0.0
    sol = row.sol_fraction if row.sol_fraction is not None else min(1.0, t_sol / t_us)
    cls: BoundClass
    if row.bound == "latency" or (floor_us and t_us <= LATENCY_MULTIPLE * float(floor_us)):
        cls = "latency"
    elif row.bytes is not None and bandwidth and row.flops is not None:
        t_mem = row.bytes / bandwidth
        t_comp = row.flops / rate if rate else 0.0
        cls = "memory" if t_mem >= t_comp else "compute"
    else:
        cls = row.bound or "memory"
    return _ShapeView(row, t_us, cls, memory, compute, launch, max(sol, 1e-9))


def _overall(views: Sequence[_ShapeView]) -> BoundClass:
    """The class whose shapes lose the most score (weight x -ln S); by weight when none loses."""
    loss: dict[BoundClass, float] = {}
    weight: dict[BoundClass, float] = {}
    for v in views:
        loss[v.cls] = loss.get(v.cls, 0.0) + v.row.weight * -math.log(min(v.sol, 1.0))
        weight[v.cls] = weight.get(v.cls, 0.0) + v.row.weight
    if max(loss.values()) > 0:
        return max(loss, key=lambda c: loss[c])
    return max(weight, key=lambda c: weight[c])


def _distance(views: Sequence[_ShapeView]) -> dict[str, float]:
    """Weighted geomean over shapes of each ceiling's fraction reached."""
    out: dict[str, float] = {}
    for key in ("memory", "compute", "launch"):
        pairs = [(getattr(v, key), v.row.weight) for v in views if getattr(v, key)]
        if pairs:
            total = sum(w for _, w in pairs) or 1.0
            out[key] = math.exp(sum(w * math.log(x) for x, w in pairs) / total)
    return out


def _roofline_hints(
    bound: BoundClass, distance: Mapping[str, float], score: float | None
) -> list[str]:
    hints = []
    memory, compute = distance.get("memory"), distance.get("compute")
    if bound == "latency":
        hints.append("latency_bound")
    elif bound == "memory" and memory is not None:
        if memory < _FAR_MEMORY:
            hints.append("memory_bound_far_from_peak")
        elif memory >= _NEAR_MEMORY:
            hints.append("memory_bound_near_peak")
        else:
            hints.append("memory_bound")
    elif bound == "compute" and compute is not None:
        if compute < _FAR_COMPUTE:
            hints.append("compute_bound_far_from_peak")
        elif compute >= _NEAR_COMPUTE:
            hints.append("compute_bound_near_peak")
        else:
            hints.append("compute_bound")
    else:
        hints.append(f"{bound}_bound")
    if score is not None and score >= _NEAR_SOL:
        hints.append("near_sol")
    return hints


# ------------------------------------------------------------------------------ compiler / ncu
def _occupancy(kernel: KernelFacts, limits: Mapping[str, int]) -> float | None:
    """Theoretical occupancy from registers and shared memory (allocation granularity ignored)."""
    warps, regs = kernel.num_warps, kernel.n_regs
    max_threads, regs_per_sm = limits.get("max_threads_per_sm"), limits.get("regs_per_sm")
    if not (warps and regs and max_threads and regs_per_sm):
        return None
    warp_size = limits.get("warp_size", 32)
    max_warps = max_threads // warp_size
    programs = regs_per_sm // (regs * warp_size * warps)
    smem, smem_max = kernel.shared_bytes, limits.get("max_shared_bytes")
    if smem and smem_max:
        programs = min(programs, smem_max // smem)
    return min(programs * warps, max_warps) / max_warps


def _compiler_hints(data: ProfileData | None) -> list[str]:
    if data is None:
        return []
    hints: list[str] = []
    smem_max = data.device_limits.get("max_shared_bytes")
    for k in data.kernels:
        if k.n_spills:
            hints.append("spills")
        if k.n_regs is not None and k.n_regs >= _HIGH_REGS:
            hints.append("high_registers")
        occ = _occupancy(k, data.device_limits)
        if occ is not None and occ < _LOW_OCCUPANCY:
            hints.append("low_occupancy")
        if k.shared_bytes and smem_max and k.shared_bytes >= _SMEM_NEAR_LIMIT * smem_max:
            hints.append("shared_memory_near_limit")
    return list(dict.fromkeys(hints))


def _ncu_hints(data: ProfileData | None) -> list[str]:
    if data is None or not data.ncu:
        return []
    hints: list[str] = []
    main = max(data.ncu, key=lambda m: m.duration_us or 0.0)
    if (
        main.achieved_occupancy_pct is not None
        and main.achieved_occupancy_pct < 100 * _LOW_OCCUPANCY
    ):
        hints.append("low_occupancy")
    if main.stalls:
        hints.append(f"stall_{max(main.stalls, key=lambda r: main.stalls[r])}")
    return hints


# ------------------------------------------------------------------------------------ summary text
def _headline(cid: str, bound: BoundClass, result: EvalResult, views: Sequence[_ShapeView]) -> str:
    score = f"SOL {result.score:.2f}" if result.score is not None else "SOL n/a"
    return f"{cid}: {bound}-bound; {score} (geomean of T_sol/T over {len(views)} timed shapes)."


def _ceiling_line(
    distance: Mapping[str, float], ceil: Mapping[str, Any], views: Sequence[_ShapeView]
) -> str:
    parts = []
    bandwidth = ceil.get("bandwidth_bytes_per_s")
    if "memory" in distance and bandwidth:
        parts.append(f"memory {distance['memory']:.0%} of {float(bandwidth) / 1e12:.2f} TB/s")
    if "compute" in distance:
        unit = next((v.row.compute_unit.value for v in views if v.row.compute_unit), "?")
        rate = _rate(ceil, unit)
        peak = f" of {rate / 1e12:.0f} TFLOP/s {unit}" if rate else ""
        parts.append(f"compute {distance['compute']:.0%}{peak}")
    if "launch" in distance and ceil.get("launch_floor_us"):
        parts.append(
            f"launch floor {float(ceil['launch_floor_us']):.1f} us = {distance['launch']:.0%} of T"
        )
    return "Ceilings reached (geomean): " + (", ".join(parts) or "unknown (no ceilings)") + "."


def _shape_lines(views: Sequence[_ShapeView]) -> list[str]:
    worst = sorted(views, key=lambda v: v.sol)[:_MAX_SHAPE_LINES]
    lines = []
    for v in worst:
        extra = []
        if v.memory is not None:
            extra.append(f"{v.memory:.0%} of peak bandwidth")
        if v.compute is not None:
            extra.append(f"{v.compute:.0%} of peak FLOP/s")
        detail = f"; {', '.join(extra)}" if extra else ""
        lines.append(
            f"- {v.row.shape_id}: {v.t_us:.1f} us vs T_sol {v.row.t_sol_us or 0.0:.1f} us "
            f"(S={v.sol:.2f}, {v.cls}){detail}"
        )
    if len(views) > len(worst):
        lines.append(f"- ... {len(views) - len(worst)} more shapes closer to SOL")
    return lines


def _fact_lines(data: ProfileData | None, hints: Sequence[str]) -> list[str]:
    lines = []
    if data is not None and data.kernels:
        facts = [
            f"{k.name}: {k.n_regs if k.n_regs is not None else '?'} regs, "
            f"{k.n_spills if k.n_spills is not None else '?'} spills, "
            f"{k.shared_bytes if k.shared_bytes is not None else '?'} B smem, "
            f"{k.num_warps} warps, {k.num_stages} stages"
            for k in data.kernels[:2]
        ]
        more = f" (+{len(data.kernels) - 2} more)" if len(data.kernels) > 2 else ""
        lines.append("Kernels: " + "; ".join(facts) + more)
    if data is not None and data.ncu:
        m = max(data.ncu, key=lambda x: x.duration_us or 0.0)
        stalls = ", ".join(f"{r} {v:.1f}" for r, v in m.stalls.items()) or "n/a"
        lines.append(
            f"ncu {m.name}: DRAM {_pct(m.dram_throughput_pct)} of peak, SM "
            f"{_pct(m.sm_throughput_pct)}, achieved occupancy {_pct(m.achieved_occupancy_pct)}; "
            f"top stalls: {stalls}"
        )
    lines.extend(_ADVICE[h] for h in hints if h in _ADVICE)
    return lines


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}%"
