"""Roofline accounting: what an operator costs (FLOPs per unit, bytes) and its speed-of-light time.

Owns ``CostCounts`` (counted or overridden costs of one shape), ``count_costs`` (runs the
reference forward under a counting mode; see ``aka.hardware.flops``), ``apply_overrides`` (the
op.yaml ``roofline:`` entries) and ``t_sol`` (ARCHITECTURE.md §4, stage 6):

    T_sol = max(sum over units of FLOPs_unit / rate_unit, bytes / bandwidth, launch floor)

Must not import torch at module level, and must not know about candidates: it prices the
reference's work on the device's ceilings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.core.errors import SpecError, UnsupportedHardwareError
from aka.spec.expr import evaluate_quantity
from aka.spec.problem import RooflineOverrideSpec
from aka.spec.vocab import ComputeUnit

if TYPE_CHECKING:
    import torch

    from aka.hardware.ceilings import DeviceCeilings

__all__ = ["CostCounts", "TSol", "apply_overrides", "count_costs", "t_sol"]


class CostCounts(BaseModel):
    """The work of one call of an operator at one shape, as an ideal fused kernel would do it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flops_by_unit: dict[ComputeUnit, float] = Field(
        default_factory=dict, description="FLOPs per compute unit; units with none are absent."
    )
    bytes_read: float = Field(default=0.0, ge=0, description="Unique bytes read from memory.")
    bytes_written: float = Field(default=0.0, ge=0, description="Unique bytes written to memory.")
    notes: list[str] = Field(
        default_factory=list, description="Approximations made and overrides applied, with reasons."
    )

    @property
    def flops_total(self) -> float:
        """All FLOPs, every unit together."""
        return sum(self.flops_by_unit.values())

    @property
    def bytes_total(self) -> float:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written


