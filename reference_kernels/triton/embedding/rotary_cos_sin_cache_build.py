"""
---
id: rotary_cos_sin_cache_build
title: Build the RoPE cos/sin cache table for given positions, base and linear scaling
op_family: embedding
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, int32, int64]
bound: memory
techniques: [2d-tiles, on-the-fly-inv-freq, exp2, position-scaling, table-build]
status: reference
launcher: rotary_cos_sin_cache_build
tuning:
  block_t: [16, 1, 4, 64]
  num_warps: [4, 1, 2, 8]
args:
  positions: {shape: [T], dtypes: [int32, int64], aliases: [position_ids, pos]}
  rotary_dim: {type: int, default: 128, aliases: [rot_dim, head_dim, head_size]}
  base: {type: float, default: 10000.0, aliases: [rope_theta, theta]}
  scaling_factor: {type: float, default: 1.0, aliases: [rope_scaling_factor, factor]}
returns:
  - {name: cos_sin_cache, shape: [T, rotary_dim], dtype: fp32}
problem:
  shapes: [{positions: 300, rotary_dim: 64}, {positions: 33, rotary_dim: 96, base: 500000.0, scaling_factor: 4.0}]
  dtypes: [int64, int32]
measured: []
---
Builds the table that cache-based RoPE kernels read: row t = [cos(p f_0) .. cos(p f_{R-1}) | sin(p
f_0) .. sin(p f_{R-1})] with R = rotary_dim / 2, p = positions[t] / scaling_factor (linear position
interpolation; 1 = plain RoPE) and f_i = base^(-2i / rotary_dim), the layout of vLLM's cos_sin_cache
(positions = arange(max_position) builds the whole cache; a sparse list builds rows on demand, e.g.
for a context extension). Program i owns BLOCK_T positions; it computes the R frequencies once as
exp2(-(2i / rotary_dim) * log2(base)) (log2(base) is done on the host in float64), forms the
(BLOCK_T, R) angle tile in fp32 and writes the cos and sin halves as two contiguous runs per row.
Cost per table entry: one 4-byte write and one sin or cos (~20-40 FLOPs on the SFU path), so a 128K
x 128 table is written in well under a millisecond; it runs once per model load or scaling change.
Limits: fp32 output only (cast afterwards for a bf16 cache); frequencies come from exp2 (within ~2
ulp of the reference's pow), so angles at position 10^5 differ by up to ~1e-2 rad from a float64
table, like any fp32 table; NTK / YaRN scaling changes inv_freq itself and is not covered (use
rope_on_the_fly_inv_freq with a precomputed inv_freq).
"""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_cos_sin_cache_build_kernel(
    # pointers
    pos_ptr,
    out_ptr,
    # sizes
    T,
    R,  # rotary_dim / 2
    # strides (elements)
    stride_ot,
    # scalars
    neg_log2_base_over_r,  # -log2(base) / R, so f_i = exp2(i * this)
    inv_scale,  # 1 / scaling_factor
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_r = tl.arange(0, BLOCK_R)
    mask_t = offs_t < T
    mask = mask_t[:, None] & (offs_r < R)[None, :]
    inv_freq = tl.exp2(offs_r.to(tl.float32) * neg_log2_base_over_r)  # once per program
    pos = tl.load(pos_ptr + offs_t, mask=mask_t, other=0).to(tl.float32) * inv_scale
    angle = pos[:, None] * inv_freq[None, :]
    rows = out_ptr + offs_t[:, None].to(tl.int64) * stride_ot + offs_r[None, :]
    tl.store(rows, tl.cos(angle), mask=mask)
    tl.store(rows + R, tl.sin(angle), mask=mask)


def rotary_cos_sin_cache_build(
    positions: torch.Tensor,
    rotary_dim: int = 128,
    base: float = 10000.0,
    scaling_factor: float = 1.0,
    *,
    block_t: int = 16,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return the (T, rotary_dim) fp32 table [cos | sin] of positions / scaling_factor.

    Args:
        positions: (T,) int32/int64 positions (arange(max_position) for a whole cache).
        rotary_dim: Rotated dims per head (even); the table has rotary_dim / 2 frequencies.
        base: RoPE base theta (> 1).
        scaling_factor: Linear position interpolation factor (> 0); 1 = none.
        block_t: Positions per program (power of two).
        num_warps: Warps per program.

    Returns:
        cos_sin_cache: (T, rotary_dim) fp32, contiguous.

    Raises:
        ValueError: positions is not a 1-D int tensor, or rotary_dim / base / factor are invalid.
    """
    if positions.dim() != 1 or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"positions must be (T,) int32/int64; got {tuple(positions.shape)} {positions.dtype}"
        )
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even and >= 2; got {rotary_dim}")
    if not base > 1.0 or not scaling_factor > 0:
        raise ValueError(f"need base > 1 and scaling_factor > 0; got {base}, {scaling_factor}")
    if block_t < 1 or block_t & (block_t - 1):
        raise ValueError(f"block_t must be a power of two; got {block_t}")
    t, r = positions.shape[0], rotary_dim // 2
    out = torch.empty((t, rotary_dim), dtype=torch.float32, device=positions.device)
    if t == 0:
        return out
    _rotary_cos_sin_cache_build_kernel[(triton.cdiv(t, block_t),)](
        positions.contiguous(), out,
        t, r,
        out.stride(0),
        -math.log2(base) / r, 1.0 / scaling_factor,
        BLOCK_T=block_t, BLOCK_R=triton.next_power_of_2(r), num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    positions: torch.Tensor,
    rotary_dim: int = 128,
    base: float = 10000.0,
    scaling_factor: float = 1.0,
) -> torch.Tensor:
    """Return cat(cos, sin) of outer(positions / factor, 1 / base^(arange(0, rd, 2) / rd)), fp32."""
    exponent = torch.arange(0, rotary_dim, 2, device=positions.device).float() / rotary_dim
    inv_freq = 1.0 / (base**exponent)
    angles = (positions.float() / scaling_factor)[:, None] * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int64, device: str = "cpu") -> dict:
    """Return inputs for ``{"positions", "rotary_dim"}`` (+ ``"base"``, ``"scaling_factor"``).

    positions: arange(n) when ``shape["positions"]`` is an int, shuffled; ``dtype`` is their dtype.
    """
    pos = torch.randperm(shape["positions"], device=device).to(dtype)
    return {"positions": pos, "rotary_dim": shape["rotary_dim"],
            "base": shape.get("base", 10000.0),
            "scaling_factor": shape.get("scaling_factor", 1.0)}  # fmt: skip
