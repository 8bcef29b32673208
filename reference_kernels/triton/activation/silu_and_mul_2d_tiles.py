"""
---
id: silu_and_mul_2d_tiles
title: SwiGLU gate silu(gate) * up over a 2D grid of (BLOCK_M tokens x BLOCK_N columns) tiles
op_family: activation
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-block, 2d-grid, fused-gate, double-rounding, exp2]
status: reference
launcher: silu_and_mul_2d_tiles
tuning:
  round_act: [true, false]
  block_m: [4, 1, 2, 8, 16]
  block_n: [512, 128, 256, 1024, 2048]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 3, d: 500}, {rows: 9, d: 64}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: silu_and_mul/0, dtype: bf16, latency_us: 3.456, sol_fraction: 0.8148, date: '2026-12-04'}
---
The SwiGLU activation out = silu(gate) * up for x (..., 2d) = [gate | up] (atrex30 silu_and_mul)
on a 2-D grid: program (i, j) owns the (BLOCK_M, BLOCK_N) output tile of rows i * BLOCK_M.. and
columns j * BLOCK_N.., reading a gate tile and the up tile d columns to its right, with no loop and
no div/mod per element. The grid is cdiv(T, BLOCK_M) x cdiv(d, BLOCK_N), so decode (T = 1..8)
still spreads over d / BLOCK_N programs, and prefill packs BLOCK_M rows per program, so short rows
(d = 512..1024 in small MoE experts) do not produce tiny programs. Numerics as the reference: SiLU
in fp32 (via exp2) ROUNDED to the output dtype, then the product of the two rounded values rounded
once more (double rounding, kept on purpose; round_act=False rounds once, for fp32 references).
Bytes per output: 2 reads + 1 write (6 bytes in bf16). Limits: each tile row is BLOCK_N contiguous
elements, so BLOCK_N below 128 gives short memory transactions; the last dimension must be even
and at least 2 (the reference's width-1 fallback, plain SiLU, is not served).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_2d_tiles_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes
    M,
    D,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_om,
    # meta
    ROUND_ACT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < D)[None, :]
    rows64 = rows.to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31 elements

    gate_ptrs = x_ptr + rows64 * stride_xm + cols[None, :]
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + D, mask=mask, other=0.0).to(tl.float32)  # up follows the gate
    act = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634))  # silu in fp32
    if ROUND_ACT:
        # rounded to the output dtype BEFORE the multiply, as the reference does
        act = act.to(out_ptr.dtype.element_ty).to(tl.float32)
    out = act * up
    tl.store(
        out_ptr + rows64 * stride_om + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask
    )


def _launch_config(m: int, d: int) -> dict[str, int]:
    """Return a tile of about 2048 outputs: BLOCK_N up to 512 columns, BLOCK_M rows for the rest."""
    block_n = min(triton.next_power_of_2(d), 512)
    block_m = max(1, min(2048 // block_n, triton.next_power_of_2(m), 16))
    return {"block_m": block_m, "block_n": block_n, "num_warps": 4}


def silu_and_mul_2d_tiles(
    x: torch.Tensor,
    *,
    round_act: bool = True,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return silu(x[..., :d]) * x[..., d:], by default with the SiLU rounded to x's dtype first.

    Args:
        x: (..., 2d) bf16/fp16/fp32, last dimension contiguous; [gate | up].
        round_act: Round silu(gate) to x's dtype before the multiply (the reference's double
            rounding); False keeps it in fp32 and rounds once.
        block_m: Rows per tile (power of two); None fills about 2048 outputs per tile.
        block_n: Columns per tile (power of two); None = min(next_pow2(d), 512).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (..., d) in x's dtype, contiguous.

    Raises:
        ValueError: The last dimension is odd or zero, or a block size is not a power of two.
    """
    two_d = x.shape[-1]
    if two_d % 2 or two_d == 0:
        raise ValueError(f"last dimension must be even and > 0 ([gate | up]); got {tuple(x.shape)}")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if out.numel() > 0:
        cfg = _launch_config(m, d)
        given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
        cfg.update({key: value for key, value in given.items() if value is not None})
        grid = (triton.cdiv(m, cfg["block_m"]), triton.cdiv(d, cfg["block_n"]))
        _silu_and_mul_2d_tiles_kernel[grid](
            x2, out,
            m, d,
            x2.stride(0), out.stride(0),
            ROUND_ACT=round_act,
            BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
            num_warps=cfg["num_warps"],
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return silu(gate.float()).to(dtype) * up rounded again (atrex30 silu_and_mul)."""
    gate, up = x.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate.float()).to(x.dtype).float() * up.float()).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1) as in atrex."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}
