"""Comparing fp8 e4m3 outputs of kernels run in Triton's interpreter with their references.

The interpreter rounds some fp32 -> e4m3 casts the wrong way: a value that should round up to a
power of two (124 -> 128) loses the carry into the exponent and comes out as half of it (64), also
on top of a one-step difference. That hits every value in the top 1/16 of a binade, so 2-9% of a
Gaussian row. fp8 outputs are therefore compared as values: at most ``max_one_step`` of the
elements may be one e4m3 step off and at most ``max_lost_carry`` may show the lost carry (a GPU
never does; dequantised checks leave those elements out).
"""

from __future__ import annotations

import torch


def e4m3_step(v: torch.Tensor) -> torch.Tensor:
    """Spacing of float8_e4m3fn values around |v| (3 mantissa bits; subnormal step 2^-9)."""
    return torch.exp2(torch.floor(torch.log2(v.abs().clamp(min=2.0**-6))) - 3)


def check_fp8(
    q: torch.Tensor,
    ref_q: torch.Tensor,
    *,
    max_one_step: float = 0.05,
    max_lost_carry: float = 0.12,
) -> torch.Tensor:
    """Assert ``q`` matches ``ref_q`` up to the interpreter's errors; return the lost-carry mask."""
    assert q.dtype == torch.float8_e4m3fn and q.shape == ref_q.shape
    a, b = q.float(), ref_q.float()
    assert torch.isfinite(a).all()
    off = a != b

    def near(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # within one e4m3 step
        return (u - v).abs() <= e4m3_step(torch.maximum(u.abs(), v.abs()))

    # a is a power of two whose double is b (or b's neighbour, when the inputs differ slightly)
    lost_carry = off & (torch.frexp(a).mantissa.abs() == 0.5) & near(2 * a, b)
    one_step = off & ~lost_carry & near(a, b)
    assert (off == (lost_carry | one_step)).all(), "an fp8 value is off by more than one step"
    assert one_step.float().mean() <= max_one_step, f"{one_step.float().mean():.3f} one step off"
    assert lost_carry.float().mean() <= max_lost_carry, (
        f"{lost_carry.float().mean():.3f} lost carries"
    )
    return lost_carry


def check_dequant(
    q: torch.Tensor,
    scale: torch.Tensor,
    target: torch.Tensor,
    skip: torch.Tensor,
    rel: float = 0.07,
) -> None:
    """Whole-output check: q * scale reproduces ``target`` to fp8 precision (~1/16 relative)."""
    deq = torch.where(skip, target.float(), q.float() * scale)
    assert (deq - target.float()).norm() <= rel * target.float().norm()
