"""
---
id: silu_and_mul_flat
title: SwiGLU gate silu(gate) * up over a flat 1D grid of output elements
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [flat-1d-grid, index-decomposition, fused-gate, double-rounding, exp2]
status: reference
launcher: silu_and_mul_flat
tuning:
  round_act: [true, false]
  block: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 3, d: 1000}, {rows: 33, d: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
The SwiGLU activation out = silu(gate) * up for x (..., 2d) = [gate | up], treated as one flat
elementwise problem: the T * d outputs are split into BLOCK-sized chunks, one per program, and each
lane recovers its (row, column) with one division and one modulo to address gate at row * stride +
col and up at + d. The grid size depends only on T * d, so a single decode row of d = 14336 still
spreads over 14 programs at BLOCK = 1024, and prefill gets a large, even grid. Numerics as the eager
expression silu(gate.float()).to(dtype) * up: fp32 SiLU rounded to the output dtype, then the
product rounded again (double rounding, on purpose; round_act=False rounds once, as an fp32
reference does). Bytes per output: 2 reads + 1 write (6 bytes in
bf16). Limits: the per-element div/mod costs integer instructions (cheap next to memory time, but a
row-structured grid avoids it); chunks straddle rows, so a chunk's gate and up reads are two or
three runs rather than one; needs an even last dimension.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_flat_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    total,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    ROUND_ACT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # int64 flat index: T * d can pass 2^31 for long prefills with a wide MLP
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < total
    row = idx // D
    col = idx - row * D  # cheaper than a second division

    gate_ptrs = x_ptr + row * stride_xm + col
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + D, mask=mask, other=0.0).to(tl.float32)
    act = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634))  # silu in fp32
    if ROUND_ACT:
        # rounded to the output dtype BEFORE the multiply, as the eager expression does
        act = act.to(out_ptr.dtype.element_ty).to(tl.float32)
    out = act * up
    tl.store(out_ptr + row * stride_om + col, out.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_config(total: int) -> dict[str, int]:
    """Return the flat block (1024 elements, fewer for tiny inputs) and warps."""
    block = min(1024, triton.next_power_of_2(total))
    return {"block": block, "num_warps": 4 if block >= 512 else 2}


def silu_and_mul_flat(
    x: torch.Tensor,
    *,
    block: int | None = None,
    num_warps: int | None = None,
    round_act: bool = True,
) -> torch.Tensor:
    """Return silu(x[..., :d]) * x[..., d:], by default with the SiLU rounded to x's dtype first.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous; [gate | up].
        block: Output elements per program (power of two); None = min(1024, next_pow2(T * d)).
        round_act: Round silu(gate) to x's dtype before the multiply (eager PyTorch's double
            rounding); False keeps it in fp32 and rounds once (an fp32 reference's numerics).
        num_warps: Warps per program; None picks by block.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: The last dimension is odd or zero.
    """
    two_d = x.shape[-1]
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    total = out.numel()
    if total > 0:
        cfg = _launch_config(total)
        given = {"block": block, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        _silu_and_mul_flat_kernel[(triton.cdiv(total, cfg["block"]),)](
            x2, out,
            total, d,
            x2.stride(0), out.stride(0),
            ROUND_ACT=round_act,
            BLOCK=cfg["block"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return silu(gate.float()).to(dtype) * up, the eager PyTorch expression (double rounding)."""
    gate, up = x.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate.float()).to(x.dtype).float() * up.float()).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1) as in atrex."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}