class TSol(BaseModel):
    """Speed-of-light time of one shape on one device, and which term sets it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    t_sol_s: float = Field(ge=0, description="max(t_compute_s, t_memory_s, t_floor_s).")
    t_compute_s: float = Field(ge=0, description="Sum over units of FLOPs / peak rate.")
    t_memory_s: float = Field(ge=0, description="(bytes read + written) / bandwidth.")
    t_floor_s: float | None = Field(description="Launch floor; None when the ceilings lack one.")
    bound: Literal["memory", "compute", "latency"] = Field(description="The term that is the max.")
    flops_total: float = Field(ge=0)
    bytes_total: float = Field(ge=0)


def count_costs(
    model: torch.nn.Module,
    inputs: Mapping[str, torch.Tensor | object] | Sequence[torch.Tensor | object],
    *,
    allow_tf32: bool = False,
) -> CostCounts:
    """Run ``model`` forward once and count its FLOPs per unit and its unique bytes.

    Runs problem code: call it only inside a scorer worker, never in the parent process.
    Matmul-class ops (mm, addmm, bmm, baddbmm, convolution, attention, _scaled_mm) take torch's
    ``FlopCounterMode`` formulas and the tensor unit of their operand dtype (bf16 -> tc_bf16,
    fp16 -> tc_fp16, fp8 -> tc_fp8, fp32 -> tc_tf32 if ``allow_tf32`` else fp32_matmul); other
    ops are priced per element at vector_fp32 (tables in ``aka.hardware.flops``). Bytes are the
    inputs, parameters and buffers the forward reads (each byte once) plus the outputs written.

    Args:
        model: The reference module, on the device its inputs are on.
        inputs: ``forward``'s keyword inputs (a mapping) or positional inputs (a sequence).
        allow_tf32: The problem lets fp32 matmuls run as tf32 (``dtype_policy.allow_tf32``).

    Returns:
        The counted costs, with notes on what was approximated.
    """
    from aka.hardware.flops import count_forward_costs

    return count_forward_costs(model, inputs, allow_tf32=allow_tf32)


def apply_overrides(
    counts: CostCounts,
    overrides: Sequence[RooflineOverrideSpec],
    names: Mapping[str, object],
    *,
    shape_id: str | None = None,
) -> CostCounts:
    """Replace counted costs with a problem's ``roofline:`` overrides, in order.

    An override replaces only the fields it sets; ``flops_by_unit``, when set, replaces the whole
    per-unit table (an override states all the work it knows of). Each override's reason goes into
    ``notes``.

    Args:
        counts: The counted costs.
        overrides: The problem's overrides (``ProblemSpec.roofline``).
        names: Values for the expressions: the shape's init and input kwargs.
        shape_id: When given, overrides that do not cover this shape are skipped.

    Returns:
        The costs with the overrides applied.

    Raises:
        SpecError: An expression fails to evaluate or gives a negative quantity.
    """
    for override in overrides:
        if shape_id is not None and not override.applies_to(shape_id):
            continue
        update: dict[str, object] = {}
        if override.flops_by_unit is not None:
            update["flops_by_unit"] = {
                unit: _quantity(value, names, f"roofline.flops_by_unit.{unit.value}")
                for unit, value in override.flops_by_unit.items()
            }
        for field in ("bytes_read", "bytes_written"):
            value = getattr(override, field)
            if value is not None:
                update[field] = _quantity(value, names, f"roofline.{field}")
        fields = ", ".join(sorted(update)) or "nothing"
        update["notes"] = [*counts.notes, f"override of {fields}: {override.reason}"]
        counts = counts.model_copy(update=update)
    return counts


def t_sol(counts: CostCounts, ceilings: DeviceCeilings) -> TSol:
    """Compute the speed-of-light time of ``counts`` on a device.

    Args:
        counts: FLOPs per unit and bytes of one call.
        ceilings: The device's measured or datasheet ceilings.

    Returns:
        T_sol and its terms; ``bound`` names the largest term.

    Raises:
        UnsupportedHardwareError: Some unit has FLOPs but the ceilings have no rate for it.
    """
    t_compute_s = 0.0
    for unit, flops in counts.flops_by_unit.items():
        if flops <= 0:
            continue
        rate = ceilings.rates_flops_per_s.get(unit)
        if rate is None:
            raise UnsupportedHardwareError(
                f"the operator does {flops:.3g} FLOPs on {unit.value}, but the {ceilings.source} "
                f"ceilings of '{ceilings.device_name}' have no {unit.value} rate (known: "
                f"{sorted(u.value for u in ceilings.rates_flops_per_s)}). Run on a device with "
                "that unit, or add a roofline override that prices the work on another unit."
            )
        t_compute_s += flops / rate
    t_memory_s = counts.bytes_total / ceilings.bandwidth_bytes_per_s
    t_floor_s = None if ceilings.launch_floor_us is None else ceilings.launch_floor_us * 1e-6
    terms: dict[Literal["memory", "compute", "latency"], float] = {
        "memory": t_memory_s,
        "compute": t_compute_s,
        "latency": t_floor_s or 0.0,
    }
    bound = max(terms, key=lambda k: terms[k])  # ties go to the first: memory, then compute
    return TSol(
        t_sol_s=terms[bound],
        t_compute_s=t_compute_s,
        t_memory_s=t_memory_s,
        t_floor_s=t_floor_s,
        bound=bound,
        flops_total=counts.flops_total,
        bytes_total=counts.bytes_total,
    )


def _quantity(value: float | int | str, names: Mapping[str, object], field: str) -> float:
    """Evaluate one override quantity; negative or malformed ones are a ``SpecError``."""
    try:
        result = evaluate_quantity(value, names)
    except (ValueError, ZeroDivisionError, OverflowError) as err:
        raise SpecError(
            f"cannot evaluate {value!r}: {err}; fix the expression", field=field
        ) from err
    if result < 0:
        raise SpecError(f"{value!r} evaluates to {result}, a negative quantity", field=field)
    return result
