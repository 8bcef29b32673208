"""
---
id: per_token_group_quant_fp8_2d_tile
title: Per-token-group FP8 quantisation over (tokens x groups x group width) 3-D register tiles
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [2d-tile, multi-row-tile, multi-group-tile, group-quant, ragged-tail, absmax-reduction,
  fp8-e4m3, dynamic-scale]
status: reference
launcher: per_token_group_quant_fp8_2d_tile
tuning:
  block_m: [4, 1, 2, 8, 16]
  groups_per_program: [4, 1, 2, 8, 16]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [group, quant_group_size]}
returns:
  - {name: quantized, shape: [T, N], dtype: fp8_e4m3fn}
  - {name: scales, shape: [T, ceil(N / group_size)], dtype: fp32}
problem:
  shapes: [{rows: 7, hidden: 320, group_size: 64}, {rows: 3, hidden: 200, group_size: 128}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30 per_token_group_quant_fp8: per (token, group of G columns), in fp32, scale = max(absmax /
448, 1e-10) and quantized = fp8_e4m3fn(clamp(x / scale, -448, 448)), with a last, shorter group
when N is not a multiple of G. Program (i, j) owns BLOCK_M tokens x GROUPS groups, held as one
(BLOCK_M, GROUPS, next_pow2(G)) register tile: element [m, g, c] is x[i BLOCK_M + m, (j GROUPS +
g) G + c], masked past T, past G and past N. The absmax is a reduction over the last axis, giving
a BLOCK_M x GROUPS block of scales stored with one 2-D store (row-major (T, ceil(N / G))). x is
read once: 2 + 1 bytes per bf16 element plus 4 per group. Of the existing designs,
per_token_group_quant_fp8 tiles tokens x ONE group (each row segment a short 2 G-byte burst) and
the multigroup design ONE token x many groups (at prefill, T x N / (8 G) small programs); this tile
streams GROUPS x G contiguous elements of each of BLOCK_M rows, so a program moves BLOCK_M x GROUPS
x G elements (2048 by default at G = 128) with long bursts, whatever T is. Limits: registers grow
as block_m x groups_per_program x G; a non-power-of-two G wastes its padded lanes; decode (T = 1)
leaves BLOCK_M - 1 rows masked unless block_m shrinks (the default follows T); e4m3fn only; no
UE8M0 scale rounding.
"""

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0  # largest finite float8_e4m3fn
MIN_SCALE = 1e-10  # keeps all-zero groups finite


@triton.jit
def _per_token_group_quant_fp8_2d_tile_kernel(
    # pointers
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    M,
    N,
    NUM_GROUPS,
    # strides (elements; last dims contiguous)
    stride_xm,
    stride_qm,
    stride_sm,
    # scalars
    fp8_max,
    min_scale,
    # meta
    G: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    GROUPS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    groups = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    lane = tl.arange(0, BLOCK_G)
    rows64 = rows.to(tl.int64)[:, None, None]  # int64: rows * stride can pass 2^31 elements
    cols = groups[None, :, None] * G + lane[None, None, :]  # (1, GROUPS, BLOCK_G)
    mask = (rows[:, None, None] < M) & (lane[None, None, :] < G) & (cols < N)

    x = tl.load(x_ptr + rows64 * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=2) / fp8_max, min_scale)  # (BLOCK_M, GROUPS)
    q = tl.clamp(x / scale[:, :, None], -fp8_max, fp8_max)
    tl.store(q_ptr + rows64 * stride_qm + cols, q.to(q_ptr.dtype.element_ty), mask=mask)
    smask = (rows[:, None] < M) & (groups[None, :] < NUM_GROUPS)
    tl.store(
        scale_ptr + rows.to(tl.int64)[:, None] * stride_sm + groups[None, :], scale, mask=smask
    )


def per_token_group_quant_fp8_2d_tile(
    x: torch.Tensor,
    group_size: int = 128,
    *,
    block_m: int | None = None,
    groups_per_program: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to float8_e4m3fn with one dynamic scale per (row, group of group_size columns).

    Args:
        x: (T, N) bf16/fp16/fp32, last dimension contiguous; a last, shorter group is allowed.
        group_size: Columns per scale group (any positive size; 128 in DeepSeek-style models).
        block_m: Tokens per program (power of two); None = 4 (fewer for tiny T).
        groups_per_program: Groups per program (power of two); None = 4 (fewer for narrow rows).
        num_warps: Warps per program; None = 4.

    Returns:
        (quantized, scales): quantized (T, N) float8_e4m3fn; scales (T, ceil(N / G)) fp32.

    Raises:
        ValueError: x is not 2D, group_size is not positive, or a tile is not a power of two.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (T, N); got {tuple(x.shape)}")
    if group_size <= 0:
        raise ValueError(f"group_size must be positive; got {group_size}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    t, n = x.shape
    num_groups = triton.cdiv(n, group_size)
    bm = min(4, triton.next_power_of_2(max(t, 1))) if block_m is None else block_m
    gp = min(4, triton.next_power_of_2(max(num_groups, 1)))
    gp = gp if groups_per_program is None else groups_per_program
    for name, value in (("block_m", bm), ("groups_per_program", gp)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    q = torch.empty((t, n), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((t, num_groups), dtype=torch.float32, device=x.device)
    if t == 0 or n == 0:
        return q, scales
    grid = (triton.cdiv(t, bm), triton.cdiv(num_groups, gp))
    _per_token_group_quant_fp8_2d_tile_kernel[grid](
        x, q, scales,
        t, n, num_groups,
        x.stride(0), q.stride(0), scales.stride(0),
        FP8_MAX, MIN_SCALE,
        G=group_size, BLOCK_G=triton.next_power_of_2(group_size), BLOCK_M=bm, GROUPS=gp,
        num_warps=4 if num_warps is None else num_warps,
    )  # fmt: skip
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (quantized, scales) computed in fp32 PyTorch (atrex30's semantics, ragged tail)."""
    t, n = x.shape
    groups = -(-n // group_size)
    padded = torch.nn.functional.pad(x.float(), (0, groups * group_size - n))
    blocks = padded.view(t, groups, group_size)
    scales = (blocks.abs().amax(dim=-1) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (blocks / scales[..., None]).clamp(-FP8_MAX, FP8_MAX).view(t, -1)[:, :n]
    return q.to(torch.float8_e4m3fn), scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``shape = {"rows", "hidden", "group_size"}``: N(0, 1), one zero group."""
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    group = shape.get("group_size", 128)
    x[0, :group] = 0.0  # exercises the minimum scale
    return {"x": x.to(dtype), "group_size": group}
